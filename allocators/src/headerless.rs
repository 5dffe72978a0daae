//! The headerless table's entry points: a [`SizelessFree`] backend's own functions, behind
//! the checks of [`AllocatorTable`](crate::AllocatorTable)'s contract (built by
//! `for_sizeless`, and by `for_allocator` for the built-in sizeless backends).

use core::ffi::c_void;
use core::ptr;

use crate::no_unwind::{no_unwind, no_unwind_free};
use crate::{SizelessFree, TABLE_MIN_ALIGN};

/// A headerless `reallocate` keeps alignments up to 2^16 = 64 KiB (see `AllocatorTable`'s
/// docs).
const MAX_KEPT_ALIGN_LOG2: u32 = 16;

#[inline(always)]
pub(crate) fn sizeless_alloc<B: SizelessFree>(b: &B, size: usize) -> *mut c_void {
    no_unwind(ptr::null_mut(), || b.alloc(size).cast())
}

#[inline(always)]
pub(crate) fn sizeless_aligned_alloc<B: SizelessFree>(
    b: &B,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    if !alignment.is_power_of_two() {
        return ptr::null_mut();
    }
    no_unwind(ptr::null_mut(), || {
        if alignment <= TABLE_MIN_ALIGN {
            b.alloc(size).cast()
        } else {
            b.alloc_aligned(size, alignment).cast()
        }
    })
}

/// # Safety
/// `pointer` is NULL or a live block of `b` (from a headerless table of it).
#[inline]
pub(crate) unsafe fn sizeless_realloc<B: SizelessFree>(
    b: &B,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    if pointer.is_null() {
        return sizeless_alloc(b, size);
    }
    // Size 0 keeps a real block (the contract: `reallocate(p, 0)` does not free).
    let size = size.max(1);
    // The block's alignment as its address shows it (at least what it was allocated with, up
    // to the cap): a heap address can be aligned far beyond anything asked (a glibc thread
    // arena starts on a 64 MiB boundary), and no allocator serves a block aligned to 2^35.
    let align = 1usize << (pointer as usize).trailing_zeros().min(MAX_KEPT_ALIGN_LOG2);
    no_unwind(ptr::null_mut(), || {
        // SAFETY: `pointer` is a live block of `b` (the caller's promise).
        unsafe {
            if align <= TABLE_MIN_ALIGN {
                b.realloc(pointer.cast(), size).cast()
            } else {
                b.realloc_aligned(pointer.cast(), size, align).cast()
            }
        }
    })
}

/// # Safety
/// `pointer` is NULL or a live block of `b` (from a headerless table of it).
#[inline(always)]
pub(crate) unsafe fn sizeless_free<B: SizelessFree>(b: &B, pointer: *mut c_void) {
    if !pointer.is_null() {
        // SAFETY: `pointer` is a live block of `b` (the caller's promise).
        no_unwind_free(pointer, || unsafe { b.free(pointer.cast()) });
    }
}

pub(crate) unsafe extern "C" fn sizeless_allocate<B: SizelessFree>(
    context: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: a `for_sizeless::<B>` table's context is a `&'static B`.
    unsafe { sizeless_alloc(&*(context as *const B), size) }
}

pub(crate) unsafe extern "C" fn sizeless_aligned_allocate<B: SizelessFree>(
    context: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: a `for_sizeless::<B>` table's context is a `&'static B`.
    unsafe { sizeless_aligned_alloc(&*(context as *const B), alignment, size) }
}

pub(crate) unsafe extern "C" fn sizeless_reallocate<B: SizelessFree>(
    context: *mut c_void,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: the context is a `&'static B`; `pointer` is NULL or one of the table's blocks.
    unsafe { sizeless_realloc(&*(context as *const B), pointer, size) }
}

pub(crate) unsafe extern "C" fn sizeless_deallocate<B: SizelessFree>(
    context: *mut c_void,
    pointer: *mut c_void,
) {
    // SAFETY: the context is a `&'static B`; `pointer` is NULL or one of the table's blocks.
    unsafe { sizeless_free(&*(context as *const B), pointer) }
}
