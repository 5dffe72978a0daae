//! The proof of keepalloc's hand-off: a scribbling allocator, seeded failure plans, negative
//! controls, and scenarios that each run in a fresh process.
//!
//! keepalloc's claim is that a process-wide allocator owner, once its pointer has crossed
//! into a C library, is never dropped, replaced or duplicated — not under a cold-start race,
//! not when initialization fails after the library captured the table, not when it panics,
//! not when memory runs out. This crate is the top of the workspace (it sees the
//! allocators, the provider as publisher and the kernels as the library that captures the
//! table) and tests that claim so that a failure cannot hide:
//!
//! * [`Scribble`]: an allocator-api2 allocator around any backend that fills new blocks with
//!   0xAA and freed ones with 0x55, keeps freed blocks in a bounded FIFO quarantine, guards
//!   each block with red zones (with readable slack past the end for over-reading kernels),
//!   and reports double free, invalid free, red-zone overwrite and write-after-free as typed
//!   [`Violation`]s, either ending the process ([`Policy::Abort`]) or recording them
//!   ([`Policy::Record`]). It is a provider backend and is reachable from C through the table.
//! * Failure plans, seeded and reproducible: [`Failing`] makes allocations fail by
//!   [`AllocPlan`] (the nth call, every call from n, probability p, byte budget);
//!   [`InitPlan`] makes initialization fail (the first k attempts or probability p, before
//!   or after the library captured the table, by error or panic); [`delay`] holds race
//!   windows open at named points.
//! * [`witness`]: what judges every variant from outside it: owner constructions counted
//!   in the constructor, a canary and a serial in every owner, the serial the library
//!   captured, and a check of both in every table callback.
//! * Negative controls (feature `controls`, never in a default build): `racy`, the original
//!   ONNX Runtime provider; `naive-retry`, a correct once that builds its owner inside the
//!   fallible closure; `poisoning-once` (`std::sync::Once`); `build-race`
//!   (`once_cell::race::OnceBox`); `drop-on-oom`, which replaces its owner when memory runs
//!   out. Each is caught only by the signature of its own bug.
//! * [`scenario`]: cold-start, retry-after-capture, retry-under-race, panic-in-init,
//!   owner-build-failure and out-of-memory, written once against a
//!   [`Subject`]; the `keepalloc-harness` binary runs one of them in its
//!   process and prints one result line ([`report`]), or lists them all ([`catalog`]);
//!   `cargo xtask fault-test` runs the campaign.
//!
//! ```
//! use core::alloc::Layout;
//! use allocator_api2::alloc::Allocator;
//! use keepalloc_allocators::System;
//! use keepalloc_fault_inject::{Policy, Scribble, ScribbleConfig, ViolationKind};
//!
//! let heap = Scribble::new(System, ScribbleConfig::DEFAULT.with_policy(Policy::Record));
//! let layout = Layout::from_size_align(24, 8).unwrap();
//! let block = heap.allocate(layout).unwrap().cast::<u8>();
//! // SAFETY: `block` is live with `layout`; the second free is the bug being caught.
//! unsafe {
//!     assert_eq!(block.as_ptr().read(), 0xAA);
//!     heap.deallocate(block, layout);
//!     heap.deallocate(block, layout);
//! }
//! assert_eq!(heap.violations()[0].kind, ViolationKind::DoubleFree);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod catalog;
pub mod consumer;
#[cfg(feature = "controls")]
pub mod controls;
pub mod delay;
pub mod explore;
mod failing;
pub mod init_plan;
pub mod ledger;
pub mod real_provider;
pub mod report;
pub mod scenario;
mod scribble;
pub mod seeds;
mod violation;
pub mod witness;

pub use failing::{AllocPlan, Failing};
pub use init_plan::{CapturePoint, FailMode, InitPlan};
pub use scribble::{MIN_RED_ZONE, Scribble, ScribbleConfig, ScribbleStats};
pub use violation::{Policy, Side, Violation, ViolationKind};

use scenario::{Scenario, Subject, Variant};

/// Why a scenario was not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRun {
    /// The variant is a negative control and this build lacks feature `controls`.
    NotBuilt,
    /// The variant does not apply to the scenario.
    NotApplicable,
}

/// Runs `scenario` against `variant` in this process, recording findings through
/// [`report`]; a memory violation ends the process. Installs the scenario's init plan and
/// build plan (seeded with `seed`), so it can be called once per process.
pub fn run_scenario(
    scenario: Scenario,
    variant: Variant,
    threads: usize,
    seed: u64,
) -> Result<(), NotRun> {
    if !variant.is_built() {
        return Err(NotRun::NotBuilt);
    }
    if !variant.applies_to(scenario) {
        return Err(NotRun::NotApplicable);
    }
    init_plan::install(scenario.init_plan(seed));
    witness::fail_first_builds(scenario.build_failures());
    match variant {
        Variant::Keepalloc => run_on(&real_provider::KEEPALLOC, scenario, threads, seed),
        #[cfg(feature = "controls")]
        Variant::Racy => run_on(&controls::racy::RACY, scenario, threads, seed),
        #[cfg(feature = "controls")]
        Variant::NaiveRetry => run_on(&controls::naive_retry::NAIVE_RETRY, scenario, threads, seed),
        #[cfg(feature = "controls")]
        Variant::PoisoningOnce => run_on(
            &controls::poisoning_once::POISONING_ONCE,
            scenario,
            threads,
            seed,
        ),
        #[cfg(feature = "controls")]
        Variant::BuildRace => run_on(&controls::build_race::BUILD_RACE, scenario, threads, seed),
        #[cfg(feature = "controls")]
        Variant::DropOnOom => run_on(&controls::drop_on_oom::DROP_ON_OOM, scenario, threads, seed),
        #[cfg(not(feature = "controls"))]
        _ => return Err(NotRun::NotBuilt),
    }
    Ok(())
}

fn run_on<S: Subject>(subject: &'static S, scenario: Scenario, threads: usize, seed: u64) {
    match scenario {
        Scenario::ColdStart => scenario::cold_start(subject, threads),
        Scenario::RetryAfterCapture => scenario::retry_after_capture(subject),
        Scenario::RetryUnderRace => scenario::retry_under_race(subject, threads),
        Scenario::PanicInInit => scenario::panic_in_init(subject, threads),
        Scenario::OwnerBuildFailure => scenario::owner_build_failure(subject, threads),
        Scenario::OutOfMemory => scenario::out_of_memory(subject, seed),
    }
}
