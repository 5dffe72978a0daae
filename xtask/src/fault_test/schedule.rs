//! Running a whole campaign of harness processes on a pool of workers with progress on
//! stderr ([`run_all`]); each one through [`crate::process::run_process`].
//!
//! Every run is a fresh process: the library under test captures its allocator table once
//! per process, so one process can only ever show one cold start.

use std::io::Write;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::process::{RunEnd, run_process};

/// Runs `total` processes, the i-th built by `command(i)`, on `jobs` workers, each with
/// `timeout`, and hands each end to `judge` (on the worker, so big outputs are not kept).
/// Returns the results in index order. A process that cannot be started ends the campaign.
pub fn run_all<T: Send>(
    total: usize,
    jobs: usize,
    timeout: Duration,
    command: impl Fn(usize) -> Command + Sync,
    judge: impl Fn(usize, RunEnd) -> T + Sync,
) -> Result<Vec<T>, String> {
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..total).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<(), String> {
        let worker = || -> Result<(), String> {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total || failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let end = run_process(command(i), timeout).inspect_err(|_| {
                    failed.store(true, Ordering::Relaxed);
                })?;
                let judged = judge(i, end);
                results.lock().expect("results")[i] = Some(judged);
                done.fetch_add(1, Ordering::Relaxed);
            }
        };
        let workers: Vec<_> = (0..jobs.clamp(1, total.max(1)))
            .map(|_| scope.spawn(worker))
            .collect();
        let progress = scope.spawn(|| progress(&done, total, &finished, started));
        let mut result = Ok(());
        for w in workers {
            let r = w.join().unwrap_or_else(|_| Err("a worker panicked".into()));
            if result.is_ok() {
                result = r;
            }
        }
        finished.store(true, Ordering::Relaxed);
        let _ = progress.join();
        result
    })?;
    results
        .into_inner()
        .map_err(|_| "results poisoned".to_string())?
        .into_iter()
        .map(|r| r.ok_or_else(|| "a run was never made".to_string()))
        .collect()
}

/// A `\r` progress bar on a terminal; in a log (CI), one line per tenth of the runs.
fn progress(done: &AtomicUsize, total: usize, finished: &AtomicBool, started: Instant) {
    const WIDTH: usize = 30;
    let mut err = std::io::stderr();
    let total = total.max(1);
    if !std::io::IsTerminal::is_terminal(&err) {
        let mut next_tenth = 1;
        loop {
            let n = done.load(Ordering::Relaxed);
            let end = finished.load(Ordering::Relaxed);
            if end || n * 10 >= next_tenth * total {
                let _ = writeln!(
                    err,
                    "fault-test: {n}/{total} runs  {:.1}s",
                    started.elapsed().as_secs_f64()
                );
                next_tenth = n * 10 / total + 1;
            }
            if end {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    loop {
        let n = done.load(Ordering::Relaxed);
        let filled = (n * WIDTH / total).min(WIDTH);
        let _ = write!(
            err,
            "\r[{}{}] {n}/{total} runs  {:.1}s ",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
        if finished.load(Ordering::Relaxed) {
            let _ = writeln!(err);
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::process::sh;

    #[test]
    fn returns_results_in_command_order() {
        let codes = run_all(
            6,
            3,
            Duration::from_secs(10),
            |i| sh(&format!("exit {i}")),
            |i, end| (i, end.code),
        )
        .unwrap();
        assert_eq!(
            codes,
            (0..6).map(|i| (i, Some(i as i32))).collect::<Vec<_>>()
        );
    }
}
