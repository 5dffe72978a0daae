//! `cargo xtask asan`: the fault campaign against a harness built with AddressSanitizer.

use std::time::Instant;

use super::nightly::{Require, host_triple, nightly_available, nightly_cargo};
use crate::fault_test;
use crate::util;

/// `cargo xtask asan --help`.
pub const ASAN_ABOUT: &str = "\
Builds keepalloc-harness with -Zsanitizer=address (nightly; target dir target/asan) and runs
the fault-test campaign against it, 20 runs a row unless --runs says otherwise (the other
options are fault-test's: see `cargo xtask fault-test --help`). A failed build always
fails.";

/// `cargo xtask asan` options: `--require` and the fault campaign's.
#[derive(clap::Args, Debug)]
pub struct AsanArgs {
    /// Fail instead of printing `skipped` when nightly is missing or the host has no
    /// AddressSanitizer (implied by CI=true).
    #[arg(long)]
    require: bool,
    #[command(flatten)]
    campaign: fault_test::Args,
}

/// `cargo xtask asan [fault-test options]`: builds the harness with
/// `-Zsanitizer=address` (no `-Zbuild-std` needed: std itself is not instrumented, which
/// is enough to catch the harness's and the libraries' own accesses) and runs the fault
pub fn asan(options: AsanArgs) -> Result<(), String> {
    let require = Require::new(options.require);
    if let Err(why) = nightly_available() {
        return require.skipped("asan", &why);
    }
    let host = match host_triple() {
        Ok(h) => h,
        Err(why) => {
            return require.skipped("asan", &format!("could not ask nightly rustc: {why}"));
        }
    };
    if !host.contains("linux") && !host.contains("apple") {
        return require.skipped(
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
    let built = Instant::now();
    // Nightly is there and the host supported: a failed build is a failure (of our code
    // or of nightly's sanitizer support), never a skip.
    let harness = fault_test::executable_from(cmd, "keepalloc-harness")
        .map_err(|why| format!("asan: building with AddressSanitizer failed: {why}"))?;
    eprintln!("asan: build took {:.0} s", built.elapsed().as_secs_f64());
    let mut options = fault_test::harness_options(options.campaign, 20)?;
    options.env.push((
        "ASAN_OPTIONS".into(),
        format!(
            "exitcode={}:detect_leaks=0:abort_on_error=0",
            fault_test::ASAN_EXIT
        ),
    ));
    options.label = Some("AddressSanitizer".into());
    let ran = Instant::now();
    let result = fault_test::campaign(&harness, &options);
    eprintln!("asan: campaign took {:.0} s", ran.elapsed().as_secs_f64());
    result
}
