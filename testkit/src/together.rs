//! Races for the tests: threads released together, each calling until it succeeds.

use std::sync::Barrier;

/// Runs `f(i)` for `i` in `0..threads`, each on its own scoped thread, all released at once by
/// a barrier (the race a test wants); returns the results in thread order. A panicking thread
/// panics the caller.
pub fn together<T: Send>(threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a racing thread panicked"))
            .collect()
    })
}

/// Calls `f` until `done` holds for its result, at most `max` times; returns every result in
/// call order.
pub fn calls_until<T>(max: usize, mut f: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> Vec<T> {
    let mut calls = Vec::new();
    for _ in 0..max {
        let r = f();
        let stop = done(&r);
        calls.push(r);
        if stop {
            break;
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_thread_runs_once_in_order() {
        let ran = AtomicUsize::new(0);
        let out = together(4, |i| {
            ran.fetch_add(1, Ordering::Relaxed);
            i * 10
        });
        assert_eq!(out, [0, 10, 20, 30]);
        assert_eq!(ran.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn calls_stop_at_the_first_done_or_at_max() {
        let mut n = 0;
        assert_eq!(
            calls_until(
                10,
                || {
                    n += 1;
                    n
                },
                |&v| v == 3
            ),
            [1, 2, 3]
        );
        assert_eq!(calls_until(2, || 0, |_| false), [0, 0]);
    }
}
