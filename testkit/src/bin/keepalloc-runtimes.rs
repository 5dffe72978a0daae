//! `keepalloc-runtimes [--force]`: what `cargo xtask runtimes` runs. The fetch is the test
//! kit's, so the tests (on first use) and the command share one pinned, hash-checked copy.

use std::process::ExitCode;

use keepalloc_testkit::runtimes::{self, EXECUTORCH, ONEDNN};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let force = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["--force"] => true,
        _ => {
            eprintln!("usage: keepalloc-runtimes [--force] (cargo xtask runtimes --help)");
            return ExitCode::from(2);
        }
    };
    match runtimes::fetch(force, &mut std::io::stdout()) {
        Ok(rt) => {
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
            println!("onednn {}: {}", ONEDNN.version, rt.onednn.display());
            println!("manifest: {}", runtimes::manifest_path().display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("runtimes: {e}");
            ExitCode::FAILURE
        }
    }
}
