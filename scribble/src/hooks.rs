//! How a fatal violation ends the process, and how the configuration may be adjusted at
//! first use: the seam through which keepalloc's fault harness keeps its result line and its
//! environment override.

use crate::config::ScribbleConfig;
use crate::report::ViolationReport;

/// What a [`Scribble`](crate::Scribble) does beyond its own checks. Both functions are
/// associated (no value), so a `Scribble` stays `const`-constructible and the fault handler
/// can call [`fatal`](Self::fatal) through a plain function pointer.
pub trait ScribbleHooks: 'static {
    /// Ends the process for `report` (a violation under [`Policy::Abort`](crate::Policy), or
    /// a guard-page fault, in which case it runs inside the signal handler). It must not
    /// return, and should not unwind.
    fn fatal(report: &ViolationReport) -> !;

    /// The configuration in effect for an allocator created with `config`, decided once, at
    /// its first use. The default keeps it.
    fn configure(config: ScribbleConfig) -> ScribbleConfig {
        config
    }
}

/// The default hooks: the full report (violation, then the faulting access's, the free's and
/// the allocation's stacks, symbolized) on stderr, then `_exit` with the kind's code
/// ([`ViolationKind::exit_code`](crate::ViolationKind::exit_code)). `_exit`, not `exit`: no
/// destructor or `atexit` handler runs in a process whose memory is known to be misused.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultHooks;

impl ScribbleHooks for DefaultHooks {
    fn fatal(report: &ViolationReport) -> ! {
        print_report(report);
        // SAFETY: _exit has no preconditions and does not return.
        unsafe { libc::_exit(report.violation.kind.exit_code()) }
    }
}

/// Writes `report` to stderr in one write (as far as stderr allows), so that reports of
/// several processes or threads do not interleave line by line.
pub fn print_report(report: &ViolationReport) {
    use std::io::Write;
    let text = report.to_string();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}
