//! `GlobalAlloc` for any backend, so it can be a `#[global_allocator]`.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use allocator_api2::alloc::Allocator;

/// Makes any [`Allocator`] usable as `#[global_allocator]`.
///
/// A global allocator must not unwind (`GlobalAlloc`'s contract), while an [`Allocator`] may
/// panic: a backend that panics inside `alloc`, `alloc_zeroed`, `dealloc` or `realloc`
/// aborts the process instead (without printing: printing could allocate through this very
/// allocator).
///
/// ```
/// use keepalloc_allocators::{AsGlobal, Counting, System};
/// #[global_allocator]
/// static GLOBAL: AsGlobal<Counting<System>> = AsGlobal(Counting::new(System));
/// let v = vec![1u8; 100];
/// assert!(GLOBAL.0.stats().live_bytes >= 100);
/// # drop(v);
/// ```
#[derive(Debug, Default)]
pub struct AsGlobal<A>(pub A);

/// Aborts the process if dropped, which happens only while unwinding: each method forgets
/// it once the backend has returned. Costs nothing on the way that does not unwind.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

/// Runs `f`, aborting instead of letting a panic unwind out of the global allocator.
#[inline(always)]
fn no_unwind<T>(f: impl FnOnce() -> T) -> T {
    let guard = AbortOnUnwind;
    let r = f();
    core::mem::forget(guard);
    r
}

// SAFETY: `GlobalAlloc` requires blocks of the layout's size and alignment, valid until
// `dealloc` with the same layout, and NULL on failure: each method maps to the `Allocator`
// method with the same promise, turning `Err` into NULL; and it must not unwind, which
// `no_unwind` turns into an abort.
unsafe impl<A: Allocator> GlobalAlloc for AsGlobal<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        no_unwind(|| {
            self.0
                .allocate(layout)
                .map_or(ptr::null_mut(), |p| p.as_ptr().cast())
        })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        no_unwind(|| {
            self.0
                .allocate_zeroed(layout)
                .map_or(ptr::null_mut(), |p| p.as_ptr().cast())
        })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // `GlobalAlloc::dealloc`'s caller promises `ptr` came from `alloc` with
            // `layout`, which is `Allocator::deallocate`'s promise.
            // SAFETY: the caller's promise is forwarded unchanged.
            no_unwind(|| unsafe { self.0.deallocate(p, layout) })
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        let Some(p) = NonNull::new(ptr) else {
            return ptr::null_mut();
        };
        // The caller promises `ptr` is live with `layout`; grow/shrink are chosen by
        // comparing sizes, as their contracts require.
        // SAFETY: `ptr` is live with `layout` and the size picks grow or shrink.
        let r = no_unwind(|| unsafe {
            if new_size >= layout.size() {
                self.0.grow(p, layout, new)
            } else {
                self.0.shrink(p, layout, new)
            }
        });
        r.map_or(ptr::null_mut(), |p| p.as_ptr().cast())
    }
}
