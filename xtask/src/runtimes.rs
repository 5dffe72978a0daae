//! `cargo xtask runtimes`: downloads the pinned runtime wheels from PyPI, unpacks them under
//! `target/runtimes/`, and writes `target/runtimes/runtimes.json`, the file the tests and the
//! ONNX Runtime campaign read to find the libraries and models.
//!
//! The code is the test kit's ([`keepalloc_testkit::runtimes`]), which the tests also run on
//! their first use; here a failed download, a hash mismatch or a missing file is always an
//! error (the command was asked for explicitly).

use keepalloc_testkit::runtimes::{self, EXECUTORCH, ONNXRUNTIME};

/// Runs the command.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut force = false;
    for arg in args {
        match arg.as_str() {
            "--force" => force = true,
            "--help" | "-h" => {
                println!(
                    "usage: cargo xtask runtimes [--force]\n\n\
                     Downloads onnxruntime=={} and executorch=={} (pinned wheels) with pip,\n\
                     unpacks them under target/runtimes/ and writes target/runtimes/runtimes.json.",
                    ONNXRUNTIME.version, EXECUTORCH.version
                );
                return Ok(());
            }
            other => return Err(format!("runtimes: unknown option `{other}`")),
        }
    }
    let rt = runtimes::fetch(force, &mut std::io::stdout())?;
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
