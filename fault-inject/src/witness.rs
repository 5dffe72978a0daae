//! Witnesses that stand outside the code they judge.
//!
//! A check of the provider must not read its verdict from the provider's own counters: a
//! cell that rebuilt its owner in place and counted the construction once would vouch for
//! itself. So every variant's owner — keepalloc's and the controls' alike — is built through
//! this module, which
//!
//! * counts constructions (and refuses the first `k` of them when a scenario plans owner
//!   construction failures), in the constructor, not in the cell;
//! * writes a [`Witness`] into the owner at construction: a canary and a serial number, the
//!   first owner of the process being serial 1; dropping the owner overwrites both with the
//!   free fill;
//! * records the serial of the owner the library captured, read through the very table the
//!   library copied ([`record_capture`]);
//! * checks, in every table callback and before the callback uses anything of the owner, that
//!   the context still holds a live witness with the captured serial ([`check`]).
//!
//! The three ways an owner can be betrayed are three distinct findings: a second owner
//! constructed (`second-owner`, from the construction count), an owner rebuilt in place
//! (`owner-rebuilt`: the canary is intact but the serial is not the captured one), and an
//! owner dropped or freed (`use-after-free`: the canary or the serial reads as the free fill).

use core::cell::Cell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use keepalloc_allocators::AllocatorTable;

use crate::report::{self, Finding};
use crate::violation::{Violation, ViolationKind};

/// The canary of a live owner ("keepallo" in ASCII).
pub const CANARY: u64 = 0x6b65_6570_616c_6c6f;

/// The byte a dropped witness is overwritten with (the scribbling allocator's free fill).
pub const DROPPED_FILL: u8 = 0x55;

static CONSTRUCTED: AtomicU64 = AtomicU64::new(0);
static BUILD_TRIES: AtomicU64 = AtomicU64::new(0);
static BUILD_REFUSALS: AtomicU64 = AtomicU64::new(0);
static FAIL_FIRST_BUILDS: AtomicU64 = AtomicU64::new(0);
static CAPTURED_SERIAL: AtomicU64 = AtomicU64::new(0);
static CAPTURED_AT: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// The owner's construction was refused by the build plan ([`fail_first_builds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildRefused {
    /// The construction attempt refused (0-based, process-wide).
    pub attempt: u64,
}

impl core::fmt::Display for BuildRefused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "planned failure of owner construction {}", self.attempt)
    }
}

/// Makes the first `k` owner constructions of this process fail (the
/// `owner-build-failure` scenario). Call before any owner is built.
pub fn fail_first_builds(k: u64) {
    FAIL_FIRST_BUILDS.store(k, Relaxed);
}

/// Owners constructed in this process, counted by their constructor.
pub fn constructed() -> u64 {
    CONSTRUCTED.load(Relaxed)
}

/// Owner constructions refused by the build plan so far.
pub fn build_refusals() -> u64 {
    BUILD_REFUSALS.load(Relaxed)
}

/// The serial of the owner the library captured (0 before the capture).
pub fn captured_serial() -> u64 {
    CAPTURED_SERIAL.load(Relaxed)
}

std::thread_local! {
    /// Attempts this thread has run (init attempts decided by the init plan, and owner
    /// constructions tried through [`Witness::try_new`]): how a scenario tells a caller that
    /// retried from one that was refused without any attempt.
    static ATTEMPTS_HERE: Cell<u64> = const { Cell::new(0) };
}

/// Attempts run on this thread so far (init attempts and owner constructions).
pub fn attempts_here() -> u64 {
    ATTEMPTS_HERE.with(Cell::get)
}

/// Counts an attempt run on this thread (an init attempt or an owner construction).
pub(crate) fn count_attempt_here() {
    ATTEMPTS_HERE.with(|n| n.set(n.get() + 1));
}

/// What every owner carries, first thing in its memory: a canary and a serial.
#[repr(C)]
#[derive(Debug)]
pub struct Witness {
    canary: u64,
    serial: u64,
}

impl Witness {
    /// The witness of a newly constructed owner: counts the construction and numbers it, or
    /// refuses it when the build plan says so. Every variant's owner constructor calls this
    /// first, so the count does not depend on the code under test.
    pub fn try_new() -> Result<Witness, BuildRefused> {
        count_attempt_here();
        let attempt = BUILD_TRIES.fetch_add(1, Relaxed);
        if attempt < FAIL_FIRST_BUILDS.load(Relaxed) {
            BUILD_REFUSALS.fetch_add(1, Relaxed);
            return Err(BuildRefused { attempt });
        }
        Ok(Witness {
            canary: CANARY,
            serial: CONSTRUCTED.fetch_add(1, Relaxed) + 1,
        })
    }

    /// The owner's serial (read as it is in memory now).
    pub fn serial(&self) -> u64 {
        // SAFETY: `self` is a valid reference; volatile so a rebuilt slot is read afresh.
        unsafe { core::ptr::addr_of!(self.serial).read_volatile() }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let fill = u64::from_ne_bytes([DROPPED_FILL; 8]);
        // Volatile, so the compiler cannot drop the stores as dead: the point is that a
        // dangling reader finds them.
        // SAFETY: `self` is valid for writes until the end of `drop`.
        unsafe {
            core::ptr::addr_of_mut!(self.canary).write_volatile(fill);
            core::ptr::addr_of_mut!(self.serial).write_volatile(fill);
        }
        // The owner's memory is freed (and filled) after this drop: no store of that may be
        // moved before these, so a reader that saw the fill anywhere in the owner finds the
        // witness dead when it reads it next (see the controls' `copy_then_judge`).
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }
}

/// Reads the witness at `at` and judges it: `Ok(serial)` for a live witness whose serial is
/// the captured one (or when nothing was captured yet), otherwise the violation. During a
/// [`record_capture`] probe the first live witness seen becomes the captured one.
///
/// # Safety
/// `at` points to memory that held a [`Witness`] and is still readable: a live owner, or
/// one dropped in place or freed into the scribbling allocator's quarantine (which is what
/// this check exists to find).
pub unsafe fn judge(at: *const Witness, size: usize) -> Result<u64, Violation> {
    // The serial is read first: a drop overwrites the canary first, so a reader racing with
    // it that sees the new serial also sees the new canary (stores and loads in order), and
    // a serial that reads as the free fill is a drop in progress, whatever the canary read.
    // Read canary-first, such a race once gave an intact canary with a filled serial,
    // reported as an owner rebuilt in place (serial 0x5555555555555555) instead of the
    // use-after-free it is.
    // SAFETY: readable per the caller's promise; volatile so nothing is assumed about it.
    let (serial, canary) = unsafe {
        let serial = core::ptr::addr_of!((*at).serial).read_volatile();
        (serial, core::ptr::addr_of!((*at).canary).read_volatile())
    };
    let violation = |kind| Violation {
        kind,
        address: at as usize,
        size,
    };
    let fill = u64::from_ne_bytes([DROPPED_FILL; 8]);
    if canary != CANARY || serial == fill {
        return Err(violation(if canary == fill || serial == fill {
            ViolationKind::UseAfterFree { found: canary }
        } else {
            ViolationKind::CanaryDead { found: canary }
        }));
    }
    if PROBING.with(Cell::get)
        && CAPTURED_SERIAL
            .compare_exchange(0, serial, Relaxed, Relaxed)
            .is_ok()
    {
        CAPTURED_AT.store(at as usize, Relaxed);
    }
    match CAPTURED_SERIAL.load(Relaxed) {
        0 => Ok(serial),
        captured if captured == serial => Ok(serial),
        // The same place holds another owner: rebuilt in place.
        captured if CAPTURED_AT.load(Relaxed) == at as usize => {
            Err(violation(ViolationKind::OwnerRebuilt {
                captured,
                found: serial,
            }))
        }
        captured => Err(violation(ViolationKind::ForeignOwner {
            captured,
            found: serial,
        })),
    }
}

/// [`judge`], ending the run with the violation's report and exit code when it fails: a
/// betrayed owner must not be used any further.
///
/// # Safety
/// As for [`judge`].
pub unsafe fn check(at: *const Witness, size: usize) -> u64 {
    // SAFETY: the caller's promise, forwarded.
    match unsafe { judge(at, size) } {
        Ok(serial) => serial,
        Err(v) => report::fatal(Finding::Violation(v)),
    }
}

/// The library's side of the capture: right after it copied `table`, it makes one small
/// allocation through the copy, and the owner's witness (checked by the callback, as in
/// every call) tells its serial. From then on every callback compares against it.
pub fn record_capture(table: AllocatorTable) {
    let (Some(allocate), Some(deallocate)) = (table.allocate(), table.deallocate()) else {
        report::record(Finding::invariant(
            "table-incomplete",
            "the library captured a table with a NULL slot",
        ));
        return;
    };
    PROBING.with(|p| p.set(true));
    // The captured table keeps the xnn_allocator contract (it is a provider's or a
    // control's table); one byte is allocated and freed at once.
    // SAFETY: a contract-keeping table; the block is freed once and never used.
    unsafe {
        let p = allocate(table.context(), 1);
        if !p.is_null() {
            deallocate(table.context(), p);
        }
    }
    PROBING.with(|p| p.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_live_rebuilt_and_dropped() {
        let w = Witness::try_new().unwrap();
        let at: *const Witness = &w;
        // SAFETY: `w` is live.
        assert_eq!(unsafe { judge(at, 16) }, Ok(w.serial()));
        let other = Witness::try_new().unwrap();
        assert_ne!(other.serial(), w.serial());
        let mut slot = core::mem::ManuallyDrop::new(w);
        // SAFETY: dropped in place; the memory stays readable (it is this stack slot).
        unsafe { core::mem::ManuallyDrop::drop(&mut slot) };
        let at: *const Witness = &*slot;
        // SAFETY: the slot is still readable.
        let found = unsafe { judge(at, 16) }.unwrap_err();
        assert_eq!(found.kind.name(), "use-after-free");
    }

    /// A reader that races with a drop can see the canary before it was overwritten and the
    /// serial after: that is a use-after-free, not an owner rebuilt in place.
    #[test]
    fn a_torn_drop_is_a_use_after_free() {
        // A drop half done: the canary not yet overwritten, the serial already.
        let torn = core::mem::ManuallyDrop::new(Witness {
            canary: CANARY,
            serial: u64::from_ne_bytes([DROPPED_FILL; 8]),
        });
        let at: *const Witness = &*torn;
        // SAFETY: `torn` is live.
        let found = unsafe { judge(at, 16) };
        assert_eq!(
            found.map_err(|v| v.kind.name()),
            Err("use-after-free"),
            "a filled serial under an intact canary"
        );
    }
}
