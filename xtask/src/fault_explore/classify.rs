//! What one site's fresh process says: the child's report line, its crash block, and the
//! rules that turn them into an outcome.

use serde::{Deserialize, Serialize};

use crate::process::{RunEnd, signal_name};

/// A site as a child reported it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Site {
    pub site: String,
    pub hits: u64,
    pub failed: u64,
    #[serde(default)]
    pub stack: Vec<String>,
}

/// Live blocks of one site after the target tore down.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Live {
    pub site: String,
    pub blocks: u64,
    pub bytes: u64,
    #[serde(default)]
    pub stack: Vec<String>,
}

/// The child's `KEEPALLOC_EXPLORE {json}` line.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Report {
    pub error: Option<String>,
    pub output_ok: Option<bool>,
    pub failed: u64,
    pub sites: Vec<Site>,
    pub live: Vec<Live>,
}

/// The report line's prefix.
pub const LINE: &str = "KEEPALLOC_EXPLORE ";
/// The crash block's marker (see `keepalloc_fault_inject::explore::crash`).
pub const CRASH: &str = "KEEPALLOC_EXPLORE_CRASH";

/// Reads the report line from a child's stdout.
pub fn report_of(stdout: &str) -> Result<Report, String> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(LINE))
        .ok_or("no KEEPALLOC_EXPLORE line on stdout")?;
    serde_json::from_str(line).map_err(|e| format!("bad report line: {e}"))
}

/// The faulting stack of a crash block on stderr (empty without one).
pub fn crash_stack(stderr: &str) -> Vec<String> {
    let mut lines = stderr.lines().skip_while(|l| !l.starts_with(CRASH)).skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        if l.starts_with(CRASH) {
            break;
        }
        // "    #3 name at file:line": keep what follows the frame number.
        let l = l.trim_start();
        let frame = l.split_once(' ').map_or(l, |(_, rest)| rest);
        out.push(frame.to_owned());
    }
    out
}

/// How failing one site went.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// The library returned an error and, after it tore down, every block it took is back.
    CleanError { error: String },
    /// Blocks still live after teardown beyond the unfailed run's, with their sites.
    Leak {
        error: Option<String>,
        leaked: Vec<Live>,
    },
    /// A signal ended the process; the faulting stack, keepalloc's frames dropped.
    Crash {
        signal: String,
        #[serde(rename = "faulting_stack")]
        stack: Vec<String>,
    },
    /// Still running at the deadline.
    Hang,
    /// The calls succeeded but an output differs from the unfailed reference.
    WrongOutput,
    /// Every call reported success although an allocation failed.
    Ignored,
    /// The run never reached the site: nothing was failed.
    NotHit,
    /// The child failed in a way that says nothing about the library (inconclusive).
    HarnessError { why: String },
}

impl Outcome {
    /// The outcome's name as printed and in the JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::CleanError { .. } => "clean-error",
            Outcome::Leak { .. } => "leak",
            Outcome::Crash { .. } => "crash",
            Outcome::Hang => "hang",
            Outcome::WrongOutput => "wrong-output",
            Outcome::Ignored => "ignored",
            Outcome::NotHit => "not-hit",
            Outcome::HarnessError { .. } => "harness-error",
        }
    }

    /// A finding: something a library should not do when an allocation fails.
    pub fn is_finding(&self) -> bool {
        matches!(
            self,
            Outcome::Leak { .. }
                | Outcome::Crash { .. }
                | Outcome::Hang
                | Outcome::WrongOutput
                | Outcome::Ignored
        )
    }

    /// The site was failed (whatever followed).
    pub fn failed(&self) -> bool {
        !matches!(self, Outcome::NotHit | Outcome::HarnessError { .. })
    }
}

/// The live blocks of `live` beyond those of `baseline` (the unfailed run's), site by site.
pub fn beyond(live: &[Live], baseline: &[Live]) -> Vec<Live> {
    live.iter()
        .filter_map(|l| {
            let base = baseline.iter().find(|b| b.site == l.site);
            let (blocks, bytes) = base.map_or((0, 0), |b| (b.blocks, b.bytes));
            (l.blocks > blocks).then(|| Live {
                blocks: l.blocks - blocks,
                bytes: l.bytes.saturating_sub(bytes),
                ..l.clone()
            })
        })
        .collect()
}

/// Classifies one failing run of a site.
pub fn classify(end: &RunEnd, baseline: &[Live]) -> Outcome {
    if end.timed_out {
        return Outcome::Hang;
    }
    if let Some(sig) = end.signal {
        return Outcome::Crash {
            signal: signal_name(sig),
            stack: crash_stack(&end.stderr),
        };
    }
    let report = match (end.code, report_of(&end.stdout)) {
        (Some(0), Ok(r)) => r,
        (code, r) => {
            let tail: String = end
                .stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ");
            return Outcome::HarnessError {
                why: format!(
                    "exit {code:?}{}; stderr: {tail}",
                    r.err().map(|e| format!(", {e}")).unwrap_or_default()
                ),
            };
        }
    };
    if report.failed == 0 {
        return Outcome::NotHit;
    }
    let leaked = beyond(&report.live, baseline);
    if !leaked.is_empty() {
        return Outcome::Leak {
            error: report.error,
            leaked,
        };
    }
    match (report.error, report.output_ok) {
        (Some(error), _) => Outcome::CleanError { error },
        (None, Some(false)) => Outcome::WrongOutput,
        (None, _) => Outcome::Ignored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(code: Option<i32>, signal: Option<i32>, stdout: &str, stderr: &str) -> RunEnd {
        RunEnd {
            code,
            signal,
            timed_out: false,
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    fn line(r: &Report) -> String {
        format!("noise\n{LINE}{}\n", serde_json::to_string(r).unwrap())
    }

    fn live(site: &str, blocks: u64) -> Live {
        Live {
            site: site.into(),
            blocks,
            bytes: 64 * blocks,
            stack: vec![],
        }
    }

    #[test]
    fn each_outcome_comes_from_its_own_evidence() {
        let base = vec![live("aa", 1)];
        let ok = |r: Report| classify(&end(Some(0), None, &line(&r), ""), &base);
        let failed = Report {
            failed: 1,
            ..Report::default()
        };
        assert_eq!(
            ok(Report {
                error: Some("oom".into()),
                live: vec![live("aa", 1)],
                ..failed.clone()
            }),
            Outcome::CleanError {
                error: "oom".into()
            }
        );
        let leak = ok(Report {
            error: Some("oom".into()),
            live: vec![live("aa", 1), live("bb", 2)],
            ..failed.clone()
        });
        assert!(matches!(&leak, Outcome::Leak { leaked, .. } if leaked == &vec![live("bb", 2)]));
        assert_eq!(
            ok(Report {
                output_ok: Some(false),
                ..failed.clone()
            }),
            Outcome::WrongOutput
        );
        assert_eq!(
            ok(Report {
                output_ok: Some(true),
                ..failed.clone()
            }),
            Outcome::Ignored
        );
        assert_eq!(ok(Report::default()), Outcome::NotHit);
        let crash = classify(
            &end(
                None,
                Some(11),
                "",
                &format!(
                    "x\n{CRASH} signal 11 (SIGSEGV)\n    #0 f at a.rs:1\n    #1 g\n{CRASH} end\n"
                ),
            ),
            &base,
        );
        assert!(
            matches!(&crash, Outcome::Crash { signal, stack } if signal.contains("SIGSEGV") && stack == &["f at a.rs:1", "g"]),
            "{crash:?}"
        );
        let mut hang = end(None, Some(9), "", "");
        hang.timed_out = true;
        assert_eq!(classify(&hang, &base), Outcome::Hang);
        assert!(matches!(
            classify(&end(Some(2), None, "", "usage"), &base),
            Outcome::HarnessError { .. }
        ));
        assert!(
            !Outcome::NotHit.failed()
                && !Outcome::CleanError {
                    error: String::new()
                }
                .is_finding()
        );
    }
}
