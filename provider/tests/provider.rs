//! `GlobalProvider` and `Provider`: sessions share one owner; the library's init runs inside
//! the once; failures are retried with the owner the library may already have captured.
#![cfg(not(loom))] // under `--cfg loom` the cell uses loom primitives: see tests/loom.rs

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::thread;

use allocator_api2::alloc::{AllocError, Allocator};
use allocator_api2::vec::Vec as AVec;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_provider::{GlobalProvider, InitError, Provider, ProviderError};

/// A stand-in for XNNPACK's `xnn_initialize`: the first table it sees wins (CAS), later
/// ones are ignored, exactly as the real library does.
struct Library {
    captured_context: AtomicUsize,
    inits: AtomicUsize,
}
impl Library {
    const fn new() -> Self {
        Library {
            captured_context: AtomicUsize::new(0),
            inits: AtomicUsize::new(0),
        }
    }
    fn initialize(&self, table: &AllocatorTable) {
        self.inits.fetch_add(1, SeqCst);
        let _ = self
            .captured_context
            .compare_exchange(0, table.context() as usize, SeqCst, SeqCst);
    }
    /// Allocates and frees through the captured context, as the library would later.
    fn use_captured(&self, table: &AllocatorTable) {
        assert_eq!(self.captured_context.load(SeqCst), table.context() as usize);
        // SAFETY: the table comes from a provider and follows the contract.
        unsafe {
            let p = table.aligned_alloc(64, 4096);
            assert!(!p.is_null());
            p.write_bytes(1, 4096);
            table.aligned_free(p);
        }
    }
}

#[test]
fn sessions_created_together_share_one_owner() {
    static LIB: Library = Library::new();
    fn init(t: &'static AllocatorTable) -> Result<(), InitError> {
        LIB.initialize(t);
        Ok(())
    }
    static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), Some(init));

    let gate = Arc::new(Barrier::new(32));
    let sessions: Vec<_> = (0..32).map(|_| Provider::with_global(&GLOBAL)).collect();
    let threads: Vec<_> = sessions
        .into_iter()
        .map(|session| {
            let gate = gate.clone();
            thread::spawn(move || {
                gate.wait();
                session.preferred_allocator().unwrap()
            })
        })
        .collect();
    let handles: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(handles.iter().all(|h| *h == handles[0]));
    assert!(
        handles
            .iter()
            .all(|h| std::ptr::eq(h.table(), handles[0].table()))
    );
    let s = GLOBAL.stats();
    assert_eq!(
        (s.owners_constructed, s.init_attempts, s.init_successes),
        (1, 1, 1)
    );
    assert_eq!(LIB.inits.load(SeqCst), 1);
    drop(handles);
    let later = Provider::with_global(&GLOBAL)
        .preferred_allocator()
        .unwrap();
    LIB.use_captured(later.table());
    assert_eq!(later.context(), later.table().context());
    assert_eq!(later.stats().live_bytes, 0);
    assert_eq!(later.stats().allocations, 1);
}

#[test]
fn init_failing_after_capture_is_retried_with_the_same_owner() {
    common::without_deadlock(|| {
        static LIB: Library = Library::new();
        static FAILURES_LEFT: AtomicUsize = AtomicUsize::new(3);
        fn init(t: &'static AllocatorTable) -> Result<(), InitError> {
            LIB.initialize(t); // the library captures the table, then init fails
            if FAILURES_LEFT
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(InitError::new("weights not ready"));
            }
            Ok(())
        }
        static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), Some(init));

        let session = Provider::with_global(&GLOBAL);
        for _ in 0..3 {
            let err = session.preferred_allocator().unwrap_err();
            assert!(matches!(err, ProviderError::InitFailed(_)), "{err}");
            assert!(err.to_string().contains("weights not ready"));
            assert!(GLOBAL.get().is_none());
        }
        let first_owner = GLOBAL.owner().expect("owner kept after failures") as *const _;
        let h = session.preferred_allocator().unwrap();
        assert!(std::ptr::eq(h.owner(), first_owner));
        let s = GLOBAL.stats();
        assert_eq!(
            (s.owners_constructed, s.init_attempts, s.init_successes),
            (1, 4, 1)
        );
        LIB.use_captured(h.table());
    });
}

#[test]
fn panicking_init_propagates_then_succeeds() {
    common::without_deadlock(|| {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn init(_: &'static AllocatorTable) -> Result<(), InitError> {
            if CALLS.fetch_add(1, SeqCst) == 0 {
                panic!("init panicked");
            }
            Ok(())
        }
        static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), Some(init));
        let r = catch_unwind(AssertUnwindSafe(|| GLOBAL.acquire()));
        assert!(r.is_err());
        let kept = GLOBAL.owner().unwrap() as *const _;
        let h = GLOBAL.acquire().unwrap();
        assert!(std::ptr::eq(h.owner(), kept));
        assert_eq!(GLOBAL.stats().owners_constructed, 1);
    });
}

#[test]
fn owner_construction_failure_is_out_of_memory_and_retryable() {
    common::without_deadlock(|| {
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        fn make() -> Result<System, AllocError> {
            if BUILDS.fetch_add(1, SeqCst) < 2 {
                Err(AllocError)
            } else {
                Ok(System)
            }
        }
        static GLOBAL: GlobalProvider<System> = GlobalProvider::new(make, None);
        for _ in 0..2 {
            assert!(matches!(GLOBAL.acquire(), Err(ProviderError::OutOfMemory)));
            assert!(GLOBAL.owner().is_none());
        }
        GLOBAL.acquire().unwrap();
        let s = GLOBAL.stats();
        // Three attempts of the owner's once; a provider without a hook runs no library's once.
        assert_eq!(
            (s.owners_constructed, s.owner_attempts, s.init_attempts),
            (1, 3, 0)
        );
    });
}

#[test]
fn default_provider_is_shared_and_is_an_allocator() {
    let a = Provider::new().preferred_allocator().unwrap();
    let b = Provider::default().preferred_allocator().unwrap();
    assert_eq!(a, b);
    let mut v: AVec<u32, _> = AVec::new_in(a);
    v.extend(0..1000);
    assert_eq!(v.iter().sum::<u32>(), 499_500);
    assert!(a.stats().live_bytes >= 4000);
    drop(v);
    let layout = core::alloc::Layout::from_size_align(64, 64).unwrap();
    let p = a.allocate(layout).unwrap();
    // SAFETY: `p` is live with `layout`.
    unsafe { a.deallocate(p.cast(), layout) };
}

#[test]
fn acquire_with_uses_this_calls_hook_only_while_unpublished() {
    common::without_deadlock(|| {
        static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
        let err = GLOBAL
            .acquire_with(|_| Err(InitError::code(-7)))
            .unwrap_err();
        match err {
            ProviderError::InitFailed(e) => assert_eq!(e.status(), Some(-7)),
            other => panic!("{other}"),
        }
        GLOBAL.acquire_with(|_| Ok(())).unwrap();
        // Published: a failing hook is not run any more.
        GLOBAL
            .acquire_with(|_| panic!("hook ran after publication"))
            .unwrap();
    });
}
