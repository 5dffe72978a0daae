//! `Counting::uncounted`: the same wrapper with counting switched off. Its tables (headerless
//! and header) and its Rust face keep the whole contract (conformance suite), its stats read
//! zero, and through a headerless table it calls the backend's plain functions: never
//! `usable_size`, which only counting needs.

mod common;
#[path = "common/plain.rs"]
mod plain;

use core::alloc::Layout;
use std::sync::atomic::Ordering::Relaxed;

use allocator_api2::alloc::Allocator;
use common::Tracked;
use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting, CountingStats, System};
use plain::Plain;

const OPTS: Options = if cfg!(miri) {
    Options::MIRI
} else {
    Options::QUICK
};

fn assert_uncounted<A>(a: &Counting<A>) {
    assert!(!a.is_counted());
    assert_eq!(a.stats(), CountingStats::default(), "stats read zero");
}

#[test]
fn new_and_default_count_uncounted_does_not() {
    assert!(Counting::new(System).is_counted());
    assert!(Counting::<System>::default().is_counted());
    let u = Counting::uncounted(System);
    assert_uncounted(&u);
    assert!(format!("{u:?}").contains("counted: false"));
}

#[test]
fn the_rust_face_forwards_and_counts_nothing() {
    let a = Counting::uncounted(System);
    let l = Layout::from_size_align(100, 8).unwrap();
    let l2 = Layout::from_size_align(300, 8).unwrap();
    let p = a.allocate(l).unwrap();
    // SAFETY: `p` is live with `l`; 300 >= 100.
    let q = unsafe {
        p.cast::<u8>().as_ptr().write_bytes(5, 100);
        a.grow(p.cast(), l, l2)
    }
    .unwrap();
    // SAFETY: the first 100 bytes were kept by `grow`.
    assert_eq!(unsafe { *q.cast::<u8>().as_ptr().add(99) }, 5);
    // SAFETY: `q` is live with `l2`; 100 <= 300.
    let r = unsafe { a.shrink(q.cast(), l2, l) }.unwrap();
    // SAFETY: `r` is live with `l`.
    unsafe { a.deallocate(r.cast(), l) };
    let z = a.allocate_zeroed(l).unwrap();
    // SAFETY: `z` is live with `l`.
    unsafe { a.deallocate(z.cast(), l) };
    assert_uncounted(&a);
}

#[test]
fn uncounted_system_keeps_the_whole_contract() {
    static A: Counting<System> = Counting::uncounted(System);
    conformance::check_allocator(&A, OPTS);
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

// mimalloc is C: Miri cannot run it.
#[cfg(all(feature = "mimalloc", not(miri)))]
#[test]
fn uncounted_mimalloc_keeps_the_whole_contract() {
    use keepalloc_allocators::Mimalloc;
    static A: Counting<Mimalloc> = Counting::uncounted(Mimalloc);
    conformance::check_allocator(&A, OPTS);
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

#[test]
fn an_uncounted_header_table_keeps_the_whole_contract() {
    static A: Counting<Plain<System>> = Counting::uncounted(Plain(System));
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

#[test]
fn an_uncounted_headerless_table_keeps_the_contract_and_never_measures_a_block() {
    static BACKEND: Counting<Tracked> = Counting::uncounted(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    conformance::check_table(&TABLE, OPTS);
    assert_uncounted(&BACKEND);
    assert_eq!(BACKEND.inner().live_blocks(), 0, "every block went back");
    assert_eq!(
        BACKEND.inner().usable_size_calls.load(Relaxed),
        0,
        "plain alloc/free/realloc: no usable-size lookup"
    );

    // The counted wrapper over the same backend does measure (the control).
    static COUNTED: Counting<Tracked> = Counting::new(Tracked::new());
    static COUNTED_TABLE: AllocatorTable = AllocatorTable::for_sizeless(&COUNTED);
    // SAFETY: a `for_sizeless` table; the block is freed once, through it.
    unsafe {
        let p = COUNTED_TABLE.allocate().unwrap()(COUNTED_TABLE.context(), 64);
        assert!(!p.is_null());
        COUNTED_TABLE.deallocate().unwrap()(COUNTED_TABLE.context(), p);
    }
    assert!(COUNTED.inner().usable_size_calls.load(Relaxed) > 0);
    assert_eq!(COUNTED.stats().allocations, 1);
}
