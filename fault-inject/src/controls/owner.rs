//! The controls' allocator owner: lives in scribbled, quarantined memory and carries a
//! canary that every table callback checks before touching anything else.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::{AllocatorTable, System};

use crate::scribble::{Scribble, ScribbleConfig};
use crate::violation::{Violation, ViolationKind};

/// The canary of a live owner ("keepallo" in ASCII).
pub const CANARY: u64 = 0x6b65_6570_616c_6c6f;

/// Where owners live: a scribbling allocator, so a freed owner reads as 0x55 bytes and stays
/// in quarantine instead of being reused by the next owner (without the quarantine the next
/// owner lands at the freed one's address in nearly every run, and the dangling pointer
/// *works*).
pub static OWNER_HEAP: Scribble<System> = Scribble::new(System, ScribbleConfig::DEFAULT);

/// Where a live owner's blocks come from (the memory the library allocates through it).
pub static DATA_HEAP: Scribble<System> = Scribble::new(System, ScribbleConfig::DEFAULT);

static DATA_TABLE: AllocatorTable = AllocatorTable::for_allocator(&DATA_HEAP);

static CONSTRUCTED: AtomicU64 = AtomicU64::new(0);

/// A control's allocator owner (what ONNX Runtime's provider kept in a `shared_ptr`).
/// `#[repr(C)]` so the canary is the first word: the callbacks read it through the raw
/// context pointer before anything else.
#[repr(C)]
#[derive(Debug)]
pub struct CanaryOwner {
    canary: u64,
    serial: u64,
    heap: &'static AllocatorTable,
}

/// A control's owner, boxed in [`OWNER_HEAP`].
pub type OwnerBox = ABox<CanaryOwner, &'static Scribble<System>>;

impl CanaryOwner {
    /// Constructs an owner in [`OWNER_HEAP`].
    pub fn boxed() -> OwnerBox {
        let serial = CONSTRUCTED.fetch_add(1, Relaxed) + 1;
        ABox::new_in(
            CanaryOwner {
                canary: CANARY,
                serial,
                heap: &DATA_TABLE,
            },
            &OWNER_HEAP,
        )
    }

    /// Owners constructed so far in this process.
    pub fn constructed() -> u64 {
        CONSTRUCTED.load(Relaxed)
    }

    /// A table whose `context` is `owner` and whose functions are the canary-checking
    /// callbacks.
    pub const fn table(owner: *const CanaryOwner) -> AllocatorTable {
        AllocatorTable {
            context: owner as *mut c_void,
            allocate: Some(canary_allocate),
            reallocate: Some(canary_reallocate),
            deallocate: Some(canary_deallocate),
            aligned_allocate: Some(canary_aligned_allocate),
            aligned_deallocate: Some(canary_deallocate),
        }
    }
}

/// The owner behind `context`, if its canary is intact. A dead canary is reported through
/// [`OWNER_HEAP`]'s policy: under `Abort` the process ends here with the one-line report; under
/// `Record` the callback fails (NULL / no-op) without touching the dead owner any further.
///
/// # Safety
/// `context` is the address of a `CanaryOwner` that was constructed in `OWNER_HEAP` (live,
/// or freed and still in quarantine, which is what this check exists to find).
unsafe fn check(context: *mut c_void) -> Option<&'static CanaryOwner> {
    let owner = context as *const CanaryOwner;
    // The first word of the block is readable whether the owner is live or in
    // quarantine (the scribbling allocator has not given a quarantined block back); a
    // volatile read so the check is not assumed away for a "live" reference.
    // SAFETY: the word is readable whether the owner is live or quarantined.
    let canary = unsafe { core::ptr::addr_of!((*owner).canary).read_volatile() };
    if canary == CANARY {
        // The canary is intact, so the owner is live (an owner is only ever freed
        // through `OWNER_HEAP`, which overwrites it with the free fill).
        // SAFETY: the canary is intact, so the owner is live.
        return Some(unsafe { &*owner });
    }
    let fill = u64::from_ne_bytes([OWNER_HEAP.config().free_fill; 8]);
    let kind = if canary == fill {
        ViolationKind::UseAfterFree { found: canary }
    } else {
        ViolationKind::CanaryDead { found: canary }
    };
    OWNER_HEAP.report(Violation {
        kind,
        address: context as usize,
        size: size_of::<CanaryOwner>(),
    });
    None
}

impl CanaryOwner {
    /// The owner's serial number (1 for the first owner constructed in the process).
    pub fn serial(&self) -> u64 {
        self.serial
    }
}

unsafe extern "C" fn canary_allocate(context: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: a canary table's context is always a `CanaryOwner` from `OWNER_HEAP`.
    match unsafe { check(context) } {
        // SAFETY: the owner's heap table is a `for_allocator` table.
        Some(o) => unsafe { o.heap.allocate.expect("complete")(o.heap.context, size) },
        None => core::ptr::null_mut(),
    }
}

unsafe extern "C" fn canary_aligned_allocate(
    context: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: as in `canary_allocate`.
    match unsafe { check(context) } {
        // SAFETY: the owner's heap table is a `for_allocator` table.
        Some(o) => unsafe {
            o.heap.aligned_allocate.expect("complete")(o.heap.context, alignment, size)
        },
        None => core::ptr::null_mut(),
    }
}

unsafe extern "C" fn canary_reallocate(
    context: *mut c_void,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: as in `canary_allocate`.
    match unsafe { check(context) } {
        // The owner's heap table is a `for_allocator` table; `pointer` is the
        // caller's block of it.
        // SAFETY: a `for_allocator` table and one of its blocks.
        Some(o) => unsafe { o.heap.reallocate.expect("complete")(o.heap.context, pointer, size) },
        None => core::ptr::null_mut(),
    }
}

unsafe extern "C" fn canary_deallocate(context: *mut c_void, pointer: *mut c_void) {
    // SAFETY: as in `canary_allocate`.
    if let Some(o) = unsafe { check(context) } {
        // The owner's heap table is a `for_allocator` table; `pointer` is the
        // caller's block of it (its free functions are interchangeable).
        // SAFETY: a `for_allocator` table and one of its blocks.
        unsafe { o.heap.deallocate.expect("complete")(o.heap.context, pointer) }
    }
}
