//! The nightly policy shared by the sanitizer commands: `cargo +nightly` through rustup,
//! probes for the toolchain and its components, and `--require` / `CI=true`, which turn a
//! reason to skip into an error.

use std::process::{Command, Stdio};

use crate::util;

/// Whether a reason to skip is an error, and why.
#[derive(Clone, Copy, Debug)]
pub(super) struct Require(pub(super) Option<&'static str>);

impl Require {
    /// Required when `flag` (`--require`) was given or when `CI=true`.
    pub(super) fn new(flag: bool) -> Require {
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        let why = if flag {
            Some("--require")
        } else if ci {
            Some("CI=true")
        } else {
            None
        };
        Require(why)
    }

    /// Prints why `command` was skipped and succeeds, or fails with the reason when
    /// required.
    pub(super) fn skipped(self, command: &str, why: &str) -> Result<(), String> {
        match self.0 {
            Some(because) => Err(format!(
                "{command}: cannot run, and skipping is an error ({because}): {why}"
            )),
            None => {
                println!("{command}: skipped: {why} (CI=true or --require make this an error)");
                Ok(())
            }
        }
    }
}

/// A `cargo +nightly` command at the workspace root, through the rustup proxy (the
/// `CARGO` that built xtask is a toolchain's own cargo and does not understand `+nightly`).
pub(super) fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(util::root());
    // Set by the outer `cargo run`; they would pin the inner cargo to the outer toolchain.
    for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC"] {
        cmd.env_remove(var);
    }
    cmd
}

/// `Ok(version)` when `cmd` runs and succeeds, `Err(reason)` otherwise.
pub(super) fn probe(mut cmd: Command) -> Result<String, String> {
    cmd.stdin(Stdio::null());
    match cmd.output() {
        Err(e) => Err(format!("could not run {cmd:?}: {e}")),
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed")
            .trim()
            .to_string()),
    }
}

pub(super) fn nightly_available() -> Result<String, String> {
    let mut cmd = nightly_cargo();
    cmd.arg("--version");
    probe(cmd).map_err(|e| format!("no nightly toolchain through rustup ({e})"))
}

/// The host target triple of the nightly toolchain.
pub(super) fn host_triple() -> Result<String, String> {
    let mut cmd = Command::new("rustc");
    cmd.args(["+nightly", "-vV"]).env_remove("RUSTUP_TOOLCHAIN");
    let info = probe_all(cmd)?;
    info.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV printed no host".into())
}

pub(super) fn probe_all(mut cmd: Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}
