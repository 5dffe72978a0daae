//! A wrapper that refuses any allocation that would take live bytes past a cap.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use allocator_api2::alloc::{AllocError, Allocator};

use crate::{Request, RequestAllocator};

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
unsafe impl<A: Allocator> RequestAllocator for Limited<A> {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let forward = || unsafe { request.forward_to(&self.inner) };
        match request {
            // A shrink asks for nothing, and gives bytes back once it has succeeded.
            Request::Shrink { old, new, .. } => {
                forward().inspect(|_| self.release(old.size() - new.size()))
            }
            _ => self.reserved(request.added_bytes(), forward),
        }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.inner.deallocate(ptr, layout) };
        self.release(layout.size());
    }
}
crate::allocator_from_requests!([A: Allocator] Limited<A>);
