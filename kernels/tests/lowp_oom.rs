//! `low_precision_path` (the fault campaign's hook for the bf16 and int8 operators) through
//! a captured table that fails each of its allocation sites in turn: every failure is a clean
//! `OutOfMemory` with every block given back, and the next run computes the right answers.
//! The captured table is process-wide, hence a process of its own.

#[path = "common/fail_nth.rs"]
mod fail_nth;

use std::sync::atomic::Ordering;

use fail_nth::{CALLS, FAIL_AT, FailNth};
use keepalloc_allocators::{AllocatorTable, Counting};
use keepalloc_kernels::{KernelError, LOW_PRECISION_ALLOCATIONS, initialize, low_precision_path};

static COUNTED: Counting<FailNth> = Counting::new(FailNth);
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&COUNTED);

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
