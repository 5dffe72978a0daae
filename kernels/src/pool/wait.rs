//! Waiting, by the caller for its job's last tasks and by an idle worker for the next job:
//! spin for up to [`SPIN`], then block (each sleeps on one of the pool's condition
//! variables).

use std::time::{Duration, Instant};

/// How long an idle worker (or a caller waiting for workers) spins before it sleeps: long
/// enough that the workers of a model that runs layer after layer never sleep between two
/// runs (a sleeping worker wakes tens of microseconds late, and the caller takes its share
/// meanwhile), short enough that an idle pool soon stops using CPU. Debian's pthreadpool
/// spins far longer, about 25 ms on the Zen 4 VM (a million pauses; the process's CPU clock
/// after one job), and a 10 ms pause in the bench was too short for it; on that VM a woken
/// worker was also seen placed on the caller's core for up to a scheduler tick.
const SPIN: Duration = Duration::from_millis(1);

/// Spins on `ready` for up to [`SPIN`], then calls `block` (which must wait until it holds).
pub(super) fn wait_until(ready: impl Fn() -> bool, block: impl FnOnce()) {
    let start = Instant::now();
    let mut i = 0u32;
    loop {
        if ready() {
            return;
        }
        core::hint::spin_loop();
        i = i.wrapping_add(1);
        if i.is_multiple_of(64) && start.elapsed() > SPIN {
            break;
        }
    }
    block();
}
