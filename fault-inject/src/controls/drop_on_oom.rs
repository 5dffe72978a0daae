//! Negative control `drop-on-oom`: a correct once, but a provider that "recovers" from
//! running out of memory by replacing its allocator: when the backend refuses an
//! allocation, the owner is swapped for a fresh one and the old owner is freed — while the
//! library still holds the old owner's context. The next allocation the library makes after
//! an out-of-memory error goes through freed memory. Signature: `use-after-free` (and the
//! replacement is a `second-owner`).

use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, PoisonError};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::AllocatorTable;

use super::owner::{CanaryOwner, OWNER_HEAP};
use crate::init_plan::{Reinit, planned_initialize};
use crate::scenario::{Identity, Subject};

static STORED: AtomicPtr<CanaryOwner> = AtomicPtr::new(ptr::null_mut());
static PUBLISHED: Mutex<Option<&'static AllocatorTable>> = Mutex::new(None);

/// The reaction to a refused allocation: a new owner replaces the old, which is freed.
fn replace_owner(old: *const CanaryOwner) {
    let Ok(new) = CanaryOwner::try_boxed_with(Some(replace_owner)) else {
        return;
    };
    let new = ABox::into_raw(new);
    if STORED
        .compare_exchange(old.cast_mut(), new, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // `old` was the stored owner, from `into_raw`, and the swap took it out: its only
        // drop. The library still holds its address: the bug.
        // SAFETY: the only drop of `old` (its dangling reader is the bug reproduced).
        drop(unsafe { ABox::from_raw_in(old.cast_mut(), &OWNER_HEAP) });
    } else {
        // SAFETY: `new` was never shared.
        drop(unsafe { ABox::from_raw_in(new, &OWNER_HEAP) });
    }
}

/// The replace-on-out-of-memory provider as a [`Subject`].
#[derive(Debug)]
pub struct DropOnOom;

/// The subject value.
pub static DROP_ON_OOM: DropOnOom = DropOnOom;

impl Subject for DropOnOom {
    type Session = ();

    fn session(&'static self) {}

    fn acquire(&'static self, _: &()) -> Result<Identity, String> {
        let mut published = PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner);
        let table = match *published {
            Some(table) => table,
            None => {
                let mut owner = STORED.load(Ordering::Acquire);
                if owner.is_null() {
                    owner = ABox::into_raw(
                        CanaryOwner::try_boxed_with(Some(replace_owner))
                            .map_err(|e| e.to_string())?,
                    );
                    STORED.store(owner, Ordering::Release);
                }
                let table: &'static AllocatorTable =
                    // SAFETY: `owner` lives in OWNER_HEAP (this control may drop it later: that is the bug it reproduces); the canary callbacks report a dead owner as a finding.
                    Box::leak(Box::new(unsafe { CanaryOwner::table(owner) }));
                planned_initialize(table, Reinit::LikeXnnpack).map_err(|e| e.to_string())?;
                *published = Some(table);
                table
            }
        };
        let owner = table.context() as *const CanaryOwner;
        Ok(Identity {
            owner: owner as usize,
            context: owner as usize,
            table,
            // SAFETY: the published owner, from OWNER_HEAP (live, or freed by the bug).
            serial: unsafe { super::owner::serial_at(owner) },
        })
    }

    fn faults(
        &'static self,
    ) -> Option<&'static crate::Failing<crate::Scribble<keepalloc_allocators::System>>> {
        Some(&super::owner::DATA_HEAP)
    }
}
