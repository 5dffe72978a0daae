//! The library registry seen through its public face: name bounds, one once per name
//! (compared by content), independent libraries on one owner, and `published`.

mod common;

use keepalloc_allocators::System;
use keepalloc_provider::{
    GlobalProvider, HookRan, LibraryError, MAX_LIBRARIES, MAX_LIBRARY_NAME, ProviderError,
    check_name_bytes,
};

#[test]
fn names_from_c_are_checked_and_kept_as_given() {
    assert_eq!(check_name_bytes(b"xnnpack"), Ok("xnnpack"));
    assert_eq!(check_name_bytes(b""), Err(LibraryError::Empty));
    let longest = vec![b'a'; MAX_LIBRARY_NAME];
    assert_eq!(
        check_name_bytes(&longest),
        Ok(core::str::from_utf8(&longest).unwrap())
    );
    let over = vec![b'a'; MAX_LIBRARY_NAME + 1];
    assert_eq!(
        check_name_bytes(&over),
        Err(LibraryError::TooLong {
            len: MAX_LIBRARY_NAME + 1
        })
    );
    assert_eq!(check_name_bytes(b"\xff\xfe"), Err(LibraryError::NotUtf8));
}

static TWO: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

#[test]
fn each_name_has_its_own_once_and_the_same_name_shares_it() {
    common::without_deadlock(|| {
        assert!(TWO.published().is_none(), "nothing published yet");
        let (a, ran) = TWO.acquire_library("alpha", |_| Ok(())).unwrap();
        assert_eq!(ran, HookRan::Ran);
        assert_eq!(TWO.published(), Some(a), "published: the same handle");
        // A name equal by content (a different String) is the same library: its hook is skipped.
        let again = String::from("alp") + "ha";
        let (b, ran) = TWO
            .acquire_library(&again, |_| panic!("alpha's hook must not run twice"))
            .unwrap();
        assert_eq!((b, ran), (a, HookRan::AlreadyInitialized));
        // Another name is another library: its own hook runs, failures retry, on the same owner.
        let failed = TWO.acquire_library("beta", |_| Err(keepalloc_provider::InitError::new("no")));
        assert!(matches!(failed, Err(ProviderError::InitFailed(_))));
        assert!(!TWO.is_initialized("beta") && TWO.is_initialized("alpha"));
        let (c, ran) = TWO.acquire_library("beta", |_| Ok(())).unwrap();
        assert_eq!((c, ran), (a, HookRan::Ran));
        assert_eq!(TWO.library_stats("beta").unwrap().init_attempts, 2);
        assert_eq!(TWO.library_stats("alpha").unwrap().init_attempts, 1);
        assert!(TWO.library_stats("gamma").is_none(), "never acquired");
    });
}

static FULL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

#[test]
fn the_registry_is_bounded_and_keeps_every_name_apart() {
    // Slot 0 is the default library: MAX_LIBRARIES - 1 named ones fit.
    for i in 1..MAX_LIBRARIES {
        let name = format!("lib{i}");
        let (_, ran) = FULL.acquire_library(&name, |_| Ok(())).unwrap();
        assert_eq!(ran, HookRan::Ran, "{name} is new");
    }
    for i in 1..MAX_LIBRARIES {
        let (_, ran) = FULL
            .acquire_library(&format!("lib{i}"), |_| panic!("ran twice"))
            .unwrap();
        assert_eq!(ran, HookRan::AlreadyInitialized);
    }
    let full = FULL.acquire_library("one-too-many", |_| Ok(()));
    assert!(
        matches!(&full, Err(ProviderError::Library(LibraryError::Full { name })) if name == "one-too-many"),
        "{full:?}"
    );
    // The default library is not one of the named slots.
    assert!(!FULL.is_initialized(keepalloc_provider::DEFAULT_LIBRARY));
    let (_, ran) = FULL
        .acquire_library(keepalloc_provider::DEFAULT_LIBRARY, |_| Ok(()))
        .unwrap();
    assert_eq!(ran, HookRan::Ran);
    assert!(FULL.is_initialized(keepalloc_provider::DEFAULT_LIBRARY));
}

static RACED: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

/// Threads that ask for the same new name at once all get its one once: the hook runs once
/// per name, however the lock-free lookup and the locked registration interleave.
#[test]
fn a_new_name_raced_by_many_threads_is_registered_once() {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Miri interprets every instruction: fewer threads and names there.
    let (threads, rounds) = if cfg!(miri) {
        (4, 2)
    } else {
        (32, MAX_LIBRARIES - 1)
    };
    for round in 0..rounds {
        let name = format!("raced-{round}");
        let runs = AtomicUsize::new(0);
        let gate = Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    gate.wait();
                    RACED
                        .acquire_library(&name, |_| {
                            runs.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        })
                        .unwrap();
                });
            }
        });
        assert_eq!(
            runs.load(Ordering::Relaxed),
            1,
            "{name}'s hook ran more than once"
        );
    }
}
