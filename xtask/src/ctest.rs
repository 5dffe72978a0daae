//! `cargo xtask c-test`: keepalloc from C and C++, against the release `libkeepalloc.a`.
//!
//! 1. `cargo build --release -p keepalloc-capi` (the staticlib, `target/release/libkeepalloc_capi.a`);
//! 2. `keepalloc.h` compiled alone as C99/C11/C17 and C++11/17/20, warnings as errors;
//! 3. the foundation tests (`capi/tests/c/*.c|*.cpp`), each in its own process;
//! 4. the negative controls: broken `keepalloc.h` implementations the tests must catch, each
//!    by the signature of its bug (the check it breaks, or its signal in its step); then the
//!    bug-free baseline of each control file, which those tests must pass;
//!    the controls on the REAL library (`controls/wrapped_library.c`, linked with
//!    `-Wl,--wrap`: one library once for all names, no C++ trampoline, ...) and their
//!    pass-through baseline;
//! 5. `libkeepalloc.so`: the 32-thread test linked against the shared library instead;
//! 6. the C++17 RAII example (`capi/examples/raii_sessions.cpp`), two sessions on
//!    two threads, with XNNPACK when it is installed;
//! 7. with XNNPACK installed (`/usr/include/xnnpack.h`, Debian's `libxnnpack-dev`): the layout
//!    test against `struct xnn_allocator`, then the XNNPACK example in both modes, each run
//!    `--xnnpack-runs` times (default 50) in a fresh process with glibc's `MALLOC_PERTURB_`
//!    set (freed memory scribbled); then the guarded example (`xnnpack_guarded.c`) with
//!    `KEEPALLOC_SCRIBBLE=guard:1/1,stacks:both`: odd shapes on exact-size guarded blocks
//!    (XNNPACK's over-reads must not report), a use after `xnn_delete_operator` (must be a
//!    `guard-use-after-free`, exit 19, freed by `xnn_delete_operator`), and that use without
//!    `KEEPALLOC_SCRIBBLE` (the negative control: it must not report). Without XNNPACK those
//!    parts print "skipped: libxnnpack-dev not installed" — except when `CI` is set (and not `false`):
//!    then a missing XNNPACK is an error, so CI cannot skip them silently.
//!
//! The same foundation tests also run under `cargo test -p keepalloc-capi`
//! (`capi/tests/c_tests.rs`); both share the test kit's C toolchain helpers
//! (`testkit/src/ctools/`).

use std::path::{Path, PathBuf};

use keepalloc_testkit::ctools::{self, Dirs, Signature, Toolchain};

use crate::util;

/// `cargo xtask c-test --help`.
pub const LONG_ABOUT: &str = "\
Builds target/release/libkeepalloc_capi.a and runs keepalloc's C and C++ tests against it:
the header in every C/C++ standard, the foundation C tests (one process each), the negative
controls they must catch, the C++17 RAII example, and (when libxnnpack-dev is installed) the
layout test and the XNNPACK example in both modes, N fresh processes each with MALLOC_PERTURB_,
then the guarded XNNPACK example (KEEPALLOC_SCRIBBLE=guard:1/1,stacks:both) and its control.

environment: CC, CXX (compilers; default cc, c++), MALLOC_PERTURB_ (default 165),
             XNNPACK_INCLUDE_DIR (default /usr/include).";

/// Options of `c-test`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Fresh processes per XNNPACK mode (0 skips the loop).
    #[arg(long, value_name = "N", default_value_t = 50)]
    xnnpack_runs: u32,
}

/// Everything the steps share.
struct Ctx {
    tc: Toolchain,
    dirs: Dirs,
    staticlib: PathBuf,
    out: PathBuf,
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_absolute() {
                p
            } else {
                util::root().join(p)
            }
        })
        .unwrap_or_else(|| util::root().join("target"))
}

/// Builds the release staticlib and returns the shared context.
fn prepare() -> Result<Ctx, String> {
    println!("c-test: cargo build --release -p keepalloc-capi");
    util::run(util::cargo().args(["build", "--release", "-p", "keepalloc-capi"]))?;
    let target = target_dir();
    let staticlib = target.join("release/libkeepalloc_capi.a");
    if !staticlib.is_file() {
        return Err(format!("{} was not built", staticlib.display()));
    }
    Ok(Ctx {
        tc: Toolchain::from_env(),
        dirs: Dirs::from_capi(&util::root().join("capi")),
        staticlib,
        out: target.join("c-test"),
    })
}

/// `cargo xtask c-test`.
pub fn run(options: Args) -> Result<(), String> {
    let ctx = prepare()?;
    header(&ctx)?;
    crate::snippets::run(&ctx.staticlib, &ctx.out.join("snippets"))?;
    foundation(&ctx)?;
    controls(&ctx)?;
    shared_library(&ctx)?;
    raii_example(&ctx, None)?;
    ort_register(&ctx)?;
    match xnnpack_include_dir() {
        None if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") => {
            return Err(
                "libxnnpack-dev is not installed (no xnnpack.h), and CI is set: \
                 the XNNPACK tests must run in CI (apt-get install libxnnpack-dev \
                 libpthreadpool-dev)"
                    .to_owned(),
            );
        }
        None => println!("c-test: XNNPACK parts skipped: libxnnpack-dev not installed"),
        Some(include) => xnnpack(&ctx, &include, options.xnnpack_runs)?,
    }
    println!("c-test: all passed");
    Ok(())
}

fn header(ctx: &Ctx) -> Result<(), String> {
    for line in ctools::check_header(&ctx.tc, &ctx.dirs, &ctx.out.join("header"))? {
        println!("  {line}");
    }
    Ok(())
}

fn run_foundation_test(ctx: &Ctx, source: &Path) -> Result<(), String> {
    let name = ctools::stem(source);
    let outcome = ctools::build_and_run(&ctx.tc, &ctx.dirs, source, &ctx.staticlib, &ctx.out)?;
    if !outcome.passed {
        return Err(outcome.describe(&name));
    }
    for line in outcome.stdout.lines() {
        println!("  {line}");
    }
    Ok(())
}

fn foundation(ctx: &Ctx) -> Result<(), String> {
    println!("c-test: foundation tests (each in its own process)");
    let tests = ctools::foundation_tests(&ctx.dirs)?;
    if tests.is_empty() {
        return Err(format!("no C tests in {}", ctx.dirs.tests().display()));
    }
    for source in &tests {
        run_foundation_test(ctx, source)?;
    }
    Ok(())
}

/// The cold-start test again, linked against `libkeepalloc.so` (rpath to its directory): the
/// shared library exports the C ABI and behaves the same.
fn shared_library(ctx: &Ctx) -> Result<(), String> {
    println!("c-test: libkeepalloc.so");
    let lib_dir = ctx
        .staticlib
        .parent()
        .ok_or("the staticlib has no directory")?;
    let shared = lib_dir.join("libkeepalloc_capi.so");
    if !shared.is_file() {
        return Err(format!("{} was not built", shared.display()));
    }
    let out = ctx.out.join("shared").join("acquire_race");
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(lib_dir);
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![ctx.dirs.tests().join("acquire_race.c")],
            defines: vec![],
            includes: vec![],
            link: vec![shared.into(), rpath, "-lpthread".into()],
            out: out.clone(),
        },
    )?;
    let outcome = ctools::run(&out, &[])?;
    if !outcome.passed {
        return Err(outcome.describe("acquire_race on libkeepalloc.so"));
    }
    print_indented(&outcome.stdout);
    Ok(())
}

fn controls(ctx: &Ctx) -> Result<(), String> {
    let (tc, dirs, lib) = (&ctx.tc, &ctx.dirs, &ctx.staticlib);
    let out = &ctx.out.join("controls");
    let say = |line: &str| println!("  {line}");
    println!("c-test: negative controls (each must be caught by the signature of its bug)");
    let mut misses = ctools::catch_controls(tc, dirs, out, say);
    println!("c-test: controls on the real library (controls/wrapped_library.c, -Wl,--wrap)");
    misses.extend(ctools::catch_wrap_controls(tc, dirs, lib, out, say));
    misses.extend(ctools::pass_wrap_baselines(tc, dirs, lib, out, say));
    println!("c-test: control baselines (bug-free, must pass what their controls fail)");
    misses.extend(ctools::pass_baselines(tc, dirs, out, say));
    if misses.is_empty() {
        Ok(())
    } else {
        Err(misses.join("\n\n"))
    }
}

/// Where `xnnpack.h` is (`$XNNPACK_INCLUDE_DIR`, else `/usr/include`), if it is installed.
fn xnnpack_include_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("XNNPACK_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    dir.join("xnnpack.h").is_file().then_some(dir)
}

/// What a program on XNNPACK links after its sources (Debian's libxnnpack-dev and
/// libpthreadpool-dev).
const XNNPACK_LIBS: &[&str] = &["-lXNNPACK", "-lpthreadpool"];

fn xnnpack_link(ctx: &Ctx) -> Vec<std::ffi::OsString> {
    let mut link: Vec<std::ffi::OsString> = vec![ctx.staticlib.clone().into()];
    link.extend(XNNPACK_LIBS.iter().map(Into::into));
    link.extend(ctools::STATIC_LIB_DEPS.iter().map(Into::into));
    link
}

/// The C++17 RAII example, on a stand-in library or (with `xnnpack` = its include dir) on
/// XNNPACK.
fn raii_example(ctx: &Ctx, xnnpack: Option<&Path>) -> Result<(), String> {
    let (name, defines, includes, link) = match xnnpack {
        None => (
            "raii_sessions",
            vec![],
            vec![],
            ctools::keepalloc_link(&ctx.staticlib),
        ),
        Some(include) => (
            "raii_sessions_xnnpack",
            vec!["KEEPALLOC_EXAMPLE_WITH_XNNPACK".to_owned()],
            vec![include.to_path_buf()],
            xnnpack_link(ctx),
        ),
    };
    println!("c-test: C++17 example {name}");
    let out = ctx.out.join("examples").join(name);
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![ctx.dirs.examples().join("raii_sessions.cpp")],
            defines,
            includes,
            link,
            out: out.clone(),
        },
    )?;
    let outcome = ctools::run(&out, &[])?;
    if !outcome.passed {
        return Err(outcome.describe(name));
    }
    print_indented(&outcome.stdout);
    Ok(())
}

/// The wheel's ONNX Runtime library, from `target/runtimes/runtimes.json`
/// (`cargo xtask runtimes`).
fn onnxruntime_library() -> Option<PathBuf> {
    let text = std::fs::read_to_string(util::root().join("target/runtimes/runtimes.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let p = PathBuf::from(v["onnxruntime"]["library"].as_str()?);
    p.is_file().then_some(p)
}

/// `keepalloc_ort_register` from C on the real ONNX Runtime (`examples/ort_register.c`).
fn ort_register(ctx: &Ctx) -> Result<(), String> {
    let Some(library) = onnxruntime_library() else {
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
            return Err(
                "CI=true and target/runtimes/runtimes.json names no ONNX Runtime \
                        library: run `cargo xtask runtimes` first"
                    .to_owned(),
            );
        }
        println!("c-test: ort_register NOT RUN: no ONNX Runtime (run `cargo xtask runtimes`)");
        return Ok(());
    };
    println!("c-test: keepalloc_ort_register from C on ONNX Runtime");
    let out = ctx.out.join("examples").join("ort_register");
    let mut link = ctools::keepalloc_link(&ctx.staticlib);
    link.push("-ldl".into());
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![ctx.dirs.examples().join("ort_register.c")],
            defines: vec![],
            includes: vec![],
            link,
            out: out.clone(),
        },
    )?;
    let library = library.to_string_lossy().into_owned();
    let outcome = ctools::run(&out, &[("KEEPALLOC_ORT_LIBRARY", &library)])?;
    if !outcome.passed {
        return Err(outcome.describe("ort_register"));
    }
    print_indented(&outcome.stdout);
    Ok(())
}

fn print_indented(text: &str) {
    for line in text.lines() {
        println!("  {line}");
    }
}

/// The value of `MALLOC_PERTURB_` for the XNNPACK runs: the caller's, else 165 (0xA5).
fn malloc_perturb() -> String {
    std::env::var("MALLOC_PERTURB_")
        .ok()
        .filter(|v| !v.is_empty() && v != "0")
        .unwrap_or_else(|| "165".to_owned())
}

/// What it looks like when XNNPACK was handed an owner that is not the published one (a
/// dropped one), in the hook's own record of the contexts it passed to `xnn_initialize`: not
/// in the provider's counters, which belong to the code under judgement.
const XNNPACK_CAPTURED_ANOTHER_OWNER: Signature =
    Signature::Check("hook_log.contexts[i] == table->context");

/// The XNNPACK example's modes, the negative control each must catch, and the failures that
/// are that control's signature (anything else is inconclusive). The racy provider shows
/// either of two faces, depending on which of the owners it built XNNPACK captured: a dropped
/// one, or the surviving one with the hook run more than once.
const XNNPACK_MODES: &[(&str, &str, &[Signature])] = &[
    (
        "once",
        "racy",
        &[
            XNNPACK_CAPTURED_ANOTHER_OWNER,
            Signature::Check("calls == failures + 1"),
        ],
    ),
    ("retry", "naive-retry", &[XNNPACK_CAPTURED_ANOTHER_OWNER]),
];

fn xnnpack(ctx: &Ctx, include: &Path, runs: u32) -> Result<(), String> {
    println!("c-test: XNNPACK ({}/xnnpack.h)", include.display());
    let examples = ctx.dirs.examples();
    let out_dir = ctx.out.join("examples");

    // The layout test: compiling it is the test (C11 _Static_assert); running it says so.
    let layout = out_dir.join("xnnpack_layout");
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![examples.join("xnnpack_layout.c")],
            defines: vec![],
            includes: vec![include.to_path_buf()],
            link: vec![],
            out: layout.clone(),
        },
    )?;
    let outcome = ctools::run(&layout, &[])?;
    if !outcome.passed {
        return Err(outcome.describe("xnnpack_layout"));
    }
    print_indented(&outcome.stdout);

    raii_example(ctx, Some(include))?;

    let example = out_dir.join("xnnpack_fc");
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![examples.join("xnnpack_fc.c")],
            defines: vec![],
            includes: vec![include.to_path_buf()],
            link: xnnpack_link(ctx),
            out: example.clone(),
        },
    )?;
    let perturb = malloc_perturb();
    let env = [("MALLOC_PERTURB_", perturb.as_str())];
    let mut failed_modes = Vec::new();
    for (mode, _, _) in XNNPACK_MODES {
        let mut failures = 0u32;
        let mut first_failure = None;
        for run in 0..runs {
            let outcome = run_example(&example, mode, &env)?;
            if run == 0 {
                print_indented(&outcome.stdout);
            }
            if !outcome.passed {
                failures += 1;
                first_failure.get_or_insert_with(|| {
                    outcome.describe(&format!("xnnpack_fc {mode}, run {run}"))
                });
            }
        }
        println!(
            "  xnnpack_fc {mode}: {} of {runs} fresh processes passed, {failures} failed \
             (MALLOC_PERTURB_={perturb})",
            runs - failures
        );
        if let Some(failure) = first_failure {
            eprintln!("{failure}");
            failed_modes.push(*mode);
        }
    }
    if !failed_modes.is_empty() {
        return Err(format!(
            "the XNNPACK example failed in mode(s) {failed_modes:?}"
        ));
    }

    // The same example against the broken providers: the hook's record of what XNNPACK was
    // handed exposes them.
    for (mode, control_name, signatures) in XNNPACK_MODES {
        let control = ctools::CONTROLS
            .iter()
            .find(|c| c.name == *control_name)
            .ok_or_else(|| format!("no control named {control_name}"))?;
        let bin = out_dir.join(format!("xnnpack_fc-control-{}", control.name));
        let mut link: Vec<std::ffi::OsString> = XNNPACK_LIBS.iter().map(Into::into).collect();
        link.extend(["-lpthread", "-lm"].map(Into::into));
        ctools::compile(
            &ctx.tc,
            &ctx.dirs,
            &ctools::Program {
                sources: vec![
                    examples.join("xnnpack_fc.c"),
                    ctx.dirs.controls().join(control.source),
                ],
                defines: vec![control.define.to_owned()],
                includes: vec![include.to_path_buf()],
                link,
                out: bin.clone(),
            },
        )?;
        let outcome = run_example(&bin, mode, &env)?;
        if outcome.passed {
            return Err(format!(
                "xnnpack_fc {mode} PASSED against the broken `{}` control\n{}",
                control.name,
                outcome.describe("xnnpack_fc")
            ));
        }
        if !signatures
            .iter()
            .any(|signature| signature.matches(&outcome))
        {
            let expected: Vec<String> = signatures.iter().map(ToString::to_string).collect();
            return Err(format!(
                "xnnpack_fc {mode} failed against the `{}` control, but not by the signature of \
                 its bug: expected {}, got {}. Inconclusive: that is no catch.\n{}",
                control.name,
                expected.join(" or "),
                outcome.reason(),
                outcome.describe("xnnpack_fc")
            ));
        }
        println!(
            "  control {}: xnnpack_fc {mode} failed as it must: {}",
            control.name,
            outcome.reason()
        );
    }

    guarded(ctx, include, &out_dir)
}

/// The Scribble setting of the guarded XNNPACK example: every block guarded, both stacks.
const GUARD_SPEC: &str = "guard:1/1,stacks:both";

/// The guarded XNNPACK example (`xnnpack_guarded.c`): XNNPACK's over-reads on exact-size
/// blocks never report; a use of a deleted operator is a `guard-use-after-free` (exit 19) whose
/// free stack names `xnn_delete_operator`; and without `KEEPALLOC_SCRIBBLE` (the negative
/// control, plain system backend) nothing reports that use.
fn guarded(ctx: &Ctx, include: &Path, out_dir: &Path) -> Result<(), String> {
    println!("c-test: XNNPACK on a guarded table (KEEPALLOC_SCRIBBLE={GUARD_SPEC})");
    let bin = out_dir.join("xnnpack_guarded");
    ctools::compile(
        &ctx.tc,
        &ctx.dirs,
        &ctools::Program {
            sources: vec![ctx.dirs.examples().join("xnnpack_guarded.c")],
            defines: vec![],
            includes: vec![include.to_path_buf()],
            link: xnnpack_link(ctx),
            out: bin.clone(),
        },
    )?;
    let guard = Some(GUARD_SPEC);

    // 1. Odd shapes on exact-size guarded blocks: must pass, no report.
    let outcome = run_guarded(&bin, "shapes", guard)?;
    if !outcome.passed {
        return Err(outcome.describe(&format!(
            "xnnpack_guarded shapes (KEEPALLOC_SCRIBBLE={GUARD_SPEC})"
        )));
    }
    print_indented(&outcome.stdout);

    // 2. A use after xnn_delete_operator: exit 19 and the report, freed by
    // xnn_delete_operator. Anything else (another exit, a plain SIGSEGV, a timeout) is no catch.
    let what = format!("xnnpack_guarded use-after-delete (KEEPALLOC_SCRIBBLE={GUARD_SPEC})");
    let outcome = run_guarded(&bin, "use-after-delete", guard)?;
    if !use_after_delete_reported(&outcome) {
        return Err(format!(
            "{what} was not reported as a guard-use-after-free of a block freed by \
             xnn_delete_operator (expected exit status 19 and that report on stderr), got {}\n{}",
            outcome.reason(),
            outcome.describe(&what)
        ));
    }
    let first = outcome
        .stderr
        .lines()
        .find(|line| line.contains("ERROR: keepalloc-scribble"))
        .unwrap_or_default();
    println!(
        "  xnnpack_guarded use-after-delete: reported as it must (exit 19, freed by \
         xnn_delete_operator): {first}"
    );

    // 3. Its negative control: the same program on the plain system backend. It may crash or
    // silently read the freed operator; it must not report (only guard mode makes the report).
    let what = "xnnpack_guarded use-after-delete without KEEPALLOC_SCRIBBLE";
    let outcome = run_guarded(&bin, "use-after-delete", None)?;
    if outcome.timed_out
        || outcome.code == Some(19)
        || outcome.stderr.contains("guard-use-after-free")
        || outcome.stderr.contains("keepalloc-scribble")
        || !outcome.stdout.contains("scribble 0")
    {
        return Err(format!(
            "{what} (the negative control, plain system backend) must run without Scribble \
             and must not report a guard-use-after-free; got {}\n{}",
            outcome.reason(),
            outcome.describe(what)
        ));
    }
    println!(
        "  control: {what} (system backend): not reported, as it must: {}",
        outcome.reason()
    );
    Ok(())
}

/// Runs the guarded example in `mode` with `KEEPALLOC_SCRIBBLE` set to `scribble`, or unset
/// (and without `MALLOC_PERTURB_`, so the control sees glibc's plain free), within
/// [`ctools::CONTROL_TIMEOUT`].
fn run_guarded(bin: &Path, mode: &str, scribble: Option<&str>) -> Result<ctools::Outcome, String> {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg(mode).env_remove("MALLOC_PERTURB_");
    match scribble {
        Some(spec) => cmd.env("KEEPALLOC_SCRIBBLE", spec),
        None => cmd.env_remove("KEEPALLOC_SCRIBBLE"),
    };
    ctools::run_command_with_timeout(cmd, ctools::CONTROL_TIMEOUT)
}

/// The signature of the use after delete in guard mode: exit status 19, a
/// `guard-use-after-free` report, and a `freed by` stack with `xnn_delete_operator` in it.
fn use_after_delete_reported(outcome: &ctools::Outcome) -> bool {
    if outcome.timed_out || outcome.signal.is_some() || outcome.code != Some(19) {
        return false;
    }
    if !outcome.stderr.contains("guard-use-after-free") {
        return false;
    }
    let mut lines = outcome.stderr.lines();
    lines.any(|line| line.starts_with("freed by "))
        && lines
            .take_while(|line| line.trim_start().starts_with('#'))
            .any(|frame| frame.contains("xnn_delete_operator"))
}

fn run_example(bin: &Path, mode: &str, env: &[(&str, &str)]) -> Result<ctools::Outcome, String> {
    let out = std::process::Command::new(bin)
        .arg(mode)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    Ok(ctools::Outcome::from_output(&out))
}
