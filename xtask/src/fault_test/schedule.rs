//! Running harness processes: one at a time with a timeout ([`run_process`]), or a whole
//! campaign on a pool of workers with progress on stderr ([`run_all`]).
//!
//! Every run is a fresh process: the library under test captures its allocator table once
//! per process, so one process can only ever show one cold start.

use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How one process ended and what it printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunEnd {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// It outlived its timeout and was killed.
    pub timed_out: bool,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// Runs `cmd` (stdin closed, stdout and stderr captured), killing it after `timeout`.
pub fn run_process(mut cmd: Command, timeout: Duration) -> Result<RunEnd, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {:?}: {e}", cmd.get_program()))?;
    let mut out_pipe = child.stdout.take().expect("stdout is piped");
    let mut err_pipe = child.stderr.take().expect("stderr is piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break (status, false);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            break (child.wait().map_err(|e| e.to_string())?, true);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    };
    Ok(RunEnd {
        code: status.code(),
        signal: signal_of(&status),
        timed_out,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

#[cfg(unix)]
fn signal_of(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &ExitStatus) -> Option<i32> {
    None
}

/// The usual name of a signal that ends a crashing process.
pub fn signal_name(signal: i32) -> String {
    match signal {
        4 => "SIGILL".into(),
        6 => "SIGABRT".into(),
        7 => "SIGBUS".into(),
        8 => "SIGFPE".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        15 => "SIGTERM".into(),
        n => format!("signal-{n}"),
    }
}

/// `exit 3`, `killed by SIGSEGV`, `timed out`.
pub fn describe_exit(end: &RunEnd) -> String {
    match (end.timed_out, end.signal, end.code) {
        (true, _, _) => "timed out".into(),
        (_, Some(s), _) => format!("killed by {}", signal_name(s)),
        (_, _, Some(c)) => format!("exit {c}"),
        _ => "ended without a status".into(),
    }
}

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

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn captures_output_exit_codes_and_signals() {
        let end = run_process(
            sh("echo out; echo err >&2; exit 7"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(
            (end.code, end.signal, end.timed_out),
            (Some(7), None, false)
        );
        assert_eq!(
            (end.stdout.as_str(), end.stderr.as_str()),
            ("out\n", "err\n")
        );
        let killed = run_process(sh("kill -SEGV $$"), Duration::from_secs(10)).unwrap();
        assert_eq!((killed.code, killed.signal), (None, Some(11)));
        assert_eq!(describe_exit(&killed), "killed by SIGSEGV");
    }

    #[test]
    fn kills_a_run_that_outlives_its_timeout() {
        let end = run_process(sh("exec sleep 30"), Duration::from_millis(200)).unwrap();
        assert!(end.timed_out);
    }

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
