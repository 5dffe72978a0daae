//! Stage 1: cargo-mutants with a part's own tests, and reading its `outcomes.json`.

use std::fs;
use std::path::Path;

use serde_json::Value;

use super::mutant::{Mutant, Span, Verdict};
use super::parts::Part;
use crate::util;

/// Stage 1 for one part: cargo-mutants with the part's tests; returns every mutant's outcome.
pub(super) fn run_part(part: &Part, tree: &Path, work: &Path) -> Result<Vec<Mutant>, String> {
    let out = work.join(part.name);
    fs::create_dir_all(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let mut cmd = util::cargo();
    cmd.arg("mutants")
        .arg("--dir")
        .arg(tree)
        .arg("--output")
        .arg(&out)
        .args(["--jobs", "1", "--colors", "never"])
        .args(part.select);
    for package in part.test_packages {
        cmd.args(["--test-package", package]);
    }
    if !part.test_args.is_empty() {
        cmd.arg("--").args(part.test_args);
    }
    // One target directory for every run: dependencies are built once.
    cmd.env("CARGO_TARGET_DIR", work.join("target"));
    println!(
        "xtask mutants: stage 1, {}: cargo-mutants with the tests of {}{}",
        part.name,
        part.test_packages.join(", "),
        if part.test_args.is_empty() {
            String::new()
        } else {
            format!(" ({})", part.test_args.join(" "))
        }
    );
    // cargo-mutants exits non-zero when a mutant survives: its outcomes say what happened.
    let status = cmd
        .status()
        .map_err(|e| format!("could not start cargo mutants: {e}"))?;
    let outcomes = out.join("mutants.out").join("outcomes.json");
    let text = fs::read_to_string(&outcomes).map_err(|e| {
        format!(
            "cargo mutants ({status}) wrote no {}: {e}",
            outcomes.display()
        )
    })?;
    let mut mutants = parse_outcomes(&text, &out.join("mutants.out"))?;
    for m in &mut mutants {
        m.stage2 = part.stage2;
    }
    Ok(mutants)
}

/// Reads cargo-mutants' `outcomes.json`: every mutant with its verdict. Fails when the
/// baseline (the unmutated tree) did not pass, since then no verdict means anything.
fn parse_outcomes(text: &str, dir: &Path) -> Result<Vec<Mutant>, String> {
    let json: Value =
        serde_json::from_str(text).map_err(|e| format!("outcomes.json is not JSON: {e}"))?;
    let outcomes = json["outcomes"]
        .as_array()
        .ok_or("outcomes.json has no `outcomes` list")?;
    let mut mutants = Vec::new();
    for outcome in outcomes {
        let summary = outcome["summary"].as_str().unwrap_or("");
        let scenario = &outcome["scenario"];
        if scenario.as_str() == Some("Baseline") {
            if summary != "Success" {
                return Err(format!(
                    "the unmutated tree failed its tests ({summary}); see {}",
                    dir.join("log").join("baseline.log").display()
                ));
            }
            continue;
        }
        let m = &scenario["Mutant"];
        let verdict = match summary {
            "CaughtMutant" => Verdict::Caught,
            "MissedMutant" => Verdict::Missed,
            "Timeout" => Verdict::Timeout,
            "Unviable" => Verdict::Unviable,
            other => return Err(format!("unexpected outcome `{other}` in outcomes.json")),
        };
        let pos = |v: &Value| -> Result<(usize, usize), String> {
            match (v["line"].as_u64(), v["column"].as_u64()) {
                (Some(l), Some(c)) => Ok((l as usize, c as usize)),
                _ => Err(format!("a mutant without a span: {m}")),
            }
        };
        mutants.push(Mutant {
            name: m["name"]
                .as_str()
                .ok_or("a mutant without a name")?
                .to_owned(),
            file: m["file"]
                .as_str()
                .ok_or("a mutant without a file")?
                .to_owned(),
            span: Span {
                start: pos(&m["span"]["start"])?,
                end: pos(&m["span"]["end"])?,
            },
            replacement: m["replacement"].as_str().unwrap_or("").to_owned(),
            diff: outcome["diff_path"].as_str().map(|p| dir.join(p)),
            verdict,
            caught_by: (verdict == Verdict::Caught).then_some("tests"),
            stage2: true,
        });
    }
    Ok(mutants)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_parsed_and_a_failed_baseline_is_an_error() {
        let ok = r#"{"outcomes":[
            {"scenario":"Baseline","summary":"Success","diff_path":null},
            {"scenario":{"Mutant":{"name":"a.rs:1:2: replace f with ()","file":"a.rs",
              "span":{"start":{"line":1,"column":2},"end":{"line":1,"column":5}},
              "replacement":"()"}},"summary":"MissedMutant","diff_path":"diff/a.diff"},
            {"scenario":{"Mutant":{"name":"a.rs:3:1: x","file":"a.rs",
              "span":{"start":{"line":3,"column":1},"end":{"line":3,"column":2}},
              "replacement":"y"}},"summary":"CaughtMutant","diff_path":null}]}"#;
        let ms = parse_outcomes(ok, Path::new("/o")).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].verdict, Verdict::Missed);
        assert_eq!(ms[0].span.start, (1, 2));
        assert_eq!(ms[0].diff.as_deref(), Some(Path::new("/o/diff/a.diff")));
        assert_eq!(ms[1].verdict, Verdict::Caught);
        let failed = ok.replacen("\"Success\"", "\"Failure\"", 1);
        assert!(parse_outcomes(&failed, Path::new("/o")).is_err());
    }
}
