//! The controls' allocator owner: lives in scribbled, quarantined memory and carries a
//! [`Witness`] that every table callback checks before touching anything else.

use core::ffi::c_void;

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::{AllocatorTable, System};

use crate::failing::Failing;
use crate::scribble::{Scribble, ScribbleConfig};
use crate::witness::{self, BuildRefused, Witness};

/// Where owners live: a scribbling allocator, so a freed owner reads as 0x55 bytes and stays
/// in quarantine instead of being reused by the next owner (without the quarantine the next
/// owner lands at the freed one's address in nearly every run, and the dangling pointer
/// *works*).
pub static OWNER_HEAP: Scribble<System> = Scribble::new(System, ScribbleConfig::DEFAULT);

/// Where a live owner's blocks come from (the memory the library allocates through it):
/// scribbled, and able to fail on plan, as keepalloc's own backend.
pub static DATA_HEAP: Failing<Scribble<System>> =
    Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT));

static DATA_TABLE: AllocatorTable = AllocatorTable::for_allocator(&DATA_HEAP);

/// What a control does when its data heap refuses an allocation (called with the owner's
/// address, from inside the callback, which touches the owner no more afterwards).
pub type OnRefusal = fn(*const CanaryOwner);

/// A control's allocator owner (what ONNX Runtime's provider kept in a `shared_ptr`).
/// `#[repr(C)]` so the witness comes first: the callbacks read it through the raw context
/// pointer before anything else.
#[repr(C)]
#[derive(Debug)]
pub struct CanaryOwner {
    witness: Witness,
    heap: &'static AllocatorTable,
    on_refusal: Option<OnRefusal>,
}

/// A control's owner, boxed in [`OWNER_HEAP`].
pub type OwnerBox = ABox<CanaryOwner, &'static Scribble<System>>;

impl CanaryOwner {
    /// Constructs an owner in [`OWNER_HEAP`] (counted and numbered by [`witness`]), or fails
    /// as the build plan says.
    pub fn try_boxed() -> Result<OwnerBox, BuildRefused> {
        Self::try_boxed_with(None)
    }

    /// As [`try_boxed`](Self::try_boxed), with a reaction to allocation refusals.
    pub fn try_boxed_with(on_refusal: Option<OnRefusal>) -> Result<OwnerBox, BuildRefused> {
        Ok(ABox::new_in(
            CanaryOwner {
                witness: Witness::try_new()?,
                heap: &DATA_TABLE,
                on_refusal,
            },
            &OWNER_HEAP,
        ))
    }

    /// The owner's serial (1 for the first owner constructed in the process).
    pub fn serial(&self) -> u64 {
        self.witness.serial()
    }

    /// A table whose `context` is `owner` and whose functions are the witness-checking
    /// callbacks.
    ///
    /// # Safety
    /// `owner` is a `CanaryOwner` from [`OWNER_HEAP`] (live or in quarantine: the callbacks
    /// judge it, which is the point) for as long as the table can be called through.
    pub const unsafe fn table(owner: *const CanaryOwner) -> AllocatorTable {
        // SAFETY: the canary callbacks keep the table contract for an owner from OWNER_HEAP (they forward to its heap's table after checking its witness), which the caller promises `owner` is.
        unsafe {
            AllocatorTable::from_raw_parts(
                owner as *mut c_void,
                Some(canary_allocate),
                Some(canary_reallocate),
                Some(canary_deallocate),
                Some(canary_aligned_allocate),
                Some(canary_deallocate),
            )
        }
    }
}

/// The serial of the owner at `owner`, read without judging it (for identities; a freed
/// owner reads as the free fill).
///
/// # Safety
/// `owner` points to a `CanaryOwner` from [`OWNER_HEAP`], live or in quarantine.
pub unsafe fn serial_at(owner: *const CanaryOwner) -> u64 {
    // SAFETY: readable per the caller's promise.
    unsafe { (*owner.cast::<Witness>()).serial() }
}

/// The owner behind `context`, after its witness was checked (a betrayed owner ends the run
/// inside [`witness::check`]).
///
/// # Safety
/// `context` is the address of a `CanaryOwner` that was constructed in `OWNER_HEAP` (live,
/// or freed and still in quarantine, which is what this check exists to find).
unsafe fn owner(context: *mut c_void) -> &'static CanaryOwner {
    let owner = context as *const CanaryOwner;
    // SAFETY: the witness is the first field and readable (caller's promise).
    unsafe { witness::check(owner.cast(), size_of::<CanaryOwner>()) };
    // The witness is live and the one captured, so the owner is live (an owner is only
    // ever freed through `OWNER_HEAP`, which overwrites it with the free fill).
    // SAFETY: the owner is live.
    unsafe { &*owner }
}

/// Calls the owner's reaction when `result` is a refusal.
fn after(context: *mut c_void, o: &CanaryOwner, result: *mut c_void) -> *mut c_void {
    if let (true, Some(react)) = (result.is_null(), o.on_refusal) {
        react(context as *const CanaryOwner);
    }
    result
}

unsafe extern "C" fn canary_allocate(context: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: a canary table's context is always a `CanaryOwner` from `OWNER_HEAP`.
    let o = unsafe { owner(context) };
    // SAFETY: the owner's heap table is a `for_allocator` table.
    let p = unsafe { o.heap.allocate().expect("complete")(o.heap.context(), size) };
    after(context, o, p)
}

unsafe extern "C" fn canary_aligned_allocate(
    context: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: as in `canary_allocate`.
    let o = unsafe { owner(context) };
    let p =
        // SAFETY: the owner's heap table is a `for_allocator` table.
        unsafe { o.heap.aligned_allocate().expect("complete")(o.heap.context(), alignment, size) };
    after(context, o, p)
}

unsafe extern "C" fn canary_reallocate(
    context: *mut c_void,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: as in `canary_allocate`.
    let o = unsafe { owner(context) };
    // The owner's heap table is a `for_allocator` table; `pointer` is the caller's block
    // of it.
    // SAFETY: a `for_allocator` table and one of its blocks.
    let p = unsafe { o.heap.reallocate().expect("complete")(o.heap.context(), pointer, size) };
    if size == 0 { p } else { after(context, o, p) }
}

unsafe extern "C" fn canary_deallocate(context: *mut c_void, pointer: *mut c_void) {
    // SAFETY: as in `canary_allocate`.
    let o = unsafe { owner(context) };
    // The owner's heap table is a `for_allocator` table; `pointer` is the caller's block of
    // it (its free functions are interchangeable).
    // SAFETY: a `for_allocator` table and one of its blocks.
    unsafe { o.heap.deallocate().expect("complete")(o.heap.context(), pointer) }
}
