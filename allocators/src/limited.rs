//! A wrapper that refuses any allocation that would take live bytes past a cap.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use allocator_api2::alloc::{AllocError, Allocator};

/// Refuses (with `AllocError`, or NULL through the C table) any request that would take the
/// bytes it has handed out past `cap`. Frees give the bytes back, so a refused caller can
/// succeed again later. Lock-free: a reservation is one compare-and-swap loop.
#[derive(Debug)]
pub struct Limited<A> {
    inner: A,
    cap: usize,
    used: AtomicUsize,
}

impl<A> Limited<A> {
    /// Wraps `inner` with a cap of `cap` live bytes.
    pub const fn new(inner: A, cap: usize) -> Self {
        Limited {
            inner,
            cap,
            used: AtomicUsize::new(0),
        }
    }

    /// The cap, in bytes.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes currently handed out.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    fn reserve(&self, bytes: usize) -> Result<(), AllocError> {
        self.used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.cap)
            })
            .map(drop)
            .map_err(|_| AllocError)
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Relaxed);
    }

    fn reserved<T>(
        &self,
        bytes: usize,
        f: impl FnOnce() -> Result<T, AllocError>,
    ) -> Result<T, AllocError> {
        self.reserve(bytes)?;
        f().inspect_err(|_| self.release(bytes))
    }
}

// SAFETY: every successful call is the wrapped allocator's own result for the caller's own
// arguments; the byte accounting never touches memory.
unsafe impl<A: Allocator> Allocator for Limited<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.reserved(layout.size(), || self.inner.allocate(layout))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.reserved(layout.size(), || self.inner.allocate_zeroed(layout))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.inner.deallocate(ptr, layout) };
        self.release(layout.size());
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        self.reserved(new.size() - old.size(), || unsafe {
            self.inner.grow(ptr, old, new)
        })
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        self.reserved(new.size() - old.size(), || unsafe {
            self.inner.grow_zeroed(ptr, old, new)
        })
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let r = unsafe { self.inner.shrink(ptr, old, new) };
        if r.is_ok() {
            self.release(old.size() - new.size());
        }
        r
    }
}
