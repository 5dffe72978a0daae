//! `AllocatorTable`'s identity and completeness (what a C library that compares or checks
//! tables sees), and `TableAllocator`'s routing of requests to the table's two families of
//! slots. Each test fails when the function it covers is replaced by a constant
//! (`cargo xtask mutants` checks that).

use core::alloc::Layout;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Counting, RawTableParts, System, TableAllocator};

// Two allocators with distinct addresses (zero-sized statics could share one).
static A: Counting<System> = Counting::new(System);
static B: Counting<System> = Counting::new(System);

/// `table` rebuilt from its raw parts after `change`.
///
/// # Safety
/// The changed parts keep the table contract for as long as the table is called through
/// (emptying a slot always does; a context must be an allocator of the type the functions
/// were built for, or the table must never be called).
unsafe fn changed(
    table: AllocatorTable,
    change: impl FnOnce(&mut RawTableParts),
) -> AllocatorTable {
    let mut p = table.raw_parts();
    change(&mut p);
    // SAFETY: the caller's promise.
    unsafe { AllocatorTable::from_raw_parts(p.0, p.1, p.2, p.3, p.4, p.5) }
}

/// The table with one of its six slots changed: slot 0 is the context, 1..=5 the functions.
fn with_slot_changed(table: AllocatorTable, slot: usize) -> AllocatorTable {
    // SAFETY: slots are only emptied, and the context is only replaced by `B`, a `Counting<System>` like the `A` the functions were built for.
    unsafe {
        changed(table, |t| match slot {
            0 => t.0 = &B as *const Counting<System> as *mut _,
            1 => t.1 = None,
            2 => t.2 = None,
            3 => t.3 = None,
            4 => t.4 = None,
            5 => t.5 = None,
            _ => unreachable!(),
        })
    }
}

#[test]
fn tables_are_equal_exactly_when_every_slot_is() {
    let a1 = AllocatorTable::for_allocator(&A);
    let copy = a1; // what a library that copies the table (as `xnn_initialize` does) holds
    assert!(a1.same_as(&copy), "a copied table is the same table");
    assert_eq!(a1, copy);
    if !cfg!(miri) {
        // Natively one crate has one copy of each instantiated function, so a second build
        // for the same allocator is the same table. Miri deliberately gives every creation of
        // a pointer to a generic function its own address (codegen may duplicate them), so
        // there this is not checked.
        let a2 = AllocatorTable::for_allocator(&A);
        assert!(a1.same_as(&a2), "two tables for one allocator are the same");
        assert_eq!(a1, a2);
    }

    let b = AllocatorTable::for_allocator(&B);
    assert!(
        !a1.same_as(&b),
        "another allocator's table differs (its context)"
    );
    assert_ne!(a1, b);

    for slot in 0..6 {
        let changed = with_slot_changed(a1, slot);
        assert!(!a1.same_as(&changed), "slot {slot} ignored by same_as");
        assert!(!changed.same_as(&a1), "slot {slot} ignored by same_as");
        assert_ne!(a1, changed, "slot {slot} ignored by ==");
    }
}

#[test]
fn a_table_is_complete_only_with_every_function() {
    let full = AllocatorTable::for_allocator(&A);
    assert!(full.is_complete());
    for slot in 1..6 {
        assert!(
            !with_slot_changed(full, slot).is_complete(),
            "a table without function slot {slot} is not usable"
        );
    }
    // The context is not a function: any pointer (NULL included) leaves the table complete.
    // SAFETY: this table is only inspected, never called through.
    let no_context = unsafe { changed(full, |t| t.0 = core::ptr::null_mut()) };
    assert!(no_context.is_complete());
}

#[test]
fn small_requests_use_the_malloc_slots_and_over_aligned_ones_the_aligned_slots() {
    // Only the malloc-style slots: requests aligned to at most 16 must work through them
    // (including grow and shrink through `reallocate`); stricter ones find an empty slot,
    // which is an allocation failure.
    // SAFETY: slots are only emptied.
    let malloc_only = unsafe {
        changed(AllocatorTable::for_allocator(&A), |t| {
            t.4 = None;
            t.5 = None;
        })
    };
    // SAFETY: the table's remaining slots are `for_allocator`'s, which honour the contract.
    let t = unsafe { TableAllocator::new(&malloc_only) };
    let before = A.stats();
    for align in [1usize, 8, 16] {
        let small = Layout::from_size_align(100, align).unwrap();
        let p = t.allocate(small).expect("a small request uses `allocate`");
        // SAFETY: `p` is a live block of 100 bytes.
        unsafe {
            let bytes = p.cast::<u8>().as_ptr();
            for i in 0..100 {
                bytes.add(i).write(i as u8);
            }
            let bigger = Layout::from_size_align(5000, align).unwrap();
            let q = t
                .grow(p.cast(), small, bigger)
                .expect("grow uses `reallocate`");
            let bytes = q.cast::<u8>().as_ptr();
            assert!(
                (0..100).all(|i| *bytes.add(i) == i as u8),
                "grow kept the bytes"
            );
            let r = t
                .shrink(q.cast(), bigger, small)
                .expect("shrink uses `reallocate`");
            t.deallocate(r.cast(), small);
        }
    }
    let after = A.stats();
    assert_eq!(
        after.reallocations - before.reallocations,
        6,
        "resized in place"
    );
    assert_eq!(after.allocations - before.allocations, 3);
    assert_eq!(after.live_bytes, before.live_bytes);
    let over = Layout::from_size_align(100, 64).unwrap();
    assert!(
        t.allocate(over).is_err(),
        "an empty aligned slot is a failure"
    );

    // Only the aligned slots: the mirror image.
    // SAFETY: slots are only emptied.
    let aligned_only = unsafe {
        changed(AllocatorTable::for_allocator(&A), |t| {
            t.1 = None;
            t.2 = None;
            t.3 = None;
        })
    };
    // SAFETY: as above.
    let t = unsafe { TableAllocator::new(&aligned_only) };
    let p = t
        .allocate(over)
        .expect("an over-aligned request uses `aligned_allocate`");
    assert_eq!(p.cast::<u8>().as_ptr() as usize % 64, 0);
    // SAFETY: `p` is live with `over`.
    unsafe { t.deallocate(p.cast(), over) };
    let small = Layout::from_size_align(100, 16).unwrap();
    assert!(
        t.allocate(small).is_err(),
        "an empty malloc slot is a failure"
    );
}
