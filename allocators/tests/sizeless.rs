//! The headerless table (`AllocatorTable::for_sizeless`) over a backend of our own that frees
//! without a size, so that it runs everywhere (Miri included, which cannot run glibc's
//! `malloc_usable_size` or mimalloc): the whole C contract (conformance suite), blocks that
//! are the backend's own pointers (no header in front), and `Counting`'s usable-size accounting
//! balancing to zero.

mod common;

use core::alloc::Layout;

use common::Tracked;
use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting};

const OPTS: Options = if cfg!(miri) {
    Options::MIRI
} else {
    Options::QUICK
};

#[test]
fn a_headerless_table_keeps_the_whole_contract_and_the_counts_balance() {
    static BACKEND: Counting<Tracked> = Counting::new(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    conformance::check_table(&TABLE, OPTS);
    let s = BACKEND.stats();
    assert!(s.allocations > 100, "{s:?}");
    assert_eq!(s.allocations, s.deallocations, "{s:?}");
    assert_eq!(s.live_bytes, 0, "{s:?}");
    assert!(s.reallocations > 0, "{s:?}");
    assert_eq!(BACKEND.inner().live_blocks(), 0, "every block went back");
}

#[test]
fn blocks_are_the_backends_own_pointers_and_count_their_usable_size() {
    static BACKEND: Counting<Tracked> = Counting::new(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    // SAFETY: a `for_sizeless` table; each block is freed once, through it.
    unsafe {
        let p = TABLE.aligned_allocate().unwrap()(TABLE.context(), 64, 100).cast::<u8>();
        assert_eq!(p as usize % 64, 0);
        // The pointer C got is the one the backend handed out (a header table would have
        // asked the backend for 100 + 64 bytes and returned an interior pointer).
        assert_eq!(
            BACKEND.inner().layout_of(p),
            Layout::from_size_align(100, 64).unwrap()
        );
        assert_eq!(BACKEND.stats().live_bytes, 100);
        let q = TABLE.reallocate().unwrap()(TABLE.context(), p.cast(), 300).cast::<u8>();
        assert_eq!(q as usize % 64, 0, "reallocate keeps the alignment");
        assert_eq!(BACKEND.stats().live_bytes, 300);
        let z = TABLE.reallocate().unwrap()(TABLE.context(), q.cast(), 0).cast::<u8>();
        assert!(!z.is_null(), "reallocate to 0 keeps a real block");
        TABLE.deallocate().unwrap()(TABLE.context(), z.cast());
    }
    let s = BACKEND.stats();
    assert_eq!(
        (s.live_bytes, s.peak_bytes, s.reallocations),
        (0, 300, 2),
        "{s:?}"
    );
    assert_eq!(BACKEND.inner().live_blocks(), 0);
}
