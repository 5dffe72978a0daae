//! The published fast path, kept out of line so its machine code can be read next to
//! `OnceLock::get`'s:
//!
//! ```sh
//! cargo build --release -p keepalloc-provider --example fast_path_asm
//! objdump -d --no-show-raw-insn -C target/release/examples/fast_path_asm \
//!   | awk '/<fast_path_asm::probe_/,/ret/'
//! ```
//!
//! Running it checks that each probe answers from the published value.

use std::hint::black_box;
use std::sync::OnceLock;

use keepalloc_allocators::System;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, KeepCell, Provider, ProviderError};

static ONCE_LOCK: OnceLock<u64> = OnceLock::new();
static KEEP_CELL: KeepCell<u64> = KeepCell::new();
static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

/// `OnceLock::get`, out of line.
#[inline(never)]
pub fn probe_oncelock(c: &OnceLock<u64>) -> Option<&u64> {
    c.get()
}

/// `KeepCell::get`, out of line.
#[inline(never)]
pub fn probe_keepcell(c: &KeepCell<u64>) -> Option<&u64> {
    c.get()
}

/// `Provider::preferred_allocator`, out of line.
#[inline(never)]
pub fn probe_provider(p: Provider<System>) -> Result<AllocatorHandle<System>, ProviderError> {
    p.preferred_allocator()
}

fn main() {
    ONCE_LOCK.get_or_init(|| 7);
    KEEP_CELL
        .get_or_try_init(|| Ok::<_, ()>(7), |_| Ok(()))
        .expect("publish");
    let provider = Provider::with_global(&GLOBAL);
    let first = provider.preferred_allocator().expect("publish");
    assert_eq!(probe_oncelock(black_box(&ONCE_LOCK)), Some(&7));
    assert_eq!(probe_keepcell(black_box(&KEEP_CELL)), Some(&7));
    assert_eq!(
        probe_provider(black_box(provider)).expect("published"),
        first
    );
    println!("fast paths answer from the published values");
}
