//! Negative control `naive-retry`: a correct once, but the owner is built inside the
//! fallible closure (`once_cell`'s `get_or_try_init` style), so an attempt that fails after
//! the library captured the table drops the owner the library now points to.
//!
//! The once itself is right: one mutex, the value stored only on success, poisoning ignored
//! (as `once_cell` does), so every caller that succeeds sees the same owner. What is wrong is
//! only *where the owner lives*: inside the attempt.

use std::sync::{Mutex, PoisonError};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::AllocatorTable;

use super::owner::{CanaryOwner, OwnerBox};
use crate::init_plan::{Reinit, planned_initialize};
use crate::scenario::{Identity, Subject};

/// A once whose value is built, and dropped on failure, by the fallible closure.
struct NaiveOnce {
    slot: Mutex<Option<(&'static CanaryOwner, &'static AllocatorTable)>>,
}

impl NaiveOnce {
    fn get_or_try_init<E>(
        &self,
        attempt: impl FnOnce() -> Result<(OwnerBox, &'static AllocatorTable), E>,
    ) -> Result<(&'static CanaryOwner, &'static AllocatorTable), E> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(done) = *slot {
            return Ok(done);
        }
        // A failure (or panic) inside `attempt` drops the owner it built: the bug.
        let (owner, table) = attempt()?;
        let done = (&*ABox::leak(owner), table);
        *slot = Some(done);
        Ok(done)
    }
}

static ONCE: NaiveOnce = NaiveOnce {
    slot: Mutex::new(None),
};

/// The naive-retry provider as a [`Subject`].
#[derive(Debug)]
pub struct NaiveRetry;

/// The subject value.
pub static NAIVE_RETRY: NaiveRetry = NaiveRetry;

impl Subject for NaiveRetry {
    type Session = ();

    fn session(&'static self) {}

    fn acquire(&'static self, _: &()) -> Result<Identity, String> {
        let (owner, table) = ONCE.get_or_try_init(|| {
            let owner = CanaryOwner::try_boxed().map_err(|e| e.to_string())?;
            // Each attempt publishes a table for its own owner (leaked: a few words per
            // attempt, so that the `&'static` the library is given stays valid).
            let table: &'static AllocatorTable =
                // SAFETY: `owner` lives in OWNER_HEAP (this control drops it later: that is the bug it reproduces); the canary callbacks report a dead owner as a finding.
                Box::leak(Box::new(unsafe { CanaryOwner::table(&*owner) }));
            planned_initialize(table, Reinit::LikeXnnpack).map_err(|e| e.to_string())?;
            Ok::<_, String>((owner, table))
        })?;
        Ok(Identity {
            owner: owner as *const CanaryOwner as usize,
            context: table.context() as usize,
            table,
            serial: owner.serial(),
        })
    }
}
