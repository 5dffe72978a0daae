//! Findings of one run, the one-line reports, and the harness's result line and exit codes.
//!
//! A run (one scenario, one variant, one seed, in one process) records [`Finding`]s. Memory
//! violations under [`Policy::Abort`](crate::Policy::Abort) end the run at once through
//! [`fatal`]; the other findings are recorded and the run goes on, so that one run can show
//! several symptoms (an identity mismatch *and* the use-after-free it leads to). [`finish`]
//! prints the result line and exits with the code of the first finding.
//!
//! The result line is one line on stdout, `key=value` pairs separated by spaces:
//!
//! ```text
//! RESULT scenario=cold-start variant=racy seed=42 threads=32 window=held status=fail exit=10 detections=identity-mismatch,use-after-free
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::violation::Violation;

/// The harness's exit codes. A run that dies from a signal is classified by its parent.
pub mod exit {
    /// Every check passed.
    pub const PASS: i32 = 0;
    /// The harness itself failed (an unexpected panic, a setup error).
    pub const HARNESS_ERROR: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// The variant was not compiled in (the negative controls need feature `controls`).
    pub const NOT_BUILT: i32 = 3;
    /// The variant does not apply to the scenario.
    pub const NOT_APPLICABLE: i32 = 4;
    /// The codes of memory violations: the allocator crate's, one definition for both, so
    /// a violation ends a process with the same code inside the harness and outside it.
    pub use keepalloc_scribble::exit::{
        CANARY_DEAD, DOUBLE_FREE, GUARD_OUT_OF_BOUNDS, GUARD_USE_AFTER_FREE, IDENTITY_MISMATCH,
        INVALID_FREE, LAYOUT_MISMATCH, OWNER_REBUILT, RED_ZONE_AFTER, RED_ZONE_BEFORE,
        USE_AFTER_FREE, WRITE_AFTER_FREE,
    };
    /// Any other broken promise (an owner too many, a leak, a wrong error, a poisoned once).
    pub const INVARIANT: i32 = 21;

    /// Every code with its name, as `keepalloc-harness --list` prints them.
    pub const ALL: [(&str, i32); 20] = [
        ("pass", PASS),
        ("harness-error", HARNESS_ERROR),
        ("usage", USAGE),
        ("not-built", NOT_BUILT),
        ("not-applicable", NOT_APPLICABLE),
        ("use-after-free", USE_AFTER_FREE),
        ("canary-dead", CANARY_DEAD),
        ("write-after-free", WRITE_AFTER_FREE),
        ("double-free", DOUBLE_FREE),
        ("invalid-free", INVALID_FREE),
        ("red-zone-before", RED_ZONE_BEFORE),
        ("red-zone-after", RED_ZONE_AFTER),
        ("layout-mismatch", LAYOUT_MISMATCH),
        ("owner-rebuilt", OWNER_REBUILT),
        ("guard-use-after-free", GUARD_USE_AFTER_FREE),
        ("guard-out-of-bounds", GUARD_OUT_OF_BOUNDS),
        ("identity-mismatch", IDENTITY_MISMATCH),
        ("invariant", INVARIANT),
        ("tsan-report", TSAN_REPORT),
        ("asan-report", ASAN_REPORT),
    ];

    /// The exit code ThreadSanitizer runs are told to use (`TSAN_OPTIONS=exitcode=`).
    pub const TSAN_REPORT: i32 = 66;
    /// The exit code AddressSanitizer runs are told to use (`ASAN_OPTIONS=exitcode=`).
    pub const ASAN_REPORT: i32 = 30;
}

/// Something a run found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A memory-safety violation (scribbling allocator or owner canary).
    Violation(Violation),
    /// Two callers got different allocators, or the library's captured context is not the
    /// published owner.
    IdentityMismatch(String),
    /// Another broken promise.
    Invariant {
        /// A short kebab-case name (`owner-count`, `leak`, `oom-not-clean`, ...).
        kind: &'static str,
        /// What was seen.
        detail: String,
    },
}

impl Finding {
    /// A broken promise named `kind`.
    pub fn invariant(kind: &'static str, detail: impl Into<String>) -> Finding {
        Finding::Invariant {
            kind,
            detail: detail.into(),
        }
    }

    /// The kind's short name, as counted in reports (`use-after-free`, `identity-mismatch`,
    /// `owner-count`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::Violation(v) => v.kind.name(),
            Finding::IdentityMismatch(_) => "identity-mismatch",
            Finding::Invariant { kind, .. } => kind,
        }
    }

    /// The exit code a run ending with this finding uses.
    pub fn exit_code(&self) -> i32 {
        match self {
            Finding::Violation(v) => v.kind.exit_code(),
            Finding::IdentityMismatch(_) => exit::IDENTITY_MISMATCH,
            Finding::Invariant { .. } => exit::INVARIANT,
        }
    }
}

impl core::fmt::Display for Finding {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Finding::Violation(v) => write!(f, "{v}"),
            Finding::IdentityMismatch(d) => write!(f, "identity-mismatch: {d}"),
            Finding::Invariant { kind, detail } => write!(f, "{kind}: {detail}"),
        }
    }
}

/// What is being run, printed with every finding so that any failure can be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    /// Scenario name.
    pub scenario: String,
    /// Variant name.
    pub variant: String,
    /// The run's seed.
    pub seed: u64,
    /// Threads used by the racing scenarios.
    pub threads: usize,
    /// How the race windows were treated (`held`, `yield`, `bare`, or `custom` for explicit
    /// `--delay`s).
    pub window: String,
}

impl core::fmt::Display for RunInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "scenario={} variant={} seed={} threads={} window={}",
            self.scenario, self.variant, self.seed, self.threads, self.window
        )
    }
}

static RUN: OnceLock<RunInfo> = OnceLock::new();
static FINDINGS: Mutex<Vec<Finding>> = Mutex::new(Vec::new());
static ENDING: AtomicBool = AtomicBool::new(false);

/// Says what this process runs (once; later calls are ignored).
pub fn set_run(info: RunInfo) {
    let _ = RUN.set(info);
}

/// What this process runs, if [`set_run`] was called.
pub fn run_info() -> Option<&'static RunInfo> {
    RUN.get()
}

fn context() -> String {
    match RUN.get() {
        Some(info) => format!(" [{info}]"),
        None => String::new(),
    }
}

/// Records a finding and prints its one-line report on stderr; the run goes on.
pub fn record(finding: Finding) {
    eprintln!("keepalloc-fault: {finding}{}", context());
    FINDINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(finding);
}

/// The findings recorded so far.
pub fn findings() -> Vec<Finding> {
    FINDINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// What [`fatal`] prints before the finding, registered by a layer above this one (the
/// controls' owner heaps, which remember a block's stacks) so this module imports none of it.
static BEFORE_FATAL: OnceLock<fn(&Finding)> = OnceLock::new();

/// Registers what [`fatal`] prints before a finding (the first registration wins).
pub fn print_before_fatal(print: fn(&Finding)) {
    let _ = BEFORE_FATAL.set(print);
}

/// Records `finding` and ends the run now: result line, exit with the finding's code.
///
/// If another thread is already ending the run, this thread parks for good (the process is
/// about to exit), so exactly one result line is printed.
pub fn fatal(finding: Finding) -> ! {
    if let Some(print) = BEFORE_FATAL.get() {
        print(&finding);
    }
    eprintln!("keepalloc-fault: {finding}{}", context());
    {
        let mut all = FINDINGS.lock().unwrap_or_else(PoisonError::into_inner);
        all.push(finding.clone());
    }
    end(finding.exit_code())
}

/// Ends the run: prints the result line and exits, with code 0 when nothing was found and
/// otherwise the code of the first finding. A violation outranks the other findings.
pub fn finish() -> ! {
    let all = findings();
    let code = all
        .iter()
        .find(|f| matches!(f, Finding::Violation(_)))
        .or(all.first())
        .map_or(exit::PASS, Finding::exit_code);
    end(code)
}

/// Prints the result line with status `status` and exits with `code` (used for "not built"
/// and "not applicable", which are not findings).
pub fn end_with(code: i32) -> ! {
    end(code)
}

/// The result line for the findings so far and exit `code`.
pub fn result_line(code: i32) -> String {
    let all = findings();
    let mut kinds: Vec<&str> = Vec::new();
    for f in &all {
        if !kinds.contains(&f.kind()) {
            kinds.push(f.kind());
        }
    }
    let status = match code {
        exit::PASS => "pass",
        exit::NOT_BUILT => "not-built",
        exit::NOT_APPLICABLE => "not-applicable",
        exit::HARNESS_ERROR | exit::USAGE => "error",
        _ => "fail",
    };
    let info = RUN.get().map_or_else(String::new, |i| format!("{i} "));
    let detections = if kinds.is_empty() {
        "none".to_string()
    } else {
        kinds.join(",")
    };
    format!("RESULT {info}status={status} exit={code} detections={detections}")
}

fn end(code: i32) -> ! {
    if ENDING.swap(true, Ordering::SeqCst) {
        // Another thread is printing the result and exiting; never return into code whose
        // memory has been found broken.
        loop {
            std::thread::park();
        }
    }
    let line = result_line(code);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    drop(out);
    std::process::exit(code)
}
