//! The scribbling allocator: every detection, the fills, the quarantine bounds, and the
//! allocator contract (the workspace's one conformance suite, through allocator-api2 and
//! through the C table).

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting, System};
use keepalloc_fault_inject::{
    MIN_RED_ZONE, Policy, Scribble, ScribbleConfig, Side, Violation, ViolationKind,
};

fn recording() -> Scribble<Counting<System>> {
    Scribble::new(
        Counting::new(System),
        ScribbleConfig::DEFAULT.with_policy(Policy::Record),
    )
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

fn alloc(heap: &Scribble<Counting<System>>, l: Layout) -> NonNull<u8> {
    heap.allocate(l).unwrap().cast()
}

#[test]
fn new_blocks_hold_the_alloc_fill_and_freed_ones_the_free_fill() {
    let heap = recording();
    let l = layout(100, 8);
    let p = alloc(&heap, l);
    // `p` is live with `l`; after the free it is only read while quarantined (the
    // allocator still owns it), which is what the fill is for.
    // SAFETY: `p` is live, or held by the quarantine when read after the free.
    unsafe {
        assert!((0..100).all(|i| p.as_ptr().add(i).read() == 0xAA));
        heap.deallocate(p, l);
        assert!((0..100).all(|i| p.as_ptr().add(i).read_volatile() == 0x55));
    }
    assert_eq!(heap.flush_quarantine(), 0);
    assert!(heap.violations().is_empty());
}

#[test]
fn write_after_free_is_found_when_the_block_leaves_quarantine() {
    let heap = recording();
    let l = layout(64, 16);
    let p = alloc(&heap, l);
    // Live block; the write after the free is the bug under test (the memory is
    // still held by the quarantine).
    // SAFETY: the memory stays owned by the quarantine; the write is the bug under test.
    unsafe {
        heap.deallocate(p, l);
        p.as_ptr().add(40).write_volatile(7);
    }
    assert_eq!(heap.verify_quarantine(), 1, "found without releasing");
    assert_eq!(heap.flush_quarantine(), 1, "found again on release");
    let v = heap.violations();
    assert_eq!(
        v[0],
        Violation {
            kind: ViolationKind::WriteAfterFree {
                offset: 40,
                found: 7
            },
            address: p.as_ptr() as usize,
            size: 64,
        }
    );
}

#[test]
fn write_after_free_is_found_when_the_quarantine_overflows() {
    let heap = Scribble::new(
        System,
        ScribbleConfig::DEFAULT
            .with_policy(Policy::Record)
            .with_quarantine(usize::MAX, 2),
    );
    let l = layout(32, 8);
    let first = heap.allocate(l).unwrap().cast::<u8>();
    // SAFETY: live block, freed once; the write after it is the bug under test.
    unsafe {
        heap.deallocate(first, l);
        first.as_ptr().write_volatile(1);
    }
    for _ in 0..2 {
        let b = heap.allocate(l).unwrap().cast::<u8>();
        // SAFETY: live block with `l`.
        unsafe { heap.deallocate(b, l) };
    }
    // The third free pushed `first` out (count bound 2), checking it on the way.
    let v = heap.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].address, first.as_ptr() as usize);
    assert_eq!(v[0].kind.name(), "write-after-free");
    assert_eq!(heap.stats().quarantined_blocks, 2);
    assert_eq!(heap.stats().released, 1);
}

#[test]
fn double_free_is_found_and_the_block_is_not_freed_twice() {
    let heap = recording();
    let l = layout(24, 8);
    let p = alloc(&heap, l);
    // SAFETY: live block; the second free is the bug under test.
    unsafe {
        heap.deallocate(p, l);
        heap.deallocate(p, l);
    }
    assert_eq!(
        heap.violations(),
        [Violation {
            kind: ViolationKind::DoubleFree,
            address: p.as_ptr() as usize,
            size: 24
        }]
    );
    heap.flush_quarantine();
    let backend = heap.inner().stats();
    assert_eq!(
        backend.deallocations, 1,
        "the backend saw one free: {backend:?}"
    );
    assert_eq!(backend.live_bytes, 0);
}

#[test]
fn invalid_free_of_a_pointer_never_returned() {
    let heap = recording();
    let l = layout(16, 8);
    let mut local = [0u8; 16];
    let interior = alloc(&heap, layout(64, 8));
    // Neither pointer is a block of `heap` (a stack array, an interior pointer);
    // the allocator must refuse both without touching them.
    // SAFETY: the allocator must reject both pointers without touching them.
    unsafe {
        heap.deallocate(NonNull::new(local.as_mut_ptr()).unwrap(), l);
        heap.deallocate(NonNull::new(interior.as_ptr().add(8)).unwrap(), l);
    }
    let v = heap.take_violations();
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|v| v.kind == ViolationKind::InvalidFree));
    assert_eq!(v[0].address, local.as_ptr() as usize);
    assert!(
        heap.is_live(interior.as_ptr()),
        "the real block is untouched"
    );
    // SAFETY: live block with its own layout.
    unsafe { heap.deallocate(interior, layout(64, 8)) };
    assert!(heap.violations().is_empty());
}

#[test]
fn red_zone_overwrites_before_and_after() {
    for (side, offset) in [(Side::After, 0usize), (Side::Before, 1usize)] {
        let heap = recording();
        let l = layout(40, 8);
        let p = alloc(&heap, l);
        // The red zones are part of the block the backend returned; writing them is
        // the bug under test (one byte past the end, one byte before the start).
        // SAFETY: the red zones belong to the block the backend returned.
        unsafe {
            match side {
                Side::After => p.as_ptr().add(40).write_volatile(0),
                Side::Before => p.as_ptr().sub(1).write_volatile(0),
            }
            heap.deallocate(p, l);
        }
        let v = heap.take_violations();
        assert_eq!(v.len(), 1, "{side:?}: {v:?}");
        match v[0].kind {
            ViolationKind::RedZoneOverwrite {
                side: s,
                offset: o,
                found: 0,
            } => {
                assert_eq!(s, side);
                if side == Side::After {
                    assert_eq!(o, offset);
                }
            }
            other => panic!("{side:?}: {other:?}"),
        }
    }
}

#[test]
fn reading_the_slack_past_the_end_is_not_reported() {
    let heap = recording();
    for size in [1usize, 7, 64, 100] {
        let l = layout(size, 4);
        let p = alloc(&heap, l);
        // At least MIN_RED_ZONE readable bytes follow every block (XNNPACK's
        // over-read); reading never changes them.
        // SAFETY: the slack after the block is readable and never changed.
        let sum: u32 = unsafe {
            (0..size + MIN_RED_ZONE)
                .map(|i| p.as_ptr().add(i).read() as u32)
                .sum()
        };
        assert!(sum > 0);
        // SAFETY: live block with `l`.
        unsafe { heap.deallocate(p, l) };
    }
    assert_eq!(heap.flush_quarantine(), 0);
    assert!(heap.violations().is_empty());
}

#[test]
fn layout_mismatch_on_free() {
    let heap = recording();
    let p = alloc(&heap, layout(48, 16));
    // SAFETY: a live block freed with the wrong size: the bug under test.
    unsafe { heap.deallocate(p, layout(32, 16)) };
    let v = heap.take_violations();
    assert_eq!(v.len(), 1);
    assert!(matches!(
        v[0].kind,
        ViolationKind::LayoutMismatch {
            allocated_size: 48,
            allocated_align: 16,
            freed_align: 16
        }
    ));
}

#[test]
fn quarantine_is_fifo_and_bounded_by_bytes() {
    let heap = Scribble::new(
        Counting::new(System),
        ScribbleConfig::DEFAULT
            .with_policy(Policy::Record)
            .with_quarantine(4096, usize::MAX),
    );
    let l = layout(1000, 8);
    let blocks: Vec<_> = (0..8).map(|_| alloc(&heap, l)).collect();
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: each block is live with `l` and freed once.
        unsafe { heap.deallocate(*b, l) };
        let s = heap.stats();
        assert!(s.quarantined_bytes <= 4096, "{s:?}");
        assert_eq!(s.frees, i as u64 + 1);
    }
    let s = heap.stats();
    assert!(s.quarantined_blocks >= 3 && s.released >= 4, "{s:?}");
    // FIFO: the newest blocks are still quarantined (still scribbled), the oldest were
    // released to the backend.
    let newest = blocks[7];
    // SAFETY: the newest block is still in quarantine.
    assert_eq!(unsafe { newest.as_ptr().read_volatile() }, 0x55);
    assert_eq!(
        heap.inner().stats().deallocations,
        s.released,
        "released blocks reached the backend"
    );
    heap.flush_quarantine();
    assert_eq!(heap.inner().stats().live_bytes, 0);
}

#[test]
fn conformance_through_allocator_api2() {
    let heap = recording();
    conformance::check_allocator(&heap, Options::FULL);
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.flush_quarantine(), 0);
    assert_eq!(heap.stats().live_blocks, 0);
    assert_eq!(heap.inner().stats().live_bytes, 0);
}

#[test]
fn conformance_through_the_c_table() {
    static HEAP: Scribble<System> = Scribble::new(
        System,
        ScribbleConfig::DEFAULT
            .with_policy(Policy::Record)
            .with_quarantine(8 << 20, 1024),
    );
    let table = AllocatorTable::for_allocator(&HEAP);
    conformance::check_table(&table, Options::FULL);
    assert!(HEAP.violations().is_empty(), "{:?}", HEAP.violations());
    assert_eq!(HEAP.flush_quarantine(), 0);
    assert_eq!(HEAP.stats().live_blocks, 0);
}

#[test]
fn a_c_caller_writing_after_free_is_caught_through_the_table() {
    static HEAP: Scribble<System> =
        Scribble::new(System, ScribbleConfig::DEFAULT.with_policy(Policy::Record));
    let table = AllocatorTable::for_allocator(&HEAP);
    // SAFETY: a table from `for_allocator`; the write after the free is the bug under test.
    unsafe {
        let p = table.aligned_alloc(64, 256);
        assert_eq!(p as usize % 64, 0);
        table.aligned_free(p);
        p.add(255).write_volatile(1);
    }
    assert_eq!(HEAP.flush_quarantine(), 1);
    assert_eq!(HEAP.violations()[0].kind.name(), "write-after-free");
}
