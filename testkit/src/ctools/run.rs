//! Running a built program in a fresh process, with or without a time limit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::outcome::Outcome;

/// Runs `bin` in a fresh process with extra environment variables.
pub fn run(bin: &Path, env: &[(&str, &str)]) -> Result<Outcome, String> {
    let mut cmd = Command::new(bin);
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    Ok(Outcome::from_output(&out))
}

/// Runs `bin` like [`run`], in its own process group, and kills the group (the program and
/// any child it forked) when it has not finished within `limit`: then the outcome says
/// `timed_out`.
pub fn run_with_timeout(
    bin: &Path,
    env: &[(&str, &str)],
    limit: Duration,
) -> Result<Outcome, String> {
    let mut cmd = Command::new(bin);
    cmd.envs(env.iter().copied());
    run_command_with_timeout(cmd, limit)
}

/// Runs `cmd` (its program, arguments and environment as given) like [`run_with_timeout`].
pub fn run_command_with_timeout(mut cmd: Command, limit: Duration) -> Result<Outcome, String> {
    let bin = PathBuf::from(cmd.get_program());
    let bin = bin.as_path();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = collect(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = collect(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let wait_error = |e: std::io::Error| format!("waiting for {}: {e}", bin.display());
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().map_err(wait_error)? {
            break (status, false);
        }
        if Instant::now() >= deadline {
            // The whole group: a forked child would keep the pipes open.
            #[cfg(unix)]
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            break (child.wait().map_err(wait_error)?, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(Outcome::new(status, timed_out, stdout, stderr))
}
