//! The whole campaign against `fake-harness.sh`, a shell stand-in that keeps the harness's
//! contract: planning from `--list`, fresh processes, classification, verdicts.

use std::path::PathBuf;

use super::options::parse_options;
use super::verdict::Row;
use super::*;

/// Writes the fake harness to a fresh directory and returns its path.
fn fake_harness(test: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("xtask-fault-test-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keepalloc-harness");
    std::fs::write(&path, include_str!("fake-harness.sh")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn options(args: &[&str], env: &[(&str, &str)]) -> Options {
    let mut all = vec![
        "--runs",
        "6",
        "--seed",
        "1",
        "--jobs",
        "2",
        "--timeout",
        "20",
    ];
    all.extend(args);
    let mut o = parse_options(&all.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    o.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    o
}

fn row<'a>(rows: &'a [Row], key: &str) -> &'a Row {
    rows.iter()
        .find(|r| format!("{}/{}/{}", r.scenario, r.variant, r.window) == key)
        .unwrap_or_else(|| panic!("no row {key}"))
}

#[test]
fn keepalloc_clean_and_the_held_control_caught_pass() {
    let harness = fake_harness("pass");
    let o = options(&["--variant", "keepalloc,racy"], &[]);
    let (rows, report) = execute(&harness, &o).unwrap();
    assert!(report.passed);
    assert_eq!(
        rows.len(),
        6,
        "2 keepalloc rows + 1 racy row, held and bare"
    );
    let held = row(&rows, "cold-start/racy/held");
    assert_eq!((held.runs, held.caught), (6, 6));
    assert_eq!(held.detections["use-after-free"], 6);
    // Seeds 1..=6: 3 and 6 show identity-mismatch with the window bare.
    let bare = row(&rows, "cold-start/racy/bare");
    assert_eq!((bare.caught, bare.missed, bare.verdict()), (2, 4, "info"));
    assert_eq!(bare.missed_seeds, [1, 2, 4, 5]);
    assert!(campaign(&harness, &o).is_ok());
}

#[test]
fn findings_outside_the_signature_do_not_catch_a_control() {
    let harness = fake_harness("outside");
    let o = options(&["--variant", "naive-retry", "--window", "held"], &[]);
    let (rows, report) = execute(&harness, &o).unwrap();
    assert!(!report.passed);
    let r = row(&rows, "retry-after-capture/naive-retry/held");
    assert_eq!((r.caught, r.inconclusive, r.verdict()), (0, 6, "MISSED"));
    assert_eq!(r.inconclusive_reasons["outside-signature"], 6);
    assert!(r.notes[0].ends_with("keepalloc-fault: leak: 1 block still live"));
    assert!(campaign(&harness, &o).is_err());
}

#[test]
fn a_keepalloc_crash_fails_the_campaign() {
    let harness = fake_harness("crash");
    let o = options(
        &[
            "--variant",
            "keepalloc",
            "--scenario",
            "cold-start",
            "--window",
            "yield",
        ],
        &[("FAKE_KEEPALLOC", "crash")],
    );
    let (rows, report) = execute(&harness, &o).unwrap();
    assert!(!report.passed);
    let r = row(&rows, "cold-start/keepalloc/yield");
    assert_eq!((r.failures, r.inconclusive), (1, 1));
    assert_eq!(r.failing_seeds, [4]);
    assert_eq!(r.inconclusive_reasons["signal:SIGSEGV"], 1);
    let json = serde_json::to_value(&report).unwrap();
    let replay = json["rows"][0]["replay"][0].as_str().unwrap();
    assert!(
        replay.starts_with("FAKE_KEEPALLOC=crash ")
            && replay.ends_with(
                "--scenario cold-start --variant keepalloc --seed 4 --threads 32 --window yield"
            ),
        "{replay}"
    );
}

#[test]
fn a_cell_mutant_must_be_asked_for_and_caught() {
    let harness = fake_harness("mutant");
    let env = [("FAKE_MUTANT", "rebuild_in_place")];
    let plain = options(&[], &env);
    let err = execute(&harness, &plain).unwrap_err();
    assert!(err.contains("--cell-mutant rebuild_in_place"), "{err}");
    let other = options(&["--cell-mutant", "drop_on_failure"], &env);
    let err = execute(&harness, &other).unwrap_err();
    assert!(err.contains("stale"), "{err}");
    let stale = options(&["--cell-mutant", "rebuild_in_place"], &[]);
    let err = execute(&harness, &stale).unwrap_err();
    assert!(err.contains("stale"), "{err}");

    let o = options(&["--cell-mutant", "rebuild_in_place"], &env);
    let (rows, report) = execute(&harness, &o).unwrap();
    assert!(report.passed);
    assert_eq!(
        rows.len(),
        2,
        "keepalloc in the exercised scenario, held and bare"
    );
    assert!(rows.iter().all(|r| r.judged() && r.caught == 6));
    // Where the mutant is not exercised, keepalloc passes, and so the mutant is missed.
    let cold = options(
        &[
            "--cell-mutant",
            "rebuild_in_place",
            "--scenario",
            "cold-start",
        ],
        &env,
    );
    let (rows, report) = execute(&harness, &cold).unwrap();
    assert!(!report.passed);
    assert_eq!(row(&rows, "cold-start/keepalloc/bare").verdict(), "MISSED");
}

#[test]
fn a_harness_without_list_is_refused() {
    let o = options(&[], &[]);
    let err = execute(std::path::Path::new("/bin/false"), &o).unwrap_err();
    assert!(err.contains("--list"), "{err}");
}

#[test]
fn a_measurement_of_unjudged_rows_is_not_a_failure_but_a_verdict_still_is() {
    let harness = fake_harness("measure");
    let bare = options(&["--variant", "racy", "--window", "bare"], &[]);
    let (rows, report) = execute(&harness, &bare).unwrap();
    assert!(!rows.iter().any(|r| r.judged()) && !report.passed);
    assert!(
        campaign(&harness, &bare).is_ok(),
        "bare rates are a measurement"
    );
    // As soon as one row is judged, the verdict decides again: keepalloc crashing fails it.
    let judged = options(
        &["--variant", "keepalloc", "--window", "bare"],
        &[("FAKE_KEEPALLOC", "crash")],
    );
    assert!(campaign(&harness, &judged).is_err());
}
