//! How a test program ended, and how to tell why from what it printed.

use std::fmt::Write as _;
use std::process::ExitStatus;

/// SIGSEGV (11 on Linux, the BSDs and macOS): what a store or load through NULL dies of.
pub const SIGSEGV: i32 = 11;

/// SIGABRT (6 on Linux): what `abort()` dies of (Rust's "cannot catch foreign exceptions").
pub const SIGABRT: i32 = 6;

/// What `CHECK` in `tests/c/check.h` prints before the condition.
pub(super) const CHECK_FAILED: &str = "CHECK failed: ";

/// What `STEP` in `tests/c/check.h` prints before the step's name.
const STEP_PREFIX: &str = "step: ";

/// A signal's name, for messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        SIGSEGV => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("{name} (signal {signal})")
}

/// How a test program ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Exit status 0.
    pub passed: bool,
    /// The status as text (`exit status: 1`, `signal: 11 (SIGSEGV)`...).
    pub status: String,
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Killed by the runner after its time limit (then `passed` is false).
    pub timed_out: bool,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
}

impl Outcome {
    /// From a finished [`Command::output`](std::process::Command::output).
    pub fn from_output(out: &std::process::Output) -> Outcome {
        Outcome::new(
            out.status,
            false,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub(super) fn new(
        status: ExitStatus,
        timed_out: bool,
        stdout: String,
        stderr: String,
    ) -> Outcome {
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        Outcome {
            passed: status.success() && !timed_out,
            status: status.to_string(),
            code: status.code(),
            signal,
            timed_out,
            stdout,
            stderr,
        }
    }

    /// The condition of the first failed `CHECK` on stderr (what follows `CHECK failed: `).
    pub fn failed_check(&self) -> Option<&str> {
        self.stderr.lines().find_map(|line| {
            line.split_once(CHECK_FAILED)
                .map(|(_, condition)| condition)
        })
    }

    /// The last `STEP` the test announced on stderr.
    pub fn last_step(&self) -> Option<&str> {
        self.stderr
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix(STEP_PREFIX))
    }

    /// Why it failed, in one line: the timeout, the signal (and the step it came in), the
    /// failed CHECK, else the first line of stderr, else the status.
    pub fn reason(&self) -> String {
        let step = self
            .last_step()
            .map(|step| format!(" in step `{step}`"))
            .unwrap_or_default();
        if self.timed_out {
            return format!("timed out{step}, killed");
        }
        if let Some(signal) = self.signal {
            return format!("killed by {}{step}", signal_name(signal));
        }
        self.stderr
            .lines()
            .find(|line| line.contains(CHECK_FAILED))
            .or_else(|| {
                self.stderr
                    .lines()
                    .find(|line| !line.starts_with(STEP_PREFIX))
            })
            .map(str::to_owned)
            .unwrap_or_else(|| self.status.clone())
    }

    /// Everything, for an error message.
    pub fn describe(&self, what: &str) -> String {
        let timed_out = if self.timed_out { " (timed out)" } else { "" };
        let mut s = format!("{what}: {}{timed_out}\n", self.status);
        let _ = write!(s, "--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr);
        s
    }
}
