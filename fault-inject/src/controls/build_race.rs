//! Negative control `build-race`: the owner is installed the way `once_cell::race::OnceBox`
//! installs its value: every caller that finds the slot empty builds an owner, one
//! compare-and-swap wins, and each loser drops the owner it built.
//!
//! Nothing dangles (a loser's owner was never published) and the library's initialization
//! is a correct retry-safe once on top; the bug is only that a racing start constructs
//! several owners, which for a real backend means several arenas reserved, several pools
//! started, several registrations made. Signature: `second-owner`.

use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, PoisonError};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::AllocatorTable;

use super::owner::{CanaryOwner, OWNER_HEAP};
use crate::delay::{Point, delay};
use crate::init_plan::{Reinit, planned_initialize};
use crate::scenario::{Identity, Subject};

static SLOT: AtomicPtr<CanaryOwner> = AtomicPtr::new(ptr::null_mut());
static PUBLISHED: Mutex<Option<&'static AllocatorTable>> = Mutex::new(None);

/// The race-to-install provider as a [`Subject`].
#[derive(Debug)]
pub struct BuildRace;

/// The subject value.
pub static BUILD_RACE: BuildRace = BuildRace;

impl Subject for BuildRace {
    type Session = ();

    fn session(&'static self) {}

    fn acquire(&'static self, _: &()) -> Result<Identity, String> {
        let mut owner = SLOT.load(Ordering::Acquire);
        if owner.is_null() {
            let mine = ABox::into_raw(CanaryOwner::try_boxed().map_err(|e| e.to_string())?);
            // The window: other callers build their own owner meanwhile.
            delay(Point::CheckToStore);
            owner = match SLOT.compare_exchange(
                ptr::null_mut(),
                mine,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => mine,
                Err(theirs) => {
                    // `mine` came from `into_raw` and was never shared: its only drop.
                    // SAFETY: the only owner of `mine`.
                    drop(unsafe { ABox::from_raw_in(mine, &OWNER_HEAP) });
                    theirs
                }
            };
        }
        // The publication itself is a correct retry-safe once, with the one owner.
        let mut published = PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner);
        let table = match *published {
            Some(table) => table,
            None => {
                let table: &'static AllocatorTable =
                    // SAFETY: `owner` lives in OWNER_HEAP (this control may drop it later: that is the bug it reproduces); the canary callbacks report a dead owner as a finding.
                    Box::leak(Box::new(unsafe { CanaryOwner::table(owner) }));
                planned_initialize(table, Reinit::LikeXnnpack).map_err(|e| e.to_string())?;
                *published = Some(table);
                table
            }
        };
        // SAFETY: `owner` is the installed owner, never freed.
        let owner: &'static CanaryOwner = unsafe { &*owner };
        Ok(Identity {
            owner: owner as *const CanaryOwner as usize,
            context: table.context() as usize,
            table,
            serial: owner.serial(),
        })
    }
}
