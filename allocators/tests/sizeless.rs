//! The headerless table (`AllocatorTable::for_sizeless`) over a backend of our own that frees
//! without a size, so that it runs everywhere (Miri included, which cannot run glibc's
//! `malloc_usable_size` or mimalloc): the whole C contract (conformance suite), blocks that
//! are the backend's own pointers (no header in front), and `Counting`'s usable-size accounting
//! balancing to zero.

use core::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::sync::Mutex;

use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting, SizelessFree};

const OPTS: Options = if cfg!(miri) {
    Options::MIRI
} else {
    Options::QUICK
};

/// `std::alloc::System` behind a side table of live blocks: it frees and measures from the
/// pointer alone, and any pointer it did not hand out (a header offset, a double free) panics.
struct Tracked {
    live: Mutex<Option<HashMap<usize, Layout>>>,
}

impl Tracked {
    const fn new() -> Self {
        Tracked {
            live: Mutex::new(None),
        }
    }
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<usize, Layout>) -> T) -> T {
        f(self.live.lock().unwrap().get_or_insert_with(HashMap::new))
    }
    fn live_blocks(&self) -> usize {
        self.with(|m| m.len())
    }
    fn layout_of(&self, ptr: *mut u8) -> Layout {
        self.with(|m| {
            *m.get(&(ptr as usize))
                .expect("not a live block of this backend")
        })
    }
    fn record(&self, p: *mut u8, layout: Layout) -> *mut u8 {
        if !p.is_null() {
            self.with(|m| m.insert(p as usize, layout));
        }
        p
    }
    fn raw_alloc(&self, size: usize, align: usize) -> *mut u8 {
        let Ok(layout) = Layout::from_size_align(size.max(1), align) else {
            return core::ptr::null_mut();
        };
        // SAFETY: the layout has a non-zero size.
        self.record(unsafe { std::alloc::System.alloc(layout) }, layout)
    }
}

// SAFETY: blocks come from `std::alloc::System` with the recorded layout (at least 16-aligned
// or `align`-aligned, as asked); realloc keeps the contents and the old block on failure; free
// and usable_size use the recorded layout, which does not change while the block is live.
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
        self.layout_of(ptr).size()
    }
}

#[test]
fn a_headerless_table_keeps_the_whole_contract_and_the_counts_balance() {
    static BACKEND: Counting<Tracked> = Counting::new(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    conformance::check_table(&TABLE, OPTS);
    let s = BACKEND.stats();
    assert!(s.allocations > 100, "{s:?}");
    assert_eq!(s.allocations, s.deallocations, "{s:?}");
    assert_eq!(s.live_bytes, 0, "{s:?}");
    assert!(s.reallocations > 0, "{s:?}");
    assert_eq!(BACKEND.inner().live_blocks(), 0, "every block went back");
}

#[test]
fn blocks_are_the_backends_own_pointers_and_count_their_usable_size() {
    static BACKEND: Counting<Tracked> = Counting::new(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    // SAFETY: a `for_sizeless` table; each block is freed once, through it.
    unsafe {
        let p = TABLE.aligned_allocate().unwrap()(TABLE.context(), 64, 100).cast::<u8>();
        assert_eq!(p as usize % 64, 0);
        // The pointer C got is the one the backend handed out (a header table would have
        // asked the backend for 100 + 64 bytes and returned an interior pointer).
        assert_eq!(
            BACKEND.inner().layout_of(p),
            Layout::from_size_align(100, 64).unwrap()
        );
        assert_eq!(BACKEND.stats().live_bytes, 100);
        let q = TABLE.reallocate().unwrap()(TABLE.context(), p.cast(), 300).cast::<u8>();
        assert_eq!(q as usize % 64, 0, "reallocate keeps the alignment");
        assert_eq!(BACKEND.stats().live_bytes, 300);
        let z = TABLE.reallocate().unwrap()(TABLE.context(), q.cast(), 0).cast::<u8>();
        assert!(!z.is_null(), "reallocate to 0 keeps a real block");
        TABLE.deallocate().unwrap()(TABLE.context(), z.cast());
    }
    let s = BACKEND.stats();
    assert_eq!(
        (s.live_bytes, s.peak_bytes, s.reallocations),
        (0, 300, 2),
        "{s:?}"
    );
    assert_eq!(BACKEND.inner().live_blocks(), 0);
}
