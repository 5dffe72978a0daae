//! `cargo xtask runtimes`: downloads the pinned runtime wheels from PyPI, unpacks them under
//! `target/runtimes/`, and writes `target/runtimes/runtimes.json`, the file the tests, the
//! bench and the ONNX Runtime campaign read to find the libraries and models.
//!
//! It runs the test kit's `keepalloc-runtimes` binary, the same fetch the tests run on their
//! first use; here a failed download, a hash mismatch or a missing file is always an error
//! (the command was asked for explicitly).

use crate::util;

/// `cargo xtask runtimes --help` (the pinned versions are the test kit's:
/// `keepalloc_testkit::runtimes::{ONNXRUNTIME, EXECUTORCH, ONEDNN}`).
pub const LONG_ABOUT: &str = "\
Downloads the pinned onnxruntime, executorch and onednn-cpu-gomp wheels with pip, unpacks
them under target/runtimes/ and writes target/runtimes/runtimes.json, the file the tests, the
bench and the ONNX Runtime campaign read. A failed download, a hash mismatch or a missing
file is an error.";

/// `cargo xtask runtimes` options.
#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Download and unpack again even when target/runtimes is complete.
    #[arg(long)]
    pub force: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), String> {
    let mut cmd = util::cargo();
    cmd.args([
        "run",
        "-q",
        "-p",
        "keepalloc-testkit",
        "--bin",
        "keepalloc-runtimes",
        "--",
    ]);
    if args.force {
        cmd.arg("--force");
    }
    util::run(&mut cmd)
}

/// Fetches the runtimes as [`run`] does (a failure is an error) and reads
/// `target/runtimes/runtimes.json`, where they are.
pub fn manifest() -> Result<serde_json::Value, String> {
    run(Args::default())?;
    let path = util::root().join("target/runtimes/runtimes.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// The ONNX Runtime library a [`manifest`] names.
pub fn onnxruntime_library(manifest: &serde_json::Value) -> Result<&str, String> {
    manifest["onnxruntime"]["library"]
        .as_str()
        .ok_or_else(|| "runtimes.json names no ONNX Runtime library".to_owned())
}
