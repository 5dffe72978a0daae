//! What an embedder observes without (or besides) acquiring: whether a cell is published, the
//! side-effect-free `GlobalProvider::acquired` and `GlobalProvider::published`, handle identity across providers, zeroed
//! allocations, and the `Debug` output that ends up in logs. Each test fails when the function
//! it covers is replaced by a constant (`cargo xtask mutants` checks that).
//!
//! Which owner a handle is, how often a hook ran and what was allocated are judged by
//! witnesses the tests own (`support/witness.rs`: a test backend that counts its
//! constructions and allocations and carries a serial number, and hooks that count their own
//! calls); the provider's counters are checked as well, after them.
#![cfg(not(loom))] // under `--cfg loom` the cell uses loom primitives: see tests/loom.rs

mod common;
#[path = "support/witness.rs"]
mod witness;

use core::alloc::Layout;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_provider::{GlobalProvider, InitError, KeepCell, Provider, ProviderError};
use witness::{Ledger, Witnessed, owner_serial, serial_behind};

#[test]
fn is_published_is_false_until_a_publication_succeeds() {
    common::without_deadlock(|| {
        let cell: KeepCell<u32> = KeepCell::new();
        assert!(!cell.is_published(), "an empty cell is not published");

        let failed = cell.get_or_try_init(|| Ok::<_, &str>(7), |_| Err("init failed"));
        assert_eq!(failed, Err("init failed"));
        assert!(!cell.is_published(), "a failed attempt must not publish");
        assert_eq!(cell.owner(), Some(&7), "the owner is kept");
        assert_eq!(cell.get(), None);

        let owner = cell
            .get_or_try_init(|| Ok::<_, &str>(8), |_| Ok(()))
            .unwrap();
        assert_eq!(*owner, 7, "the retry published the kept owner");
        assert!(cell.is_published());
        assert_eq!(cell.get(), Some(&7));
    });
}

#[test]
fn keep_cell_debug_shows_publication_and_counters() {
    common::without_deadlock(|| {
        let cell: KeepCell<u32> = KeepCell::new();
        let before = format!("{cell:?}");
        assert!(before.starts_with("KeepCell {"), "{before}");
        assert!(before.contains("published: false"), "{before}");
        assert!(before.contains("owners_constructed: 0"), "{before}");

        let _ = cell.get_or_try_init(|| Ok::<_, ()>(1), |_| Err(()));
        cell.get_or_try_init(|| Ok::<_, ()>(2), |_| Ok(())).unwrap();
        let after = format!("{cell:?}");
        assert!(after.contains("published: true"), "{after}");
        assert!(after.contains("owners_constructed: 1"), "{after}");
        assert!(after.contains("init_attempts: 2"), "{after}");
        assert!(after.contains("init_successes: 1"), "{after}");
    });
}

#[test]
fn acquired_is_none_until_the_hook_succeeds_then_the_acquired_handle() {
    common::without_deadlock(|| {
        static LEDGER: Ledger = Ledger::new();
        static FAILURES_LEFT: AtomicUsize = AtomicUsize::new(1);
        // The hook's own count of its calls, and the serial behind the table of each.
        static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);
        static SEEN: Mutex<Vec<u64>> = Mutex::new(Vec::new());
        fn init(t: &'static AllocatorTable) -> Result<(), InitError> {
            HOOK_CALLS.fetch_add(1, SeqCst);
            SEEN.lock().unwrap().push(serial_behind(t, &LEDGER));
            if FAILURES_LEFT
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(InitError::new("not yet"));
            }
            Ok(())
        }
        static GLOBAL: GlobalProvider<Witnessed> =
            GlobalProvider::new(|| LEDGER.construct(), Some(init));

        assert!(GLOBAL.acquired().is_none(), "nothing published yet");
        assert!(GLOBAL.published().is_none(), "nothing published yet");
        assert!(matches!(
            GLOBAL.acquire(),
            Err(ProviderError::InitFailed(_))
        ));
        assert!(
            GLOBAL.constructed_owner().is_some(),
            "the owner is kept after the failure"
        );
        assert!(
            GLOBAL.acquired().is_none(),
            "an owner whose default library failed to initialize is not acquired"
        );
        let published = GLOBAL
            .published()
            .expect("the owner was published before its library's hook failed");

        let handle = GLOBAL.acquire().unwrap();
        assert_eq!(published, handle, "the retry acquired another owner");
        assert_eq!(GLOBAL.acquired(), Some(handle));
        assert_eq!(GLOBAL.published(), Some(handle));
        let got = GLOBAL.acquired().unwrap();
        // The test's witnesses: `acquired` and `published` ran no hook (the hook's own count)
        // and built nothing (the constructor's count); they return the acquired owner, by
        // serial.
        assert_eq!(HOOK_CALLS.load(SeqCst), 2, "an observer ran the hook");
        assert_eq!(LEDGER.constructed(), 1, "an observer constructed a backend");
        let serial = LEDGER.first_serial();
        assert_eq!(
            (owner_serial(&got), owner_serial(&handle)),
            (serial, serial),
            "`acquired` returned another owner than `acquire` did"
        );
        assert_eq!(
            *SEEN.lock().unwrap(),
            [serial; 2],
            "the retried hook was given another owner than the kept one"
        );
        assert!(std::ptr::eq(got.owner(), handle.owner()));
        assert!(std::ptr::eq(got.table(), handle.table()));
        assert_eq!(
            GLOBAL.stats().init_attempts,
            2,
            "an observer ran an attempt"
        );
    });
}

#[test]
fn handles_of_different_providers_are_not_equal() {
    static LEDGER_A: Ledger = Ledger::new();
    static LEDGER_B: Ledger = Ledger::new();
    static A: GlobalProvider<Witnessed> = GlobalProvider::new(|| LEDGER_A.construct(), None);
    static B: GlobalProvider<Witnessed> = GlobalProvider::new(|| LEDGER_B.construct(), None);
    let a = A.acquire().unwrap();
    let b = B.acquire().unwrap();
    // The test's witnesses: each provider built its own backend, once, and each handle is
    // its provider's (by serial).
    assert_eq!((LEDGER_A.constructed(), LEDGER_B.constructed()), (1, 1));
    assert_eq!(
        (owner_serial(&a), owner_serial(&b)),
        (LEDGER_A.first_serial(), LEDGER_B.first_serial())
    );
    assert_ne!(owner_serial(&a), owner_serial(&b));
    assert_ne!(a, b, "two providers own two allocators");
    assert_ne!(a.context(), b.context());
    let again = Provider::with_global(&A).preferred_allocator().unwrap();
    assert_eq!(owner_serial(&again), LEDGER_A.first_serial());
    assert_eq!(
        owner_serial(&B.acquired().unwrap()),
        LEDGER_B.first_serial()
    );
    assert_eq!(a, again);
    assert_eq!(b, B.published().unwrap());
}

#[test]
fn allocate_zeroed_zeroes_memory_that_was_dirty() {
    static LEDGER: Ledger = Ledger::new();
    static GLOBAL: GlobalProvider<Witnessed> = GlobalProvider::new(|| LEDGER.construct(), None);
    let h = GLOBAL.acquire().unwrap();
    // Small bins, a page, and a block large enough to be mmapped: for each, dirty a block,
    // free it (so the allocator is likely to hand the same bytes back), then ask for zeroes.
    let sizes: &[usize] = if cfg!(miri) {
        &[24, 4096]
    } else {
        &[24, 256, 4096, 1 << 20]
    };
    for &size in sizes {
        let layout = Layout::from_size_align(size, 16).unwrap();
        for _ in 0..4 {
            let before = h.stats();
            let (allocs_before, live_before) = (LEDGER.allocations(), LEDGER.live_bytes());
            let dirty = h.allocate(layout).unwrap();
            // SAFETY: `dirty` is a live block of `size` bytes from `h`.
            unsafe {
                dirty.cast::<u8>().as_ptr().write_bytes(0xA5, size);
                h.deallocate(dirty.cast(), layout);
            }
            let zeroed = h.allocate_zeroed(layout).unwrap();
            assert_eq!(zeroed.len(), size);
            assert_eq!(zeroed.cast::<u8>().as_ptr() as usize % 16, 0);
            // SAFETY: `zeroed` is a live, initialised (zeroed) block of `size` bytes.
            let bytes = unsafe { core::slice::from_raw_parts(zeroed.cast::<u8>().as_ptr(), size) };
            assert!(
                bytes.iter().all(|&b| b == 0),
                "allocate_zeroed returned dirty bytes"
            );
            // Counted by the test's backend, behind the owner ...
            assert_eq!(
                LEDGER.allocations(),
                allocs_before + 2,
                "the blocks did not come from the owner's backend"
            );
            assert_eq!(LEDGER.live_bytes(), live_before + size);
            // ... and by the owner's own counter.
            let s = h.stats();
            assert_eq!(
                s.allocations,
                before.allocations + 2,
                "counted by the owner"
            );
            assert_eq!(s.live_bytes, before.live_bytes + size);
            // SAFETY: `zeroed` is live with `layout`.
            unsafe { h.deallocate(zeroed.cast(), layout) };
            assert_eq!(LEDGER.live_bytes(), live_before);
            assert_eq!(h.stats().live_bytes, before.live_bytes);
        }
    }
}

#[test]
fn debug_output_names_the_owner_and_the_provider() {
    static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
    let session = Provider::with_global(&GLOBAL);
    assert_eq!(
        format!("{session:?}"),
        format!("Provider {{ global: {:p} }}", &GLOBAL)
    );
    let unpublished = format!("{GLOBAL:?}");
    assert!(
        unpublished.starts_with("GlobalProvider { cell: KeepCell { published: false"),
        "{unpublished}"
    );

    let h = session.preferred_allocator().unwrap();
    assert_eq!(
        format!("{h:?}"),
        format!("AllocatorHandle({:p})", h.owner())
    );
    let published = format!("{GLOBAL:?}");
    assert!(
        published.starts_with("GlobalProvider { cell: KeepCell { published: true"),
        "{published}"
    );

    let owner = h.owner();
    let text = format!("{owner:?}");
    assert!(
        text.starts_with(&format!("Owner {{ at: {owner:p}, stats: CountingStats {{")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{:?}", owner.allocator().stats())),
        "{text}"
    );
}
