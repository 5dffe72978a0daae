//! `Scribble<A>`: `keepalloc-scribble`'s debugging allocator with the harness's hooks.
//!
//! The allocator lives in its own crate (`keepalloc-scribble`), which keepalloc's C library
//! also carries. Here it is the same type with [`HarnessHooks`]:
//!
//! * a fatal violation prints its full report (the block's allocation and free stacks, the
//!   faulting access's stack) when there is one, then ends the run through
//!   [`report::fatal`], which prints the `RESULT` line and exits with the kind's code, as
//!   before;
//! * at first use, every harness allocator applies the settings of the environment variable
//!   `KEEPALLOC_SCRIBBLE` (the C library's language, e.g. `guard:1/64,stacks:both`) over its
//!   own configuration, so the fault campaign can run in guard-page mode or with stacks; a bad
//!   setting ends the process with [`exit::USAGE`](crate::report::exit::USAGE) and a message.

use core::sync::atomic::{AtomicBool, Ordering};

use keepalloc_scribble::{ScribbleHooks, ViolationReport};

pub use keepalloc_scribble::{MIN_RED_ZONE, ScribbleConfig, ScribbleStats};

use crate::report::{self, Finding};

/// The scribbling allocator of the fault harness: `keepalloc-scribble`'s, ending a run with
/// the harness's result line.
pub type Scribble<A> = keepalloc_scribble::Scribble<A, HarnessHooks>;

/// The harness's [`ScribbleHooks`]: see the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct HarnessHooks;

/// Set once a detailed report was printed, so that the owner heaps' history is not printed
/// again after it.
static DETAIL_PRINTED: AtomicBool = AtomicBool::new(false);

impl ScribbleHooks for HarnessHooks {
    fn fatal(report: &ViolationReport) -> ! {
        if report.has_detail() {
            DETAIL_PRINTED.store(true, Ordering::SeqCst);
            keepalloc_scribble::print_report(report);
        }
        report::fatal(Finding::Violation(report.violation))
    }

    fn configure(config: ScribbleConfig) -> ScribbleConfig {
        let Ok(spec) = std::env::var(keepalloc_scribble::ENV_VAR) else {
            return config;
        };
        match config.apply_spec(&spec) {
            Ok(config) => config,
            Err(e) => {
                eprintln!(
                    "keepalloc-fault: {}={spec:?}: {e}",
                    keepalloc_scribble::ENV_VAR
                );
                std::process::exit(report::exit::USAGE)
            }
        }
    }
}

/// Whether a fatal violation's detailed report (with the block's stacks) was printed already.
#[cfg(feature = "controls")]
pub fn detail_printed() -> bool {
    DETAIL_PRINTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use crate::report::exit;

    /// The harness's own codes and the allocator crate's violation codes it re-exports never
    /// collide.
    #[test]
    fn exit_codes_are_distinct() {
        let mut codes: Vec<i32> = exit::ALL.iter().map(|&(_, c)| c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), exit::ALL.len(), "exit codes are distinct");
    }
}
