//! `Counting`'s per-thread shards add up to exact totals once the threads are quiescent: many
//! threads allocating and freeing at once (through the Rust face and through the owner's C
//! table), blocks freed by other threads than the ones that allocated them, threads that exit
//! and hand their slot to new ones, and more threads at once than there are private slots (the
//! rest count on the shared shard). A lost shard, a slot reused by two live threads, or a
//! shard reset when its slot changes hands makes a total wrong.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Barrier, Mutex};

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Counting, System};

/// Rounds per thread (Miri interprets every instruction).
const ROUNDS: usize = if cfg!(miri) { 40 } else { 20_000 };

/// A block handed from one thread to another (raw pointers are not `Send`).
struct Block(NonNull<u8>, Layout);
// SAFETY: the block is owned memory, freed exactly once by whichever thread takes it.
unsafe impl Send for Block {}

#[test]
fn totals_are_exact_under_eight_threads() {
    static C: Counting<System> = Counting::new(System);
    static TABLE: AllocatorTable = AllocatorTable::for_allocator(&C);
    let handed: Mutex<Vec<Block>> = Mutex::new(Vec::new());
    let kept_bytes = std::sync::atomic::AtomicUsize::new(0);

    // Phase 1: 8 threads; each round one block through the Rust face and one through each
    // allocating slot of the table, all freed at once except every 8th Rust block, which is
    // handed to whichever thread frees it in phase 2.
    std::thread::scope(|s| {
        for t in 0..8usize {
            let (handed, kept_bytes) = (&handed, &kept_bytes);
            s.spawn(move || {
                let (alloc, free) = (TABLE.allocate().unwrap(), TABLE.deallocate().unwrap());
                let aligned = TABLE.aligned_allocate().unwrap();
                for round in 0..ROUNDS {
                    let size = 1 + (round * 7 + t * 13) % 3000;
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    let p = C.allocate(layout).unwrap().cast::<u8>();
                    if round % 8 == 0 {
                        kept_bytes.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
                        handed.lock().unwrap().push(Block(p, layout));
                    } else {
                        // SAFETY: `p` is live with `layout`.
                        unsafe { C.deallocate(p, layout) };
                    }
                    // SAFETY: a `for_allocator` table; each block is freed once, through it.
                    unsafe {
                        let q = alloc(TABLE.context(), size);
                        let r = aligned(TABLE.context(), 64, size);
                        assert!(!q.is_null() && !r.is_null());
                        free(TABLE.context(), q);
                        free(TABLE.context(), r);
                    }
                }
            });
        }
    });
    let kept = kept_bytes.into_inner();
    let kept_blocks = 8 * ROUNDS.div_ceil(8);
    let s = C.stats();
    assert_eq!(s.allocations, 8 * ROUNDS as u64 * 3, "{s:?}");
    assert_eq!(
        s.deallocations,
        (8 * ROUNDS * 3 - kept_blocks) as u64,
        "{s:?}"
    );
    assert_eq!(s.live_bytes, kept, "{s:?}");
    assert!(s.peak_bytes >= kept, "{s:?}");
    assert_eq!(s.failures, 0);

    // Phase 2: 8 new threads (the first ones' slots change hands) free the handed blocks.
    let blocks = handed.into_inner().unwrap();
    assert_eq!(blocks.len(), kept_blocks);
    let chunks: Vec<Vec<Block>> = {
        let mut chunks: Vec<Vec<Block>> = (0..8).map(|_| Vec::new()).collect();
        for (i, b) in blocks.into_iter().enumerate() {
            chunks[i % 8].push(b);
        }
        chunks
    };
    std::thread::scope(|s| {
        for chunk in chunks {
            s.spawn(move || {
                for Block(p, layout) in chunk {
                    // SAFETY: each handed block is live with its layout and freed once.
                    unsafe { C.deallocate(p, layout) };
                }
            });
        }
    });
    let s = C.stats();
    assert_eq!(s.allocations, s.deallocations, "{s:?}");
    assert_eq!(s.live_bytes, 0, "{s:?}");
}

#[test]
fn more_threads_than_slots_count_exactly_on_the_shared_shard() {
    static C: Counting<System> = Counting::new(System);
    // More than the 64 private slots, all alive at once (the barrier), so some must share.
    let threads = if cfg!(miri) { 70 } else { 80 };
    let rounds = if cfg!(miri) { 5 } else { 2_000 };
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                let layout = Layout::from_size_align(16 + t, 8).unwrap();
                let held = C.allocate(layout).unwrap();
                barrier.wait();
                for _ in 0..rounds {
                    let p = C.allocate(layout).unwrap();
                    // SAFETY: `p` is live with `layout`.
                    unsafe { C.deallocate(p.cast(), layout) };
                }
                barrier.wait();
                // SAFETY: `held` is live with `layout`.
                unsafe { C.deallocate(held.cast(), layout) };
            });
        }
    });
    let s = C.stats();
    let pairs = (threads * (rounds + 1)) as u64;
    assert_eq!((s.allocations, s.deallocations), (pairs, pairs), "{s:?}");
    assert_eq!(s.live_bytes, 0, "{s:?}");
    // Every thread held its block while all the others held theirs.
    let all_held: usize = (0..threads).map(|t| 16 + t).sum();
    assert!(s.peak_bytes >= all_held, "{s:?}");
}

/// The peak: exact when one thread allocates and frees; when one thread allocates and another
/// frees, an upper bound (the sum of each thread's own high-water mark), never below.
#[test]
fn peak_is_exact_on_one_thread_and_an_upper_bound_across_threads() {
    static ONE: Counting<System> = Counting::new(System);
    let layout = Layout::from_size_align(1000, 8).unwrap();
    std::thread::spawn(move || {
        let blocks: Vec<_> = (0..10).map(|_| ONE.allocate(layout).unwrap()).collect();
        for b in blocks {
            // SAFETY: each block is live with `layout`.
            unsafe { ONE.deallocate(b.cast(), layout) };
        }
        let p = ONE.allocate(layout).unwrap();
        // SAFETY: live with `layout`.
        unsafe { ONE.deallocate(p.cast(), layout) };
    })
    .join()
    .unwrap();
    let s = ONE.stats();
    assert_eq!((s.live_bytes, s.peak_bytes), (0, 10_000), "{s:?}");

    static TWO: Counting<System> = Counting::new(System);
    // A producer allocates 10 blocks three times; a consumer frees each batch. At most 10
    // blocks are live at once, the producer's own mark is 30 blocks.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Block>>();
    let consumer = std::thread::spawn(move || {
        for batch in rx {
            for Block(p, layout) in batch {
                // SAFETY: each block is live with its layout and freed once.
                unsafe { TWO.deallocate(p, layout) };
            }
        }
    });
    std::thread::spawn(move || {
        for _ in 0..3 {
            let batch = (0..10)
                .map(|_| Block(TWO.allocate(layout).unwrap().cast(), layout))
                .collect();
            tx.send(batch).unwrap();
        }
    })
    .join()
    .unwrap();
    consumer.join().unwrap();
    let s = TWO.stats();
    assert_eq!(s.live_bytes, 0, "{s:?}");
    assert!(
        (10_000..=30_000).contains(&s.peak_bytes),
        "never below the true peak, at most the producer's total: {s:?}"
    );
}
