//! `cargo xtask runtimes`: downloads the pinned runtime wheels from PyPI, unpacks them under
//! `target/runtimes/`, and writes `target/runtimes/runtimes.json`, the file the tests and the
//! ONNX Runtime campaign read to find the libraries and models.
//!
//! The code is the test kit's ([`keepalloc_testkit::runtimes`]), which the tests also run on
//! their first use; here a failed download, a hash mismatch or a missing file is always an
//! error (the command was asked for explicitly).

use keepalloc_testkit::runtimes::{self, EXECUTORCH};

/// `cargo xtask runtimes --help` (the pinned versions are the test kit's:
/// `keepalloc_testkit::runtimes::{ONNXRUNTIME, EXECUTORCH}`).
pub const LONG_ABOUT: &str = "\
Downloads the pinned onnxruntime and executorch wheels with pip, unpacks them under
target/runtimes/ and writes target/runtimes/runtimes.json, the file the tests and the ONNX
Runtime campaign read. A failed download, a hash mismatch or a missing file is an error.";

/// `cargo xtask runtimes` options.
#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Download and unpack again even when target/runtimes is complete.
    #[arg(long)]
    pub force: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), String> {
    let rt = runtimes::fetch(args.force, &mut std::io::stdout())?;
    println!(
        "onnxruntime {}: {}",
        rt.onnxruntime_version,
        rt.onnxruntime.display()
    );
    for (name, p) in &rt.wheel_models {
        println!("  model {name}: {}", p.display());
    }
    println!(
        "executorch {}: {}",
        EXECUTORCH.version,
        rt.executorch_xnnpack.display()
    );
    println!("manifest: {}", runtimes::manifest_path().display());
    Ok(())
}
