//! The ONNX Runtime campaign's verdict on recorded runs.

use super::child::{Run, injected};
use super::verdict::{OWNER_BYPASSED, judge};

const MODELS: [&str; 2] = ["a", "b"];

/// A run; `nth` and `probability` plans refused an allocation.
fn run(model: &str, plan: &str, outcome: &str) -> Run {
    let control = plan == "control";
    let faults_injected = plan.starts_with("nth:") || plan.starts_with("probability:");
    Run {
        runtime: "onnxruntime",
        model: model.into(),
        plan: if control { "never".into() } else { plan.into() },
        threads: 1,
        control,
        faults_injected,
        outcome: outcome.into(),
        violations: Vec::new(),
        detail: String::new(),
        stage: String::new(),
        figures: if plan == "count" && outcome == "ok" {
            serde_json::json!({ "allocation_calls": 2 })
        } else {
            serde_json::Value::Null
        },
        replay: String::new(),
    }
}

/// The control caught by its own signature: the bypass check alone, and the foreign
/// allocator did receive the sessions' calls.
fn caught_control(model: &str) -> Run {
    Run {
        violations: vec![OWNER_BYPASSED.into()],
        figures: serde_json::json!({ "foreign_allocator_calls": 2 }),
        ..run(model, "control", "keepalloc-violation")
    }
}

/// A full, passing campaign for one model.
fn model_runs(model: &str) -> Vec<Run> {
    vec![
        run(model, "count", "ok"),
        run(model, "nth:1", "clean-error"),
        run(model, "nth:2", "crash"),
        run(model, "probability:0.25@1", "clean-error"),
        run(model, "refuse-registrations:3", "ok"),
        caught_control(model),
    ]
}

fn models() -> Vec<String> {
    MODELS.iter().map(|m| m.to_string()).collect()
}

fn all_runs() -> Vec<Run> {
    MODELS.iter().flat_map(|m| model_runs(m)).collect()
}

#[test]
fn a_full_campaign_passes_and_an_ort_crash_under_a_fault_is_a_finding() {
    let runs = all_runs();
    let v = judge(&models(), &runs);
    assert!(v.passed(), "{:?}", v.problems());
    assert_eq!((v.caught, v.controls), (2, 2));
    let crashes: Vec<&str> = v.findings.iter().map(|&i| runs[i].plan.as_str()).collect();
    assert_eq!(crashes, ["nth:2", "nth:2"]);
}

#[test]
fn the_control_with_its_signature_is_caught() {
    let v = judge(&models()[..1], &model_runs("a"));
    assert!(v.passed(), "{:?}", v.problems());
    assert_eq!((v.caught, v.controls), (1, 1));
}

#[test]
fn count_runs_that_all_crashed_fail_the_campaign() {
    // What the old loop produced when every count run crashed: the count runs alone.
    for outcome in ["crash", "hang"] {
        let runs: Vec<Run> = MODELS.iter().map(|m| run(m, "count", outcome)).collect();
        let v = judge(&models(), &runs);
        assert!(!v.passed(), "{outcome}: {}", v.summary());
        // Even with every other plan run, a crashed count run fails the campaign.
        let mut runs = all_runs();
        runs[0] = run("a", "count", outcome);
        assert!(!judge(&models(), &runs).passed(), "{outcome}");
    }
}

#[test]
fn a_crash_or_hang_without_an_injected_fault_counts_against_keepalloc() {
    for outcome in ["crash", "hang", "wrong-output", "leak", "clean-error"] {
        let mut runs = all_runs();
        runs[4] = run("a", "refuse-registrations:3", outcome);
        let v = judge(&models(), &runs);
        assert!(!v.passed(), "{outcome}");
        assert!(
            v.findings.iter().all(|&i| i != 4),
            "{outcome} became an ORT finding"
        );
    }
}

#[test]
fn a_crash_under_a_plan_that_refused_nothing_counts_against_keepalloc() {
    for outcome in ["crash", "hang", "wrong-output", "leak", "clean-error"] {
        let mut runs = all_runs();
        runs[3] = Run {
            faults_injected: false,
            ..run("a", "probability:0.25@1", outcome)
        };
        let v = judge(&models(), &runs);
        assert!(!v.passed(), "{outcome}");
        assert!(
            v.findings.iter().all(|&i| i != 3),
            "{outcome} became an ORT finding"
        );
    }
    // The same run with a refusal seen is ONNX Runtime's.
    let mut runs = all_runs();
    runs[3] = run("a", "probability:0.25@1", "crash");
    let v = judge(&models(), &runs);
    assert!(v.passed(), "{:?}", v.problems());
    assert!(v.findings.contains(&3));
}

#[test]
fn a_refusal_is_read_from_the_childs_line_and_checked_against_its_count() {
    let stages = "stage load\nstage armed\n";
    let marked = "stage load\nstage armed\ninjected\nstage run\n";
    // A crash leaves no result line: the marker alone decides.
    assert_eq!(injected(stages, None), Some(false));
    assert_eq!(injected(marked, None), Some(true));
    let refused = |n: u64| serde_json::json!({ "refused": n });
    assert_eq!(injected(marked, Some(&refused(3))), Some(true));
    assert_eq!(injected(stages, Some(&refused(0))), Some(false));
    // The two witnesses disagree: neither a pass nor a finding.
    assert_eq!(injected(stages, Some(&refused(1))), None);
    assert_eq!(injected(marked, Some(&refused(0))), None);
    // Only a whole line counts.
    assert_eq!(injected("stage injected\n", None), Some(false));
}

#[test]
fn zero_control_runs_fail_the_campaign() {
    let runs: Vec<Run> = all_runs().into_iter().filter(|r| !r.control).collect();
    assert!(!judge(&models(), &runs).passed());
    // One model's control is not another's.
    let runs: Vec<Run> = all_runs()
        .into_iter()
        .filter(|r| !(r.control && r.model == "b"))
        .collect();
    assert!(!judge(&models(), &runs).passed());
}

#[test]
fn a_control_ending_in_another_failure_is_not_caught() {
    let others = [
        // keepalloc's own registration failed: exit 20, but not the control's signature.
        Run {
            violations: vec!["registration-failed".into()],
            ..run("a", "control", "keepalloc-violation")
        },
        // Scribble found something besides the bypass.
        Run {
            violations: vec![OWNER_BYPASSED.into(), "scribble".into()],
            figures: serde_json::json!({ "foreign_allocator_calls": 2 }),
            ..run("a", "control", "keepalloc-violation")
        },
        // The signature without its witness: the other allocator was never called.
        Run {
            violations: vec![OWNER_BYPASSED.into()],
            figures: serde_json::json!({ "foreign_allocator_calls": 0 }),
            ..run("a", "control", "keepalloc-violation")
        },
        // An exit 20 from a child that names no check.
        run("a", "control", "keepalloc-violation"),
        run("a", "control", "setup-error"),
        run("a", "control", "crash"),
        run("a", "control", "hang"),
        run("a", "control", "clean-error"),
        run("a", "control", "ok"),
    ];
    for other in others {
        let mut runs = all_runs();
        runs[5] = other.clone();
        let v = judge(&models(), &runs);
        assert!(
            !v.passed(),
            "{} {:?} counted as caught",
            other.outcome,
            other.violations
        );
        assert_eq!((v.caught, v.controls), (1, 2), "{}", other.outcome);
    }
}

#[test]
fn harness_errors_are_inconclusive_not_findings() {
    for outcome in ["setup-error", "unknown", "usage", ""] {
        let mut runs = all_runs();
        runs[2] = run("a", "nth:2", outcome);
        let v = judge(&models(), &runs);
        assert!(!v.passed(), "{outcome:?}");
        assert!(v.findings.is_empty() || v.findings == [8], "{outcome:?}");
    }
}
