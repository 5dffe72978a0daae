//! A runtime hands keepalloc's table to a C-style library whose first initialization fails.
//!
//! `cargo run -p keepalloc --example quickstart`
//!
//! The "library" below behaves like XNNPACK: `initialize` copies the allocator table once and
//! the library allocates through that copy for the rest of the process. Its first
//! initialization fails (as XNNPACK's hardware check can); the second session's acquire
//! retries it with the same owner, and every later session gets that owner without running
//! the hook again.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use keepalloc::{AllocatorTable, GlobalProvider, HookRan, InitError, System};

/// The library's copy of the table, taken once, as `xnn_initialize` does.
static LIBRARY_TABLE: OnceLock<AllocatorTable> = OnceLock::new();
static INIT_CALLS: AtomicU32 = AtomicU32::new(0);

/// The library's `initialize`: fails the first time, then copies the table.
fn library_initialize(table: &'static AllocatorTable) -> Result<(), InitError> {
    if INIT_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(InitError::code(1)); // e.g. xnn_status_uninitialized
    }
    LIBRARY_TABLE.get_or_init(|| *table);
    Ok(())
}

/// The library allocating through the table it kept, as an operator's create does.
fn library_allocates(bytes: usize) -> *mut u8 {
    let table = LIBRARY_TABLE.get().expect("the library was initialized");
    let allocate = table
        .aligned_allocate()
        .expect("the table has aligned_allocate");
    // SAFETY: the table is keepalloc's, filled, and its owner is never dropped.
    unsafe { allocate(table.context(), 64, bytes).cast() }
}

fn library_frees(p: *mut u8) {
    let table = LIBRARY_TABLE.get().expect("the library was initialized");
    let free = table
        .aligned_deallocate()
        .expect("the table has aligned_deallocate");
    // SAFETY: `p` came from this table's aligned_allocate and is freed once.
    unsafe { free(table.context(), p.cast()) }
}

static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

fn main() {
    // Session 1: the library's init fails; the owner is built and kept.
    let first = ALLOCATOR.acquire_library("mylib", library_initialize);
    println!(
        "session 1: {}",
        first
            .as_ref()
            .map(|_| "ok".into())
            .unwrap_or_else(|e| e.to_string())
    );
    assert!(first.is_err(), "the first initialization was made to fail");

    // Session 2: retried with the same owner; this call's hook ran and succeeded.
    let (handle, ran) = ALLOCATOR
        .acquire_library("mylib", library_initialize)
        .expect("the retry succeeds");
    assert_eq!(ran, HookRan::Ran);
    // Session 3: published already, the hook does not run again.
    let (again, ran) = ALLOCATOR
        .acquire_library("mylib", library_initialize)
        .expect("published");
    assert_eq!(ran, HookRan::AlreadyInitialized);
    assert_eq!(handle, again);

    let p = library_allocates(1000);
    assert!(!p.is_null());
    println!(
        "library allocated through the owner: live bytes {}",
        handle.stats().live_bytes
    );
    assert!(handle.stats().live_bytes >= 1000);
    library_frees(p);
    assert_eq!(handle.stats().live_bytes, 0);

    let stats = ALLOCATOR.stats();
    println!(
        "owners built: {}, init calls: {}, live bytes after free: {}",
        stats.owners_constructed,
        INIT_CALLS.load(Ordering::SeqCst),
        handle.stats().live_bytes
    );
    assert_eq!(stats.owners_constructed, 1);
    assert_eq!(INIT_CALLS.load(Ordering::SeqCst), 2);
}
