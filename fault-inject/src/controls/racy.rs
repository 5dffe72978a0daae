//! Negative control `racy`: ONNX Runtime's original XNNPACK allocator provider.
//!
//! ```text
//! if stored is empty { stored = create_allocator() }   // check, then act: not atomic
//! table.context = stored.as_ptr()                      // every caller rewrites the table
//! library_initialize(&table)                           // the library copies it ONCE
//! ```
//!
//! Two callers that both see `stored` empty both build an owner; the second assignment drops
//! the first owner while the library may already hold its pointer. The check and the store
//! are modelled with an atomic pointer (a load, then a swap that drops what it replaced, as
//! assigning a `shared_ptr` does), so the control itself neither tears a pointer nor frees an
//! owner twice: the only bug left in it is the original one.

use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::AllocatorTable;

use super::owner::{CanaryOwner, OWNER_HEAP, serial_at};
use crate::delay::{Point, delay};
use crate::init_plan::{Reinit, planned_initialize};
use crate::scenario::{Identity, Subject};

/// `stored`: the process-wide owner, checked and set without synchronisation.
static STORED: AtomicPtr<CanaryOwner> = AtomicPtr::new(ptr::null_mut());

/// The one shared table every caller rewrites.
struct SharedTable(UnsafeCell<AllocatorTable>);

// SAFETY: NOT sound, on purpose: this is the shared, unsynchronised table of the original
// bug. Writers store the context with an atomic pointer store so the pointer is never torn;
// the library's copy of the table can still race with a writer, which is the bug reproduced.
unsafe impl Sync for SharedTable {}

static TABLE: SharedTable =
    // SAFETY: the context is NULL only until the first caller stores an owner from OWNER_HEAP into it (below), before anything calls through the table.
    SharedTable(UnsafeCell::new(unsafe { CanaryOwner::table(ptr::null()) }));

/// The racy provider as a [`Subject`]. Sessions carry nothing: the original provider's
/// state is all process-wide.
#[derive(Debug)]
pub struct Racy;

/// The subject value.
pub static RACY: Racy = Racy;

impl Subject for Racy {
    type Session = ();

    fn session(&'static self) {}

    fn acquire(&'static self, _: &()) -> Result<Identity, String> {
        if STORED.load(Ordering::Acquire).is_null() {
            // The race window: another caller can pass the same check now.
            delay(Point::CheckToStore);
            let owner = ABox::into_raw(CanaryOwner::try_boxed().map_err(|e| e.to_string())?);
            let replaced = STORED.swap(owner, Ordering::AcqRel);
            if !replaced.is_null() {
                // `replaced` came from `ABox::into_raw` of an owner in OWNER_HEAP and
                // the swap took it out of `stored`, so this is its only drop. Whoever still
                // holds its address (the library!) now dangles: the bug.
                // SAFETY: the only drop of `replaced` (the dangling reader is the bug reproduced).
                drop(unsafe { ABox::from_raw_in(replaced, &OWNER_HEAP) });
            }
        }
        let owner = STORED.load(Ordering::Acquire);
        // An atomic store to the table's context field, which is a properly aligned
        // pointer-sized field of a static; see `SharedTable` for why the table as a whole is
        // deliberately unsynchronised.
        // SAFETY: an aligned atomic store into a static field.
        unsafe {
            AtomicPtr::from_ptr(AllocatorTable::context_field(TABLE.0.get()).cast())
                .store(owner.cast::<core::ffi::c_void>(), Ordering::Release);
        }
        // SAFETY: the static lives forever; its non-context fields are never written.
        let table: &'static AllocatorTable = unsafe { &*TABLE.0.get() };
        planned_initialize(table, Reinit::LikeXnnpack).map_err(|e| e.to_string())?;
        Ok(Identity {
            owner: owner as usize,
            context: owner as usize,
            table,
            // SAFETY: `owner` came from `STORED`: an owner of OWNER_HEAP, live or (the bug) freed into its quarantine.
            serial: unsafe { serial_at(owner) },
        })
    }
}
