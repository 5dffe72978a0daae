//! Small helpers shared by the commands: the workspace root and running cargo.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of this crate's directory).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// A `cargo` command from the toolchain that built xtask, run at the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(root());
    cmd
}

/// Runs `cmd`, turning a non-zero exit into an error that names the command.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}
