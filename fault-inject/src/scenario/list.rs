//! The scenarios of the issue as data: names, summaries, and the init and build plans each
//! runs under.

use crate::init_plan::{CapturePoint, FailMode, InitPlan};
#[cfg(doc)]
use crate::witness;

/// A scenario of the issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// The upstream regression: many sessions acquire at once from a cold start.
    ColdStart,
    /// The library captures the table, then init fails `RETRY_FAILURES` times.
    RetryAfterCapture,
    /// Many threads acquire while init fails at random (the first attempt after capture).
    RetryUnderRace,
    /// The first attempt panics after capture; the next succeeds; nothing is poisoned.
    PanicInInit,
    /// The backend's constructor fails the first [`BUILD_FAILURES`] times under a race.
    OwnerBuildFailure,
    /// Each allocation site of the library's path fails in turn.
    OutOfMemory,
}

impl Scenario {
    /// Every scenario, in the order of the issue.
    pub const ALL: [Scenario; 6] = [
        Scenario::ColdStart,
        Scenario::RetryAfterCapture,
        Scenario::RetryUnderRace,
        Scenario::PanicInInit,
        Scenario::OwnerBuildFailure,
        Scenario::OutOfMemory,
    ];

    /// The scenario's name (`cold-start`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::ColdStart => "cold-start",
            Scenario::RetryAfterCapture => "retry-after-capture",
            Scenario::RetryUnderRace => "retry-under-race",
            Scenario::PanicInInit => "panic-in-init",
            Scenario::OwnerBuildFailure => "owner-build-failure",
            Scenario::OutOfMemory => "out-of-memory",
        }
    }

    /// One line on what the scenario does.
    pub const fn summary(self) -> &'static str {
        match self {
            Scenario::ColdStart => {
                "threads acquire together from a cold start; all must get one owner, which \
                 the library captured and keeps using"
            }
            Scenario::RetryAfterCapture => {
                "the library captures the table, then init fails 3 times; the retries \
                 publish the captured owner"
            }
            Scenario::RetryUnderRace => {
                "threads race while init fails at random (the first attempt after capture), \
                 by error or panic; each retries"
            }
            Scenario::PanicInInit => {
                "the first attempt panics after capture; then threads race and all succeed \
                 with that owner"
            }
            Scenario::OwnerBuildFailure => {
                "the owner's constructor fails the first 3 times under the thread race; \
                 exactly one owner, built once"
            }
            Scenario::OutOfMemory => {
                "every allocation site of the library's path fails in turn, then budgets and \
                 seeded random failures; clean errors, nothing leaked, retries work"
            }
        }
    }

    /// The scenario with this name.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The init plan the scenario runs under (seeded with `seed`).
    pub fn init_plan(self, seed: u64) -> InitPlan {
        match self {
            Scenario::ColdStart | Scenario::OutOfMemory | Scenario::OwnerBuildFailure => {
                InitPlan::never()
            }
            Scenario::RetryAfterCapture => InitPlan::new(
                RETRY_FAILURES,
                0.0,
                CapturePoint::After,
                FailMode::Error,
                seed,
            ),
            // The first attempt always fails after the library captured the table (the case
            // a retry must survive); every later one fails with probability 1/2, before or
            // after capture, by error or by panic.
            Scenario::RetryUnderRace => {
                InitPlan::new(1, 0.5, CapturePoint::After, FailMode::Error, seed)
                    .then_random(CapturePoint::Either, FailMode::Either)
            }
            Scenario::PanicInInit => {
                InitPlan::new(1, 0.0, CapturePoint::After, FailMode::Panic, seed)
            }
        }
    }

    /// The owner constructions that fail (process-wide, counted by
    /// [`witness`]) before one succeeds.
    pub const fn build_failures(self) -> u64 {
        match self {
            Scenario::OwnerBuildFailure => BUILD_FAILURES,
            _ => 0,
        }
    }
}

/// How many attempts fail in `retry-after-capture`.
pub const RETRY_FAILURES: u64 = 3;

/// How many owner constructions fail in `owner-build-failure`.
pub const BUILD_FAILURES: u64 = 3;

/// Attempts one thread makes in `retry-under-race` before it gives up.
pub const MAX_ATTEMPTS: usize = 1000;
