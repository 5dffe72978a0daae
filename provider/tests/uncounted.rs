//! `GlobalProvider::new_uncounted`: one owner, a working published table, counters that read
//! zero; `GlobalProvider::new` still counts.
#![cfg(not(loom))] // under `--cfg loom` the cell uses loom primitives: see tests/loom.rs

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::thread;

use allocator_api2::vec::Vec as AVec;
use keepalloc_allocators::{AllocatorTable, CountingStats, System};
use keepalloc_provider::{GlobalProvider, InitError, Provider};

#[test]
fn an_uncounted_provider_builds_one_owner_and_publishes_a_working_table() {
    static INITS: AtomicUsize = AtomicUsize::new(0);
    static CAPTURED: AtomicUsize = AtomicUsize::new(0);
    fn init(t: &'static AllocatorTable) -> Result<(), InitError> {
        INITS.fetch_add(1, SeqCst);
        CAPTURED.store(t.context() as usize, SeqCst);
        Ok(())
    }
    static GLOBAL: GlobalProvider<System> =
        GlobalProvider::new_uncounted(|| Ok(System), Some(init));
    assert!(!GLOBAL.is_counted());

    let gate = Barrier::new(8);
    let handles: Vec<_> = thread::scope(|s| {
        let spawned: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    gate.wait();
                    let h = Provider::with_global(&GLOBAL)
                        .preferred_allocator()
                        .unwrap();
                    // Allocate and free through the table from every thread.
                    let t = h.table();
                    for size in [1usize, 64, 4096, 1 << 20] {
                        // Each block is freed once, through the table it came from.
                        // SAFETY: the published table follows the C contract.
                        unsafe {
                            let p = t.aligned_alloc(64, size);
                            assert!(!p.is_null());
                            assert_eq!(p as usize % 64, 0);
                            p.write_bytes(0xa5, size);
                            t.aligned_free(p);
                            let q = t.allocate().unwrap()(t.context(), size).cast::<u8>();
                            assert!(!q.is_null());
                            q.write_bytes(1, size);
                            let r = t.reallocate().unwrap()(t.context(), q.cast(), 2 * size)
                                .cast::<u8>();
                            assert!(!r.is_null());
                            assert_eq!(*r.add(size - 1), 1, "reallocate keeps the contents");
                            t.deallocate().unwrap()(t.context(), r.cast());
                        }
                    }
                    h
                })
            })
            .collect();
        spawned.into_iter().map(|j| j.join().unwrap()).collect()
    });
    assert!(handles.windows(2).all(|w| w[0] == w[1]), "one owner");
    let h = handles[0];
    assert_eq!(CAPTURED.load(SeqCst), h.context() as usize);
    // The table is the backend's own, inside the owner: not even `Counting`'s flag test.
    assert_eq!(
        h.context() as usize,
        h.owner().allocator().inner() as *const System as usize
    );
    assert_eq!(INITS.load(SeqCst), 1);

    // The handle's Rust face works too.
    let mut v: AVec<u64, _> = AVec::new_in(h);
    v.extend(0..10_000u64);
    assert_eq!(v.iter().sum::<u64>(), 10_000 * 9_999 / 2);
    drop(v);

    assert!(!h.owner().allocator().is_counted());
    assert_eq!(
        h.stats(),
        CountingStats::default(),
        "the owner counts nothing"
    );
    let s = GLOBAL.stats();
    assert_eq!(s.allocator, CountingStats::default());
    assert_eq!((s.owners_constructed, s.init_successes), (1, 1));
}

#[test]
fn new_still_counts() {
    static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
    assert!(GLOBAL.is_counted());
    let h = GLOBAL.acquire().unwrap();
    assert!(h.owner().allocator().is_counted());
    // SAFETY: the published table follows the C contract; the block is freed once.
    unsafe {
        let p = h.table().aligned_alloc(64, 100);
        assert!(!p.is_null());
        assert_eq!(GLOBAL.stats().allocator.allocations, 1);
        h.table().aligned_free(p);
    }
    let s = GLOBAL.stats().allocator;
    assert_eq!((s.allocations, s.deallocations, s.live_bytes), (1, 1, 0));
}
