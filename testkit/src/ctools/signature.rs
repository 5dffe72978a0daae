//! How a negative control must make a test fail: the signature of its bug, and the shape of
//! a control (a broken build and the tests that must catch it).

use super::outcome::{CHECK_FAILED, Outcome, signal_name};

/// How a negative control must make a test fail: the signature of its bug.
#[derive(Clone, Copy, Debug)]
pub enum Signature {
    /// Exit status 1 from the `CHECK` whose condition reads exactly this: the first
    /// `CHECK failed: <condition>` line on stderr (for `CHECK_EQ_U64(a, b)` the condition is
    /// `a == b`, followed there by the two values in parentheses).
    Check(&'static str),
    /// Killed by `signal` in `step` (the last `step: <step>` line on stderr, see `STEP` in
    /// `check.h`), with no `CHECK` failed before it.
    Signal {
        /// The signal number, e.g. [`SIGSEGV`](super::SIGSEGV).
        signal: i32,
        /// The name given to `STEP` in the test.
        step: &'static str,
    },
}

impl Signature {
    /// Whether `outcome` is this failure.
    pub fn matches(&self, outcome: &Outcome) -> bool {
        if outcome.passed || outcome.timed_out {
            return false;
        }
        match *self {
            Signature::Check(condition) => {
                outcome.code == Some(1)
                    && outcome.failed_check().is_some_and(|failed| {
                        failed == condition
                            || failed
                                .strip_prefix(condition)
                                .is_some_and(|rest| rest.starts_with(" ("))
                    })
            }
            Signature::Signal { signal, step } => {
                outcome.signal == Some(signal)
                    && outcome.failed_check().is_none()
                    && outcome.last_step() == Some(step)
            }
        }
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signature::Check(condition) => write!(f, "`{CHECK_FAILED}{condition}`"),
            Signature::Signal { signal, step } => {
                write!(f, "{} in step `{step}`", signal_name(*signal))
            }
        }
    }
}

/// A test that must catch a control, and how.
#[derive(Clone, Copy, Debug)]
pub struct Catch {
    /// The C test (file stem in `tests/c/`).
    pub test: &'static str,
    /// The failure that is the signature of the control's bug in that test.
    pub by: Signature,
}

/// A negative control: a broken `keepalloc.h` implementation and the tests that must catch it.
#[derive(Clone, Copy, Debug)]
pub struct Control {
    /// Short name.
    pub name: &'static str,
    /// The file in `tests/c/controls/` it is a mode of.
    pub source: &'static str,
    /// The `-D` that selects it in [`source`](Self::source).
    pub define: &'static str,
    /// What it breaks.
    pub breaks: &'static str,
    /// The C tests that must fail against it, each by the signature of its bug.
    pub caught_by: &'static [Catch],
}
