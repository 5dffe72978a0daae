//! Child processes for every command: run one with a deadline ([`run_captured`]), wait for
//! one and kill it when its time is up ([`wait_or_kill`]), and name how it ended
//! ([`RunEnd`], [`signal_name`]).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What to kill when a child outlives its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// The child alone.
    Child,
    /// The process group the child leads (it was spawned with `process_group(0)`): cargo,
    /// the test binaries and whatever they started.
    Group,
}

/// Waits for `child` until `timeout` has passed, then kills it (`kill`) and reaps it.
/// Returns its status and whether it was killed for its time. Polls from 100 µs up to every
/// 5 ms, so a short run is not charged a long sleep.
pub fn wait_or_kill(
    child: &mut Child,
    timeout: Duration,
    kill: Kill,
) -> Result<(ExitStatus, bool), String> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            return Ok((status, false));
        }
        if started.elapsed() > timeout {
            #[cfg(unix)]
            if kill == Kill::Group {
                // The process group this child leads, by its id: never a broad name.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
            }
            let _ = child.kill();
            let status = child.wait().map_err(|e| format!("wait: {e}"))?;
            return Ok((status, true));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// Times [`spawn_retrying_busy`] tries, 10 ms apart.
const BUSY_TRIES: u32 = 100;

/// `cmd.spawn()`, tried again while the program is "busy" (ETXTBSY): an executable this
/// process has just written stays busy while another thread's fork, not yet exec'd, still
/// holds the writer's descriptor (the driver's tests write their fake harnesses while other
/// tests spawn; seen in 1 of 60 loaded runs of the xtask tests).
fn spawn_retrying_busy(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 1;
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < BUSY_TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            spawned => return spawned,
        }
    }
}

/// A finished child of [`run_captured`].
#[derive(Debug)]
pub struct Captured {
    /// How it ended (after the kill, when it timed out).
    pub status: ExitStatus,
    /// It outlived its timeout and was killed.
    pub timed_out: bool,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// Runs `cmd` (stdin closed, stdout and stderr captured), killing it after `timeout`.
pub fn run_captured(mut cmd: Command, timeout: Duration) -> Result<Captured, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_retrying_busy(&mut cmd)
        .map_err(|e| format!("could not start {:?}: {e}", cmd.get_program()))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let (status, timed_out) = wait_or_kill(&mut child, timeout, Kill::Child)?;
    Ok(Captured {
        status,
        timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Reads `pipe` to its end on a thread of its own (so a chatty child never blocks on a
/// full pipe while we wait for it).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

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

impl From<Captured> for RunEnd {
    fn from(c: Captured) -> RunEnd {
        RunEnd {
            code: c.status.code(),
            signal: signal_of(&c.status),
            timed_out: c.timed_out,
            stdout: c.stdout,
            stderr: c.stderr,
        }
    }
}

/// Runs `cmd` as [`run_captured`] does and says how it ended.
pub fn run_process(cmd: Command, timeout: Duration) -> Result<RunEnd, String> {
    run_captured(cmd, timeout).map(RunEnd::from)
}

/// The signal that ended a process, if one did.
#[cfg(unix)]
pub fn signal_of(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// The signal that ended a process, if one did.
#[cfg(not(unix))]
pub fn signal_of(_: &ExitStatus) -> Option<i32> {
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

/// `sh -c script`, for the tests that run real processes (here and in the campaign's pool).
#[cfg(all(test, unix))]
pub fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

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
    #[cfg(target_os = "linux")]
    fn a_program_busy_for_a_moment_is_started_once_it_is_free() {
        use std::io::Write as _;
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("prog");
        // Open for writing while the spawns below run: exec(2) says ETXTBSY meanwhile.
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"#!/bin/sh\necho started\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let busy = Command::new(&path).spawn().unwrap_err();
        assert_eq!(
            busy.kind(),
            std::io::ErrorKind::ExecutableFileBusy,
            "{busy}"
        );
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(file);
        });
        let end = run_captured(Command::new(&path), Duration::from_secs(10)).unwrap();
        closer.join().unwrap();
        assert_eq!(end.stdout, "started\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
