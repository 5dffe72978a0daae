//! A wrapper that counts what passes through it, on per-thread shards: no lock, and no atomic
//! read-modify-write on a shared cache line in the common case.

use core::alloc::Layout;
use core::cell::Cell;
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{
    AtomicIsize, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use allocator_api2::alloc::{AllocError, Allocator};

use crate::{Request, RequestAllocator, SizelessFree};

/// Thread slots with a private shard. A thread claims the lowest free slot at its first
/// counted call and gives it back when it exits; threads beyond this many live at once, and a
/// thread's calls made after its slot was given back (other thread-local destructors), use the
/// shared shard with atomic read-modify-writes.
const SLOTS: usize = 64;
/// The index of the shared shard.
const SHARED: usize = SLOTS;
/// A thread that has not claimed a slot yet.
const UNSET: usize = usize::MAX;

/// Bit `i` set: slot `i` belongs to a live thread (its shard has exactly one writer).
static SLOTS_TAKEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's slot: `UNSET`, a private slot below `SLOTS`, or `SHARED`. Constant
    /// initialised and without a destructor, so reading it is one load and never fails.
    static SLOT: Cell<usize> = const { Cell::new(UNSET) };
    /// Gives the slot back when the thread exits (registered before a slot is claimed).
    static RELEASE: SlotRelease = const { SlotRelease };
}

struct SlotRelease;

impl Drop for SlotRelease {
    fn drop(&mut self) {
        // From here on this thread counts on the shared shard (other destructors may still
        // allocate), and its slot may go to a new thread: the `Release` hands over the
        // shard's values to the next owner's `Acquire`.
        let slot = SLOT.with(|s| s.replace(SHARED));
        if slot < SLOTS {
            SLOTS_TAKEN.fetch_and(!(1u64 << slot), Release);
        }
    }
}

/// This thread's shard index.
#[inline(always)]
fn slot() -> usize {
    let s = SLOT.with(Cell::get);
    if s != UNSET { s } else { claim_slot() }
}

#[cold]
#[inline(never)]
fn claim_slot() -> usize {
    // Register the release first: a thread that cannot (it is already being torn down) must
    // never own a slot it would not give back.
    let slot = if RELEASE.try_with(|_| ()).is_err() {
        SHARED
    } else {
        let mut taken = SLOTS_TAKEN.load(Relaxed);
        loop {
            if taken == u64::MAX {
                break SHARED;
            }
            let free = (!taken).trailing_zeros() as usize;
            // `Acquire` pairs with the previous owner's `Release` in `SlotRelease::drop`.
            match SLOTS_TAKEN.compare_exchange_weak(taken, taken | (1u64 << free), Acquire, Relaxed)
            {
                Ok(_) => break free,
                Err(now) => taken = now,
            }
        }
    };
    SLOT.with(|s| s.set(slot));
    slot
}

/// One thread slot's counters, alone on its cache lines (128 bytes: the adjacent-line
/// prefetcher pulls lines in pairs).
#[repr(align(128))]
struct Shard {
    allocations: AtomicU64,
    deallocations: AtomicU64,
    reallocations: AtomicU64,
    failures: AtomicU64,
    /// Bytes allocated minus bytes freed through this slot (below zero when this slot frees
    /// blocks other slots allocated).
    live: AtomicIsize,
    /// The highest `live` this slot has seen.
    peak: AtomicIsize,
}

impl Shard {
    const fn new() -> Self {
        Shard {
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
            reallocations: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            live: AtomicIsize::new(0),
            peak: AtomicIsize::new(0),
        }
    }
}

/// Adds to a counter: a plain load and store on a private shard (its one writer is this
/// thread), an atomic add on the shared one.
#[inline(always)]
fn add_u64(shared: bool, c: &AtomicU64, n: u64) {
    if shared {
        c.fetch_add(n, Relaxed);
    } else {
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

#[inline(always)]
fn add_live(shared: bool, shard: &Shard, bytes: isize) {
    if shared {
        let now = shard.live.fetch_add(bytes, Relaxed).wrapping_add(bytes);
        if bytes > 0 {
            shard.peak.fetch_max(now, Relaxed);
        }
    } else {
        let now = shard.live.load(Relaxed).wrapping_add(bytes);
        shard.live.store(now, Relaxed);
        if now > shard.peak.load(Relaxed) {
            shard.peak.store(now, Relaxed);
        }
    }
}

/// Counts allocations, frees, resizes, failures, live bytes and peak live bytes of the
/// allocator it wraps.
///
/// The counters live on per-thread shards (64 thread slots, each on its own 128-byte line, and
/// one shared shard for threads beyond those), summed by [`stats`](Self::stats): counting
/// takes no lock and, on a thread's own slot, does no atomic read-modify-write, so threads
/// allocating at once do not serialize on a cache line. A snapshot taken while other threads
/// allocate is a consistent-enough picture, not an atomic one; once the threads that counted
/// are quiescent (joined, or synchronized with the reader) every count and `live_bytes` is
/// exact, whichever threads allocated and freed and however many have exited (a slot's
/// values stay in its shard and pass to the next thread that claims it).
///
/// Bytes are the `Layout` sizes for the Rust face ([`Allocator`]); through a headerless C table
/// ([`SizelessFree`]) they are the sizes the backend reports for each block (its accounted
/// size: glibc's usable size, mimalloc's whole block), taken at allocation and again at free,
/// so they balance exactly too.
///
/// `peak_bytes` is the sum of each thread slot's own high-water mark: exactly the peak when
/// one thread allocates and frees (as before), and never below the true peak; when threads
/// free blocks that other threads allocated (a producer and a consumer), it over-states the
/// peak, up to the total allocated by the producing threads. It is not the exact peak of the
/// process-wide sum, which would need a shared counter on every call.
///
/// # Uncounted mode
///
/// [`Counting::uncounted`] builds the same type with counting switched off for its whole
/// life: every call checks one flag that never changes (a perfectly predicted branch) and
/// goes straight to the wrapped allocator. Through a headerless C table
/// ([`SizelessFree`]) that is the backend's plain `alloc`/`free`, with no usable-size lookup,
/// so a table of an uncounted wrapper costs what a table of the bare backend costs.
/// [`stats`](Self::stats) then reads all zeros and [`is_counted`](Self::is_counted) is false:
/// no live-bytes accounting, no peak, no failure count, and no leak check can be made from
/// these counters. [`Counting::new`] (and `Default`) count, as always.
pub struct Counting<A> {
    inner: A,
    /// False for [`Counting::uncounted`]: no counting at all. Fixed at construction.
    counted: bool,
    /// `SLOTS` private shards, then the shared one.
    shards: [Shard; SLOTS + 1],
}

impl<A: fmt::Debug> fmt::Debug for Counting<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting")
            .field("inner", &self.inner)
            .field("counted", &self.counted)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<A: Default> Default for Counting<A> {
    fn default() -> Self {
        Counting::new(A::default())
    }
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
    /// The most bytes that were ever live at once: exact when one thread allocates and frees,
    /// otherwise an upper bound (see [`Counting`]).
    pub peak_bytes: usize,
}

impl<A> Counting<A> {
    /// Wraps `inner`, all counters at zero.
    pub const fn new(inner: A) -> Self {
        Counting {
            inner,
            counted: true,
            shards: [const { Shard::new() }; SLOTS + 1],
        }
    }

    /// Wraps `inner` without counting, for the whole life of the wrapper: every call goes
    /// straight to `inner` after one check of a flag that never changes, and
    /// [`stats`](Self::stats) reads all zeros (see the type's docs for what that gives up).
    /// For an owner whose runtime needs no per-owner statistics and wants the C table as
    /// thin as the backend itself.
    pub const fn uncounted(inner: A) -> Self {
        Counting {
            inner,
            counted: false,
            shards: [const { Shard::new() }; SLOTS + 1],
        }
    }

    /// False for a wrapper built by [`uncounted`](Self::uncounted), whose
    /// [`stats`](Self::stats) are always zero.
    #[inline]
    pub const fn is_counted(&self) -> bool {
        self.counted
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }

    /// A snapshot of the counters: the sum of every shard. All zeros for an
    /// [`uncounted`](Self::uncounted) wrapper.
    pub fn stats(&self) -> CountingStats {
        let mut s = CountingStats::default();
        if !self.counted {
            return s;
        }
        let (mut live, mut peak) = (0isize, 0isize);
        for shard in &self.shards {
            s.allocations = s.allocations.wrapping_add(shard.allocations.load(Relaxed));
            s.deallocations = s
                .deallocations
                .wrapping_add(shard.deallocations.load(Relaxed));
            s.reallocations = s
                .reallocations
                .wrapping_add(shard.reallocations.load(Relaxed));
            s.failures = s.failures.wrapping_add(shard.failures.load(Relaxed));
            live = live.wrapping_add(shard.live.load(Relaxed));
            peak = peak.wrapping_add(shard.peak.load(Relaxed));
        }
        s.live_bytes = live as usize;
        // While threads run, a sum of shards read at different moments can put `live` above
        // the sum of peaks; a peak is never below what is live.
        s.peak_bytes = peak.max(live) as usize;
        s
    }

    /// Runs `f` on this thread's shard, telling it whether that is the shared one.
    #[inline(always)]
    fn with_shard(&self, f: impl FnOnce(&Shard, bool)) {
        let s = SLOT.with(Cell::get);
        if s < SLOTS {
            f(&self.shards[s], false);
        } else {
            self.with_other_shard(f);
        }
    }

    /// A thread with no private slot yet (it claims one now) or none at all (shared).
    #[cold]
    #[inline(never)]
    fn with_other_shard(&self, f: impl FnOnce(&Shard, bool)) {
        let s = slot();
        let i = s.min(SHARED);
        f(&self.shards[i], i == SHARED);
    }

    #[inline]
    fn count_alloc(&self, bytes: usize) {
        self.with_shard(|shard, shared| {
            add_u64(shared, &shard.allocations, 1);
            add_live(shared, shard, bytes as isize);
        });
    }

    #[inline]
    fn count_free(&self, bytes: usize) {
        self.with_shard(|shard, shared| {
            add_u64(shared, &shard.deallocations, 1);
            // A free only lowers `live`: no peak to check.
            if shared {
                shard.live.fetch_sub(bytes as isize, Relaxed);
            } else {
                let live = &shard.live;
                live.store(live.load(Relaxed).wrapping_sub(bytes as isize), Relaxed);
            }
        });
    }

    #[inline]
    fn count_resize(&self, old: usize, new: usize) {
        self.with_shard(|shard, shared| {
            add_u64(shared, &shard.reallocations, 1);
            add_live(shared, shard, (new as isize).wrapping_sub(old as isize));
        });
    }

    #[cold]
    fn count_failure(&self) {
        self.with_shard(|shard, shared| add_u64(shared, &shard.failures, 1));
    }

    #[inline]
    fn track(
        &self,
        r: Result<NonNull<[u8]>, AllocError>,
        layout: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        match r {
            Ok(_) => self.count_alloc(layout.size()),
            Err(_) => self.count_failure(),
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
            Ok(_) => self.count_resize(old.size(), new.size()),
            Err(_) => self.count_failure(),
        }
        r
    }

    #[inline]
    fn track_raw(&self, (p, usable): (*mut u8, usize)) -> (*mut u8, usize) {
        if p.is_null() {
            self.count_failure();
        } else {
            self.count_alloc(usable);
        }
        (p, usable)
    }
}

// SAFETY: every call forwards to the wrapped allocator with the caller's own arguments, so
// the wrapped allocator's guarantees are ours; the counters do not touch memory.
unsafe impl<A: Allocator> RequestAllocator for Counting<A> {
    #[inline]
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        let r = unsafe { request.forward_to(&self.inner) };
        if !self.counted {
            return r;
        }
        match request.resized() {
            None => self.track(r, request.layout()),
            Some((_, old)) => self.track_resize(r, old, request.layout()),
        }
    }

    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise about `ptr` and `layout` is forwarded unchanged.
        unsafe { self.inner.deallocate(ptr, layout) };
        if self.counted {
            self.count_free(layout.size());
        }
    }
}
crate::allocator_from_requests!([A: Allocator] Counting<A>);

// SAFETY: every call forwards to the wrapped backend with the caller's own arguments (so its
// guarantees are ours) and only adds counting; the accounted sizes it reports are the
// backend's own reports, passed through unchanged.
unsafe impl<B: SizelessFree> SizelessFree for Counting<B> {
    #[inline]
    fn alloc(&self, size: usize) -> *mut u8 {
        if self.counted {
            return self.counted_alloc(size);
        }
        self.inner.alloc(size)
    }

    #[inline]
    fn alloc_aligned(&self, size: usize, align: usize) -> *mut u8 {
        if self.counted {
            return self.counted_alloc_aligned(size, align);
        }
        self.inner.alloc_aligned(size, align)
    }

    #[inline]
    fn alloc_usable(&self, size: usize) -> (*mut u8, usize) {
        let r = self.inner.alloc_usable(size);
        if !self.counted {
            return r;
        }
        self.track_raw(r)
    }

    #[inline]
    fn alloc_aligned_usable(&self, size: usize, align: usize) -> (*mut u8, usize) {
        let r = self.inner.alloc_aligned_usable(size, align);
        if !self.counted {
            return r;
        }
        self.track_raw(r)
    }

    #[inline]
    unsafe fn free_counted(&self, ptr: *mut u8, count: impl FnOnce(usize)) {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        unsafe {
            self.inner.free_counted(ptr, |bytes| {
                if self.counted {
                    self.count_free(bytes);
                }
                count(bytes);
            })
        }
    }

    #[inline]
    unsafe fn realloc_usable(&self, ptr: *mut u8, size: usize) -> (*mut u8, usize, usize) {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        let r = unsafe { self.inner.realloc_usable(ptr, size) };
        if self.counted {
            self.resized(r);
        }
        r
    }

    #[inline]
    unsafe fn realloc_aligned_usable(
        &self,
        ptr: *mut u8,
        size: usize,
        align: usize,
    ) -> (*mut u8, usize, usize) {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        let r = unsafe { self.inner.realloc_aligned_usable(ptr, size, align) };
        if self.counted {
            self.resized(r);
        }
        r
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
        if self.counted {
            // SAFETY: `ptr` is a live block of the backend (the caller's promise).
            return unsafe { self.counted_realloc(ptr, size) };
        }
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        unsafe { self.inner.realloc(ptr, size) }
    }

    #[inline]
    unsafe fn realloc_aligned(&self, ptr: *mut u8, size: usize, align: usize) -> *mut u8 {
        if self.counted {
            // SAFETY: `ptr` is a live block of the backend (the caller's promise).
            return unsafe { self.counted_realloc_aligned(ptr, size, align) };
        }
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        unsafe { self.inner.realloc_aligned(ptr, size, align) }
    }

    #[inline]
    unsafe fn free(&self, ptr: *mut u8) {
        if self.counted {
            // SAFETY: `ptr` is a live block of the backend (the caller's promise).
            return unsafe { self.counted_free(ptr) };
        }
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        unsafe { self.inner.free(ptr) }
    }

    #[inline]
    unsafe fn usable_size(&self, ptr: *mut u8) -> usize {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.inner.usable_size(ptr) }
    }
}

/// The counted paths of the headerless face, out of line and `extern "C"` so that they cannot
/// unwind: the function a headerless table calls is then one flag test and a tail jump, to the
/// backend (uncounted) or to these (counted), and the uncounted path pays for none of the
/// counted path's registers or unwinding pads. Counting itself never panics; a wrapped
/// [`SizelessFree`] backend that panics inside one of these aborts the process (the built-in
/// ones are C and cannot; through an uncounted wrapper the table still turns a panicking
/// allocation into NULL).
impl<B: SizelessFree> Counting<B> {
    #[inline(never)]
    extern "C" fn counted_alloc(&self, size: usize) -> *mut u8 {
        self.track_raw(self.inner.alloc_usable(size)).0
    }

    #[inline(never)]
    extern "C" fn counted_alloc_aligned(&self, size: usize, align: usize) -> *mut u8 {
        self.track_raw(self.inner.alloc_aligned_usable(size, align))
            .0
    }

    /// # Safety
    /// `ptr` is a live block of the backend.
    #[inline(never)]
    unsafe extern "C" fn counted_free(&self, ptr: *mut u8) {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        unsafe { self.inner.free_counted(ptr, |bytes| self.count_free(bytes)) }
    }

    /// # Safety
    /// `ptr` is a live block of the backend.
    #[inline(never)]
    unsafe extern "C" fn counted_realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        self.resized(unsafe { self.inner.realloc_usable(ptr, size) })
    }

    /// # Safety
    /// `ptr` is a live block of the backend.
    #[inline(never)]
    unsafe extern "C" fn counted_realloc_aligned(
        &self,
        ptr: *mut u8,
        size: usize,
        align: usize,
    ) -> *mut u8 {
        // SAFETY: `ptr` is a live block of the backend (the caller's promise).
        self.resized(unsafe { self.inner.realloc_aligned_usable(ptr, size, align) })
    }

    /// Counts a resize the backend reported as `(p, old, new)`: a failure when `p` is NULL.
    #[inline]
    fn resized(&self, (p, old, new): (*mut u8, usize, usize)) -> *mut u8 {
        if p.is_null() {
            self.count_failure();
        } else {
            self.count_resize(old, new);
        }
        p
    }
}
