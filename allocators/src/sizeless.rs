//! Backends that free a block without being told its size: the C table needs no header for
//! them.
//!
//! glibc's `free` and mimalloc's `mi_free` find a block's size themselves, and
//! `malloc_usable_size` / `mi_usable_size` tell it to anyone who asks. For such a backend
//! [`AllocatorTable`](crate::AllocatorTable) hands the backend's own pointer to C and frees it
//! with the backend's own `free`: no 16-byte (or alignment-sized) header, no padding, and an
//! over-aligned request costs what the backend charges for it, nothing more.

#[cfg(any(
    feature = "mimalloc",
    all(target_os = "linux", target_env = "gnu", not(miri))
))]
use core::ffi::c_void;

#[cfg(any(
    feature = "mimalloc",
    all(target_os = "linux", target_env = "gnu", not(miri))
))]
use crate::TABLE_MIN_ALIGN;

/// A backend whose blocks can be freed, resized and measured from the pointer alone.
///
/// The table built by [`AllocatorTable::for_sizeless`](crate::AllocatorTable::for_sizeless)
/// (and by [`for_allocator`](crate::AllocatorTable::for_allocator) for the built-in sizeless
/// backends) calls these functions directly, with no header before the block.
///
/// # Safety
/// An implementation promises, for every call from any thread:
/// * `alloc(size)` returns NULL or a block of at least `size` bytes aligned to
///   [`TABLE_MIN_ALIGN`]; `size == 0` gives a unique block (or NULL when memory runs out);
///   any size, `usize::MAX` included, is accepted (NULL when it cannot be served);
/// * `alloc_aligned(size, align)` (with `align` a power of two greater than
///   [`TABLE_MIN_ALIGN`]) returns NULL or a block of at least `size` bytes aligned to `align`;
/// * `realloc(ptr, size)` and `realloc_aligned(ptr, size, align)` (with `size >= 1`, `ptr` a
///   live block of this backend from any of its allocating functions) return NULL and leave
///   `ptr` valid and unchanged, or return a block aligned to [`TABLE_MIN_ALIGN`] (to `align`)
///   holding the first `min(usable_size(ptr), size)` bytes of `ptr`, after which `ptr` is no
///   longer live;
/// * `free(ptr)` releases a live block of this backend, whichever function made it;
/// * `usable_size(ptr)` is at least the size asked for and does not change while the block
///   is live;
/// * the `_usable` functions report each block's *accounted size*, fixed for the block's
///   life: what [`alloc_usable`](Self::alloc_usable), [`alloc_aligned_usable`](Self::alloc_aligned_usable)
///   and the `new` of a resize report for a block is what [`free_counted`](Self::free_counted)
///   (and so [`free_usable`](Self::free_usable)) and the `old` of a resize report for it (accounting that adds one and subtracts the
///   other balances). By default it is `usable_size`; a backend whose allocator reports a
///   block's size as it allocates and frees (mimalloc's `mi_umalloc`/`mi_ufree`: the whole
///   block, at no extra lookup) may report that instead.
pub unsafe trait SizelessFree: Sync {
    /// Allocates `size` bytes aligned to [`TABLE_MIN_ALIGN`].
    fn alloc(&self, size: usize) -> *mut u8;
    /// Allocates `size` bytes aligned to `align` (a power of two above [`TABLE_MIN_ALIGN`]).
    fn alloc_aligned(&self, size: usize, align: usize) -> *mut u8;
    /// Resizes to `size >= 1` bytes aligned to [`TABLE_MIN_ALIGN`], keeping the contents.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    unsafe fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8;
    /// Resizes to `size >= 1` bytes aligned to `align` (a power of two above
    /// [`TABLE_MIN_ALIGN`]), keeping the contents.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    unsafe fn realloc_aligned(&self, ptr: *mut u8, size: usize, align: usize) -> *mut u8;
    /// Frees a block, with no size.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    unsafe fn free(&self, ptr: *mut u8);
    /// The block's usable size (at least what was asked for, stable while it is live).
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    unsafe fn usable_size(&self, ptr: *mut u8) -> usize;

    /// [`alloc`](Self::alloc), and the block's accounted size (0 with NULL). A backend that
    /// learns the size while allocating (mimalloc's `mi_umalloc`) overrides it, so that
    /// accounting costs no second lookup.
    #[inline]
    fn alloc_usable(&self, size: usize) -> (*mut u8, usize) {
        let p = self.alloc(size);
        if p.is_null() {
            return (p, 0);
        }
        // SAFETY: `p` is a live block just returned.
        (p, unsafe { self.usable_size(p) })
    }

    /// [`alloc_aligned`](Self::alloc_aligned), and the block's accounted size (0 with NULL).
    #[inline]
    fn alloc_aligned_usable(&self, size: usize, align: usize) -> (*mut u8, usize) {
        let p = self.alloc_aligned(size, align);
        if p.is_null() {
            return (p, 0);
        }
        // SAFETY: `p` is a live block just returned.
        (p, unsafe { self.usable_size(p) })
    }

    /// [`free`](Self::free), handing the block's accounted size to `count`: by default
    /// measured before the free, so that the free is the last call (a tail call); a backend
    /// whose free reports the size (mimalloc's `mi_ufree`) hands it over after.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    #[inline]
    unsafe fn free_counted(&self, ptr: *mut u8, count: impl FnOnce(usize)) {
        // SAFETY: the caller's promise; the block is measured before it is freed.
        unsafe {
            count(self.usable_size(ptr));
            self.free(ptr)
        }
    }

    /// [`free`](Self::free), returning the accounted size the block had (what
    /// [`free_counted`](Self::free_counted) reports).
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    #[inline]
    unsafe fn free_usable(&self, ptr: *mut u8) -> usize {
        let mut n = 0;
        // SAFETY: the caller's promise.
        unsafe { self.free_counted(ptr, |bytes| n = bytes) };
        n
    }

    /// [`realloc`](Self::realloc), with `(p, old, new)`: `new - old` is the change in
    /// accounted size. When the block moves, `old` is the old block's accounted size and `new`
    /// the new one's; when it stays, they may be any equal pair. When `p` is NULL nothing
    /// changed (`ptr` is still live with its size) and `old`/`new` mean nothing.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    #[inline]
    unsafe fn realloc_usable(&self, ptr: *mut u8, size: usize) -> (*mut u8, usize, usize) {
        // SAFETY: the caller's promise, for both the measuring and the resize.
        unsafe { measured_resize(self, ptr, || self.realloc(ptr, size)) }
    }

    /// [`realloc_aligned`](Self::realloc_aligned), with the accounted sizes as
    /// [`realloc_usable`](Self::realloc_usable) reports them.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    #[inline]
    unsafe fn realloc_aligned_usable(
        &self,
        ptr: *mut u8,
        size: usize,
        align: usize,
    ) -> (*mut u8, usize, usize) {
        // SAFETY: the caller's promise, for both the measuring and the resize.
        unsafe { measured_resize(self, ptr, || self.realloc_aligned(ptr, size, align)) }
    }
}

/// A resize measured by `usable_size`: the old block before `resize` runs, the new one after
/// (0 when it failed), for the default `realloc_usable` and `realloc_aligned_usable`.
///
/// # Safety
/// `ptr` is a live block of `b`, and `resize` resizes it as `SizelessFree::realloc` does.
#[inline]
unsafe fn measured_resize<B: SizelessFree + ?Sized>(
    b: &B,
    ptr: *mut u8,
    resize: impl FnOnce() -> *mut u8,
) -> (*mut u8, usize, usize) {
    // SAFETY: `ptr` is live until `resize` runs, and the block it returns is live after.
    unsafe {
        let old = b.usable_size(ptr);
        let p = resize();
        let new = if p.is_null() { 0 } else { b.usable_size(p) };
        (p, old, new)
    }
}

/// glibc's allocator, called by its C names (what `std::alloc::System` calls underneath).
#[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
mod glibc {
    use super::*;
    use crate::System;

    unsafe extern "C" {
        fn malloc(size: usize) -> *mut c_void;
        fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
        fn free(ptr: *mut c_void);
        fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32;
        fn malloc_usable_size(ptr: *mut c_void) -> usize;
    }

    // glibc's MALLOC_ALIGNMENT is 16 on every 64-bit target (and on i386 since 2.26).
    const _: () = assert!(TABLE_MIN_ALIGN == 16);

    // SAFETY: glibc's `malloc` returns 16-aligned blocks (MALLOC_ALIGNMENT) and a unique block
    // for size 0; `posix_memalign` accepts any power-of-two multiple of `sizeof(void*)`, which
    // every alignment above 16 is; `realloc` with a non-zero size keeps the contents and
    // leaves the old block alone when it fails; `free` takes any of these blocks; and
    // `malloc_usable_size` is fixed while a block is live. `realloc_aligned` moves by copying
    // at most the old usable size.
    unsafe impl super::SizelessFree for System {
        #[inline]
        fn alloc(&self, size: usize) -> *mut u8 {
            // SAFETY: `malloc` accepts any size.
            unsafe { malloc(size).cast() }
        }
        #[inline]
        fn alloc_aligned(&self, size: usize, align: usize) -> *mut u8 {
            let mut out = core::ptr::null_mut();
            // SAFETY: `align` is a power of two above 16, so a multiple of `sizeof(void*)`.
            match unsafe { posix_memalign(&mut out, align, size) } {
                0 => out.cast(),
                _ => core::ptr::null_mut(),
            }
        }
        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
            // SAFETY: `ptr` is a live glibc block and `size >= 1` (so `realloc` never frees).
            unsafe { realloc(ptr.cast(), size.max(1)).cast() }
        }
        unsafe fn realloc_aligned(&self, ptr: *mut u8, size: usize, align: usize) -> *mut u8 {
            // glibc has no aligned realloc: allocate, copy what both blocks hold, free.
            let fresh = self.alloc_aligned(size, align);
            if !fresh.is_null() {
                // SAFETY: `ptr` is live with `malloc_usable_size(ptr)` bytes, `fresh` holds `size`; the two are distinct blocks.
                unsafe {
                    let keep = malloc_usable_size(ptr.cast()).min(size);
                    core::ptr::copy_nonoverlapping(ptr, fresh, keep);
                    free(ptr.cast());
                }
            }
            fresh
        }
        #[inline]
        unsafe fn free(&self, ptr: *mut u8) {
            // SAFETY: `ptr` is a live glibc block.
            unsafe { free(ptr.cast()) }
        }
        #[inline]
        unsafe fn usable_size(&self, ptr: *mut u8) -> usize {
            // SAFETY: `ptr` is a live glibc block.
            unsafe { malloc_usable_size(ptr.cast()) }
        }
    }
}

#[cfg(feature = "mimalloc")]
mod mi {
    use super::*;
    use crate::Mimalloc;
    use libmimalloc_sys as ffi;

    // `mi_usable_size` is behind libmimalloc-sys's `extended` feature, and the `u` entry
    // points (which report the block's size while allocating, resizing and freeing, at no
    // extra lookup) are mimalloc 3's, which libmimalloc-sys builds unless its `v2` feature is
    // on; the symbols are in the library, so declare them here.
    unsafe extern "C" {
        fn mi_usable_size(p: *const c_void) -> usize;
        fn mi_umalloc(size: usize, block_size: *mut usize) -> *mut c_void;
        fn mi_umalloc_aligned(size: usize, align: usize, block_size: *mut usize) -> *mut c_void;
        fn mi_urealloc(
            p: *mut c_void,
            size: usize,
            block_size_pre: *mut usize,
            block_size_post: *mut usize,
        ) -> *mut c_void;
        fn mi_ufree(p: *mut c_void, block_size: *mut usize);
    }

    // SAFETY: `mi_malloc` of at least 16 bytes is 16-aligned (MI_MAX_ALIGN_SIZE), and the
    // smaller sizes are served as 16; the aligned entry points return blocks of the requested
    // alignment; `mi_realloc`/`mi_realloc_aligned` keep the contents and leave the old block
    // valid when they fail; `mi_free` frees any mimalloc block; `mi_usable_size` is fixed
    // while a block is live. The accounted size is the whole block, as mimalloc's `u` entry
    // points report it (`mi_page_usable_block_size` of the block's page, in every one of
    // them), fixed for the block's life.
    unsafe impl super::SizelessFree for Mimalloc {
        #[inline]
        fn alloc(&self, size: usize) -> *mut u8 {
            // `mi_malloc` through the main heap's `mi_heap_malloc` (one jump fewer).
            crate::mimalloc::malloc(size.max(TABLE_MIN_ALIGN)).cast()
        }
        #[inline]
        fn alloc_aligned(&self, size: usize, align: usize) -> *mut u8 {
            // SAFETY: plain FFI call; `align` is a power of two.
            unsafe { ffi::mi_malloc_aligned(size, align).cast() }
        }
        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
            // SAFETY: `ptr` is a live mimalloc block; at least 16 bytes keeps 16 alignment.
            unsafe { ffi::mi_realloc(ptr.cast(), size.max(TABLE_MIN_ALIGN)).cast() }
        }
        #[inline]
        unsafe fn realloc_aligned(&self, ptr: *mut u8, size: usize, align: usize) -> *mut u8 {
            // SAFETY: `ptr` is a live mimalloc block; `align` is a power of two.
            unsafe { ffi::mi_realloc_aligned(ptr.cast(), size, align).cast() }
        }
        #[inline]
        unsafe fn free(&self, ptr: *mut u8) {
            // SAFETY: `ptr` is a live mimalloc block.
            unsafe { ffi::mi_free(ptr.cast()) }
        }
        #[inline]
        unsafe fn usable_size(&self, ptr: *mut u8) -> usize {
            // SAFETY: `ptr` is a live mimalloc block.
            unsafe { mi_usable_size(ptr.cast_const().cast()) }
        }
        // Accounting reads the block size that mimalloc's `u` entry points report for the
        // whole block, at allocation, resize and free alike: one page lookup per call (the
        // one the call makes anyway). Reading `mi_usable_size` at free instead costs a second
        // lookup, and would not agree with the `u` reports for a pointer aligned inside its
        // block (an over-aligned request, or a block an aligned resize moved): `mi_usable_size`
        // counts from the pointer, the `u` reports count the whole block (measured: 81920
        // against 32768 after an aligned resize to a 1 << 17 boundary).
        #[inline]
        fn alloc_usable(&self, size: usize) -> (*mut u8, usize) {
            let mut block = 0;
            // SAFETY: plain FFI call; `block` is written only when a block is returned.
            let p = unsafe { mi_umalloc(size.max(TABLE_MIN_ALIGN), &mut block) };
            (p.cast(), if p.is_null() { 0 } else { block })
        }
        #[inline]
        fn alloc_aligned_usable(&self, size: usize, align: usize) -> (*mut u8, usize) {
            let mut block = 0;
            // `block` is written only when a block is returned.
            // SAFETY: plain FFI call; `align` is a power of two.
            let p = unsafe { mi_umalloc_aligned(size, align, &mut block) };
            (p.cast(), if p.is_null() { 0 } else { block })
        }
        #[inline]
        unsafe fn free_counted(&self, ptr: *mut u8, count: impl FnOnce(usize)) {
            let mut block = 0;
            // SAFETY: `ptr` is a live mimalloc block (the caller's promise).
            unsafe { mi_ufree(ptr.cast(), &mut block) };
            count(block);
        }
        #[inline]
        unsafe fn realloc_usable(&self, ptr: *mut u8, size: usize) -> (*mut u8, usize, usize) {
            let (mut old, mut new) = (0, 0);
            // At least 16 bytes keeps 16 alignment.
            let size = size.max(TABLE_MIN_ALIGN);
            // SAFETY: `ptr` is a live mimalloc block (the caller's promise).
            let p = unsafe { mi_urealloc(ptr.cast(), size, &mut old, &mut new) };
            (p.cast(), old, new)
        }
        // mimalloc has no `u` form of its aligned resize, so this is `mi_realloc_aligned`'s
        // own policy over the `u` entry points: keep the block when it is aligned and the
        // new size fits in it with at most half wasted (its accounted size is unchanged),
        // else allocate, copy what both hold, free.
        unsafe fn realloc_aligned_usable(
            &self,
            ptr: *mut u8,
            size: usize,
            align: usize,
        ) -> (*mut u8, usize, usize) {
            // SAFETY: `ptr` is a live mimalloc block (the caller's promise).
            let usable = unsafe { mi_usable_size(ptr.cast_const().cast()) };
            if size <= usable && size >= usable - usable / 2 && (ptr as usize).is_multiple_of(align)
            {
                return (ptr, 0, 0);
            }
            let (fresh, new) = self.alloc_aligned_usable(size, align);
            if fresh.is_null() {
                return (fresh, 0, 0);
            }
            // `ptr` is live with `usable` bytes and `fresh` holds at least `size`.
            // SAFETY: two distinct live blocks; `ptr` is freed once, after the copy.
            let old = unsafe {
                core::ptr::copy_nonoverlapping(ptr, fresh, usable.min(size));
                self.free_usable(ptr)
            };
            (fresh, old, new)
        }
    }
}
