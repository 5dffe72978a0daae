//! Shared by the provider's test files.

/// Runs `f` on its own thread and fails if it has not returned within a bound far beyond any
/// uncontended run (a deadlock detector, not a timing measurement). A broken cell deadlocks
/// (an attempt that never resets its state, a re-entry check that never fires): the test must
/// then fail with this message, not hang the run, so that a mutant or a regression is a
/// failure rather than an inconclusive timeout. A panic inside `f` is re-raised.
pub fn without_deadlock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    // Miri interprets every instruction: give it the same bound in its own time.
    let bound = if cfg!(miri) { 600 } else { 10 };
    match rx.recv_timeout(std::time::Duration::from_secs(bound)) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("deadlocked: the test did not finish within {bound} s"),
    }
}
