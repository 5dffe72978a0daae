//! `Counting::uncounted`: the same wrapper with counting switched off. Its tables (headerless
//! and header) and its Rust face keep the whole contract (conformance suite), its stats read
//! zero, and through a headerless table it calls the backend's plain functions: never
//! `usable_size`, which only counting needs.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting, CountingStats, SizelessFree, System};

const OPTS: Options = if cfg!(miri) {
    Options::MIRI
} else {
    Options::QUICK
};

fn assert_uncounted<A>(a: &Counting<A>) {
    assert!(!a.is_counted());
    assert_eq!(a.stats(), CountingStats::default(), "stats read zero");
}

#[test]
fn new_and_default_count_uncounted_does_not() {
    assert!(Counting::new(System).is_counted());
    assert!(Counting::<System>::default().is_counted());
    let u = Counting::uncounted(System);
    assert_uncounted(&u);
    assert!(format!("{u:?}").contains("counted: false"));
}

#[test]
fn the_rust_face_forwards_and_counts_nothing() {
    let a = Counting::uncounted(System);
    let l = Layout::from_size_align(100, 8).unwrap();
    let l2 = Layout::from_size_align(300, 8).unwrap();
    let p = a.allocate(l).unwrap();
    // SAFETY: `p` is live with `l`; 300 >= 100.
    let q = unsafe {
        p.cast::<u8>().as_ptr().write_bytes(5, 100);
        a.grow(p.cast(), l, l2)
    }
    .unwrap();
    // SAFETY: the first 100 bytes were kept by `grow`.
    assert_eq!(unsafe { *q.cast::<u8>().as_ptr().add(99) }, 5);
    // SAFETY: `q` is live with `l2`; 100 <= 300.
    let r = unsafe { a.shrink(q.cast(), l2, l) }.unwrap();
    // SAFETY: `r` is live with `l`.
    unsafe { a.deallocate(r.cast(), l) };
    let z = a.allocate_zeroed(l).unwrap();
    // SAFETY: `z` is live with `l`.
    unsafe { a.deallocate(z.cast(), l) };
    assert_uncounted(&a);
}

#[test]
fn uncounted_system_keeps_the_whole_contract() {
    static A: Counting<System> = Counting::uncounted(System);
    conformance::check_allocator(&A, OPTS);
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

// mimalloc is C: Miri cannot run it.
#[cfg(all(feature = "mimalloc", not(miri)))]
#[test]
fn uncounted_mimalloc_keeps_the_whole_contract() {
    use keepalloc_allocators::Mimalloc;
    static A: Counting<Mimalloc> = Counting::uncounted(Mimalloc);
    conformance::check_allocator(&A, OPTS);
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

/// An allocator that is not `SizelessFree`: its owner gets a header table.
struct Plain<A>(A);

// SAFETY: every call is forwarded unchanged to the wrapped allocator.
unsafe impl<A: Allocator> Allocator for Plain<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.0.allocate(layout)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise, forwarded.
        unsafe { self.0.deallocate(ptr, layout) }
    }
}

#[test]
fn an_uncounted_header_table_keeps_the_whole_contract() {
    static A: Counting<Plain<System>> = Counting::uncounted(Plain(System));
    let table = AllocatorTable::for_allocator(&A);
    conformance::check_table(&table, OPTS);
    assert_uncounted(&A);
}

/// `std::alloc::System` behind a side table of live blocks (frees from the pointer alone, and
/// panics on any pointer it did not hand out), counting the calls to `usable_size`.
struct Tracked {
    live: Mutex<Option<HashMap<usize, Layout>>>,
    usable_size_calls: AtomicUsize,
}

impl Tracked {
    const fn new() -> Self {
        Tracked {
            live: Mutex::new(None),
            usable_size_calls: AtomicUsize::new(0),
        }
    }
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<usize, Layout>) -> T) -> T {
        f(self.live.lock().unwrap().get_or_insert_with(HashMap::new))
    }
    fn layout_of(&self, ptr: *mut u8) -> Layout {
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

#[test]
fn an_uncounted_headerless_table_keeps_the_contract_and_never_measures_a_block() {
    static BACKEND: Counting<Tracked> = Counting::uncounted(Tracked::new());
    static TABLE: AllocatorTable = AllocatorTable::for_sizeless(&BACKEND);
    conformance::check_table(&TABLE, OPTS);
    assert_uncounted(&BACKEND);
    assert_eq!(
        BACKEND.inner().with(|m| m.len()),
        0,
        "every block went back"
    );
    assert_eq!(
        BACKEND.inner().usable_size_calls.load(Relaxed),
        0,
        "plain alloc/free/realloc: no usable-size lookup"
    );

    // The counted wrapper over the same backend does measure (the control).
    static COUNTED: Counting<Tracked> = Counting::new(Tracked::new());
    static COUNTED_TABLE: AllocatorTable = AllocatorTable::for_sizeless(&COUNTED);
    // SAFETY: a `for_sizeless` table; the block is freed once, through it.
    unsafe {
        let p = COUNTED_TABLE.allocate().unwrap()(COUNTED_TABLE.context(), 64);
        assert!(!p.is_null());
        COUNTED_TABLE.deallocate().unwrap()(COUNTED_TABLE.context(), p);
    }
    assert!(COUNTED.inner().usable_size_calls.load(Relaxed) > 0);
    assert_eq!(COUNTED.stats().allocations, 1);
}
