//! A wrapper that counts what passes through it, with relaxed atomics and no lock.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use allocator_api2::alloc::{AllocError, Allocator};

/// Counts allocations, frees, resizes, failures, live bytes and peak live bytes of the
/// allocator it wraps.
///
/// Every counter is a relaxed atomic: counting never takes a lock and never orders memory, so
/// a snapshot taken while other threads allocate is a consistent-enough picture, not an
/// atomic one. Bytes are the `Layout` sizes requested from the wrapped allocator.
#[derive(Debug, Default)]
pub struct Counting<A> {
    inner: A,
    allocations: AtomicU64,
    deallocations: AtomicU64,
    reallocations: AtomicU64,
    failures: AtomicU64,
    live_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
}

/// A snapshot of a [`Counting`] wrapper's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountingStats {
    /// Successful `allocate`/`allocate_zeroed` calls.
    pub allocations: u64,
    /// `deallocate` calls.
    pub deallocations: u64,
    /// Successful `grow`/`shrink` calls (a block that moved is not counted as alloc + free).
    pub reallocations: u64,
    /// Requests the wrapped allocator refused.
    pub failures: u64,
    /// Bytes currently allocated.
    pub live_bytes: usize,
    /// The most bytes that were ever live at once.
    pub peak_bytes: usize,
}

impl<A> Counting<A> {
    /// Wraps `inner`, all counters at zero.
    pub const fn new(inner: A) -> Self {
        Counting {
            inner,
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
            reallocations: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            live_bytes: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
        }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CountingStats {
        CountingStats {
            allocations: self.allocations.load(Relaxed),
            deallocations: self.deallocations.load(Relaxed),
            reallocations: self.reallocations.load(Relaxed),
            failures: self.failures.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
            peak_bytes: self.peak_bytes.load(Relaxed),
        }
    }

    #[inline]
    fn add_live(&self, bytes: usize) {
        let now = self
            .live_bytes
            .fetch_add(bytes, Relaxed)
            .wrapping_add(bytes);
        self.peak_bytes.fetch_max(now, Relaxed);
    }

    #[inline]
    fn track(
        &self,
        r: Result<NonNull<[u8]>, AllocError>,
        layout: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        match r {
            Ok(_) => {
                self.allocations.fetch_add(1, Relaxed);
                self.add_live(layout.size());
            }
            Err(_) => {
                self.failures.fetch_add(1, Relaxed);
            }
        }
        r
    }

    #[inline]
    fn track_resize(
        &self,
        r: Result<NonNull<[u8]>, AllocError>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        match r {
            Ok(_) => {
                self.reallocations.fetch_add(1, Relaxed);
                if new.size() >= old.size() {
                    self.add_live(new.size() - old.size());
                } else {
                    self.live_bytes.fetch_sub(old.size() - new.size(), Relaxed);
                }
            }
            Err(_) => {
                self.failures.fetch_add(1, Relaxed);
            }
        }
        r
    }
}

// SAFETY: every call forwards to the wrapped allocator with the caller's own arguments, so
// the wrapped allocator's guarantees are ours; the counters do not touch memory.
unsafe impl<A: Allocator> Allocator for Counting<A> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.track(self.inner.allocate(layout), layout)
    }

    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.track(self.inner.allocate_zeroed(layout), layout)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise about `ptr` and `layout` is forwarded unchanged.
        unsafe { self.inner.deallocate(ptr, layout) };
        self.deallocations.fetch_add(1, Relaxed);
        self.live_bytes.fetch_sub(layout.size(), Relaxed);
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let r = unsafe { self.inner.grow(ptr, old, new) };
        self.track_resize(r, old, new)
    }

    #[inline]
    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let r = unsafe { self.inner.grow_zeroed(ptr, old, new) };
        self.track_resize(r, old, new)
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let r = unsafe { self.inner.shrink(ptr, old, new) };
        self.track_resize(r, old, new)
    }
}
