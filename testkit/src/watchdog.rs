//! A per-test deadlock watchdog, for tests that can hang (a pool that loses a wake-up or a
//! task): a test that is still running after [`deadlock_bound`] is named on stderr and the
//! process aborts, so the run fails at once instead of hanging. The kernels' pool tests
//! (unit and `kernels/tests/pool.rs`) hold one each:
//!
//! ```
//! let _bound = keepalloc_testkit::watchdog::watchdog("my_test");
//! // ... the test's body; the watchdog stands down when `_bound` is dropped.
//! ```

use std::sync::mpsc;
use std::time::Duration;

/// A deadlock bound, not a timing measurement: a test that is still running after this
/// long has hung (the slowest takes under 2 s here), and its watchdog stops the process
/// with the test's name, so a pool that loses a wake-up or a task fails the run at once
/// instead of hanging it. `KEEPALLOC_TEST_DEADLOCK_SECS` raises it where everything is
/// slower (`cargo xtask tsan` sets it for its ThreadSanitizer builds).
pub fn deadlock_bound() -> Duration {
    let secs = std::env::var("KEEPALLOC_TEST_DEADLOCK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

/// The watchdog of one test: dropped (the test returned or panicked), it stands down.
pub struct Watchdog(Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>);

/// Starts the watchdog of test `name`: if the test has not finished within
/// [`deadlock_bound`], it writes `deadlock bound: <name> ...` to stderr and aborts.
pub fn watchdog(name: &'static str) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    let bound = deadlock_bound();
    let handle = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(bound) {
            use std::io::Write as _;
            // The stream itself: the harness's capture would swallow it before the abort.
            let _ = writeln!(
                std::io::stderr(),
                "deadlock bound: {name} still running after {bound:?}"
            );
            std::process::abort();
        }
    });
    Watchdog(Some((tx, handle)))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.0.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}
