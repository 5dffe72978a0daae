//! The allocator contract as one generic test suite.
//!
//! Every backend, every wrapper and the C table of each is run through the same functions
//! (in the style of allocator-api2's `test_sizes`), by this crate's tests and by the
//! fault-injection crate for its scribbling allocator. Each check panics with a message that
//! names the size and alignment that broke; none of them can pass by doing nothing, because
//! each writes a pattern and reads it back.
//!
//! ```
//! use keepalloc_allocators::{conformance, Counting, System};
//! conformance::check_allocator(&Counting::new(System), conformance::Options::QUICK);
//! ```

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::NonNull;

use allocator_api2::alloc::Allocator;

use crate::{AllocatorTable, TABLE_MIN_ALIGN};

/// How hard to push.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Largest block size tried (the list of sizes is cut at this).
    pub max_size: usize,
    /// Largest alignment tried (powers of two from 1).
    pub max_align: usize,
    /// Threads in the concurrent check (0 skips it).
    pub threads: usize,
    /// Allocate/verify/free rounds per thread.
    pub rounds: usize,
}

impl Options {
    /// Everything the contract names: sizes to 1 MiB, alignments to 4096, 8 threads.
    pub const FULL: Options = Options {
        max_size: 1 << 20,
        max_align: 4096,
        threads: 8,
        rounds: 2000,
    };
    /// A fast pass for doc tests and slow environments (Miri).
    pub const QUICK: Options = Options {
        max_size: 4097,
        max_align: 256,
        threads: 2,
        rounds: 50,
    };
    /// The smallest pass that still crosses every boundary the contract names (odd sizes,
    /// the table's 16-byte minimum alignment, over-alignment, threads), for Miri, which
    /// interprets every byte the suite fills and checks.
    pub const MIRI: Options = Options {
        max_size: 257,
        max_align: 64,
        threads: 2,
        rounds: 20,
    };
}

/// Sizes tried: zero, odd sizes, sizes around powers of two, up to 1 MiB.
pub const SIZES: &[usize] = &[
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    15,
    16,
    17,
    31,
    33,
    63,
    64,
    65,
    100,
    127,
    255,
    257,
    1000,
    1023,
    4095,
    4096,
    4097,
    12345,
    65535,
    65537,
    (1 << 20) - 1,
    1 << 20,
];

fn alignments(max: usize) -> impl Iterator<Item = usize> {
    (0..=12).map(|s| 1usize << s).filter(move |&a| a <= max)
}

fn sizes(max: usize) -> impl Iterator<Item = usize> {
    SIZES.iter().copied().filter(move |&s| s <= max)
}

/// A byte pattern that differs per offset and per block, so a mixed-up copy is caught.
fn pattern(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) % 251) as u8
}

/// # Safety
/// `p` is valid for `len` bytes of writes.
unsafe fn fill(p: *mut u8, len: usize, seed: usize) {
    for i in 0..len {
        // SAFETY: `i < len` (caller's promise).
        unsafe { p.add(i).write(pattern(seed, i)) };
    }
}

/// # Safety
/// `p` is valid for `len` bytes of reads.
unsafe fn verify(p: *const u8, len: usize, seed: usize, what: &str) {
    for i in 0..len {
        // SAFETY: `i < len` (caller's promise).
        let got = unsafe { p.add(i).read() };
        assert_eq!(
            got,
            pattern(seed, i),
            "{what}: byte {i} of {len} lost its contents"
        );
    }
}

/// Runs every Rust-side check on `a`: sizes × alignments, zeroed memory, grow and shrink
/// keeping contents, and many threads allocating and freeing at once.
pub fn check_allocator<A: Allocator + Sync>(a: &A, options: Options) {
    check_sizes(a, options);
    check_zeroed(a, options);
    check_grow_shrink(a, options);
    check_threads(a, options);
}

/// Every size up to `max_size` with every alignment up to `max_align`: the block is aligned,
/// at least as long as asked, and holds what is written to it.
pub fn check_sizes<A: Allocator>(a: &A, options: Options) {
    for align in alignments(options.max_align) {
        for (n, size) in sizes(options.max_size).enumerate() {
            let layout = Layout::from_size_align(size, align).expect("valid layout");
            let block = a
                .allocate(layout)
                .unwrap_or_else(|_| panic!("allocate({size}, align {align}) failed"));
            let p = block.as_ptr().cast::<u8>();
            assert_eq!(
                p as usize % align,
                0,
                "allocate({size}, {align}) misaligned"
            );
            assert!(
                block.len() >= size,
                "allocate({size}) returned a short block"
            );
            // SAFETY: the block is `size` bytes long and ours until freed.
            unsafe {
                fill(p, size, n);
                verify(p, size, n, "allocate");
                a.deallocate(NonNull::new_unchecked(p), layout);
            }
        }
    }
}

/// `allocate_zeroed` returns zeroes, even where a freed block had data.
pub fn check_zeroed<A: Allocator>(a: &A, options: Options) {
    for size in sizes(options.max_size.min(65537)) {
        let layout = Layout::from_size_align(size, 16).expect("valid layout");
        // Dirty a block first, so that reuse of it would show.
        let dirty = a.allocate(layout).expect("allocate");
        // SAFETY: `dirty` is `size` bytes long; we fill it and free it with its layout.
        unsafe {
            dirty.as_ptr().cast::<u8>().write_bytes(0xEE, size);
            a.deallocate(dirty.cast(), layout);
        }
        let block = a
            .allocate_zeroed(layout)
            .unwrap_or_else(|_| panic!("allocate_zeroed({size}) failed"));
        // SAFETY: the block is `size` bytes long.
        unsafe {
            let bytes = core::slice::from_raw_parts(block.as_ptr().cast::<u8>(), size);
            assert!(
                bytes.iter().all(|&b| b == 0),
                "allocate_zeroed({size}) not zero"
            );
            a.deallocate(block.cast(), layout);
        }
    }
}

/// Growing and shrinking keep the bytes both sizes share, at every alignment.
pub fn check_grow_shrink<A: Allocator>(a: &A, options: Options) {
    let steps: Vec<usize> = sizes(options.max_size).collect();
    for align in alignments(options.max_align) {
        let mut layout = Layout::from_size_align(1, align).expect("valid layout");
        let mut ptr = a.allocate(layout).expect("allocate").cast::<u8>();
        // SAFETY: one byte, ours.
        unsafe { fill(ptr.as_ptr(), 1, align) };
        // Up through every size, then back down.
        let path = steps.iter().chain(steps.iter().rev()).copied();
        for size in path.filter(|&s| s > 0) {
            let new = Layout::from_size_align(size, align).expect("valid layout");
            // SAFETY: `ptr` is live with `layout`; grow or shrink by comparing sizes.
            let moved = unsafe {
                if size >= layout.size() {
                    a.grow(ptr, layout, new)
                } else {
                    a.shrink(ptr, layout, new)
                }
            }
            .unwrap_or_else(|_| panic!("resize {} -> {size} (align {align})", layout.size()));
            let p = moved.as_ptr().cast::<u8>();
            assert_eq!(
                p as usize % align,
                0,
                "resize to {size} lost alignment {align}"
            );
            let kept = layout.size().min(size);
            // SAFETY: the block is `size` bytes, of which `kept` carried over.
            unsafe {
                verify(p, kept, align, "grow/shrink");
                fill(p, size, align);
            }
            // SAFETY: non-null by construction.
            ptr = unsafe { NonNull::new_unchecked(p) };
            layout = new;
        }
        // SAFETY: `ptr` is live with `layout`.
        unsafe { a.deallocate(ptr, layout) };
    }
}

/// Many threads allocate, fill, verify and free at once; blocks are passed between threads
/// so that frees from a thread other than the allocating one are exercised too.
pub fn check_threads<A: Allocator + Sync>(a: &A, options: Options) {
    if options.threads == 0 {
        return;
    }
    std::thread::scope(|s| {
        for t in 0..options.threads {
            s.spawn(move || {
                use rand::{Rng, SeedableRng};
                // One ChaCha8 stream per thread, so every run makes the same requests.
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6b65_6570);
                rng.set_stream(t as u64);
                let mut live: Vec<(NonNull<u8>, Layout, usize)> = Vec::new();
                for round in 0..options.rounds {
                    let size = rng.random_range(0..options.max_size.clamp(1, 8192));
                    let align = 1 << rng.random_range(0..7);
                    let layout = Layout::from_size_align(size, align).expect("valid layout");
                    let p = a
                        .allocate(layout)
                        .expect("concurrent allocate")
                        .cast::<u8>();
                    assert_eq!(p.as_ptr() as usize % align, 0);
                    // SAFETY: `size` bytes, ours.
                    unsafe { fill(p.as_ptr(), size, round + t) };
                    live.push((p, layout, round + t));
                    if live.len() > 16 || rng.random_bool(0.5) {
                        let (p, layout, seed) = live.swap_remove(rng.random_range(0..live.len()));
                        // SAFETY: live block with its own layout and pattern.
                        unsafe {
                            verify(p.as_ptr(), layout.size(), seed, "concurrent");
                            a.deallocate(p, layout);
                        }
                    }
                }
                for (p, layout, seed) in live {
                    // SAFETY: live block with its own layout and pattern.
                    unsafe {
                        verify(p.as_ptr(), layout.size(), seed, "concurrent");
                        a.deallocate(p, layout);
                    }
                }
            });
        }
    });
}

/// Fills a `Limited`-style allocator until it refuses, checks the refusal is clean (an
/// `Err`, nothing corrupted), frees one block and checks that allocation succeeds again.
/// `cap` is the wrapper's byte cap.
pub fn check_cap<A: Allocator>(a: &A, cap: usize) {
    let layout = Layout::from_size_align(cap / 8 + 1, 8).expect("valid layout");
    let mut blocks = Vec::new();
    while let Ok(b) = a.allocate(layout) {
        // SAFETY: the block is `layout.size()` bytes.
        unsafe { fill(b.as_ptr().cast(), layout.size(), blocks.len()) };
        blocks.push(b.cast::<u8>());
        assert!(blocks.len() <= 8, "cap of {cap} bytes was not enforced");
    }
    assert_eq!(
        blocks.len(),
        7,
        "cap {cap}: expected 7 blocks of {}",
        layout.size()
    );
    let huge = Layout::from_size_align(cap + 1, 8).expect("valid layout");
    assert!(
        a.allocate(huge).is_err(),
        "a block larger than the cap was granted"
    );
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: each block is live and was filled with seed `i`.
        unsafe { verify(b.as_ptr(), layout.size(), i, "after refusal") };
    }
    let last = blocks.pop().expect("seven blocks");
    // SAFETY: live block with `layout`.
    unsafe { a.deallocate(last, layout) };
    let again = a
        .allocate(layout)
        .expect("allocation after a free must succeed");
    blocks.push(again.cast());
    for b in blocks {
        // SAFETY: live blocks with `layout`.
        unsafe { a.deallocate(b, layout) };
    }
}

/// Checks the C contract of a table: alignment of both allocate functions, NULL handling,
/// invalid alignments and overflowing sizes giving NULL, size 0 giving unique blocks,
/// `reallocate` keeping contents and alignment, and the two frees being interchangeable.
/// Then runs the Rust-side suite through [`TableAllocator`](crate::TableAllocator).
pub fn check_table(table: &AllocatorTable, options: Options) {
    assert!(table.is_complete(), "table has an empty slot");
    let ctx = table.context();
    let (allocate, reallocate, deallocate, aligned_allocate, aligned_deallocate) = (
        table.allocate().expect("allocate"),
        table.reallocate().expect("reallocate"),
        table.deallocate().expect("deallocate"),
        table.aligned_allocate().expect("aligned_allocate"),
        table.aligned_deallocate().expect("aligned_deallocate"),
    );
    // The caller hands us a table that claims the xnn_allocator contract; every
    // pointer below is used within the size it was allocated with and freed once.
    // SAFETY: every call below stays inside the contract just stated.
    unsafe {
        // NULL frees are no-ops.
        deallocate(ctx, core::ptr::null_mut());
        aligned_deallocate(ctx, core::ptr::null_mut());

        // Sizes through `allocate`: malloc alignment, contents kept.
        for (n, size) in sizes(options.max_size).enumerate() {
            let p = allocate(ctx, size).cast::<u8>();
            assert!(!p.is_null(), "allocate({size}) returned NULL");
            assert_eq!(
                p as usize % TABLE_MIN_ALIGN,
                0,
                "allocate({size}) misaligned"
            );
            fill(p, size, n);
            verify(p, size, n, "table allocate");
            deallocate(ctx, p.cast());
        }

        // Size 0 is a real, unique block.
        let z1 = allocate(ctx, 0);
        let z2 = allocate(ctx, 0);
        assert!(
            !z1.is_null() && !z2.is_null() && z1 != z2,
            "allocate(0) not unique"
        );
        deallocate(ctx, z1);
        aligned_deallocate(ctx, z2);

        // Alignments through `aligned_allocate`, freed by either free function.
        for align in alignments(options.max_align) {
            for (n, size) in sizes(options.max_size.min(65537)).enumerate() {
                let p = aligned_allocate(ctx, align, size).cast::<u8>();
                assert!(
                    !p.is_null(),
                    "aligned_allocate({align}, {size}) returned NULL"
                );
                assert_eq!(p as usize % align, 0, "aligned_allocate({align}, {size})");
                fill(p, size, n);
                verify(p, size, n, "table aligned_allocate");
                if n % 2 == 0 {
                    aligned_deallocate(ctx, p.cast());
                } else {
                    deallocate(ctx, p.cast());
                }
            }
        }

        // Bad alignments and overflowing sizes are NULL, never UB.
        for bad in [0usize, 3, 6, 24, 100, 4095, usize::MAX] {
            assert!(
                aligned_allocate(ctx, bad, 64).is_null(),
                "alignment {bad} must give NULL"
            );
        }
        for huge in [
            usize::MAX,
            usize::MAX - 15,
            usize::MAX / 2 + 1,
            isize::MAX as usize,
        ] {
            assert!(
                allocate(ctx, huge).is_null(),
                "allocate({huge}) must be NULL"
            );
            assert!(
                aligned_allocate(ctx, 64, huge).is_null(),
                "aligned_allocate(64, {huge}) must be NULL"
            );
        }

        // reallocate(NULL, n) allocates; reallocate keeps contents through grow and shrink.
        let mut p = reallocate(ctx, core::ptr::null_mut(), 10).cast::<u8>();
        assert!(!p.is_null(), "reallocate(NULL, 10) must allocate");
        fill(p, 10, 99);
        let mut len = 10;
        let steps = [100usize, 5000, 70000, 33, 1 << 20, 7, 0, 1];
        for size in steps
            .into_iter()
            .filter(|&s| s <= options.max_size.max(100))
        {
            let q = reallocate(ctx, p.cast(), size).cast::<u8>();
            assert!(!q.is_null(), "reallocate to {size} failed");
            assert_eq!(q as usize % TABLE_MIN_ALIGN, 0);
            verify(q, len.min(size), 99, "reallocate");
            fill(q, size, 99);
            p = q;
            len = size;
        }
        deallocate(ctx, p.cast());

        // An over-aligned block keeps its alignment through reallocate.
        let p = aligned_allocate(ctx, 256, 40).cast::<u8>();
        fill(p, 40, 5);
        let q = reallocate(ctx, p.cast(), options.max_size.max(100)).cast::<u8>();
        assert!(
            !q.is_null() && (q as usize).is_multiple_of(256),
            "reallocate lost alignment"
        );
        verify(q, 40, 5, "aligned reallocate");
        // A reallocate that overflows fails and leaves the block alone.
        assert!(reallocate(ctx, q.cast(), usize::MAX).is_null());
        verify(q, 40, 5, "failed reallocate");
        aligned_deallocate(ctx, q.cast());
    }
    // SAFETY: the table claims the contract (caller's promise above).
    let through = unsafe { crate::TableAllocator::new(table) };
    check_allocator(&through, options);
}

/// Checks that a table whose allocator is capped refuses cleanly: `reallocate` past the cap
/// returns NULL and leaves the old block valid and unchanged; after frees, allocation works.
/// `cap` is the cap of the table's allocator, which must be otherwise empty.
pub fn check_table_cap(table: &AllocatorTable, cap: usize) {
    let ctx: *mut c_void = table.context();
    let allocate = table.allocate().expect("allocate");
    let reallocate = table.reallocate().expect("reallocate");
    let deallocate = table.deallocate().expect("deallocate");
    // SAFETY: as in `check_table`.
    unsafe {
        let p = allocate(ctx, cap / 4).cast::<u8>();
        assert!(!p.is_null(), "a quarter of the cap must fit");
        fill(p, cap / 4, 7);
        assert!(
            allocate(ctx, cap).is_null(),
            "allocate past the cap must be NULL"
        );
        let q = reallocate(ctx, p.cast(), cap);
        assert!(q.is_null(), "reallocate past the cap must be NULL");
        verify(p, cap / 4, 7, "failed reallocate under a cap");
        deallocate(ctx, p.cast());
        let r = allocate(ctx, cap / 2);
        assert!(!r.is_null(), "allocation after a free must succeed");
        deallocate(ctx, r);
    }
}
