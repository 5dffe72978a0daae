//! Negative control `poisoning-once`: the whole hand-off inside a `std::sync::Once`.
//!
//! `Once::call_once` runs its closure at most once to completion: a closure that returns
//! (having failed) completes the once for good, and a closure that panics poisons it, so
//! every later `call_once` panics too. Either way a failed initialization can never be
//! retried: the process is left without an allocator. Its owner is never dropped (it is
//! leaked at once), so the only bug left is the missing retry, and its signature is
//! `no-retry`: a caller fails without any attempt being made for it.

use std::sync::{Once, OnceLock};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::AllocatorTable;

use super::owner::CanaryOwner;
use crate::init_plan::{Reinit, planned_initialize};
use crate::scenario::{Identity, Subject};

static ONCE: Once = Once::new();
static DONE: OnceLock<Result<Identity, String>> = OnceLock::new();

fn attempt() -> Result<Identity, String> {
    let owner: &'static CanaryOwner =
        ABox::leak(CanaryOwner::try_boxed().map_err(|e| e.to_string())?);
    // SAFETY: `owner` was allocated in OWNER_HEAP just above; the canary callbacks report a dead owner as a finding.
    let table: &'static AllocatorTable = Box::leak(Box::new(unsafe { CanaryOwner::table(owner) }));
    planned_initialize(table, Reinit::LikeXnnpack).map_err(|e| e.to_string())?;
    Ok(Identity {
        owner: owner as *const CanaryOwner as usize,
        context: table.context() as usize,
        table,
        serial: owner.serial(),
    })
}

/// The `std::sync::Once` provider as a [`Subject`].
#[derive(Debug)]
pub struct PoisoningOnce;

/// The subject value.
pub static POISONING_ONCE: PoisoningOnce = PoisoningOnce;

impl Subject for PoisoningOnce {
    type Session = ();

    fn session(&'static self) {}

    fn acquire(&'static self, _: &()) -> Result<Identity, String> {
        // A panic in `attempt` poisons ONCE; later calls panic ("Once instance has
        // previously been poisoned") without running anything.
        ONCE.call_once(|| {
            let _ = DONE.set(attempt());
        });
        match DONE.get() {
            Some(Ok(id)) => Ok(*id),
            Some(Err(e)) => Err(format!("{e} (std::sync::Once completed with the failure)")),
            None => Err("the once completed without a result".into()),
        }
    }
}
