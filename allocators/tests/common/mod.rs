//! `Tracked`: a backend of our own that frees without a size (`SizelessFree`), shared by the
//! headerless-table tests.

use core::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use keepalloc_allocators::SizelessFree;

/// `std::alloc::System` behind a side table of live blocks: it frees and measures from the
/// pointer alone, and any pointer it did not hand out (a header offset, a double free)
/// panics. It counts its `usable_size` calls (only counting needs them).
pub struct Tracked {
    live: Mutex<Option<HashMap<usize, Layout>>>,
    pub usable_size_calls: AtomicUsize,
}

impl Tracked {
    pub const fn new() -> Self {
        Tracked {
            live: Mutex::new(None),
            usable_size_calls: AtomicUsize::new(0),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<usize, Layout>) -> T) -> T {
        f(self.live.lock().unwrap().get_or_insert_with(HashMap::new))
    }

    /// Blocks handed out and not yet freed.
    #[allow(dead_code)]
    pub fn live_blocks(&self) -> usize {
        self.with(|m| m.len())
    }

    /// The layout a live block was allocated with.
    #[allow(dead_code)]
    pub fn layout_of(&self, ptr: *mut u8) -> Layout {
        self.with(|m| {
            *m.get(&(ptr as usize))
                .expect("not a live block of this backend")
        })
    }

    fn raw_alloc(&self, size: usize, align: usize) -> *mut u8 {
        let Ok(layout) = Layout::from_size_align(size.max(1), align) else {
            return core::ptr::null_mut();
        };
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            self.with(|m| m.insert(p as usize, layout));
        }
        p
    }
}

// SAFETY: blocks come from `std::alloc::System` with the recorded layout (16-aligned or
// `align`-aligned, as asked); realloc keeps the contents and the old block on failure; free and
// usable_size use the recorded layout, which does not change while the block is live.
unsafe impl SizelessFree for Tracked {
    fn alloc(&self, size: usize) -> *mut u8 {
        self.raw_alloc(size, 16)
    }
    fn alloc_aligned(&self, size: usize, align: usize) -> *mut u8 {
        self.raw_alloc(size, align)
    }
    unsafe fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
        // SAFETY: same promises as `realloc_aligned`, at the table's minimum alignment.
        unsafe { self.realloc_aligned(ptr, size, 16) }
    }
    unsafe fn realloc_aligned(&self, ptr: *mut u8, size: usize, align: usize) -> *mut u8 {
        let old = self.layout_of(ptr);
        let fresh = self.raw_alloc(size, align);
        if !fresh.is_null() {
            // SAFETY: both blocks are live and distinct; the old one is freed once.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, fresh, old.size().min(size));
                self.free(ptr);
            }
        }
        fresh
    }
    unsafe fn free(&self, ptr: *mut u8) {
        let layout = self
            .with(|m| m.remove(&(ptr as usize)))
            .expect("freed a pointer this backend did not hand out");
        // SAFETY: `ptr` was allocated by `System` with `layout`, and is freed once.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn usable_size(&self, ptr: *mut u8) -> usize {
        self.usable_size_calls.fetch_add(1, Relaxed);
        self.layout_of(ptr).size()
    }
}
