//! The real runtimes the tests and the bench run against: pinned PyPI wheels of ONNX
//! Runtime, ExecuTorch and oneDNN, downloaded and unpacked under `target/runtimes/`,
//! described by `target/runtimes/runtimes.json`.
//!
//! The wheels are fetched with `pip download --no-deps --only-binary=:all:` for one fixed
//! interpreter tag and each wheel's platform tag, so the machine's own Python version does
//! not matter, and each wheel's SHA-256 is pinned: pip refuses a wheel whose hash differs
//! (`--require-hashes`). They are unpacked with Python's `zipfile`.
//!
//! [`fetch`] is `cargo xtask runtimes`; [`for_test`] calls it on a test's first use, under a
//! file lock so that test binaries and threads fetch once, and reports the test as not run
//! (or fails it under `CI=true`) when the wheels cannot be had.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One pinned wheel.
#[derive(Debug)]
pub struct Wheel {
    /// The distribution name on PyPI.
    pub name: &'static str,
    /// The pinned version.
    pub version: &'static str,
    /// The SHA-256 of the `cp311` wheel of that version for [`Wheel::platform`].
    pub sha256: &'static str,
    /// The wheel's platform tag (pip does not widen `manylinux_2_28` to older tags).
    pub platform: &'static str,
    /// Only members under these prefixes are unpacked.
    pub unpack: &'static [&'static str],
}

/// ONNX Runtime (its `libonnxruntime.so` and the models the wheel ships).
pub const ONNXRUNTIME: Wheel = Wheel {
    name: "onnxruntime",
    version: "1.32.0",
    sha256: "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d",
    platform: "manylinux_2_28_x86_64",
    unpack: &["onnxruntime/capi/", "onnxruntime/datasets/"],
};

/// ExecuTorch (its XNNPACK backend library, which carries current XNNPACK's C API).
pub const EXECUTORCH: Wheel = Wheel {
    name: "executorch",
    version: "1.5.1",
    sha256: "274c28c2fe2b76acb03f9fa381537425c40e0098dcf886baf6d97a1a55ffe300",
    platform: "manylinux_2_28_x86_64",
    unpack: &["executorch/lib/"],
};

/// oneDNN v3.2.0 built with GNU OpenMP (`libdnnl.so.3`; it links the system's
/// `libgomp.so.1`): the bench's x86 peer. The newer `onednn` wheels run on a SYCL runtime
/// that adds about 14 µs to every call.
pub const ONEDNN: Wheel = Wheel {
    name: "onednn-cpu-gomp",
    version: "2023.2.0",
    sha256: "2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb",
    platform: "manylinux1_x86_64",
    unpack: &["onednn_cpu_gomp-2023.2.0.data/data/lib/libdnnl.so.3.2"],
};

const PYTHON_VERSION: &str = "3.11";

/// What `runtimes.json` says: where the unpacked runtimes are.
#[derive(Clone, Debug)]
pub struct Runtimes {
    /// `libonnxruntime.so.<version>`.
    pub onnxruntime: PathBuf,
    /// ONNX Runtime's version.
    pub onnxruntime_version: String,
    /// The models the ONNX Runtime wheel ships, by file stem.
    pub wheel_models: BTreeMap<String, PathBuf>,
    /// ExecuTorch's XNNPACK backend library (current XNNPACK's C API).
    pub executorch_xnnpack: PathBuf,
    /// oneDNN's `libdnnl.so.3.2`.
    pub onednn: PathBuf,
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    let me = Path::new(env!("CARGO_MANIFEST_DIR"));
    me.parent().unwrap_or(me).to_path_buf()
}

/// `target/runtimes/` under the workspace: the wheels, their unpacked trees, the manifest.
pub fn cache_dir() -> PathBuf {
    workspace_root().join("target").join("runtimes")
}

/// The manifest's path: `$KEEPALLOC_RUNTIMES` if set, else `target/runtimes/runtimes.json`.
pub fn manifest_path() -> PathBuf {
    std::env::var_os("KEEPALLOC_RUNTIMES")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("runtimes.json"))
}

/// Reads the manifest; an error names what is missing. Checks the pinned versions and that
/// every file it names exists.
pub fn load() -> Result<Runtimes, String> {
    let path = manifest_path();
    let missing = |reason: String| format!("{}: {reason}", path.display());
    let text = fs::read_to_string(&path).map_err(|e| missing(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| missing(e.to_string()))?;
    if v["onnxruntime"]["version"] != ONNXRUNTIME.version
        || v["executorch"]["version"] != EXECUTORCH.version
        || v["onednn"]["version"] != ONEDNN.version
    {
        return Err(missing("written for other pinned versions".into()));
    }
    let file = |v: &serde_json::Value| -> Result<PathBuf, String> {
        let p = v
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| missing("a path is missing from the manifest".into()))?;
        if p.is_file() {
            Ok(p)
        } else {
            Err(missing(format!("{} does not exist", p.display())))
        }
    };
    let mut wheel_models = BTreeMap::new();
    for (name, p) in v["onnxruntime"]["models"]
        .as_object()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| missing("no models listed".into()))?
    {
        wheel_models.insert(name.clone(), file(p)?);
    }
    Ok(Runtimes {
        onnxruntime: file(&v["onnxruntime"]["library"])?,
        onnxruntime_version: ONNXRUNTIME.version.to_owned(),
        wheel_models,
        executorch_xnnpack: file(&v["executorch"]["xnnpack_backend"])?,
        onednn: file(&v["onednn"]["library"])?,
    })
}

/// The FC models `runtimes/onnxruntime/models/generate_fc.py` generated and the repository
/// keeps beside it, by file stem.
pub fn generated_models() -> BTreeMap<String, PathBuf> {
    let dir = workspace_root().join("runtimes/onnxruntime/models");
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|x| x == "onnx")
            && let Some(stem) = p.file_stem().and_then(|s| s.to_str())
        {
            out.insert(stem.to_owned(), p.clone());
        }
    }
    out
}

/// ExecuTorch's XNNPACK backend (the current XNNPACK) if it is already here, never fetching:
/// `$KEEPALLOC_XNNPACK_CURRENT` if set, else the manifest's path when that file exists. The
/// kernels' comparisons use it, so a machine without the wheels runs the rest.
pub fn executorch_xnnpack() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KEEPALLOC_XNNPACK_CURRENT") {
        return Some(PathBuf::from(p));
    }
    let text = fs::read_to_string(manifest_path()).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let path = PathBuf::from(v["executorch"]["xnnpack_backend"].as_str()?);
    path.is_file().then_some(path)
}

/// The runtimes for a test: read from the manifest, or fetched now if they are not there yet
/// (once per process, under a file lock shared with other test binaries). `None` after
/// reporting `test` as not run when they cannot be had; under `CI=true` that panics instead.
pub fn for_test(test: &str) -> Option<Runtimes> {
    match ensure() {
        Ok(r) => Some(r),
        Err(e) => {
            crate::not_run(test, &format!("the pinned runtimes cannot be had: {e}"));
            None
        }
    }
}

/// The runtimes, fetching them first if the manifest is missing or stale. A fetch that
/// failed in this process is not tried again by the next test.
pub fn ensure() -> Result<Runtimes, String> {
    static FAILED: Mutex<Option<String>> = Mutex::new(None);
    let mut failed = FAILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Ok(r) = load() {
        return Ok(r);
    }
    if let Some(e) = failed.as_ref() {
        return Err(e.clone());
    }
    if std::env::var_os("KEEPALLOC_RUNTIMES").is_some() {
        return load(); // a manifest named by hand is not ours to write
    }
    let result = locked(|| match load() {
        Ok(r) => Ok(r),
        Err(_) => {
            eprintln!("keepalloc-testkit: fetching the pinned runtime wheels (first use)");
            fetch(false, &mut std::io::sink())?;
            load()
        }
    });
    if let Err(e) = &result {
        *failed = Some(e.clone());
    }
    result
}

/// Runs `f` holding `target/runtimes/.lock`, so only one process fetches at a time.
fn locked<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let dir = cache_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lock_path = dir.join(".lock");
    let lock = File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let out = f();
    let _ = lock.unlock();
    out
}

/// Downloads and unpacks the pinned wheels and writes the manifest (what `cargo xtask
/// runtimes` does), printing what it did to `log`. Idempotent: with a complete manifest and
/// `force` false, nothing is downloaded again.
pub fn fetch(force: bool, log: &mut dyn std::io::Write) -> Result<Runtimes, String> {
    let dir = cache_dir();
    let manifest_path = dir.join("runtimes.json");
    if !force && let Ok(r) = load() {
        let _ = writeln!(
            log,
            "runtimes: already present ({})",
            manifest_path.display()
        );
        return Ok(r);
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let wheels = dir.join("wheels");
    let mut unpacked = Vec::new();
    for wheel in [&ONNXRUNTIME, &EXECUTORCH, &ONEDNN] {
        let file = download(wheel, &wheels)?;
        let into = dir.join(format!("{}-{}", wheel.name, wheel.version));
        unpack(&file, &into, wheel.unpack)?;
        let _ = writeln!(
            log,
            "runtimes: {}=={} unpacked in {}",
            wheel.name,
            wheel.version,
            into.display()
        );
        unpacked.push(into);
    }
    let library = unpacked[0]
        .join("onnxruntime/capi")
        .join(format!("libonnxruntime.so.{}", ONNXRUNTIME.version));
    let datasets = unpacked[0].join("onnxruntime/datasets");
    let mut models = serde_json::Map::new();
    let entries =
        fs::read_dir(&datasets).map_err(|e| format!("cannot list {}: {e}", datasets.display()))?;
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_some_and(|e| e == "onnx") {
            let stem = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            models.insert(stem, path.display().to_string().into());
        }
    }
    let xnnpack_backend = unpacked[1].join("executorch/lib/libexecutorch_backend_xnnpack.so");
    let onednn = unpacked[2].join(ONEDNN.unpack[0]);
    let manifest = serde_json::json!({
        "onnxruntime": {
            "version": ONNXRUNTIME.version,
            "library": library.display().to_string(),
            "models": models,
        },
        "executorch": {
            "version": EXECUTORCH.version,
            "xnnpack_backend": xnnpack_backend.display().to_string(),
        },
        "onednn": {
            "version": ONEDNN.version,
            "library": onednn.display().to_string(),
        },
    });
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    // Written last, through a temporary file: its presence means the unpack completed.
    let tmp = dir.join("runtimes.json.tmp");
    fs::write(&tmp, json + "\n").map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, &manifest_path)
        .map_err(|e| format!("cannot write {}: {e}", manifest_path.display()))?;
    // `load` checks that every file the manifest names exists: a changed wheel layout fails here.
    load()
        .map_err(|e| format!("the unpacked wheels are incomplete (did their layout change?): {e}"))
}

/// Downloads `wheel` into `into` (pip skips the download when the file is already there and
/// its hash matches) and returns the wheel's path.
fn download(wheel: &Wheel, into: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    let requirements = into.join(format!("{}.txt", wheel.name));
    let pin = format!(
        "{}=={} --hash=sha256:{}\n",
        wheel.name, wheel.version, wheel.sha256
    );
    fs::write(&requirements, pin)
        .map_err(|e| format!("cannot write {}: {e}", requirements.display()))?;
    let mut pip = Command::new(python());
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--python-version",
            PYTHON_VERSION,
            "--platform",
            wheel.platform,
        ])
        .args(["--require-hashes", "--disable-pip-version-check", "-q"])
        .arg("-r")
        .arg(&requirements)
        .arg("-d")
        .arg(into);
    run(&mut pip)
        .map_err(|e| format!("downloading {}=={} failed: {e}", wheel.name, wheel.version))?;
    // A wheel's file name spells the distribution's dashes as underscores.
    let prefix = format!("{}-{}-", wheel.name.replace('-', "_"), wheel.version);
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
    run(&mut py).map_err(|e| format!("unpacking {} failed: {e}", wheel.display()))
}

/// The Python interpreter: `$PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs `cmd`; an error carries its status and standard error.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} exited with {}: {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest that names a missing file is refused with that file's name, not trusted.
    #[test]
    fn a_manifest_naming_a_missing_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("keepalloc-testkit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runtimes.json");
        let json = serde_json::json!({
            "onnxruntime": {"version": ONNXRUNTIME.version, "library": "/nonexistent/libonnxruntime.so",
                            "models": {"m": "/nonexistent/m.onnx"}},
            "executorch": {"version": EXECUTORCH.version, "xnnpack_backend": "/nonexistent/x.so"},
            "onednn": {"version": ONEDNN.version, "library": "/nonexistent/libdnnl.so.3.2"},
        });
        fs::write(&path, json.to_string()).unwrap();
        let err = with_manifest(&path, load).unwrap_err();
        assert!(err.contains("/nonexistent/"), "{err}");
        let stale = json.to_string().replace(ONNXRUNTIME.version, "0.0.1");
        fs::write(&path, stale).unwrap();
        let err = with_manifest(&path, load).unwrap_err();
        assert!(err.contains("other pinned versions"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    fn with_manifest<T>(path: &Path, f: impl FnOnce() -> T) -> T {
        // SAFETY: no other thread of this test binary reads or writes the environment.
        unsafe { std::env::set_var("KEEPALLOC_RUNTIMES", path) };
        let out = f();
        // SAFETY: as above.
        unsafe { std::env::remove_var("KEEPALLOC_RUNTIMES") };
        out
    }
}
