//! `out-of-memory`'s judgement of one failure plan: a clean error, nothing leaked, and a
//! retry that works.

use keepalloc_allocators::System;
use keepalloc_kernels::KernelError;

use crate::consumer;
use crate::failing::{AllocPlan, Failing};
use crate::report::Finding;
use crate::scribble::Scribble;

/// One plan of `out-of-memory`: runs `path` under `plan` armed on `failing`, then without
/// failures, and records (through `record`, as they happen) a path that succeeded although
/// `must_fail` (`oom-ignored`), any other outcome than a clean `OutOfMemory` after a refusal
/// or the right answer (`oom-not-clean`), live blocks other than `baseline` after it
/// (`leak`), and a retry without failures that does not give `expected` (`retry-failed`).
pub(super) fn check_clean_oom(
    failing: &Failing<Scribble<System>>,
    mut path: impl FnMut() -> Result<Vec<f32>, KernelError>,
    expected: &[f32],
    baseline: usize,
    plan: AllocPlan,
    must_fail: bool,
    record: &mut impl FnMut(Finding),
) {
    failing.arm(plan);
    let result = path();
    let refused = failing.failures();
    failing.disarm();
    match result {
        Err(KernelError::OutOfMemory { .. }) if refused > 0 => {}
        Ok(y) if !must_fail && consumer::close(&y, expected) => {}
        Ok(_) if must_fail => record(Finding::invariant(
            "oom-ignored",
            format!("plan {plan}: {refused} refusals, yet the path succeeded"),
        )),
        other => record(Finding::invariant(
            "oom-not-clean",
            format!("plan {plan}: {other:?} after {refused} refusals"),
        )),
    }
    let now = failing.inner().stats().live_blocks;
    if now != baseline {
        record(Finding::invariant(
            "leak",
            format!("plan {plan}: {now} live blocks, {baseline} before"),
        ));
    }
    match path() {
        Ok(y) if consumer::close(&y, expected) => {}
        other => record(Finding::invariant(
            "retry-failed",
            format!("plan {plan}: the retry gave {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use core::alloc::Layout;
    use core::ptr::NonNull;

    use allocator_api2::alloc::Allocator;

    use super::*;
    use crate::scribble::ScribbleConfig;

    const BLOCK: Layout = match Layout::from_size_align(64, 8) {
        Ok(l) => l,
        Err(_) => panic!(),
    };
    const SITES: usize = 3;

    /// A bug of the fake library's out-of-memory path.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Bug {
        None,
        /// Goes on without a refused block and succeeds.
        IgnoresOom,
        /// Frees what it took and returns another error than `OutOfMemory`.
        WrongError,
        /// Says `OutOfMemory` on its first run without asking for memory.
        SpuriousOom,
        /// Returns `OutOfMemory` without freeing the blocks it took.
        LeaksOnOom,
        /// Returns `OutOfMemory` cleanly, then fails every later run.
        StaysBroken,
    }

    /// A library path of `SITES` allocations through `heap` that answers `[1, 2]`.
    struct FakeLibrary<'a> {
        heap: &'a Failing<Scribble<System>>,
        bug: Bug,
        runs: u32,
        broken: bool,
        leaked: Vec<NonNull<u8>>,
    }

    const ANSWER: [f32; 2] = [1.0, 2.0];
    const OOM: KernelError = KernelError::OutOfMemory {
        bytes: BLOCK.size(),
    };

    impl FakeLibrary<'_> {
        fn run(&mut self) -> Result<Vec<f32>, KernelError> {
            self.runs += 1;
            if self.broken || (self.bug == Bug::SpuriousOom && self.runs == 1) {
                return Err(OOM);
            }
            let mut taken = Vec::new();
            let mut refused = false;
            for _ in 0..SITES {
                match self.heap.allocate(BLOCK) {
                    Ok(b) => taken.push(b.cast::<u8>()),
                    Err(_) if self.bug == Bug::IgnoresOom => refused = true,
                    Err(_) => {
                        refused = true;
                        break;
                    }
                }
            }
            if refused && self.bug == Bug::LeaksOnOom {
                self.leaked.append(&mut taken);
            }
            for b in taken {
                // SAFETY: `b` was allocated by `heap` with `BLOCK` and is freed once.
                unsafe { self.heap.deallocate(b, BLOCK) };
            }
            match (refused, self.bug) {
                (false, _) | (true, Bug::IgnoresOom) => Ok(ANSWER.to_vec()),
                (true, Bug::WrongError) => Err(KernelError::Uninitialized),
                (true, Bug::StaysBroken) => {
                    self.broken = true;
                    Err(OOM)
                }
                (true, _) => Err(OOM),
            }
        }
    }

    /// The kinds `check_clean_oom` records for one plan over a fake library with `bug`.
    fn oom_kinds(bug: Bug, plan: AllocPlan, must_fail: bool) -> Vec<&'static str> {
        let heap = Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT));
        let baseline = heap.inner().stats().live_blocks;
        let mut lib = FakeLibrary {
            heap: &heap,
            bug,
            runs: 0,
            broken: false,
            leaked: Vec::new(),
        };
        let mut kinds = Vec::new();
        check_clean_oom(
            &heap,
            || lib.run(),
            &ANSWER,
            baseline,
            plan,
            must_fail,
            &mut |f: Finding| kinds.push(f.kind()),
        );
        for b in lib.leaked.drain(..) {
            // SAFETY: a block the fake library took with `BLOCK` and never freed.
            unsafe { heap.deallocate(b, BLOCK) };
        }
        kinds
    }

    #[test]
    fn a_correct_oom_path_passes_every_plan() {
        for n in 1..=SITES as u64 {
            assert_eq!(
                oom_kinds(Bug::None, AllocPlan::Nth(n), true),
                Vec::<&str>::new()
            );
        }
        assert_eq!(
            oom_kinds(Bug::None, AllocPlan::From(2), true),
            Vec::<&str>::new()
        );
        assert_eq!(
            oom_kinds(Bug::None, AllocPlan::Never, false),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn oom_ignored_fires_on_a_path_that_succeeds_past_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::IgnoresOom, AllocPlan::Nth(2), true),
            ["oom-ignored"]
        );
    }

    #[test]
    fn oom_not_clean_fires_on_a_wrong_error_or_an_oom_without_refusal() {
        assert_eq!(
            oom_kinds(Bug::WrongError, AllocPlan::Nth(2), true),
            ["oom-not-clean"]
        );
        assert_eq!(
            oom_kinds(Bug::SpuriousOom, AllocPlan::Never, false),
            ["oom-not-clean"]
        );
    }

    #[test]
    fn leak_fires_on_blocks_kept_after_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::LeaksOnOom, AllocPlan::Nth(2), true),
            ["leak"]
        );
    }

    #[test]
    fn retry_failed_fires_on_a_path_broken_by_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::StaysBroken, AllocPlan::Nth(2), true),
            ["retry-failed"]
        );
    }
}
