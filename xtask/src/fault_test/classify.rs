//! How one run ended, read strictly: a clean pass, findings, or nothing that can be
//! concluded.
//!
//! The harness's contract is one `RESULT key=value ...` line on stdout and an exit with
//! the code that line names. Anything else (a timeout, a death by signal before the line,
//! an exit without it, two lines, a line for another run or one that omits any of the keys
//! saying which run it is about, a status that does not match its exit code) proves nothing
//! about the provider and is [`Outcome::Inconclusive`], with a short reason. A sanitizer's
//! report is a finding even without a result line (the sanitizer ends the process itself),
//! named `asan:KIND`: it fails a keepalloc row, but it is never a control's signature (see
//! [`super::verdict::Judge::judge`]).

use std::collections::BTreeMap;

use crate::process::{RunEnd, signal_name};

/// Exit code AddressSanitizer is told to use (`ASAN_OPTIONS=exitcode=`).
pub const ASAN_EXIT: i32 = 30;

/// Prefix of a detection kind reported by AddressSanitizer (`asan:heap-use-after-free`).
pub const ASAN_PREFIX: &str = "asan:";

/// How one run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `status=pass`, exit 0, `detections=none`.
    Pass,
    /// The run reported these finding kinds (never empty).
    Found(Vec<String>),
    /// Nothing can be concluded from this run; the reason, short enough to be counted.
    Inconclusive(String),
}

/// The run that was asked for, to check that the result line is about it.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Variant name.
    pub variant: &'a str,
    /// Seed.
    pub seed: u64,
    /// Threads.
    pub threads: usize,
    /// Window name.
    pub window: &'a str,
}

/// Classifies one run. `exit_name` names the harness's exit codes (from `--list`).
pub fn classify<'n>(
    end: &RunEnd,
    expected: &Expected<'_>,
    exit_name: impl Fn(i32) -> Option<&'n str>,
) -> Outcome {
    if end.timed_out {
        return inconclusive("timeout");
    }
    if let Some(kind) = asan_kind(end) {
        return Outcome::Found(vec![format!("{ASAN_PREFIX}{kind}")]);
    }
    let lines: Vec<&str> = end
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .collect();
    let result = match lines[..] {
        [] => {
            return inconclusive(&match (end.signal, end.code) {
                (Some(s), _) => format!("signal:{}", signal_name(s)),
                (None, Some(c)) => match exit_name(c) {
                    Some(name) => format!("no-result:exit-{c}:{name}"),
                    None => format!("no-result:exit-{c}"),
                },
                (None, None) => "no-result".to_string(),
            });
        }
        [line] => parse_result(line),
        _ => return inconclusive("several-result-lines"),
    };
    let (Some(status), Some(exit), Some(detections)) = (
        result.get("status"),
        result.get("exit").and_then(|e| e.parse::<i32>().ok()),
        result.get("detections"),
    ) else {
        return inconclusive("malformed-result");
    };
    let asked = [
        ("scenario", expected.scenario.to_string()),
        ("variant", expected.variant.to_string()),
        ("seed", expected.seed.to_string()),
        ("threads", expected.threads.to_string()),
        ("window", expected.window.to_string()),
    ];
    // Every identity key must be there and equal: a line that omits one could be about
    // another run as well as this one.
    for (key, want) in &asked {
        match result.get(key) {
            None => return inconclusive(&format!("result-missing:{key}")),
            Some(got) if got != want => return inconclusive(&format!("result-mismatch:{key}")),
            Some(_) => {}
        }
    }
    let kinds: Vec<String> = if *detections == "none" {
        Vec::new()
    } else {
        detections.split(',').map(str::to_string).collect()
    };
    if let Some(s) = end.signal {
        // Killed after the line was printed: the findings of a `fail` line stand (the run
        // had judged itself before it died), and nothing else does: a clean line, or an
        // `error` line whose process then crashed (race threads may still be touching freed
        // owners while it exits), says nothing about the provider.
        return if *status == "fail" && !kinds.is_empty() {
            Outcome::Found(kinds)
        } else if *status == "fail" || *status == "pass" {
            inconclusive(&format!("signal:{}", signal_name(s)))
        } else {
            inconclusive(&format!("signal-after-{status}:{}", signal_name(s)))
        };
    }
    if end.code != Some(exit) {
        return inconclusive("exit-mismatch");
    }
    match *status {
        "pass" if exit == 0 && kinds.is_empty() => Outcome::Pass,
        "pass" => inconclusive("inconsistent-pass"),
        "fail" if !kinds.is_empty() => Outcome::Found(kinds),
        "fail" => inconclusive("fail-without-detection"),
        // error, not-built, not-applicable, or a status this xtask does not know.
        other => inconclusive(exit_name(exit).unwrap_or(other)),
    }
}

fn inconclusive(reason: &str) -> Outcome {
    Outcome::Inconclusive(reason.to_string())
}

/// The `key=value` pairs of a result line.
fn parse_result(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

/// AddressSanitizer's name for what it found (`heap-use-after-free`), when it reported.
fn asan_kind(end: &RunEnd) -> Option<String> {
    let reported = end.code == Some(ASAN_EXIT) || end.stderr.contains("ERROR: AddressSanitizer");
    if !reported {
        return None;
    }
    // `SUMMARY: AddressSanitizer: heap-use-after-free file:line in f` names the kind as
    // ASan counts it; the ERROR line says `attempting double-free on ...` for some kinds.
    let summary = end.stderr.lines().find_map(|l| {
        l.split("SUMMARY: AddressSanitizer: ")
            .nth(1)?
            .split_whitespace()
            .next()
    });
    let error = || {
        end.stderr.lines().find_map(|l| {
            let mut words = l
                .split("ERROR: AddressSanitizer: ")
                .nth(1)?
                .split_whitespace();
            match words.next()? {
                "attempting" => words.next(),
                w => Some(w),
            }
        })
    };
    Some(summary.or_else(error).unwrap_or("error").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASKED: Expected<'static> = Expected {
        scenario: "cold-start",
        variant: "racy",
        seed: 42,
        threads: 32,
        window: "held",
    };

    fn names(code: i32) -> Option<&'static str> {
        match code {
            0 => Some("pass"),
            1 => Some("harness-error"),
            2 => Some("usage"),
            3 => Some("not-built"),
            4 => Some("not-applicable"),
            10 => Some("use-after-free"),
            _ => None,
        }
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> RunEnd {
        RunEnd {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..RunEnd::default()
        }
    }

    fn result(rest: &str) -> String {
        format!("RESULT scenario=cold-start variant=racy seed=42 threads=32 window=held {rest}\n")
    }

    fn classify_end(end: &RunEnd) -> Outcome {
        classify(end, &ASKED, names)
    }

    fn inconclusive(reason: &str) -> Outcome {
        Outcome::Inconclusive(reason.into())
    }

    #[test]
    fn a_clean_result_line_is_a_pass() {
        let end = exited(0, &result("status=pass exit=0 detections=none"), "");
        assert_eq!(classify_end(&end), Outcome::Pass);
    }

    #[test]
    fn detections_are_findings() {
        let end = exited(
            10,
            &result("status=fail exit=10 detections=second-owner,use-after-free"),
            "keepalloc-fault: use-after-free ...\n",
        );
        assert_eq!(
            classify_end(&end),
            Outcome::Found(vec!["second-owner".into(), "use-after-free".into()])
        );
    }

    #[test]
    fn harness_errors_are_inconclusive_with_the_exit_codes_name() {
        for (code, status, reason) in [
            (1, "error", "harness-error"),
            (2, "error", "usage"),
            (3, "not-built", "not-built"),
            (4, "not-applicable", "not-applicable"),
        ] {
            let end = exited(
                code,
                &result(&format!("status={status} exit={code} detections=none")),
                "",
            );
            assert_eq!(classify_end(&end), inconclusive(reason));
        }
    }

    #[test]
    fn no_result_line_is_inconclusive() {
        assert_eq!(
            classify_end(&exited(0, "", "")),
            inconclusive("no-result:exit-0:pass")
        );
        assert_eq!(
            classify_end(&exited(10, "noise\n", "")),
            inconclusive("no-result:exit-10:use-after-free")
        );
        assert_eq!(
            classify_end(&exited(77, "", "")),
            inconclusive("no-result:exit-77")
        );
        let segv = RunEnd {
            signal: Some(11),
            ..RunEnd::default()
        };
        assert_eq!(classify_end(&segv), inconclusive("signal:SIGSEGV"));
        let hung = RunEnd {
            timed_out: true,
            signal: Some(9),
            stdout: result("status=pass exit=0 detections=none"),
            ..RunEnd::default()
        };
        assert_eq!(classify_end(&hung), inconclusive("timeout"));
    }

    #[test]
    fn a_result_that_contradicts_itself_or_the_run_is_inconclusive() {
        let cases = [
            (3, "status=pass exit=0 detections=none", "exit-mismatch"),
            (0, "status=pass exit=0 detections=leak", "inconsistent-pass"),
            (
                21,
                "status=fail exit=21 detections=none",
                "fail-without-detection",
            ),
            (0, "status=pass detections=none", "malformed-result"),
        ];
        for (code, rest, reason) in cases {
            assert_eq!(
                classify_end(&exited(code, &result(rest), "")),
                inconclusive(reason)
            );
        }
        let other_seed = exited(
            0,
            "RESULT scenario=cold-start variant=racy seed=43 threads=32 window=held \
             status=pass exit=0 detections=none\n",
            "",
        );
        assert_eq!(
            classify_end(&other_seed),
            inconclusive("result-mismatch:seed")
        );
        let twice = exited(
            0,
            &(result("status=pass exit=0 detections=none")
                + &result("status=pass exit=0 detections=none")),
            "",
        );
        assert_eq!(classify_end(&twice), inconclusive("several-result-lines"));
    }

    #[test]
    fn a_result_line_missing_an_identity_key_is_inconclusive() {
        // A line that does not say which run it is about could be another run's: each of the
        // identity keys must be there (and equal, see above), even on a clean pass.
        for (key, line) in [
            (
                "seed",
                "RESULT scenario=cold-start variant=racy threads=32 window=held \
                 status=pass exit=0 detections=none\n",
            ),
            (
                "scenario",
                "RESULT variant=racy seed=42 threads=32 window=held \
                 status=pass exit=0 detections=none\n",
            ),
            (
                "window",
                "RESULT scenario=cold-start variant=racy seed=42 threads=32 \
                 status=fail exit=10 detections=use-after-free\n",
            ),
        ] {
            let code = if line.contains("exit=10") { 10 } else { 0 };
            assert_eq!(
                classify_end(&exited(code, line, "")),
                inconclusive(&format!("result-missing:{key}")),
                "{line}"
            );
        }
    }

    #[test]
    fn a_signal_after_the_result_line_keeps_its_findings() {
        let end = RunEnd {
            signal: Some(6),
            stdout: result("status=fail exit=10 detections=use-after-free"),
            ..RunEnd::default()
        };
        assert_eq!(
            classify_end(&end),
            Outcome::Found(vec!["use-after-free".into()])
        );
        let clean = RunEnd {
            signal: Some(6),
            stdout: result("status=pass exit=0 detections=none"),
            ..RunEnd::default()
        };
        assert_eq!(classify_end(&clean), inconclusive("signal:SIGABRT"));
        // The harness gave up (status=error) and the process then crashed: its detections,
        // even ones in a signature, are no catch.
        let error = RunEnd {
            signal: Some(11),
            stdout: result("status=error exit=1 detections=use-after-free"),
            ..RunEnd::default()
        };
        assert_eq!(
            classify_end(&error),
            inconclusive("signal-after-error:SIGSEGV")
        );
    }

    #[test]
    fn address_sanitizer_reports_are_findings() {
        let uaf = exited(
            ASAN_EXIT,
            "",
            "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020\n\
             SUMMARY: AddressSanitizer: heap-use-after-free src/x.rs:3 in f\n",
        );
        assert_eq!(
            classify_end(&uaf),
            Outcome::Found(vec!["asan:heap-use-after-free".into()])
        );
        let double = exited(
            ASAN_EXIT,
            "",
            "==1==ERROR: AddressSanitizer: attempting double-free on 0x6020 in thread T0\n",
        );
        assert_eq!(
            classify_end(&double),
            Outcome::Found(vec!["asan:double-free".into()])
        );
    }
}
