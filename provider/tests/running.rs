//! What a `fork()` child handler and a diagnostic read: whether an attempt is running now,
//! and what `after_fork_in_child` makes of attempts other threads were running.

use std::sync::Barrier;

use keepalloc_allocators::System;
use keepalloc_provider::{GlobalProvider, KeepCell, LibraryOnce, ProviderError};

#[test]
fn a_cell_says_running_exactly_inside_an_attempt() {
    let cell: KeepCell<u32> = KeepCell::new();
    assert!(!cell.is_attempt_running(), "an empty cell runs nothing");
    let r = cell.get_or_try_init(
        || {
            assert!(cell.is_attempt_running(), "inside make_owner");
            Ok(7)
        },
        |_| {
            assert!(cell.is_attempt_running(), "inside publish");
            Err("not yet")
        },
    );
    assert_eq!(r, Err("not yet"));
    assert!(!cell.is_attempt_running(), "a failed attempt is over");
    cell.get_or_try_init(|| Ok(8), |_| Ok::<_, &str>(()))
        .unwrap();
    assert!(!cell.is_attempt_running(), "a published cell runs nothing");
}

#[test]
fn a_library_once_says_running_only_inside_its_hook_and_debug_says_its_state() {
    let once = LibraryOnce::new();
    assert!(!once.is_running());
    assert!(
        format!("{once:?}").contains("initialized: false"),
        "{once:?}"
    );
    let r = once.run(|| {
        assert!(once.is_running(), "inside the hook");
        Err("no")
    });
    assert!(r.is_err());
    assert!(!once.is_running());
    once.run(|| Ok::<_, &str>(())).unwrap();
    assert!(!once.is_running());
    let shown = format!("{once:?}");
    assert!(
        shown.starts_with("LibraryOnce") && shown.contains("initialized: true"),
        "{shown}"
    );
}

static FORKED: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

/// `after_fork_in_child` called while another thread is inside a library's hook (what a
/// fork in the middle of that hook leaves the child with): that library's attempt is
/// orphaned and reported, never waited for; the other libraries, and a library whose hook
/// was not running, are unaffected.
#[test]
fn after_fork_orphans_only_the_attempts_other_threads_were_running() {
    let inside = Barrier::new(2);
    let release = Barrier::new(2);
    std::thread::scope(|s| {
        let hook = s.spawn(|| {
            FORKED.acquire_library("busy", |_| {
                inside.wait();
                release.wait();
                Ok(())
            })
        });
        inside.wait();
        FORKED.after_fork_in_child();
        let orphaned = FORKED.acquire_library("busy", |_| Ok(()));
        assert!(
            matches!(orphaned, Err(ProviderError::OrphanedByFork { .. })),
            "{orphaned:?}"
        );
        let (_, ran) = FORKED
            .acquire_library("idle", |_| Ok(()))
            .expect("a library whose hook was not running is unaffected");
        assert_eq!(ran, keepalloc_provider::HookRan::Ran);
        release.wait();
        hook.join()
            .unwrap()
            .expect("the parent's own hook finishes");
    });
}
