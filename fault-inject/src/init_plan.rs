//! Initialization failure plans, and the planned library init every variant runs.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use keepalloc_kernels::{AllocatorTable, KernelError};
use keepalloc_provider::InitError;

use crate::delay::{Point, delay};
use rand::Rng;

/// Where in the init hook a planned failure strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapturePoint {
    /// Before the library is called: nothing captured.
    Before,
    /// After the library copied the table: it now holds the owner's pointer for good.
    After,
    /// Either, drawn per failure from the plan's generator.
    Either,
}

/// How a planned failure shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// The hook returns an error.
    Error,
    /// The hook panics (with a [`PlannedPanic`] payload).
    Panic,
    /// Either, drawn per failure from the plan's generator.
    Either,
}

/// The payload of a planned panic, so hooks can tell it from a real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedPanic {
    /// The attempt (0-based) that panicked.
    pub attempt: u64,
}

/// Which initialization attempts fail, where and how: the first `first_k` attempts fail,
/// and each later one fails with probability `probability`, from a generator seeded with
/// `seed`.
#[derive(Debug)]
pub struct InitPlan {
    first_k: u64,
    probability: f64,
    point: CapturePoint,
    mode: FailMode,
    random_point: CapturePoint,
    random_mode: FailMode,
    seed: u64,
    attempts: AtomicU64,
    failures: AtomicU64,
}

/// What the plan decided for one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptPlan {
    /// The attempt's index (0-based, in the order attempts asked).
    pub index: u64,
    /// `None` to succeed, or where and how to fail.
    pub failure: Option<(CapturePoint, FailMode)>,
}

impl InitPlan {
    /// Never fails.
    pub const fn never() -> Self {
        Self::new(0, 0.0, CapturePoint::After, FailMode::Error, 0)
    }

    /// The first `first_k` attempts fail, then each later one with probability
    /// `probability`; `point` and `mode` say where and how (`Either` is drawn per failure).
    pub const fn new(
        first_k: u64,
        probability: f64,
        point: CapturePoint,
        mode: FailMode,
        seed: u64,
    ) -> Self {
        InitPlan {
            first_k,
            probability,
            point,
            mode,
            random_point: point,
            random_mode: mode,
            seed,
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// The same plan, but the failures drawn with `probability` (after the first `first_k`)
    /// strike at `point` and show as `mode`.
    pub const fn then_random(mut self, point: CapturePoint, mode: FailMode) -> Self {
        self.random_point = point;
        self.random_mode = mode;
        self
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Attempts decided so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Relaxed)
    }

    /// Attempts planned to fail so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    /// Decides the next attempt. Attempt `i` draws from its own ChaCha8 stream of the seed,
    /// so its fate does not depend on which thread asked first.
    pub fn next_attempt(&self) -> AttemptPlan {
        let index = self.attempts.fetch_add(1, Relaxed);
        crate::witness::count_attempt_here();
        let mut rng = crate::seeds::stream(self.seed, index);
        let (point, mode) = if index < self.first_k {
            (self.point, self.mode)
        } else if rng.random_bool(self.probability.clamp(0.0, 1.0)) {
            (self.random_point, self.random_mode)
        } else {
            return AttemptPlan {
                index,
                failure: None,
            };
        };
        self.failures.fetch_add(1, Relaxed);
        let point = match point {
            CapturePoint::Either if rng.random_bool(0.5) => CapturePoint::Before,
            CapturePoint::Either => CapturePoint::After,
            p => p,
        };
        let mode = match mode {
            FailMode::Either if rng.random_bool(0.5) => FailMode::Panic,
            FailMode::Either => FailMode::Error,
            m => m,
        };
        AttemptPlan {
            index,
            failure: Some((point, mode)),
        }
    }
}

static HOOK_SUCCESSES: AtomicU64 = AtomicU64::new(0);

/// Library initializations that returned success through [`planned_initialize`] with
/// [`Reinit::Strict`] (the provider's hook): the witness of "published once", counted here
/// and not by the provider under test.
pub fn hook_successes() -> u64 {
    HOOK_SUCCESSES.load(Relaxed)
}

static PLAN: OnceLock<InitPlan> = OnceLock::new();
static NEVER: InitPlan = InitPlan::never();

/// Installs this process's init plan (once; returns `false` if one was already set).
pub fn install(plan: InitPlan) -> bool {
    PLAN.set(plan).is_ok()
}

/// This process's init plan (one that never fails if none was installed).
pub fn plan() -> &'static InitPlan {
    PLAN.get().unwrap_or(&NEVER)
}

/// How the library's own answer is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reinit {
    /// `KernelError::AlreadyInitialized` is an error (keepalloc-kernels' contract).
    Strict,
    /// `KernelError::AlreadyInitialized` is success: XNNPACK's `xnn_initialize` silently
    /// keeps the first allocator and returns success, which is what the original provider
    /// (and so the negative controls) ran against.
    LikeXnnpack,
}

/// The library initialization every variant runs as its init hook: asks the installed plan
/// about this attempt, waits at [`Point::BeforeCapture`], fails there if planned, calls
/// [`keepalloc_kernels::initialize`] (which captures the table on its first success), waits
/// at [`Point::AfterCapture`], and fails there if planned.
///
/// A planned panic unwinds with a [`PlannedPanic`] payload.
pub fn planned_initialize(table: &'static AllocatorTable, reinit: Reinit) -> Result<(), InitError> {
    let attempt = plan().next_attempt();
    let fail = |at: CapturePoint, mode: FailMode| -> Result<(), InitError> {
        let seed = plan().seed();
        match mode {
            FailMode::Panic => std::panic::panic_any(PlannedPanic {
                attempt: attempt.index,
            }),
            _ => Err(InitError::new(format!(
                "planned failure of attempt {} {} capture (seed {seed})",
                attempt.index,
                if at == CapturePoint::Before {
                    "before"
                } else {
                    "after"
                }
            ))),
        }
    };
    delay(Point::BeforeCapture);
    if let Some((CapturePoint::Before, mode)) = attempt.failure {
        return fail(CapturePoint::Before, mode);
    }
    let captured_before = keepalloc_kernels::captured_table().is_some();
    match keepalloc_kernels::initialize(table) {
        Ok(()) => {}
        Err(KernelError::AlreadyInitialized) if reinit == Reinit::LikeXnnpack => {}
        Err(e) => return Err(InitError::new(format!("keepalloc-kernels: {e}"))),
    }
    if !captured_before {
        // The library just took its copy: it remembers which owner it captured.
        if let Some(captured) = keepalloc_kernels::captured_table() {
            crate::witness::record_capture(captured);
        }
    }
    delay(Point::AfterCapture);
    if let Some((at, mode)) = attempt.failure {
        return fail(at, mode);
    }
    if reinit == Reinit::Strict {
        HOOK_SUCCESSES.fetch_add(1, Relaxed);
    }
    Ok(())
}

/// Installs a panic hook that stays quiet for [`PlannedPanic`]s and reports every other
/// panic as usual.
pub fn quiet_planned_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<PlannedPanic>().is_none() {
            previous(info);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failures(plan: &InitPlan, n: usize) -> Vec<Option<(CapturePoint, FailMode)>> {
        (0..n).map(|_| plan.next_attempt().failure).collect()
    }

    #[test]
    fn first_k_then_never() {
        let plan = InitPlan::new(2, 0.0, CapturePoint::After, FailMode::Error, 1);
        let f = failures(&plan, 4);
        assert!(f[0].is_some() && f[1].is_some() && f[2].is_none() && f[3].is_none());
        assert_eq!((plan.attempts(), plan.failures()), (4, 2));
    }

    #[test]
    fn probability_is_seeded() {
        let a = InitPlan::new(0, 0.5, CapturePoint::Either, FailMode::Either, 77);
        let b = InitPlan::new(0, 0.5, CapturePoint::Either, FailMode::Either, 77);
        let (fa, fb) = (failures(&a, 200), failures(&b, 200));
        assert_eq!(fa, fb);
        let failed: Vec<_> = fa.iter().flatten().collect();
        assert!((50..150).contains(&failed.len()), "{}", failed.len());
        assert!(failed.iter().any(|f| f.0 == CapturePoint::Before));
        assert!(failed.iter().any(|f| f.0 == CapturePoint::After));
        assert!(failed.iter().any(|f| f.1 == FailMode::Panic));
        assert!(failed.iter().any(|f| f.1 == FailMode::Error));
    }
}
