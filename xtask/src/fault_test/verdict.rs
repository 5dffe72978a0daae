//! The verdict rules: how a run counts for its row, and when a row passes.
//!
//! - A **keepalloc row** ([`Judge::Clean`]) passes only when every run was a clean pass.
//!   A finding, a timeout, a harness error: each is a failure.
//! - A **control row** ([`Judge::Catch`]) catches a run only when the run's findings
//!   intersect the row's signature (the findings that are the symptom of *its* bug). A
//!   clean pass is a miss; anything else is inconclusive, and an inconclusive run counts
//!   as a miss. A judged control row passes when `caught / runs >= 95%`. Controls are
//!   judged with the window `held` only (a bare race on two cores shows up in about 1 run
//!   in 100); a cell mutant, whose bug needs no race, is judged in every window.
//!
//! A row's `failures` are the runs that count against it: every run that was not clean
//! for keepalloc, every run that was not caught for a control.

use std::collections::BTreeMap;

use super::classify::Outcome;
use super::stats::Rate;

/// The share of its runs a judged control row must catch.
pub const REQUIRED_RATE: f64 = 0.95;

/// The window in which the race controls are judged.
pub const GATE_WINDOW: &str = "held";

/// What a row must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judge {
    /// keepalloc: every run a clean pass.
    Clean,
    /// A control: caught (findings in `signature`) in >= 95% of the runs.
    Catch {
        /// The finding kinds that catch it.
        signature: Vec<String>,
        /// Judged in every window (a cell mutant), not only in [`GATE_WINDOW`].
        every_window: bool,
    },
}

/// What one run counts as for its row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// keepalloc passed.
    Clean,
    /// keepalloc did not pass.
    Failure,
    /// The control was caught by its signature.
    Caught,
    /// The control passed.
    Missed,
    /// Nothing concluded (for a control; counts as a miss).
    Inconclusive,
}

impl Judge {
    /// What `outcome` counts as.
    pub fn judge(&self, outcome: &Outcome) -> Judgement {
        match (self, outcome) {
            (Judge::Clean, Outcome::Pass) => Judgement::Clean,
            (Judge::Clean, _) => Judgement::Failure,
            (Judge::Catch { .. }, Outcome::Pass) => Judgement::Missed,
            // Only the harness's own witnesses name a signature's kinds. An AddressSanitizer
            // report (`asan:heap-use-after-free`, ...) is never one: the controls' owners live
            // in the scribbling heap's quarantine, which ASan does not see, so a report in a
            // control's run is about some other block, not the owner the bug dropped.
            (Judge::Catch { signature, .. }, Outcome::Found(kinds)) => {
                if kinds.iter().any(|k| signature.iter().any(|s| s == k)) {
                    Judgement::Caught
                } else {
                    Judgement::Inconclusive
                }
            }
            (Judge::Catch { .. }, Outcome::Inconclusive(_)) => Judgement::Inconclusive,
        }
    }

    /// The signature (empty for keepalloc).
    pub fn signature(&self) -> &[String] {
        match self {
            Judge::Clean => &[],
            Judge::Catch { signature, .. } => signature,
        }
    }

    /// A control (must be caught) rather than keepalloc (must pass).
    pub fn is_control(&self) -> bool {
        matches!(self, Judge::Catch { .. })
    }
}

/// Reason counted for a control run whose findings all lie outside its signature.
pub const OUTSIDE_SIGNATURE: &str = "outside-signature";

/// One row of the campaign: a (scenario, variant, window) and what its runs showed.
#[derive(Clone, Debug)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Variant name.
    pub variant: String,
    /// Window name.
    pub window: String,
    /// What the row must show.
    pub judge: Judge,
    /// Runs made.
    pub runs: usize,
    /// Control runs caught by the signature.
    pub caught: usize,
    /// Control runs that passed.
    pub missed: usize,
    /// Runs from which nothing could be concluded.
    pub inconclusive: usize,
    /// Runs that count against the row (see the module docs).
    pub failures: usize,
    /// Finding kind → runs that showed it.
    pub detections: BTreeMap<String, usize>,
    /// Inconclusive reason → runs.
    pub inconclusive_reasons: BTreeMap<String, usize>,
    /// Seeds of the runs that count against the row, in run order.
    pub failing_seeds: Vec<u64>,
    /// Seeds of missed control runs, in run order.
    pub missed_seeds: Vec<u64>,
    /// Seeds of inconclusive runs, in run order.
    pub inconclusive_seeds: Vec<u64>,
    /// A few notes on inconclusive or failing runs (seed, reason, first stderr line).
    pub notes: Vec<String>,
}

impl Row {
    /// A row with no run yet.
    pub fn new(scenario: &str, variant: &str, window: &str, judge: Judge) -> Row {
        Row {
            scenario: scenario.into(),
            variant: variant.into(),
            window: window.into(),
            judge,
            runs: 0,
            caught: 0,
            missed: 0,
            inconclusive: 0,
            failures: 0,
            detections: BTreeMap::new(),
            inconclusive_reasons: BTreeMap::new(),
            failing_seeds: Vec::new(),
            missed_seeds: Vec::new(),
            inconclusive_seeds: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Counts one run: its seed, how it ended, and the first line of its stderr.
    pub fn record(&mut self, seed: u64, outcome: &Outcome, first_stderr_line: &str) {
        self.runs += 1;
        if let Outcome::Found(kinds) = outcome {
            for k in kinds {
                *self.detections.entry(k.clone()).or_default() += 1;
            }
        }
        let judgement = self.judge.judge(outcome);
        let reason = match outcome {
            Outcome::Inconclusive(reason) => Some(reason.as_str()),
            Outcome::Found(_) if judgement == Judgement::Inconclusive => Some(OUTSIDE_SIGNATURE),
            _ => None,
        };
        if let Some(reason) = reason {
            self.inconclusive += 1;
            self.inconclusive_seeds.push(seed);
            *self.inconclusive_reasons.entry(reason.into()).or_default() += 1;
            if self.notes.len() < 3 {
                self.notes
                    .push(format!("seed {seed}: {reason}: {first_stderr_line}"));
            }
        }
        match judgement {
            Judgement::Clean => {}
            Judgement::Caught => self.caught += 1,
            Judgement::Failure | Judgement::Missed | Judgement::Inconclusive => {
                self.failures += 1;
                self.failing_seeds.push(seed);
                if judgement == Judgement::Missed {
                    self.missed += 1;
                    self.missed_seeds.push(seed);
                }
            }
        }
    }

    /// Caught / runs for a control, failures / runs for keepalloc, with its 95% interval.
    pub fn detection_rate(&self) -> Rate {
        if self.judge.is_control() {
            Rate::wilson(self.caught, self.runs)
        } else {
            Rate::wilson(self.failures, self.runs)
        }
    }

    /// Whether the row counts toward the verdict.
    pub fn judged(&self) -> bool {
        match &self.judge {
            Judge::Clean => true,
            Judge::Catch { every_window, .. } => *every_window || self.window == GATE_WINDOW,
        }
    }

    /// Whether the row met its rule (also computed for rows that are not judged).
    pub fn passed(&self) -> bool {
        if self.runs == 0 {
            return false;
        }
        match &self.judge {
            Judge::Clean => self.failures == 0,
            Judge::Catch { .. } => self.caught as f64 >= REQUIRED_RATE * self.runs as f64,
        }
    }

    /// The verdict column: `PASS`, `FAIL`, `caught`, `MISSED`, `info`.
    pub fn verdict(&self) -> &'static str {
        match (self.judge.is_control(), self.judged(), self.passed()) {
            (false, _, true) => "PASS",
            (false, _, false) => "FAIL",
            (true, false, _) => "info",
            (true, true, true) => "caught",
            (true, true, false) => "MISSED",
        }
    }
}

/// The campaign passes when every judged row passed (and there was one).
pub fn all_passed(rows: &[Row]) -> bool {
    rows.iter().any(Row::judged) && rows.iter().filter(|r| r.judged()).all(Row::passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(window: &str) -> Row {
        Row::new(
            "cold-start",
            "racy",
            window,
            Judge::Catch {
                signature: vec!["second-owner".into(), "use-after-free".into()],
                every_window: false,
            },
        )
    }

    fn found(kinds: &[&str]) -> Outcome {
        Outcome::Found(kinds.iter().map(|k| k.to_string()).collect())
    }

    #[test]
    fn a_control_is_caught_only_by_its_signature() {
        let judge = control("held").judge;
        assert_eq!(judge.judge(&found(&["use-after-free"])), Judgement::Caught);
        assert_eq!(
            judge.judge(&found(&["leak", "second-owner"])),
            Judgement::Caught
        );
        // A sanitizer's use-after-free is about some block, not shown to be the owner's.
        assert_eq!(
            judge.judge(&found(&["asan:heap-use-after-free"])),
            Judgement::Inconclusive
        );
        assert_eq!(judge.judge(&found(&["leak"])), Judgement::Inconclusive);
        assert_eq!(judge.judge(&Outcome::Pass), Judgement::Missed);
        assert_eq!(
            judge.judge(&Outcome::Inconclusive("timeout".into())),
            Judgement::Inconclusive
        );
    }

    #[test]
    fn keepalloc_fails_on_anything_but_a_clean_pass() {
        let mut row = Row::new("cold-start", "keepalloc", "bare", Judge::Clean);
        for seed in 0..10 {
            row.record(seed, &Outcome::Pass, "");
        }
        assert!(row.judged() && row.passed());
        assert_eq!(row.verdict(), "PASS");
        row.record(10, &Outcome::Inconclusive("timeout".into()), "");
        assert!(!row.passed());
        assert_eq!(row.verdict(), "FAIL");
        row.record(11, &found(&["second-owner"]), "");
        assert_eq!((row.runs, row.failures, row.inconclusive), (12, 2, 1));
        assert_eq!(row.failing_seeds, [10, 11]);
        assert_eq!(row.inconclusive_reasons["timeout"], 1);
        assert_eq!(row.detections["second-owner"], 1);
        assert_eq!(row.detection_rate().value, 2.0 / 12.0);
    }

    #[test]
    fn inconclusive_control_runs_count_as_misses() {
        let mut row = control("held");
        for seed in 0..95 {
            row.record(seed, &found(&["use-after-free"]), "");
        }
        for seed in 95..99 {
            row.record(seed, &Outcome::Pass, "");
        }
        row.record(99, &found(&["leak"]), "keepalloc-fault: leak");
        assert_eq!(
            (
                row.runs,
                row.caught,
                row.missed,
                row.inconclusive,
                row.failures
            ),
            (100, 95, 4, 1, 5)
        );
        assert!(row.passed(), "95 of 100 is enough");
        assert_eq!(row.inconclusive_reasons[OUTSIDE_SIGNATURE], 1);
        assert_eq!(row.missed_seeds, [95, 96, 97, 98]);
        assert_eq!(row.inconclusive_seeds, [99]);
        assert_eq!(
            row.notes,
            ["seed 99: outside-signature: keepalloc-fault: leak"]
        );

        let mut short = control("held");
        for seed in 0..94 {
            short.record(seed, &found(&["second-owner"]), "");
        }
        for seed in 94..100 {
            short.record(seed, &Outcome::Inconclusive("timeout".into()), "");
        }
        assert!(!short.passed(), "94 caught + 6 inconclusive is 94%");
        assert_eq!(short.verdict(), "MISSED");
    }

    #[test]
    fn controls_are_judged_with_the_window_held_and_mutants_in_every_window() {
        let mut bare = control("bare");
        bare.record(0, &Outcome::Pass, "");
        assert!(!bare.judged());
        assert_eq!(bare.verdict(), "info");
        let mut keep = Row::new("cold-start", "keepalloc", "bare", Judge::Clean);
        keep.record(0, &Outcome::Pass, "");
        assert!(all_passed(&[bare.clone(), keep.clone()]));
        let mut held = control("held");
        held.record(0, &Outcome::Pass, "");
        assert!(!all_passed(&[bare, keep.clone(), held]));

        let mut mutant = Row::new(
            "retry-after-capture",
            "keepalloc",
            "bare",
            Judge::Catch {
                signature: vec!["owner-rebuilt".into()],
                every_window: true,
            },
        );
        mutant.record(0, &Outcome::Pass, "");
        assert!(mutant.judged() && !mutant.passed());
        assert!(!all_passed(&[keep, mutant]));
    }

    #[test]
    fn nothing_run_proves_nothing() {
        assert!(!all_passed(&[]));
        assert!(!Row::new("s", "keepalloc", "held", Judge::Clean).passed());
    }
}
