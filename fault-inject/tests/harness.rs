//! The harness binary, each run a fresh process, as `cargo xtask fault-test` drives it:
//! keepalloc passes its scenarios; a negative control is caught with the distinct
//! use-after-free exit code (feature `controls`); and a default build contains no control.

use std::process::{Command, Output};

use keepalloc_fault_inject::report::exit;

fn harness(scenario: &str, variant: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keepalloc-harness"))
        .args(["--scenario", scenario, "--variant", variant, "--seed", "7"])
        .args(["--threads", "8"])
        .args(extra)
        .output()
        .expect("spawn keepalloc-harness")
}

/// The one `RESULT` line, checked to name the run.
fn result_line(out: &Output, scenario: &str, variant: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect();
    assert_eq!(lines.len(), 1, "exactly one result line: {stdout}");
    let line = lines[0].to_string();
    assert!(line.contains(&format!("scenario={scenario} variant={variant} seed=7")));
    line
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn keepalloc_passes_cold_start_with_the_window_held() {
    let out = harness("cold-start", "keepalloc", &["--window", "held"]);
    assert_eq!(out.status.code(), Some(exit::PASS), "{}", describe(&out));
    let line = result_line(&out, "cold-start", "keepalloc");
    assert!(line.contains("window=held status=pass exit=0 detections=none"));
}

#[test]
fn keepalloc_passes_out_of_memory() {
    let out = harness("out-of-memory", "keepalloc", &[]);
    assert_eq!(out.status.code(), Some(exit::PASS), "{}", describe(&out));
    result_line(&out, "out-of-memory", "keepalloc");
}

#[test]
fn bad_arguments_are_a_usage_error() {
    let out = harness("no-such-scenario", "keepalloc", &[]);
    assert_eq!(out.status.code(), Some(exit::USAGE), "{}", describe(&out));
}

#[cfg(not(feature = "controls"))]
#[test]
fn a_default_build_contains_no_control() {
    for variant in [
        "racy",
        "naive-retry",
        "poisoning-once",
        "build-race",
        "drop-on-oom",
    ] {
        let out = harness("retry-under-race", variant, &[]);
        assert_eq!(
            out.status.code(),
            Some(exit::NOT_BUILT),
            "{}",
            describe(&out)
        );
        assert!(result_line(&out, "retry-under-race", variant).contains("status=not-built"));
    }
}

#[cfg(feature = "controls")]
#[test]
fn naive_retry_is_caught_using_the_owner_it_dropped() {
    let out = harness("retry-after-capture", "naive-retry", &[]);
    assert_eq!(
        out.status.code(),
        Some(exit::USE_AFTER_FREE),
        "{}",
        describe(&out)
    );
    let line = result_line(&out, "retry-after-capture", "naive-retry");
    assert!(line.contains("status=fail exit=10"), "{line}");
    assert!(line.contains("use-after-free"), "{line}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("owner canary reads 0x5555555555555555") && stderr.contains("seed=7"),
        "one-line report with the seed: {stderr}"
    );
}

#[cfg(feature = "controls")]
#[test]
fn racy_is_caught_with_the_window_held() {
    // Caught in >= 99.8% of runs with the window held; five independent runs all missing
    // would take odds below 1e-13.
    let caught = (0..5).any(|_| {
        let out = harness("cold-start", "racy", &["--window", "held"]);
        out.status.code() == Some(exit::USE_AFTER_FREE)
            || out.status.code() == Some(exit::IDENTITY_MISMATCH)
    });
    assert!(caught, "the racy control went unnoticed in 5 runs");
}

#[cfg(feature = "controls")]
#[test]
fn controls_do_not_run_where_they_do_not_apply() {
    let out = harness("out-of-memory", "racy", &[]);
    assert_eq!(
        out.status.code(),
        Some(exit::NOT_APPLICABLE),
        "{}",
        describe(&out)
    );
}

/// Runs `scenario` against `variant` and returns the detections of its result line.
#[cfg(feature = "controls")]
fn detections(scenario: &str, variant: &str, extra: &[&str]) -> Vec<String> {
    let out = harness(scenario, variant, extra);
    let line = result_line(&out, scenario, variant);
    line.rsplit("detections=")
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect()
}

#[cfg(feature = "controls")]
#[test]
fn poisoning_once_is_caught_by_no_retry() {
    for scenario in [
        "retry-after-capture",
        "panic-in-init",
        "owner-build-failure",
    ] {
        let found = detections(scenario, "poisoning-once", &[]);
        assert!(
            found.iter().any(|k| k == "no-retry"),
            "{scenario}: {found:?}"
        );
        assert!(
            !found.iter().any(|k| k == "use-after-free"),
            "{scenario}: {found:?}"
        );
    }
}

#[cfg(feature = "controls")]
#[test]
fn build_race_is_caught_by_its_second_owner() {
    let found = detections("owner-build-failure", "build-race", &["--window", "held"]);
    assert_eq!(found, ["second-owner"]);
}

#[cfg(feature = "controls")]
#[test]
fn drop_on_oom_is_caught_using_the_owner_it_replaced() {
    let out = harness("out-of-memory", "drop-on-oom", &[]);
    assert_eq!(
        out.status.code(),
        Some(exit::USE_AFTER_FREE),
        "{}",
        describe(&out)
    );
}

#[test]
fn the_catalog_lists_every_scenario_with_a_control() {
    let out = Command::new(env!("CARGO_BIN_EXE_keepalloc-harness"))
        .arg("--list")
        .output()
        .expect("spawn keepalloc-harness");
    assert!(out.status.success(), "{}", describe(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = list["rows"].as_array().expect("rows");
    for s in list["scenarios"].as_array().expect("scenarios") {
        let name = s["name"].as_str().unwrap();
        let controls = rows
            .iter()
            .filter(|r| r["scenario"] == name && r["variant"] != "keepalloc")
            .count();
        assert!(controls >= 1, "scenario {name} has no control");
    }
    assert_eq!(list["exit_codes"]["owner-rebuilt"], exit::OWNER_REBUILT);
}
