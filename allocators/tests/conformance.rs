//! One conformance suite, every backend, every wrapper, and the C table of each.

use allocator_api2::alloc::Allocator;
use allocator_api2::vec::Vec as AVec;
use keepalloc_allocators::conformance::{self, Options};
use keepalloc_allocators::{AllocatorTable, Counting, Limited, System, TableAllocator};

/// The full contract natively; a quick pass under Miri, which is ~1000× slower.
const OPTS: Options = if cfg!(miri) {
    Options::MIRI
} else {
    Options::FULL
};

/// Leaks `a` so that a table can point at it for the rest of the test process (only for
/// zero-sized backends and the arena, which Miri does not run, so Miri's leak check holds;
/// sized wrappers are `static`s instead).
fn leak<A>(a: A) -> &'static A {
    Box::leak(Box::new(a))
}

/// The whole suite on `a`, on its C table, and through allocator-api2 and hashbrown
/// collections (the interop the shared allocator-api2 version buys).
fn full_suite<A: Allocator + Sync + 'static>(a: &'static A) {
    conformance::check_allocator(a, OPTS);
    let table = AllocatorTable::for_allocator(a);
    conformance::check_table(&table, OPTS);
    collections(a);
    // SAFETY: `table` was built by `for_allocator`.
    collections(unsafe { TableAllocator::new(&table) });
}

fn collections<A: Allocator + Copy>(a: A) {
    let mut v: AVec<u64, A> = AVec::new_in(a);
    let n = if cfg!(miri) { 500 } else { 10_000u64 };
    for i in 0..n {
        v.push(i * 3);
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
    assert_eq!(v.len() as u64, n);
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v.iter().sum::<u64>(), 135);

    let mut map = hashbrown::HashMap::new_in(a);
    let m = if cfg!(miri) { 200 } else { 5_000u32 };
    for i in 0..m {
        map.insert(i, format!("value {i}"));
    }
    for i in (0..m).step_by(2) {
        map.remove(&i);
    }
    assert_eq!(map.len() as u32, m / 2);
    assert_eq!(
        map.get(&(m - 1)).map(String::as_str),
        Some(format!("value {}", m - 1).as_str())
    );
}

#[test]
fn system() {
    full_suite(leak(System));
}

/// The whole suite on a counting wrapper, whose counts must then balance to zero: every
/// block freed, every byte given back (through the C table, the backend's usable sizes).
fn full_suite_balances<A: Allocator + Sync + 'static>(a: &'static Counting<A>) {
    full_suite(a);
    let s = a.stats();
    assert!(s.allocations > 100, "{s:?}");
    assert_eq!(s.allocations, s.deallocations, "{s:?}");
    assert_eq!(s.live_bytes, 0, "{s:?}");
    assert!(s.peak_bytes >= OPTS.max_size, "{s:?}");
    assert!(s.reallocations > 0, "{s:?}");
}

#[test]
fn counting_system_balances() {
    static A: Counting<System> = Counting::new(System);
    full_suite_balances(&A);
}

#[test]
fn counting_counts_exactly() {
    let a = Counting::new(System);
    let l = core::alloc::Layout::from_size_align(100, 8).unwrap();
    let p = a.allocate(l).unwrap();
    let l2 = core::alloc::Layout::from_size_align(300, 8).unwrap();
    // SAFETY: `p` is live with `l`; 300 >= 100.
    let q = unsafe { a.grow(p.cast(), l, l2) }.unwrap();
    let s = a.stats();
    assert_eq!(
        (s.allocations, s.reallocations, s.live_bytes, s.peak_bytes),
        (1, 1, 300, 300)
    );
    // SAFETY: `q` is live with `l2`.
    unsafe { a.deallocate(q.cast(), l2) };
    let s = a.stats();
    assert_eq!((s.deallocations, s.live_bytes, s.peak_bytes), (1, 0, 300));
}

#[test]
fn limited_under_its_cap_is_a_full_allocator() {
    static A: Limited<System> = Limited::new(System, 64 << 20);
    let a = &A;
    full_suite(a);
    assert_eq!(a.used(), 0);
}

#[test]
fn limited_refuses_cleanly_and_recovers() {
    const CAP: usize = if cfg!(miri) { 4096 } else { 1 << 20 };
    let cap = CAP;
    let a = Limited::new(Counting::new(System), cap);
    conformance::check_cap(&a, cap);
    assert_eq!(a.used(), 0);
    assert_eq!(a.inner().stats().live_bytes, 0);
    assert!(a.inner().stats().allocations >= 8);

    static LIMITED: Limited<System> = Limited::new(System, CAP);
    let limited = &LIMITED;
    let table = AllocatorTable::for_allocator(limited);
    conformance::check_table_cap(&table, cap);
    assert_eq!(limited.used(), 0);
}

// mimalloc is C: Miri cannot run it.
#[cfg(all(feature = "mimalloc", not(miri)))]
#[test]
fn mimalloc() {
    use keepalloc_allocators::Mimalloc;
    full_suite(leak(Mimalloc));
}

/// Through its headerless table `Counting<Mimalloc>` counts mimalloc's usable sizes, at
/// allocation and again at free: they must balance to zero, over-aligned blocks and blocks
/// moved by `reallocate` included.
#[cfg(all(feature = "mimalloc", not(miri)))]
#[test]
fn counting_mimalloc_balances() {
    use keepalloc_allocators::Mimalloc;
    static A: Counting<Mimalloc> = Counting::new(Mimalloc);
    full_suite_balances(&A);
}

#[cfg(feature = "bumpalo")]
#[test]
fn arena() {
    use keepalloc_allocators::Arena;
    let arena = leak(Arena::new());
    full_suite(arena);
    assert!(arena.allocated_bytes() >= OPTS.max_size);
}

#[cfg(feature = "bumpalo")]
#[test]
fn arena_reset_returns_memory() {
    use keepalloc_allocators::Arena;
    let fill = |arena: &Arena| {
        // Many separate blocks, so the arena needs several chunks.
        let blocks: Vec<AVec<u8, &Arena>> = (0..64)
            .map(|i| {
                let mut v = AVec::new_in(arena);
                v.resize(16 << 10, i as u8);
                v
            })
            .collect();
        assert!(blocks.iter().enumerate().all(|(i, v)| v[100] == i as u8));
    };
    let mut arena = Arena::new();
    fill(&arena);
    let before = arena.allocated_bytes();
    arena.reset();
    let after = arena.allocated_bytes();
    // Only the largest chunk is kept...
    assert!(after < before, "reset kept {after} of {before} bytes");
    // ...and reused: a block that fits in it takes no new chunk.
    let mut v: AVec<u8, &Arena> = AVec::with_capacity_in(16 << 10, &arena);
    v.resize(16 << 10, 1);
    assert_eq!(arena.allocated_bytes(), after);
    drop(v);
}

/// `&bumpalo::Bump` implements the same `Allocator` trait: the suite and the collections
/// run on it unchanged (single-threaded, since `Bump` is not `Sync`).
#[test]
fn plain_bump_interoperates() {
    let bump = bumpalo::Bump::new();
    let opts = Options { threads: 0, ..OPTS };
    conformance::check_sizes(&&bump, opts);
    conformance::check_zeroed(&&bump, opts);
    conformance::check_grow_shrink(&&bump, opts);
    collections(&bump);
}

#[cfg(not(all(miri, feature = "mimalloc")))]
#[test]
fn default_backend_is_the_feature_selected_one() {
    let b = keepalloc_allocators::default_backend().expect("default backend");
    let expected = if cfg!(feature = "mimalloc") {
        "mimalloc"
    } else if cfg!(feature = "bumpalo") {
        "bumpalo"
    } else {
        "system"
    };
    assert_eq!(keepalloc_allocators::DEFAULT_BACKEND_NAME, expected);
    // The alias itself follows the documented rule (mimalloc > bumpalo > system).
    let type_name = std::any::type_name::<keepalloc_allocators::DefaultBackend>();
    let expected_type = match expected {
        "mimalloc" => "Mimalloc",
        "bumpalo" => "Arena",
        _ => "System",
    };
    assert!(type_name.ends_with(expected_type), "{type_name}");
    conformance::check_allocator(&b, Options::QUICK);
}

/// A panic inside the backend never crosses the C boundary: the table reports NULL.
#[test]
fn panicking_backend_gives_null_through_the_table() {
    struct Panics;
    // SAFETY: never returns a block at all.
    unsafe impl Allocator for Panics {
        fn allocate(
            &self,
            _: core::alloc::Layout,
        ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
            panic!("backend exploded")
        }
        unsafe fn deallocate(&self, _: core::ptr::NonNull<u8>, _: core::alloc::Layout) {}
    }
    static PANICS: Panics = Panics;
    let t = AllocatorTable::for_allocator(&PANICS);
    // SAFETY: the table comes from `for_allocator`.
    unsafe {
        assert!(t.allocate().unwrap()(t.context(), 10).is_null());
        assert!(t.aligned_allocate().unwrap()(t.context(), 64, 10).is_null());
        assert!(t.reallocate().unwrap()(t.context(), core::ptr::null_mut(), 10).is_null());
    }
}

#[test]
fn table_layout_matches_xnn_allocator() {
    use core::mem::{align_of, size_of};
    let w = size_of::<usize>();
    assert_eq!(size_of::<AllocatorTable>(), 6 * w);
    assert_eq!(align_of::<AllocatorTable>(), w);
    // The fields are private: read the six words of a real table in memory order and compare
    // them with the accessors, slot by slot (the `xnn_allocator` order).
    static BACKEND: Counting<System> = Counting::new(System);
    let table = AllocatorTable::for_allocator(&BACKEND);
    // SAFETY: the table is six pointer-sized words (checked above); reading them as `usize` reads initialised pointer bits.
    let words: [usize; 6] = unsafe { core::mem::transmute_copy(&table) };
    let (context, allocate, reallocate, deallocate, aligned_allocate, aligned_deallocate) =
        table.raw_parts();
    assert_eq!(
        words,
        [
            context as usize,
            allocate.unwrap() as usize,
            reallocate.unwrap() as usize,
            deallocate.unwrap() as usize,
            aligned_allocate.unwrap() as usize,
            aligned_deallocate.unwrap() as usize,
        ]
    );
    assert_ne!(allocate.unwrap() as usize, reallocate.unwrap() as usize);
}
