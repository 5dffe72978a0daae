//! The variant under test: keepalloc's real provider, over a failing, scribbling backend.

use allocator_api2::alloc::AllocError;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::KernelError;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, InitError, Provider};

use crate::failing::{AllocPlan, Failing};
use crate::init_plan::{Reinit, planned_initialize};
use crate::library::{self, PATH_ALLOCATIONS};
use crate::report::{self, Finding};
use crate::scenario::{Identity, Subject};
use crate::scribble::{Scribble, ScribbleConfig};

/// The backend of the provider under test: allocation failures on demand, over a scribbling
/// allocator (violations abort the process), over the system allocator. The provider wraps
/// it in its own `Counting`, which gives the live-byte counts the leak checks use.
pub type Backend = Failing<Scribble<System>>;

fn make_backend() -> Result<Backend, AllocError> {
    Ok(Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT)))
}

fn init_hook(table: &'static AllocatorTable) -> Result<(), InitError> {
    planned_initialize(table, Reinit::Strict)
}

/// The process-wide provider under test, exactly as an embedder declares one: a `static`
/// [`GlobalProvider`] whose init hook initializes the library (here through the process's
/// init plan, which may fail or panic before or after the library captured the table).
pub static PROVIDER: GlobalProvider<Backend> = GlobalProvider::new(make_backend, Some(init_hook));

/// keepalloc's provider as a [`Subject`]: each session is a [`Provider`] on [`PROVIDER`].
#[derive(Debug)]
pub struct Keepalloc;

fn identity(handle: AllocatorHandle<Backend>) -> Identity {
    Identity {
        owner: handle.owner() as *const _ as usize,
        context: handle.context() as usize,
        table: handle.table(),
    }
}

impl Subject for Keepalloc {
    type Session = Provider<Backend>;

    fn session(&'static self) -> Provider<Backend> {
        Provider::with_global(&PROVIDER)
    }

    fn acquire(&'static self, session: &Provider<Backend>) -> Result<Identity, String> {
        session
            .preferred_allocator()
            .map(identity)
            .map_err(|e| e.to_string())
    }

    fn owners_constructed(&'static self) -> u64 {
        PROVIDER.stats().owners_constructed
    }

    /// One publication; nothing left allocated through the owner (every operator and the
    /// 64-byte block were freed); every freed block still holds the free fill and intact red
    /// zones when the quarantine is flushed (a write-after-free ends the process).
    fn final_checks(&'static self) {
        let stats = PROVIDER.stats();
        if stats.init_successes != 1 {
            report::record(Finding::invariant(
                "publication-count",
                format!("{} successful publications", stats.init_successes),
            ));
        }
        if stats.allocator.live_bytes != 0 {
            report::record(Finding::invariant(
                "leak",
                format!("{} bytes still allocated", stats.allocator.live_bytes),
            ));
        }
        if let Some(owner) = PROVIDER.owner() {
            let scribble = owner.allocator().inner().inner();
            scribble.flush_quarantine();
            let live = scribble.stats().live_blocks;
            if live != 0 {
                report::record(Finding::invariant(
                    "leak",
                    format!("{live} blocks never freed"),
                ));
            }
        }
    }
}

/// The subject value.
pub static KEEPALLOC: Keepalloc = Keepalloc;

/// `out-of-memory`: every allocation site of the library's path fails in turn (then every
/// call from the second on, a byte budget one byte short, and seeded random failures); each
/// time the library returns a clean `OutOfMemory`, the owner's live bytes are back where
/// they were, and a retry without failures succeeds with the right answer.
pub fn out_of_memory() {
    let handle = match Keepalloc.acquire(&KEEPALLOC.session()) {
        Ok(_) => PROVIDER.get().expect("published"),
        Err(e) => {
            report::record(Finding::invariant("acquire-failed", e));
            return;
        }
    };
    let failing: &Backend = handle.owner().allocator().inner();
    let baseline = handle.stats().live_bytes;
    let expected = library::expected_path();
    let seed = report::run_info().map_or(0, |i| i.seed);

    let check_clean = |plan: AllocPlan, must_fail: bool| {
        failing.arm(plan);
        let result = library::run_path();
        let refused = failing.failures();
        failing.disarm();
        match result {
            Err(KernelError::OutOfMemory { .. }) if refused > 0 => {}
            Ok(y) if !must_fail && library::close(&y, &expected) => {}
            Ok(_) if must_fail => report::record(Finding::invariant(
                "oom-ignored",
                format!("plan {plan}: {refused} refusals, yet the path succeeded"),
            )),
            other => report::record(Finding::invariant(
                "oom-not-clean",
                format!("plan {plan}: {other:?} after {refused} refusals"),
            )),
        }
        let live = handle.stats().live_bytes;
        if live != baseline {
            report::record(Finding::invariant(
                "leak",
                format!("plan {plan}: {live} live bytes, {baseline} before"),
            ));
        }
        match library::run_path() {
            Ok(y) if library::close(&y, &expected) => {}
            other => report::record(Finding::invariant(
                "retry-failed",
                format!("plan {plan}: the retry gave {other:?}"),
            )),
        }
    };

    // Count the sites and the bytes of a clean run.
    failing.arm(AllocPlan::Never);
    let clean = library::run_path();
    let (sites, bytes) = (failing.calls(), failing.granted_bytes());
    failing.disarm();
    if !matches!(&clean, Ok(y) if library::close(y, &expected)) {
        report::record(Finding::invariant(
            "library-broken",
            format!("clean run: {clean:?}"),
        ));
    }
    if sites != PATH_ALLOCATIONS as u64 {
        report::record(Finding::invariant(
            "site-count",
            format!("{sites} allocation calls, {PATH_ALLOCATIONS} expected"),
        ));
    }
    for n in 1..=sites {
        check_clean(AllocPlan::Nth(n), true);
    }
    check_clean(AllocPlan::From(2), true);
    check_clean(AllocPlan::Budget(bytes - 1), true);
    check_clean(AllocPlan::Budget(bytes), false);
    for i in 0..8 {
        let p = AllocPlan::Probability {
            p: 0.5,
            seed: crate::rng::derive(seed, i),
        };
        check_clean(p, false);
    }
    KEEPALLOC.final_checks();
}
