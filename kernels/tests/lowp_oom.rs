//! `low_precision_path` (the fault campaign's hook for the bf16 and int8 operators) through
//! a captured table that fails each of its allocation sites in turn: every failure is a clean
//! `OutOfMemory` with every block given back, and the next run computes the right answers.
//! The captured table is process-wide, hence a process of its own.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use keepalloc_allocators::allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{AllocatorTable, Counting, System};
use keepalloc_kernels::{KernelError, LOW_PRECISION_ALLOCATIONS, initialize, low_precision_path};

/// Fails the allocation whose 0-based index equals `FAIL_AT` (usize::MAX: none).
struct FailNth;
static FAIL_AT: AtomicUsize = AtomicUsize::new(usize::MAX);
static CALLS: AtomicUsize = AtomicUsize::new(0);
static COUNTED: Counting<FailNth> = Counting::new(FailNth);
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&COUNTED);

// SAFETY: forwards to `System`, or refuses.
unsafe impl Allocator for FailNth {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if CALLS.fetch_add(1, Ordering::SeqCst) == FAIL_AT.load(Ordering::SeqCst) {
            return Err(AllocError);
        }
        System.allocate(layout)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the block came from `System.allocate` above.
        unsafe { System.deallocate(ptr, layout) }
    }
}

fn main() {
    assert_eq!(low_precision_path(), Err(KernelError::Uninitialized));
    initialize(&TABLE).unwrap();
    for site in 0..LOW_PRECISION_ALLOCATIONS {
        CALLS.store(0, Ordering::SeqCst);
        FAIL_AT.store(site, Ordering::SeqCst);
        let err = low_precision_path().unwrap_err();
        assert!(
            matches!(err, KernelError::OutOfMemory { .. }),
            "site {site}: {err:?}"
        );
        assert_eq!(COUNTED.stats().live_bytes, 0, "site {site} leaked");
        assert_eq!(
            CALLS.load(Ordering::SeqCst),
            site + 1,
            "site {site}: calls after the failure"
        );
        FAIL_AT.store(usize::MAX, Ordering::SeqCst);
        assert_eq!(low_precision_path(), Ok(true), "after failing site {site}");
        assert_eq!(COUNTED.stats().live_bytes, 0);
        println!("lowp_oom: site {site} failed cleanly, the next run was right");
    }
    // No failure injected: exactly LOW_PRECISION_ALLOCATIONS calls, all given back.
    CALLS.store(0, Ordering::SeqCst);
    FAIL_AT.store(LOW_PRECISION_ALLOCATIONS, Ordering::SeqCst);
    assert_eq!(low_precision_path(), Ok(true));
    assert_eq!(CALLS.load(Ordering::SeqCst), LOW_PRECISION_ALLOCATIONS);
    assert_eq!(COUNTED.stats().live_bytes, 0);
    println!("lowp_oom: ok");
}
