//! The real mimalloc, through its aligned entry points.

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{
    AtomicPtr,
    Ordering::{Acquire, Release},
};

use libmimalloc_sys as ffi;

use crate::raw::RawBackend;

/// mimalloc as an [`Allocator`](allocator_api2::alloc::Allocator).
///
/// Over-aligned requests use `mi_malloc_aligned`, `mi_zalloc_aligned` and `mi_realloc_aligned`
/// directly, so they cost what mimalloc charges and are never over-allocated and re-aligned by
/// hand. Requests that mimalloc's plain `mi_malloc` already satisfies (alignment ≤ 8, or ≤ 16
/// for blocks of 16 bytes or more: every mimalloc block is 8-aligned and every block of at
/// least `MI_MAX_ALIGN_SIZE` = 16 bytes is 16-aligned) go to `mi_malloc`/`mi_zalloc`/
/// `mi_realloc`: measured with callgrind, `mi_malloc_aligned(80, 16)` misses mimalloc's
/// aligned fast path and costs about twice the instructions of `mi_malloc(80)`. The
/// allocations among them go in through `mi_heap_malloc` of mimalloc's main heap, which is
/// what `mi_malloc` does but with its fast path inline (see `malloc` below: 4.4 against
/// 5.0 ns per alloc + free of 64 bytes in the `contended` example).
/// Zero-sized and `Copy`; every instance shares mimalloc's heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mimalloc;

impl Mimalloc {
    /// The mimalloc backend.
    pub const fn new() -> Self {
        Mimalloc
    }
}

// mimalloc 3's first-class heaps (libmimalloc-sys builds mimalloc 3 unless its `v2` feature is
// on; the symbols are in the library, so declare them here).
// SAFETY: the signatures are mimalloc.h's (`mi_heap_t*` as an opaque pointer).
unsafe extern "C" {
    fn mi_heap_main() -> *mut c_void;
    fn mi_heap_malloc(heap: *mut c_void, size: usize) -> *mut c_void;
}

/// mimalloc's main heap, read once: `mi_heap_main` calls through two functions, and the heap
/// never moves.
static MAIN_HEAP: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

/// `mi_malloc(size)`: the same block from the same thread-local heap, through
/// `mi_heap_malloc` of mimalloc's main heap. In the library as built, `mi_malloc` is itself a
/// shim (a thread-local load, then a jump to `_mi_theap_malloc_zero`), while `mi_heap_malloc`
/// holds the small-block fast path inline: one jump fewer per allocation, which a C table's
/// entry point (one frame of its own) cannot otherwise save. Measured by the `contended`
/// example and, in C against the same archive, 1.3% faster called directly.
///
/// The main heap is that of mimalloc's main sub-process; a runtime that moves threads into
/// other mimalloc sub-processes (`mi_subproc_add_current_thread`) should not use this backend.
#[inline(always)]
pub(crate) fn malloc(size: usize) -> *mut c_void {
    // `Acquire` pairs with the `Release` below: mimalloc's own writes to the heap are seen.
    let heap = MAIN_HEAP.load(Acquire);
    if heap.is_null() {
        return malloc_first(size);
    }
    // mimalloc 3: each thread allocates from its own part of the main heap.
    // SAFETY: `heap` is mimalloc's main heap, alive for the process, usable from any thread.
    unsafe { mi_heap_malloc(heap, size) }
}

/// The first call: finds the heap. `extern "C"`, so that the compiler knows it cannot unwind
/// and the callers' fast path (a C table's entry point among them) needs no frame of its own.
#[cold]
#[inline(never)]
extern "C" fn malloc_first(size: usize) -> *mut c_void {
    // SAFETY: `mi_heap_main` initialises mimalloc as needed and may be called at any time.
    let heap = unsafe { mi_heap_main() };
    if heap.is_null() {
        // SAFETY: plain FFI call; any size is accepted (NULL on failure).
        return unsafe { ffi::mi_malloc(size) };
    }
    MAIN_HEAP.store(heap, Release);
    // SAFETY: as in `malloc`.
    unsafe { mi_heap_malloc(heap, size) }
}

/// True when plain `mi_malloc(size)` is already aligned to `align` (see the type's docs).
#[inline(always)]
fn natural(size: usize, align: usize) -> bool {
    align <= 8 || (align <= 16 && size >= 16)
}

// mimalloc's plain entry points return blocks aligned as `natural` says; its aligned entry
// points return NULL or a block of the requested size and alignment; `mi_realloc_aligned`
// leaves the old block valid when it fails; `mi_free` releases any mimalloc block.
// SAFETY: by the above, every method keeps `RawBackend`'s contract.
unsafe impl RawBackend for Mimalloc {
    #[inline]
    fn raw_alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; any size/alignment is accepted (NULL on failure).
        unsafe {
            if natural(layout.size(), layout.align()) {
                malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }
    #[inline]
    fn raw_alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; any size/alignment is accepted (NULL on failure).
        unsafe {
            if natural(layout.size(), layout.align()) {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }
    #[inline]
    unsafe fn raw_realloc(&self, ptr: *mut u8, old: Layout, new_size: usize) -> *mut u8 {
        // Caller promises `ptr` is a live mimalloc block allocated with `old.align()`;
        // `mi_realloc` of any mimalloc block keeps the alignment `natural` promises.
        // SAFETY: `ptr` is a live mimalloc block of `old.align()`.
        unsafe {
            if natural(new_size, old.align()) {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, old.align()).cast()
            }
        }
    }
    #[inline]
    unsafe fn raw_free(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: caller promises `ptr` is a live mimalloc block.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }
}

crate::allocator_from_requests!(Mimalloc);

#[cfg(test)]
mod tests {
    use super::*;
    use allocator_api2::alloc::Allocator;

    // SAFETY: the signature is mimalloc.h's `mi_heap_of` (`mi_heap_t*` as an opaque pointer).
    unsafe extern "C" {
        fn mi_heap_of(p: *const c_void) -> *mut c_void;
    }

    /// Blocks from the main-heap path are mimalloc's main heap's by mimalloc's own account
    /// (`mi_heap_of`), from threads that never allocated before as from this one, keep the
    /// alignment `natural` promises, and are freed by another thread with `mi_free`.
    #[test]
    fn blocks_come_from_the_main_heap_on_every_thread() {
        // SAFETY: plain FFI call.
        let main = unsafe { mi_heap_main() } as usize;
        let blocks: Vec<usize> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|t| {
                    s.spawn(move || {
                        (1..=200)
                            .map(|i| {
                                let size = (i * 7 + t) % 3000 + 1;
                                let layout = Layout::from_size_align(size, 8).unwrap();
                                let p = Mimalloc.allocate(layout).unwrap().cast::<u8>();
                                // SAFETY: `p` is live with at least `size` bytes.
                                unsafe { p.as_ptr().write_bytes(0xa5, size) };
                                p.as_ptr() as usize
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        for &p in &blocks {
            // SAFETY: `p` is a live mimalloc block.
            let heap = unsafe { mi_heap_of(p as *const c_void) } as usize;
            assert_eq!(heap, main, "block {p:#x} is not the main heap's");
            assert_eq!(p % 8, 0);
        }
        assert_eq!(MAIN_HEAP.load(Acquire) as usize, main);
        for p in blocks {
            // SAFETY: each block is live and freed once, on a thread that did not make it.
            unsafe { libmimalloc_sys::mi_free(p as *mut c_void) };
        }
        // 16-byte alignment from 16 bytes up, as `natural` says.
        for size in [16, 17, 24, 48, 80, 1000] {
            let p = malloc(size);
            assert_eq!(p as usize % 16, 0, "size {size}");
            // SAFETY: a live block from `malloc`.
            unsafe { libmimalloc_sys::mi_free(p) };
        }
    }
}
