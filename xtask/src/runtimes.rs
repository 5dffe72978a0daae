//! `cargo xtask runtimes`: downloads the pinned runtime wheels from PyPI, unpacks them under
//! `target/runtimes/`, and writes `target/runtimes/runtimes.json`, the file the tests and the
//! ONNX Runtime campaign read to find the libraries and models.
//!
//! The wheels are fetched with `pip download --no-deps --only-binary=:all:` for one fixed
//! interpreter tag and platform (`cp311`, `manylinux_2_28_x86_64`), so the machine's own
//! Python version does not matter, and each wheel's SHA-256 is pinned: pip refuses a wheel
//! whose hash differs (`--require-hashes`). They are unpacked with Python's standard
//! `zipfile` module (pip already needs Python, so this adds no dependency to xtask).
//!
//! The command is idempotent: when `runtimes.json` exists and every path it names is there,
//! nothing is downloaded or unpacked again. A failed download, a hash mismatch or a missing
//! file is always an error (the command was asked for explicitly); only the tests treat a
//! missing runtime as "not run", and only when `CI` is not `true`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::util;

/// One pinned wheel.
struct Wheel {
    /// The distribution name on PyPI.
    name: &'static str,
    /// The pinned version.
    version: &'static str,
    /// The SHA-256 of the `cp311` `manylinux_2_28_x86_64` wheel of that version.
    sha256: &'static str,
    /// Only members under these prefixes are unpacked.
    unpack: &'static [&'static str],
}

const ONNXRUNTIME: Wheel = Wheel {
    name: "onnxruntime",
    version: "1.32.0",
    sha256: "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d",
    unpack: &["onnxruntime/capi/", "onnxruntime/datasets/"],
};

const EXECUTORCH: Wheel = Wheel {
    name: "executorch",
    version: "1.5.1",
    sha256: "274c28c2fe2b76acb03f9fa381537425c40e0098dcf886baf6d97a1a55ffe300",
    unpack: &["executorch/lib/"],
};

const PYTHON_VERSION: &str = "3.11";
const PLATFORM: &str = "manylinux_2_28_x86_64";

/// `target/runtimes/runtimes.json`: where the unpacked runtimes are (absolute paths).
#[derive(Serialize)]
struct Manifest {
    onnxruntime: OnnxRuntime,
    executorch: ExecuTorch,
}

#[derive(Serialize)]
struct OnnxRuntime {
    version: &'static str,
    library: PathBuf,
    /// Model name (file stem) to path, for every `.onnx` the wheel ships.
    models: std::collections::BTreeMap<String, PathBuf>,
}

#[derive(Serialize)]
struct ExecuTorch {
    version: &'static str,
    /// The XNNPACK backend library; it carries XNNPACK's C API (`xnn_*`).
    xnnpack_backend: PathBuf,
}

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
    let dir = util::root().join("target").join("runtimes");
    let manifest_path = dir.join("runtimes.json");
    if !force && manifest_is_complete(&manifest_path) {
        println!("runtimes: already present ({})", manifest_path.display());
        print_manifest(&manifest_path)?;
        return Ok(());
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let wheels = dir.join("wheels");
    let mut unpacked = Vec::new();
    for wheel in [&ONNXRUNTIME, &EXECUTORCH] {
        let file = download(wheel, &wheels)?;
        let into = dir.join(format!("{}-{}", wheel.name, wheel.version));
        unpack(&file, &into, wheel.unpack)?;
        unpacked.push(into);
    }
    let ort_dir = &unpacked[0];
    let et_dir = &unpacked[1];
    let library = ort_dir
        .join("onnxruntime/capi")
        .join(format!("libonnxruntime.so.{}", ONNXRUNTIME.version));
    let mut models = std::collections::BTreeMap::new();
    let datasets = ort_dir.join("onnxruntime/datasets");
    let entries =
        fs::read_dir(&datasets).map_err(|e| format!("cannot list {}: {e}", datasets.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "onnx") {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            models.insert(stem, path);
        }
    }
    if models.is_empty() {
        return Err(format!("no .onnx model under {}", datasets.display()));
    }
    let xnnpack_backend = et_dir.join("executorch/lib/libexecutorch_backend_xnnpack.so");
    let manifest = Manifest {
        onnxruntime: OnnxRuntime {
            version: ONNXRUNTIME.version,
            library,
            models,
        },
        executorch: ExecuTorch {
            version: EXECUTORCH.version,
            xnnpack_backend,
        },
    };
    for path in manifest_paths(&manifest) {
        if !path.is_file() {
            return Err(format!(
                "the unpacked wheel lacks {} (did the wheel's layout change?)",
                path.display()
            ));
        }
    }
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    // Written last, through a temporary file: its presence means the unpack completed.
    let tmp = dir.join("runtimes.json.tmp");
    fs::write(&tmp, json + "\n").map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, &manifest_path)
        .map_err(|e| format!("cannot write {}: {e}", manifest_path.display()))?;
    print_manifest(&manifest_path)
}

fn manifest_paths(m: &Manifest) -> Vec<&Path> {
    let mut paths = vec![m.onnxruntime.library.as_path()];
    paths.extend(m.onnxruntime.models.values().map(PathBuf::as_path));
    paths.push(&m.executorch.xnnpack_backend);
    paths
}

/// True when `runtimes.json` exists, names the pinned versions and every file it names exists.
fn manifest_is_complete(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    let versions_match = value["onnxruntime"]["version"] == ONNXRUNTIME.version
        && value["executorch"]["version"] == EXECUTORCH.version;
    let mut files = vec![
        &value["onnxruntime"]["library"],
        &value["executorch"]["xnnpack_backend"],
    ];
    match value["onnxruntime"]["models"].as_object() {
        Some(models) if !models.is_empty() => files.extend(models.values()),
        _ => return false,
    }
    versions_match
        && files
            .iter()
            .all(|f| f.as_str().is_some_and(|p| Path::new(p).is_file()))
}

fn print_manifest(path: &Path) -> Result<(), String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    println!(
        "onnxruntime {}: {}",
        value["onnxruntime"]["version"].as_str().unwrap_or("?"),
        value["onnxruntime"]["library"].as_str().unwrap_or("?")
    );
    if let Some(models) = value["onnxruntime"]["models"].as_object() {
        for (name, p) in models {
            println!("  model {name}: {}", p.as_str().unwrap_or("?"));
        }
    }
    println!(
        "executorch {}: {}",
        value["executorch"]["version"].as_str().unwrap_or("?"),
        value["executorch"]["xnnpack_backend"]
            .as_str()
            .unwrap_or("?")
    );
    println!("manifest: {}", path.display());
    Ok(())
}

/// Downloads `wheel` into `into` (pip skips the download when the file is already there and
/// its hash matches) and returns the wheel's path.
fn download(wheel: &Wheel, into: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    let requirements = into.join(format!("{}.txt", wheel.name));
    fs::write(
        &requirements,
        format!(
            "{}=={} --hash=sha256:{}\n",
            wheel.name, wheel.version, wheel.sha256
        ),
    )
    .map_err(|e| format!("cannot write {}: {e}", requirements.display()))?;
    let mut pip = Command::new(python());
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--python-version", PYTHON_VERSION, "--platform", PLATFORM])
        .args(["--require-hashes", "--disable-pip-version-check", "-q"])
        .arg("-r")
        .arg(&requirements)
        .arg("-d")
        .arg(into);
    util::run(&mut pip)
        .map_err(|e| format!("downloading {}=={} failed: {e}", wheel.name, wheel.version))?;
    let prefix = format!("{}-{}-", wheel.name, wheel.version);
    let entries = fs::read_dir(into).map_err(|e| format!("cannot list {}: {e}", into.display()))?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .ok_or_else(|| {
            format!(
                "pip reported success but no {prefix}*.whl is in {}",
                into.display()
            )
        })
}

/// Unpacks the members of `wheel` under `prefixes` into `into` with Python's `zipfile`.
fn unpack(wheel: &Path, into: &Path, prefixes: &[&str]) -> Result<(), String> {
    const SCRIPT: &str = "import sys, zipfile\n\
        wheel, into, prefixes = sys.argv[1], sys.argv[2], sys.argv[3:]\n\
        with zipfile.ZipFile(wheel) as z:\n    \
            names = [n for n in z.namelist() if n.startswith(tuple(prefixes))]\n    \
            if not names: sys.exit('no member under ' + ' '.join(prefixes))\n    \
            z.extractall(into, names)\n";
    let mut py = Command::new(python());
    py.arg("-c").arg(SCRIPT).arg(wheel).arg(into).args(prefixes);
    util::run(&mut py).map_err(|e| format!("unpacking {} failed: {e}", wheel.display()))
}

/// The Python interpreter: `$PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}
