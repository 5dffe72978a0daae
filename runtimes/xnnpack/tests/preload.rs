//! `libkeepalloc_preload.so` (`preload/keepalloc_preload.c`) on the real ExecuTorch 1.5.1
//! XNNPACK backend, each check in its own process (XNNPACK keeps its first allocator for the
//! life of the process), with its negative controls:
//!
//! * the C adoption check (`c/adoption.c`, linked against the shared libkeepalloc) says
//!   "adopted" under the preload, "not adopted" without it and under the control preload
//!   (the same interposer built to forward the caller's NULL);
//! * a C program (`c/preload_check.c`) and a Python process through `ctypes`
//!   (`python/preload_check.py`) `dlopen` the runtime, create, run (outputs against a
//!   reference) and delete FC operators and a subgraph: under the preload every allocation is
//!   counted by the owner and live bytes return to zero; without it the owner sees none;
//! * the campaign's cold-start (32 threads) and retry-after-capture scenarios on that copy;
//! * `KEEPALLOC_SCRIBBLE=guard:1/1,stacks:both`: the operators run clean, and an operator used
//!   after `xnn_delete_operator` is caught (exit 19) with its allocation, free and faulting
//!   stacks; without the preload the same use goes unseen (the control);
//! * the preload's decisions on stand-in runtimes (`c/fake/`): two copies each adopt the one
//!   owner once, a caller's own allocator is kept unless `KEEPALLOC_ADOPT=force`,
//!   `KEEPALLOC_ADOPT=0` forwards unchanged, `verbose` prints each decision once, a program
//!   whose only definition is the preload's is refused;
//! * which libraries a preload can reach at all ([`interposition`]): ExecuTorch's yes, LiteRT
//!   2.3.0's (pinned wheel, fetched on first use) "not adoptable (hidden)", with the reason.
//!
//! The C programs and the preload are compiled here with `$CC` (else `cc`) against the
//! `libkeepalloc_capi.so` cargo built for this test run (keepalloc-capi is a dev-dependency
//! for that file only; nothing of it is linked into this test). Needs the pinned runtimes
//! (`cargo xtask runtimes`, else fetched on first use), `python3` and a C compiler; without
//! them a test prints NOT RUN, and fails under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use keepalloc_testkit::preload_env::with_preload;
use keepalloc_testkit::{describe, not_run, runtimes};
use keepalloc_xnnpack::{Interposition, interposition};

/// Everything the checks run, built once per test process.
struct Built {
    preload: PathBuf,
    control: PathBuf,
    adoption: PathBuf,
    check: PathBuf,
    decisions: PathBuf,
    only_ours: PathBuf,
    fakes: [PathBuf; 3],
    keepalloc: PathBuf,
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `libkeepalloc_capi.so` from this build: cargo compiles the dev-dependency with all its
/// crate types into `target/<profile>/deps/`, the directory this test executable runs from.
fn keepalloc_so() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let lib = exe
        .parent()
        .expect("its directory")
        .join("libkeepalloc_capi.so");
    assert!(
        lib.is_file(),
        "{} not found: cargo builds keepalloc-capi's cdylib next to this test",
        lib.display()
    );
    lib
}

fn cc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Result<(), String> {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&compiler);
    for a in args {
        cmd.arg(a);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {compiler}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed:\n{}", describe(&out)))
    }
}

fn build() -> Result<Built, String> {
    let src = manifest_dir();
    let include = src.join("../../capi/include");
    let keepalloc = keepalloc_so();
    let libdir = keepalloc.parent().unwrap().to_path_buf();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "keepalloc-preload/{}",
        libdir
            .parent()
            .and_then(|p| p.file_name())
            .map_or("unknown".into(), |n| n.to_string_lossy().into_owned())
    ));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let rpath = format!("-Wl,-rpath,{}", libdir.display());
    let link: [&dyn AsRef<std::ffi::OsStr>; 4] = [&"-L", &libdir, &"-lkeepalloc_capi", &rpath];
    let warn: [&dyn AsRef<std::ffi::OsStr>; 5] =
        [&"-std=c11", &"-Wall", &"-Wextra", &"-Werror", &"-I"];
    let preload_c = src.join("preload/keepalloc_preload.c");
    let shared: [&dyn AsRef<std::ffi::OsStr>; 4] =
        [&"-O2", &"-fPIC", &"-shared", &"-fvisibility=hidden"];
    let preload = out.join("libkeepalloc_preload.so");
    let control = out.join("libkeepalloc_preload_control.so");
    for (so, define) in [
        (&preload, None),
        (&control, Some("-DKEEPALLOC_PRELOAD_CONTROL_FORWARD_NULL")),
    ] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = warn.to_vec();
        args.push(&include);
        args.extend(shared);
        if let Some(d) = &define {
            args.push(d);
        }
        args.extend([&preload_c as &dyn AsRef<std::ffi::OsStr>, &"-o", so]);
        args.extend(link);
        cc(&args)?;
    }
    let program = |source: &str, name: &str, extra: &[&str]| -> Result<PathBuf, String> {
        let exe = out.join(name);
        let include_xnnpack = src.join("include");
        let source = src.join(source);
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = warn.to_vec();
        args.extend([
            &include as &dyn AsRef<std::ffi::OsStr>,
            &"-I",
            &include_xnnpack,
        ]);
        args.extend([
            &"-g" as &dyn AsRef<std::ffi::OsStr>,
            &"-D_GNU_SOURCE",
            &source,
            &"-o",
            &exe,
        ]);
        args.extend(link);
        for e in extra {
            args.push(e);
        }
        cc(&args)?;
        Ok(exe)
    };
    let adoption = program("c/adoption.c", "adoption", &["-ldl"])?;
    let check = program(
        "c/preload_check.c",
        "preload_check",
        &["-ldl", "-lpthread", "-lm"],
    )?;
    let decisions = program("c/fake/decisions.c", "decisions", &["-ldl"])?;
    let preload_rpath = format!("-Wl,-rpath,{}", out.display());
    let only_ours = out.join("only_ours");
    cc(&[
        &src.join("c/fake/only_ours.c"),
        &"-o",
        &only_ours,
        &"-L",
        &out,
        &"-lkeepalloc_preload",
        &preload_rpath,
    ])?;
    let fake_c = src.join("c/fake/fake_runtime.c");
    let fakes = ["a", "b", "hidden"].map(|n| out.join(format!("libfake_xnn_{n}.so")));
    for (so, hidden) in fakes.iter().zip([false, false, true]) {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"-O2", &"-fPIC", &"-shared", &"-Wall", &"-Werror"];
        if hidden {
            args.push(&"-DFAKE_HIDDEN");
        }
        args.extend([&fake_c as &dyn AsRef<std::ffi::OsStr>, &"-o", so]);
        cc(&args)?;
    }
    Ok(Built {
        preload,
        control,
        adoption,
        check,
        decisions,
        only_ours,
        fakes,
        keepalloc,
    })
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .as_ref()
        .unwrap_or_else(|e| panic!("building the preload and its checks: {e}"))
}

/// ExecuTorch's XNNPACK backend, or `None` after reporting `test` as not run.
fn executorch(test: &str) -> Option<PathBuf> {
    runtimes::for_test(test).map(|r| r.executorch_xnnpack)
}

/// Runs `cmd` with `preload` in LD_PRELOAD (or none), the adoption settings cleared unless
/// `env` sets them ([`with_preload`]); prints the stdout lines and the time.
fn run(label: &str, cmd: &mut Command, preload: Option<&Path>, env: &[(&str, &str)]) -> Output {
    with_preload(cmd, preload);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{label}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "{label} ({:.3} s): {}",
        start.elapsed().as_secs_f64(),
        stdout.lines().collect::<Vec<_>>().join(" | ")
    );
    out
}

fn passed(label: &str, out: &Output) -> String {
    assert!(out.status.success(), "{label}: {}", describe(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_adoption_check_says_adopted_only_under_the_preload() {
    let Some(rt) = executorch("the_adoption_check_says_adopted_only_under_the_preload") else {
        return;
    };
    let b = built();
    let adoption = |args: &[&str], preload: Option<&Path>, label: &str| {
        let mut cmd = Command::new(&b.adoption);
        cmd.arg("current").arg(&rt).args(args);
        run(label, &mut cmd, preload, &[])
    };
    let out = adoption(&["adopted"], Some(&b.preload), "adoption, preload");
    assert!(passed("adoption, preload", &out).contains("  adopted"));
    let out = adoption(&[], None, "adoption, no preload");
    assert!(passed("adoption, no preload", &out).contains("not adopted, as expected"));
    let out = adoption(&[], Some(&b.control), "adoption, control preload");
    assert!(passed("control preload", &out).contains("not adopted, as expected"));
    // The check can fail: "adopted" expected where there is none.
    let out = adoption(
        &["adopted"],
        Some(&b.control),
        "adoption, control, expecting adopted",
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
}

#[test]
fn executorch_operators_and_subgraph_allocate_through_the_owner() {
    let Some(rt) = executorch("executorch_operators_and_subgraph_allocate_through_the_owner")
    else {
        return;
    };
    let b = built();
    let ops = |expect: &str, preload: Option<&Path>| {
        let mut cmd = Command::new(&b.check);
        cmd.arg(&rt).args(["ops", expect]);
        let with = preload.map_or("no preload".into(), |p| p.display().to_string());
        run(
            &format!("C ops, expecting {expect}, {with}"),
            &mut cmd,
            preload,
            &[],
        )
    };
    let stdout = passed("C ops with the preload", &ops("adopted", Some(&b.preload)));
    assert!(stdout.contains("ops: adopted, as expected"), "{stdout}");
    assert!(stdout.contains("live bytes 0 before, 0 after"), "{stdout}");
    let stdout = passed("C ops without the preload", &ops("none", None));
    assert!(
        stdout.contains("0 allocations through the owner for 4 FC"),
        "{stdout}"
    );
    // Controls of the program's own verdict: each expectation fails in the other setting.
    assert_eq!(ops("adopted", None).status.code(), Some(1));
    assert_eq!(ops("none", Some(&b.preload)).status.code(), Some(1));
    assert_eq!(ops("adopted", Some(&b.control)).status.code(), Some(1));
}

#[test]
fn python_ctypes_sees_the_allocations_only_under_the_preload() {
    let Some(rt) = executorch("python_ctypes_sees_the_allocations_only_under_the_preload") else {
        return;
    };
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&python).arg("--version").output().is_err() {
        return not_run("python_ctypes_sees_the_allocations", "no python3");
    }
    let b = built();
    let script = manifest_dir().join("python/preload_check.py");
    let py = |expect: &str, preload: Option<&Path>| {
        let mut cmd = Command::new(&python);
        cmd.arg(&script).arg(&rt).arg(&b.keepalloc).arg(expect);
        let with = preload.map_or("no preload", |_| "preload");
        run(
            &format!("python ctypes, expecting {expect}, {with}"),
            &mut cmd,
            preload,
            &[],
        )
    };
    let stdout = passed("python with the preload", &py("adopted", Some(&b.preload)));
    assert!(
        stdout.contains("python ctypes: adopted, as expected"),
        "{stdout}"
    );
    let stdout = passed("python without the preload", &py("none", None));
    assert!(
        stdout.contains("0 allocations through the owner"),
        "{stdout}"
    );
    assert_eq!(
        py("adopted", None).status.code(),
        Some(1),
        "the check can fail"
    );
}

#[test]
fn cold_start_and_retry_after_capture_on_executorchs_copy() {
    let Some(rt) = executorch("cold_start_and_retry_after_capture_on_executorchs_copy") else {
        return;
    };
    let b = built();
    for scenario in ["cold-start", "retry-after-capture"] {
        for attempt in 0..3 {
            let mut cmd = Command::new(&b.check);
            cmd.arg(&rt).arg(scenario);
            let label = format!("{scenario}, run {attempt}");
            let stdout = passed(&label, &run(&label, &mut cmd, Some(&b.preload), &[]));
            assert!(stdout.starts_with(scenario), "{stdout}");
        }
        // The control: without the preload the copy never took the owner.
        let mut cmd = Command::new(&b.check);
        cmd.arg(&rt).arg(scenario);
        let out = run(&format!("{scenario}, no preload"), &mut cmd, None, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    }
}

#[test]
fn scribble_guard_mode_on_executorchs_copy() {
    let Some(rt) = executorch("scribble_guard_mode_on_executorchs_copy") else {
        return;
    };
    let b = built();
    let guard = [("KEEPALLOC_SCRIBBLE", "guard:1/1,stacks:both")];
    let mut cmd = Command::new(&b.check);
    cmd.arg(&rt).args(["ops", "adopted"]);
    let stdout = passed(
        "guard ops",
        &run("guard:1/1, ops", &mut cmd, Some(&b.preload), &guard),
    );
    assert!(stdout.contains("scribble 1"), "Scribble is on: {stdout}");

    let mut cmd = Command::new(&b.check);
    cmd.arg(&rt).arg("use-after-delete");
    let out = run(
        "guard:1/1, use after delete",
        &mut cmd,
        Some(&b.preload),
        &guard,
    );
    assert_eq!(out.status.code(), Some(19), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let section = |title: &str| -> String {
        let at = stderr
            .find(title)
            .unwrap_or_else(|| panic!("no {title:?} stack: {stderr}"));
        stderr[at..]
            .lines()
            .skip(1)
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let faulting = section("faulting access");
    assert!(
        faulting
            .lines()
            .next()
            .unwrap_or("")
            .contains("xnn_setup_fully_connected_nc_f32"),
        "the fault is XNNPACK's read of the deleted operator: {stderr}"
    );
    assert!(
        section("freed by thread").contains("xnn_delete_operator"),
        "{stderr}"
    );
    assert!(
        section("previously allocated by thread").contains("xnn_create_fully_connected_nc_f32"),
        "{stderr}"
    );
    println!("use after delete: exit 19 with the faulting, free and allocation stacks");

    // The control: the same program and setting without the preload: XNNPACK's blocks are
    // its own, and the use goes unseen.
    let mut cmd = Command::new(&b.check);
    cmd.arg(&rt).arg("use-after-delete");
    let out = run(
        "guard:1/1, use after delete, no preload",
        &mut cmd,
        None,
        &guard,
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("use of a deleted operator unseen"));
}

/// One line of `decisions`' report: what `file` kept, and its library's once.
fn kept(stdout: &str, file: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{file}: kept")))
        .unwrap_or_else(|| panic!("no line for {file}: {stdout}"))
        .to_owned()
}

#[test]
fn the_preloads_decisions() {
    let b = built();
    let [a, bb, hidden] = &b.fakes;
    let decisions = |mode: &str, adopt: Option<&str>, libs: &[&PathBuf]| {
        let mut cmd = Command::new(&b.decisions);
        cmd.arg(mode).args(libs);
        let env: Vec<(&str, &str)> = adopt.map(|v| ("KEEPALLOC_ADOPT", v)).into_iter().collect();
        let out = run(
            &format!("decisions {mode}, KEEPALLOC_ADOPT={}", adopt.unwrap_or("")),
            &mut cmd,
            Some(&b.preload),
            &env,
        );
        let stdout = passed("decisions", &out);
        (stdout, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // Two copies, two onces, one owner; the hidden copy is out of reach.
    let (out, err) = decisions("null", Some("verbose"), &[a, bb, hidden]);
    assert!(kept(&out, "libfake_xnn_a.so").contains("kept keepalloc, calls 2, library once 1/1"));
    assert!(kept(&out, "libfake_xnn_b.so").contains("kept keepalloc, calls 2, library once 1/1"));
    assert!(kept(&out, "libfake_xnn_hidden.so").contains("kept null, calls 2, library once 0/0"));
    assert!(out.contains("owners 1"), "{out}");
    // Each decision once per object: adopted, then already adopted (the second round).
    for copy in ["libfake_xnn_a.so", "libfake_xnn_b.so"] {
        let lines = |what: &str| {
            err.lines()
                .filter(|l| l.contains(copy) && l.contains(what))
                .count()
        };
        assert_eq!(lines(": adopted:"), 1, "{err}");
        assert_eq!(lines("already adopted"), 1, "{err}");
    }
    // Quiet without verbose.
    let (_, err) = decisions("null", None, &[a]);
    assert!(err.is_empty(), "{err}");
    // Off: forwarded unchanged.
    let (out, _) = decisions("null", Some("0"), &[a]);
    assert!(
        kept(&out, "libfake_xnn_a.so").contains("kept null"),
        "{out}"
    );
    // An unknown word: off, said even without verbose.
    let (out, err) = decisions("null", Some("forse"), &[a]);
    assert!(
        kept(&out, "libfake_xnn_a.so").contains("kept null"),
        "{out}"
    );
    assert!(
        err.contains("KEEPALLOC_ADOPT has a word other than"),
        "{err}"
    );
    // A caller's own allocator is kept, unless force.
    let (out, _) = decisions("own", None, &[a]);
    assert!(kept(&out, "libfake_xnn_a.so").contains("kept own, calls 2, library once 0/0"));
    let (out, err) = decisions("own", Some("force,verbose"), &[a]);
    assert!(kept(&out, "libfake_xnn_a.so").contains("kept keepalloc, calls 2, library once 1/1"));
    assert!(
        err.contains("replaced by keepalloc's (KEEPALLOC_ADOPT=force)"),
        "{err}"
    );
    // The control: no preload, nothing adopted.
    let mut cmd = Command::new(&b.decisions);
    cmd.arg("null").arg(a);
    let out = passed(
        "no preload",
        &run("decisions, no preload", &mut cmd, None, &[]),
    );
    assert!(
        kept(&out, "libfake_xnn_a.so").contains("kept null"),
        "{out}"
    );
}

#[test]
fn a_caller_whose_only_definition_is_the_preloads_is_refused() {
    let b = built();
    let out = run("only ours", &mut Command::new(&b.only_ours), None, &[]);
    passed("only ours", &out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "refused: its lookup scope has no xnn_initialize but keepalloc-preload's own"
        ),
        "{}",
        describe(&out)
    );
}

/// LiteRT 2.3.0 (`ai-edge-litert`): its wheels are cp312/cp313 `manylinux_2_27` only.
const LITERT_VERSION: &str = "2.3.0";
const LITERT_SHA256: &str = "dc9f56c23e0dcf182b6c35f23fbb102ed048296588882b806d5eff7654c04c88";
const LITERT_MEMBER: &str = "ai_edge_litert/libpywrap_litert_common.so";

/// LiteRT's library that carries its XNNPACK, from the pinned, hash-checked wheel (fetched
/// into `target/runtimes/` on first use, under a file lock).
fn litert() -> Result<PathBuf, String> {
    let dir = runtimes::cache_dir();
    let into = dir.join(format!("ai-edge-litert-{LITERT_VERSION}"));
    let lib = into.join(LITERT_MEMBER);
    if lib.is_file() {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let lock = std::fs::File::create(dir.join(".litert.lock")).map_err(|e| e.to_string())?;
    lock.lock().map_err(|e| e.to_string())?;
    if lib.is_file() {
        return Ok(lib);
    }
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(|e| e.to_string())?;
    let requirements = wheels.join("ai-edge-litert.txt");
    std::fs::write(
        &requirements,
        format!("ai-edge-litert=={LITERT_VERSION} --hash=sha256:{LITERT_SHA256}\n"),
    )
    .map_err(|e| e.to_string())?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--python-version",
            "3.12",
            "--platform",
            "manylinux_2_27_x86_64",
        ])
        .args([
            "--require-hashes",
            "--disable-pip-version-check",
            "-q",
            "-r",
        ])
        .arg(&requirements)
        .arg("-d")
        .arg(&wheels)
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!("pip download ai-edge-litert: {}", describe(&out)));
    }
    let wheel = wheels.join(format!(
        "ai_edge_litert-{LITERT_VERSION}-cp312-cp312-manylinux_2_27_x86_64.whl"
    ));
    let out = Command::new(&python)
        .arg("-c")
        .arg("import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[3], sys.argv[2])")
        .arg(&wheel)
        .arg(&into)
        .arg(LITERT_MEMBER)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() || !lib.is_file() {
        return Err(format!("unpacking {}: {}", wheel.display(), describe(&out)));
    }
    Ok(lib)
}

#[test]
fn which_libraries_a_preload_can_reach() {
    let b = built();
    let [a, _, hidden] = &b.fakes;
    assert_eq!(
        interposition(a).unwrap(),
        Interposition::Reachable { relocations: 1 }
    );
    let verdict = interposition(hidden).unwrap();
    assert!(matches!(verdict, Interposition::Hidden { .. }), "{verdict}");
    assert!(
        verdict.to_string().starts_with("not adoptable (hidden): "),
        "{verdict}"
    );
    // The C adoption check says the same of a library that does not export it.
    let mut cmd = Command::new(&b.adoption);
    cmd.arg("current").arg(hidden).arg("hidden");
    let stdout = passed(
        "adoption, hidden",
        &run("adoption, hidden", &mut cmd, None, &[]),
    );
    assert!(stdout.contains("not adoptable (hidden)"), "{stdout}");
    // Not an ELF file: a typed error.
    let not_elf = manifest_dir().join("c/adoption.c");
    assert!(interposition(&not_elf).is_err());

    if let Some(rt) = executorch("which_libraries_a_preload_can_reach") {
        let verdict = interposition(&rt).unwrap();
        println!("ExecuTorch 1.5.1 libexecutorch_backend_xnnpack.so: {verdict}");
        // Three call sites: the XnnpackBackend constructor, is_available, compileModel; all
        // through one PLT slot.
        assert!(
            matches!(verdict, Interposition::Reachable { relocations } if relocations >= 1),
            "{verdict}"
        );
    }
    match litert() {
        Ok(lib) => {
            let verdict = interposition(&lib).unwrap();
            println!("LiteRT {LITERT_VERSION} {LITERT_MEMBER}: {verdict}");
            let Interposition::Hidden { reason } = &verdict else {
                panic!("LiteRT's XNNPACK is hidden: {verdict}");
            };
            assert!(
                reason.contains("not in its dynamic symbol table"),
                "{reason}"
            );
            assert!(reason.contains("xnn_initialize at 0x"), "{reason}");
        }
        Err(e) => not_run("which_libraries_a_preload_can_reach (LiteRT)", &e),
    }
}
