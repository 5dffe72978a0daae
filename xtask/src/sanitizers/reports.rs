//! ThreadSanitizer's reports on stderr, condensed ([`Report`]) and named by their signature
//! ([`Signature`]): which race a control or a pool mutant must show.

use super::pool::{POOL_SOURCE, POOL_TEST};

/// The marker of a ThreadSanitizer report on stderr.
pub(super) const TSAN_WARNING: &str = "WARNING: ThreadSanitizer: ";

/// One ThreadSanitizer report, condensed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Report {
    /// "data race", "thread leak", "heap-use-after-free", ...
    pub(super) kind: String,
    /// Each access: its header ("Atomic write of size 8 at 0x.. by thread T3") and its first
    /// frame in the workspace ("fault-inject/src/controls/racy.rs:73 (acquire)").
    pub(super) accesses: Vec<(String, Option<String>)>,
    /// "heap block", "global", ... (what the `Location is` line says), if any.
    pub(super) location: Option<String>,
}

/// The negative controls' own code: a report with an access there is the `racy` control's
/// signature (its atomic store of the shared table racing with the library's copy, its owner
/// code against the reads of a freed owner). A report elsewhere is no catch.
pub(super) const CONTROL_CODE: &str = "fault-inject/src/controls/";

impl Report {
    /// One of the accesses is in the controls' own code ([`CONTROL_CODE`]).
    pub(super) fn in_control(&self) -> bool {
        self.accesses.iter().any(|(_, frame)| {
            frame
                .as_deref()
                .is_some_and(|f| f.starts_with(CONTROL_CODE))
        })
    }

    /// What kind of report this is, independent of addresses and threads: the kind, the
    /// two access kinds (sorted) and the kind of memory, e.g. `data race: atomic write +
    /// read` or `data race: read + write, heap block`.
    pub(super) fn label(&self) -> String {
        let mut kinds: Vec<String> = self
            .accesses
            .iter()
            .map(|(header, _)| {
                let what = header.split(" of size").next().unwrap_or(header).trim();
                what.strip_prefix("Previous ")
                    .unwrap_or(what)
                    .to_ascii_lowercase()
            })
            .collect();
        kinds.sort();
        let mut label = self.kind.clone();
        if !kinds.is_empty() {
            label = format!("{label}: {}", kinds.join(" + "));
        }
        if let Some(location) = &self.location {
            label = format!("{label}, {location}");
        }
        label
    }
}

/// The ThreadSanitizer reports in `stderr`; frames are shown relative to `root` and only
/// the first one inside it is kept per access.
pub(super) fn parse_reports(stderr: &str, root: &str) -> Vec<Report> {
    let mut reports: Vec<Report> = Vec::new();
    let mut want_frame = false;
    for line in stderr.lines() {
        if let Some(rest) = line.split(TSAN_WARNING).nth(1) {
            reports.push(Report {
                kind: rest.split(" (").next().unwrap_or(rest).trim().to_string(),
                accesses: Vec::new(),
                location: None,
            });
            want_frame = false;
            continue;
        }
        let Some(report) = reports.last_mut() else {
            continue;
        };
        if line.starts_with("SUMMARY:") || line.starts_with("==================") {
            want_frame = false;
            continue;
        }
        let trimmed = line.trim();
        if let Some(location) = trimmed.strip_prefix("Location is ") {
            if report.location.is_none() {
                let what = location.split(" of size").next().unwrap_or(location);
                let what = what.split(" '").next().unwrap_or(what);
                report.location = Some(what.trim().to_string());
            }
            want_frame = false;
        } else if line.starts_with("  ")
            && !line.starts_with("   ")
            && trimmed.contains(" of size ")
            && trimmed.contains(" by ")
        {
            let header = trimmed.trim_end_matches(':');
            report.accesses.push((header.to_string(), None));
            want_frame = true;
        } else if want_frame && trimmed.starts_with('#') {
            if let Some(frame) = workspace_frame(trimmed, root)
                && let Some(access) = report.accesses.last_mut()
            {
                access.1 = Some(frame);
                want_frame = false;
            }
        } else if !trimmed.starts_with('#') {
            want_frame = false;
        }
    }
    reports
}

/// `path:line (function)` of a stack frame line (`#3 func /root/path.rs:12:5 (bin+0x..)`)
/// when its file is under `root`, the path shown relative to it.
pub(super) fn workspace_frame(frame: &str, root: &str) -> Option<String> {
    let at = frame.find(root)?;
    let location = frame[at + root.len()..]
        .trim_start_matches('/')
        .split_whitespace()
        .next()?;
    // path:line:column -> path:line
    let location = match location.rsplit_once(':') {
        Some((head, col)) if col.chars().all(|c| c.is_ascii_digit()) && head.contains(':') => head,
        _ => location,
    };
    let function = frame[..at]
        .trim()
        .split_once(' ')
        .map_or("", |(_, f)| f.trim());
    // The last path segment outside generic arguments: `<A as B>::acquire` -> `acquire`.
    let mut depth = 0usize;
    let mut plain = String::new();
    for c in function.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let name = plain.rsplit("::").find(|s| !s.is_empty()).unwrap_or("");
    Some(format!("{location} ({name})"))
}

/// What a report must show to count as the catch of one broken variant: the signature of
/// its own bug, not any report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Signature {
    /// The harness's `racy` control: an access in the controls' own code
    /// ([`Report::in_control`]).
    RacyControl,
    /// The kernels pool's `done_relaxed` mutant: a data race between a worker's plain store
    /// in a task (`task_writes`) and the caller's read of it after `run` returned
    /// (`caller_reads`), both in [`POOL_TEST`]: the tasks' results not published to the
    /// caller.
    PoolResultsUnpublished,
    /// The kernels pool's `job_before_claim` mutant: a data race between the caller's write
    /// of the job slot in `run_ranges_with` and a worker's read of it in `worker`, both in the pool
    /// (`kernels/src/pool/`): a worker that read the slot before claiming, and then
    /// claimed nothing, is not ordered before the caller's next job.
    PoolSlotReadBeforeClaim,
}

impl Signature {
    pub(super) fn matches(self, report: &Report) -> bool {
        match self {
            Signature::RacyControl => report.in_control(),
            Signature::PoolResultsUnpublished => {
                let has = |name: &str| {
                    report.accesses.iter().any(|(_, frame)| {
                        frame.as_deref().is_some_and(|f| {
                            f.starts_with(POOL_TEST) && f.ends_with(&format!(" ({name})"))
                        })
                    })
                };
                report.kind == "data race" && has("task_writes") && has("caller_reads")
            }
            Signature::PoolSlotReadBeforeClaim => {
                // A plain access of that kind ("Write", "Previous read"; the header goes on
                // "of size 8 at ... by thread T1").
                let has = |access: &str, name: &str| {
                    report.accesses.iter().any(|(header, frame)| {
                        let kind = header.split(" of size").next().unwrap_or("");
                        let kind = kind.to_ascii_lowercase();
                        kind.ends_with(access)
                            && !kind.contains("atomic")
                            && frame.as_deref().is_some_and(|f| {
                                f.starts_with(POOL_SOURCE) && f.ends_with(&format!(" ({name})"))
                            })
                    })
                };
                report.kind == "data race"
                    && has("write", "run_ranges_with")
                    && has("read", "worker")
            }
        }
    }

    /// For the summary line: "the racy control reported in its own code".
    pub(super) fn describe(self) -> &'static str {
        match self {
            Signature::RacyControl => "the racy control reported in its own code",
            Signature::PoolResultsUnpublished => {
                "the pool's done_relaxed mutant reported as task_writes racing with caller_reads"
            }
            Signature::PoolSlotReadBeforeClaim => {
                "the pool's job_before_claim mutant reported as run_ranges_with's write of the \
                 job slot racing with worker's read"
            }
        }
    }
}
