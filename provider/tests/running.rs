//! What a `fork()` child handler and a diagnostic read: whether an attempt is running now,
//! and what `after_fork_in_child` makes of attempts other threads were running.

use std::sync::{Barrier, LazyLock, mpsc};
use std::time::Duration;

use keepalloc_allocators::System;
use keepalloc_provider::{GlobalProvider, HookRan, KeepCell, LibraryOnce, ProviderError};

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
/// orphaned and reported, never waited for; the owner, an initialized library and a library
/// whose hook was not running are unaffected. The orphaned call runs on its own thread and
/// a broken provider that waits for the orphaned attempt is reported after 10 s instead of
/// hanging the test run (a deadlock bound, not a timing measurement).
#[test]
fn after_fork_orphans_only_the_attempts_other_threads_were_running() {
    // Give the busy library a slot above 1, so its bit is not the owner's.
    for name in ["first", "second"] {
        FORKED.acquire_library(name, |_| Ok(())).unwrap();
    }
    let (inside_tx, inside_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let hook = std::thread::spawn(move || {
        FORKED.acquire_library("busy", move |_| {
            inside_tx.send(()).unwrap();
            let _ = release_rx.recv();
            Ok(())
        })
    });
    inside_rx
        .recv_timeout(Duration::from_secs(if cfg!(miri) { 600 } else { 10 }))
        .expect("the hook of library \"busy\" never ran (its name shares a once with another)");
    FORKED.after_fork_in_child();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(
            FORKED
                .acquire_library("busy", |_| Ok(()))
                .map(|(_, ran)| ran),
        );
    });
    let orphaned = rx
        .recv_timeout(Duration::from_secs(if cfg!(miri) { 600 } else { 10 }))
        .expect("the child waited for an attempt whose thread does not exist");
    assert!(
        matches!(orphaned, Err(ProviderError::OrphanedByFork { ref library }) if library == "busy"),
        "{orphaned:?}"
    );
    let (_, ran) = FORKED
        .acquire_library("first", |_| panic!("initialized before the fork"))
        .expect("an initialized library is unaffected");
    assert_eq!(ran, HookRan::AlreadyInitialized);
    let (_, ran) = FORKED
        .acquire_library("idle", |_| Ok(()))
        .expect("a library whose hook was not running is unaffected");
    assert_eq!(ran, HookRan::Ran);
    release_tx.send(()).unwrap();
    hook.join()
        .unwrap()
        .expect("the parent's own hook finishes");
}

static CLEAN: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

/// A fork while nothing runs orphans nothing: the child publishes and initializes as usual.
#[test]
fn after_fork_with_nothing_running_orphans_nothing() {
    CLEAN.after_fork_in_child();
    CLEAN
        .publish()
        .expect("no attempt was running: the owner can be built");
    let (_, ran) = CLEAN.acquire_library("fresh", |_| Ok(())).unwrap();
    assert_eq!(ran, HookRan::Ran);
}

static BUILD_INSIDE: LazyLock<Barrier> = LazyLock::new(|| Barrier::new(2));
static BUILD_RELEASE: LazyLock<Barrier> = LazyLock::new(|| Barrier::new(2));

fn slow_system() -> Result<System, allocator_api2::alloc::AllocError> {
    BUILD_INSIDE.wait();
    BUILD_RELEASE.wait();
    Ok(System)
}

static BUILDING: GlobalProvider<System> = GlobalProvider::new(slow_system, None);

/// A fork while another thread constructs the owner: the child's publish reports the
/// orphaned construction instead of waiting for a thread it does not have.
#[test]
fn after_fork_during_the_owners_construction_reports_it() {
    let builder = std::thread::spawn(|| BUILDING.publish().map(|_| ()));
    BUILD_INSIDE.wait();
    BUILDING.after_fork_in_child();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(BUILDING.publish().map(|_| ()));
    });
    let orphaned = rx
        .recv_timeout(Duration::from_secs(if cfg!(miri) { 600 } else { 10 }))
        .expect("the child waited for an owner construction whose thread does not exist");
    assert!(
        matches!(orphaned, Err(ProviderError::OrphanedByFork { .. })),
        "{orphaned:?}"
    );
    BUILD_RELEASE.wait();
    builder
        .join()
        .unwrap()
        .expect("the parent's construction finishes");
}
