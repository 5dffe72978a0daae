//! The ONNX Runtime campaign's verdict, decided from the runs' records alone ([`judge`]).

use super::child::Run;

/// The kind the child gives its check "sessions ran but never allocated through the owner"
/// (`fault-inject/src/bin/keepalloc-ort-child.rs`): the negative control's signature, the only way a
/// control run counts as caught.
pub(super) const OWNER_BYPASSED: &str = "owner-bypassed";

/// What the runs prove, decided from their records alone.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    /// Counted against keepalloc: a broken invariant, a run with no injected fault that did
    /// not end `ok`, a control that ran clean (keepalloc's checks missed the bypass).
    pub(super) failures: Vec<String>,
    /// Neither a pass nor a catch: a harness error, a missing run, a control that ended other
    /// than by its signature.
    pub(super) inconclusive: Vec<String>,
    /// ONNX Runtime's behaviour under an injected allocation failure (indices into the runs).
    pub(super) findings: Vec<usize>,
    /// Runs that are not controls, and those of them that injected no fault.
    pub(super) checked: usize,
    pub(super) fault_free: usize,
    pub(super) controls: usize,
    pub(super) caught: usize,
}

impl Verdict {
    pub(super) fn passed(&self) -> bool {
        self.failures.is_empty() && self.inconclusive.is_empty()
    }

    pub(super) fn problems(&self) -> Vec<String> {
        let failures = self
            .failures
            .iter()
            .map(|p| format!("against keepalloc: {p}"));
        let inconclusive = self
            .inconclusive
            .iter()
            .map(|p| format!("inconclusive: {p}"));
        failures.chain(inconclusive).collect()
    }

    pub(super) fn summary(&self) -> String {
        format!(
            "keepalloc: {} failures in {} runs ({} of them without an injected fault), {} \
             inconclusive; the control was caught by its signature ({OWNER_BYPASSED}) in {} \
             of {} runs",
            self.failures.len(),
            self.checked,
            self.fault_free,
            self.inconclusive.len(),
            self.caught,
            self.controls
        )
    }
}

/// ONNX Runtime's answers to an injected allocation failure that do not fail the campaign.
pub(super) const ORT_FINDINGS: [&str; 4] = ["crash", "hang", "wrong-output", "leak"];

/// Decides the campaign over `models` from the runs.
///
/// - A run that injects no allocation fault (`count`, `refuse-registrations`) must end `ok`:
///   a crash, hang, wrong output, leak, clean error or broken invariant there counts against
///   keepalloc, since nothing was done to ONNX Runtime but to run it on the owner.
/// - A run that does inject faults (`nth`, `probability`) passes with `ok` or `clean-error`,
///   fails with `keepalloc-violation`, and a crash, hang, wrong output or leak is a finding
///   about ONNX Runtime (docs/findings-onnxruntime.md).
/// - Every model needs its `count` run (ok, with its allocation sites) and at least one
///   control; a control counts as caught only by its own signature: `keepalloc-violation`
///   with `owner-bypassed` as the only broken check, and the foreign allocator (the witness
///   outside keepalloc's counters) called. A control that ran clean is a miss; one that ended
///   in anything else is inconclusive.
/// - Any other outcome (`setup-error`, `unknown`, `usage`, none) is inconclusive.
pub(super) fn judge(models: &[String], runs: &[Run]) -> Verdict {
    let mut v = Verdict::default();
    let what = |r: &Run| {
        let violations = if r.violations.is_empty() {
            String::new()
        } else {
            format!(" {:?}", r.violations)
        };
        format!(
            "{} {}: {}{violations} ({})\n  {}",
            r.model, r.plan, r.outcome, r.detail, r.replay
        )
    };
    for (i, r) in runs.iter().enumerate() {
        let known = ["ok", "clean-error", "keepalloc-violation"]
            .into_iter()
            .chain(ORT_FINDINGS)
            .any(|o| o == r.outcome);
        if r.control {
            v.controls += 1;
            let witnessed = r.figures["foreign_allocator_calls"]
                .as_u64()
                .is_some_and(|n| n > 0);
            if r.outcome == "keepalloc-violation" && r.violations == [OWNER_BYPASSED] && witnessed {
                v.caught += 1;
            } else if r.outcome == "ok" {
                v.failures
                    .push(format!("the control was missed: {}", what(r)));
            } else {
                v.inconclusive.push(format!(
                    "the control ended other than by its signature: {}",
                    what(r)
                ));
            }
            continue;
        }
        v.checked += 1;
        if !known {
            v.inconclusive.push(what(r));
        } else if !r.faults_injected {
            v.fault_free += 1;
            if r.outcome != "ok" {
                v.failures
                    .push(format!("with no fault injected: {}", what(r)));
            }
        } else if r.outcome == "keepalloc-violation" {
            v.failures.push(what(r));
        } else if ORT_FINDINGS.contains(&r.outcome.as_str()) {
            v.findings.push(i);
        }
    }
    for model in models {
        let of_model = |r: &&Run| r.model == *model;
        match runs.iter().filter(of_model).find(|r| r.plan == "count") {
            None => v.inconclusive.push(format!("{model}: no count run")),
            Some(r) if r.outcome == "ok" => {
                if r.figures["allocation_calls"].as_u64().unwrap_or(0) == 0 {
                    v.inconclusive.push(format!(
                        "{model}: the count run measured no allocation site"
                    ));
                }
            }
            // Judged above; its nth plans were not run.
            Some(_) => {}
        }
        if !runs.iter().filter(of_model).any(|r| r.control) {
            v.inconclusive.push(format!(
                "{model}: no control run (nothing shows the checks can fail)"
            ));
        }
    }
    v
}
