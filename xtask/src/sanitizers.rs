//! `cargo xtask miri` and `cargo xtask asan`: the provider and allocator tests under Miri,
//! and the fault campaign under AddressSanitizer, where the nightly toolchain allows.
//!
//! Both need nightly, reached through rustup (`cargo +nightly`). Where rustup, nightly or a
//! needed component is missing, they print `skipped: <why>` and succeed: a machine without
//! nightly is not a failure of the code.

use std::process::{Command, Stdio};

use crate::fault_test;
use crate::util;

/// Prints why a command was skipped.
fn skipped(command: &str, why: &str) -> Result<(), String> {
    println!("{command}: skipped: {why}");
    Ok(())
}

/// A `cargo +nightly` command at the workspace root, through the rustup proxy (the
/// `CARGO` that built xtask is a toolchain's own cargo and does not understand `+nightly`).
fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(util::root());
    // Set by the outer `cargo run`; they would pin the inner cargo to the outer toolchain.
    for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC"] {
        cmd.env_remove(var);
    }
    cmd
}

/// `Ok(version)` when `cmd` runs and succeeds, `Err(reason)` otherwise.
fn probe(mut cmd: Command) -> Result<String, String> {
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

fn nightly_available() -> Result<String, String> {
    let mut cmd = nightly_cargo();
    cmd.arg("--version");
    probe(cmd).map_err(|e| format!("no nightly toolchain through rustup ({e})"))
}

/// `cargo xtask miri [args for cargo miri test]`: the allocator and provider tests under
/// Miri.
pub fn miri(args: &[String]) -> Result<(), String> {
    if let Err(why) = nightly_available() {
        return skipped("miri", &why);
    }
    let mut probe_cmd = nightly_cargo();
    probe_cmd.args(["miri", "--version"]);
    if let Err(why) = probe(probe_cmd) {
        return skipped(
            "miri",
            &format!(
                "the nightly toolchain has no miri component \
                 (`rustup +nightly component add miri rust-src`): {why}"
            ),
        );
    }
    let mut sysroot = nightly_cargo();
    sysroot.args(["miri", "setup"]);
    if let Err(why) = probe(sysroot) {
        return skipped(
            "miri",
            &format!("`cargo miri setup` failed (is rust-src installed?): {why}"),
        );
    }
    let mut cmd = nightly_cargo();
    cmd.args([
        "miri",
        "test",
        "-p",
        "keepalloc-allocators",
        "-p",
        "keepalloc-provider",
    ])
    .args(args)
    .env("CARGO_TARGET_DIR", util::root().join("target").join("miri"));
    // Miri checks the strict provenance model and many threads slowly; isolation off so
    // tests may read the clock.
    cmd.env(
        "MIRIFLAGS",
        std::env::var("MIRIFLAGS").unwrap_or_else(|_| "-Zmiri-disable-isolation".into()),
    );
    util::run(&mut cmd)
}

/// The host target triple of the nightly toolchain.
fn host_triple() -> Result<String, String> {
    let mut cmd = Command::new("rustc");
    cmd.args(["+nightly", "-vV"]).env_remove("RUSTUP_TOOLCHAIN");
    let info = probe_all(cmd)?;
    info.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV printed no host".into())
}

fn probe_all(mut cmd: Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `cargo xtask asan [fault-test options]`: builds the harness with
/// `-Zsanitizer=address` (no `-Zbuild-std` needed: std itself is not instrumented, which
/// is enough to catch the harness's and the libraries' own accesses) and runs the fault
/// campaign against it. Defaults to 20 runs per row (an ASan run costs ~5x a plain one).
pub fn asan(args: &[String]) -> Result<(), String> {
    if let Err(why) = nightly_available() {
        return skipped("asan", &why);
    }
    let host = match host_triple() {
        Ok(h) => h,
        Err(why) => return skipped("asan", &format!("could not ask nightly rustc: {why}")),
    };
    if !host.contains("linux") && !host.contains("apple") {
        return skipped(
            "asan",
            &format!("AddressSanitizer is not supported on {host}"),
        );
    }
    let mut cmd = nightly_cargo();
    cmd.args(crate::fault_test::HARNESS_BUILD_ARGS)
        .args(["--target", &host])
        .env("RUSTFLAGS", "-Zsanitizer=address")
        .env("CARGO_TARGET_DIR", util::root().join("target").join("asan"));
    eprintln!("asan: building keepalloc-harness with -Zsanitizer=address for {host}");
    let harness = match fault_test::executable_from(cmd, "keepalloc-harness") {
        Ok(h) => h,
        Err(why) => {
            return skipped(
                "asan",
                &format!("the nightly toolchain could not build with AddressSanitizer: {why}"),
            );
        }
    };
    let mut argv: Vec<String> = args.to_vec();
    if !argv.iter().any(|a| a.starts_with("--runs")) {
        argv.extend(["--runs".to_string(), "20".to_string()]);
    }
    let mut options = fault_test::Options::parse(&argv)?;
    options.env.push((
        "ASAN_OPTIONS".into(),
        format!(
            "exitcode={}:detect_leaks=0:abort_on_error=0",
            fault_test::ASAN_EXIT
        ),
    ));
    options.label = Some("AddressSanitizer".into());
    fault_test::campaign(&harness, &options)
}
