//! The controls' allocator owner: lives in scribbled, quarantined memory and carries a
//! [`Witness`] that every table callback judges before it uses anything of the owner.

use core::ffi::c_void;
use core::mem::MaybeUninit;
use core::sync::atomic::{Ordering, fence};

use allocator_api2::boxed::Box as ABox;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_scribble::{Stack, ViolationReport};

use crate::failing::Failing;
use crate::report::{self, Finding};
use crate::scribble::{self, Scribble, ScribbleConfig};
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

/// For a finding about an address in the owner or data heap (an owner canary found freed),
/// prints what that heap remembers of the block: where it was freed and allocated, when
/// `KEEPALLOC_SCRIBBLE` turned stacks on. [`report::fatal`] calls it before the finding.
fn print_history(finding: &Finding) {
    let Finding::Violation(v) = finding else {
        return;
    };
    if scribble::detail_printed() {
        return;
    }
    for heap in [&OWNER_HEAP, DATA_HEAP.inner()] {
        if let Some(block) = heap.history(v.address) {
            keepalloc_scribble::print_report(&ViolationReport {
                violation: *v,
                block: Some(block),
                access: Some(Stack::capture(heap.config().stack_depth)),
                fault: None,
            });
            return;
        }
    }
}

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
        report::print_before_fatal(print_history);
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

/// What a callback uses of its owner: copied out of the owner *before* the owner is judged.
#[derive(Clone, Copy)]
struct Fields {
    heap: &'static AllocatorTable,
    on_refusal: Option<OnRefusal>,
}

/// Copies the owner's fields out of `context`, then judges the owner's witness: `Ok` only if
/// the owner was live when the copy was taken, so the callback never has to read the owner
/// again.
///
/// The order is the point. Judged first and read afterwards, an owner that another thread
/// frees between the two (the racy control does exactly that: 32 sessions, each dropping the
/// owner the one before it built) hands the callback its free fill as `heap`, and the run
/// dies of SIGSEGV on the address 0x5555555555555555 instead of reporting the
/// `use-after-free` it is. A clean-clone CI run saw one racy process of 20 die of SIGSEGV
/// with nothing reported; this was the one read of an owner no judgement covered. The test
/// below frees the owner inside the window and fails for the old order.
///
/// Copied first, the fill cannot slip through: an owner is freed only through
/// [`OWNER_HEAP`], after its witness was dropped (the drop's volatile stores, then a fence,
/// then the allocator's fill), so a copy that read any byte of the fill finds the witness
/// dead when it reads it after the copy (x86-TSO: stores become visible in order, loads are
/// not reordered with older loads; the fences hold the compiler to that order).
///
/// # Safety
/// `context` is the address of a `CanaryOwner` that was constructed in `OWNER_HEAP` (live,
/// or freed and still in quarantine, which is what this check exists to find).
unsafe fn copy_then_judge(context: *mut c_void) -> Result<Fields, crate::violation::Violation> {
    let owner = context as *const CanaryOwner;
    // Read as `MaybeUninit`, so the free fill, if that is what the copy read, is never a
    // reference or a function pointer until the witness has vouched for it.
    // SAFETY: the owner's memory is readable (caller's promise); volatile, so nothing is assumed.
    let (heap, on_refusal) = unsafe {
        (
            core::ptr::addr_of!((*owner).heap)
                .cast::<MaybeUninit<&'static AllocatorTable>>()
                .read_volatile(),
            core::ptr::addr_of!((*owner).on_refusal)
                .cast::<MaybeUninit<Option<OnRefusal>>>()
                .read_volatile(),
        )
    };
    fence(Ordering::SeqCst);
    #[cfg(test)]
    tests::between_copy_and_judge();
    // SAFETY: the witness is the first field and readable (caller's promise).
    unsafe { witness::judge(owner.cast(), size_of::<CanaryOwner>()) }?;
    // The witness was live after the copy, so the copy read a live owner's fields.
    // SAFETY: both were written by `try_boxed_with` and not yet overwritten.
    Ok(unsafe {
        Fields {
            heap: heap.assume_init(),
            on_refusal: on_refusal.assume_init(),
        }
    })
}

/// The owner's fields, copied while it was live; a betrayed owner ends the run inside
/// [`report::fatal`] with its violation.
///
/// # Safety
/// As for [`copy_then_judge`].
unsafe fn owner(context: *mut c_void) -> Fields {
    // SAFETY: the caller's promise, forwarded.
    match unsafe { copy_then_judge(context) } {
        Ok(fields) => fields,
        Err(v) => report::fatal(Finding::Violation(v)),
    }
}

/// Calls the owner's reaction when `result` is a refusal.
fn after(context: *mut c_void, o: Fields, result: *mut c_void) -> *mut c_void {
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

#[cfg(test)]
mod tests {
    use core::cell::RefCell;

    use super::*;
    use crate::violation::ViolationKind;

    std::thread_local! {
        /// An owner the test frees inside [`copy_then_judge`]'s window, on this thread.
        static FREE_IN_WINDOW: RefCell<Option<OwnerBox>> = const { RefCell::new(None) };
    }

    /// Called between the copy and the judgement: frees the owner the test put there, as
    /// another session of the racy control does at the worst moment.
    pub(super) fn between_copy_and_judge() {
        FREE_IN_WINDOW.with(|o| drop(o.borrow_mut().take()));
    }

    fn on_refusal(_: *const CanaryOwner) {}

    #[test]
    fn a_live_owner_hands_over_its_fields() {
        let owner = CanaryOwner::try_boxed_with(Some(on_refusal)).unwrap();
        let context = (&*owner as *const CanaryOwner).cast_mut().cast();
        // SAFETY: a live owner from OWNER_HEAP.
        let fields = unsafe { copy_then_judge(context) }.unwrap();
        assert!(core::ptr::eq(fields.heap, &DATA_TABLE));
        assert!(
            fields
                .on_refusal
                .is_some_and(|f| core::ptr::fn_addr_eq(f, on_refusal as OnRefusal))
        );
    }

    /// The racy control's SIGSEGV: an owner freed by another session after the callback
    /// looked at it. Whatever the callback read must either be judged a use-after-free or be
    /// the live owner's fields, never the free fill handed on as a table to call through.
    #[test]
    fn an_owner_freed_while_a_callback_reads_it_is_a_use_after_free() {
        let owner = CanaryOwner::try_boxed_with(Some(on_refusal)).unwrap();
        let context = (&*owner as *const CanaryOwner).cast_mut().cast();
        FREE_IN_WINDOW.with(|o| *o.borrow_mut() = Some(owner));
        // The owner is freed into OWNER_HEAP's quarantine during the call: still readable.
        // SAFETY: an owner from OWNER_HEAP, live or in its quarantine.
        let judged = unsafe { copy_then_judge(context) };
        assert!(
            FREE_IN_WINDOW.with(|o| o.borrow().is_none()),
            "freed in the window"
        );
        match judged {
            Err(v) => assert!(
                matches!(v.kind, ViolationKind::UseAfterFree { .. }),
                "judged {v:?}"
            ),
            Ok(f) => panic!(
                "a freed owner's copy was handed on: heap at {:p} (DATA_TABLE at {:p})",
                f.heap, &DATA_TABLE
            ),
        }
    }
}
