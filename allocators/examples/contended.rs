//! Alloc + free of 64 bytes through an owner's C table (`Counting<backend>`, the provider's
//! owner, and `AllocatorTable::for_allocator` of it) against the backend called directly
//! (`Allocator::allocate`/`deallocate`, no counting), with 1, 2, 8 and 32 threads; the middle
//! column is the same `Counting` wrapper called directly through its Rust face, so that
//! table/counted shows what the table adds and counted/direct what exact counting costs.
//! The `uncounted` column is the table of an owner of `GlobalProvider::new_uncounted`, built as
//! `Owner::table` builds it: `Counting::uncounted(backend)` is the owner, and its table is
//! `for_allocator` of the backend inside it (no `Counting` call at all), for a runtime that
//! needs no per-owner statistics.
//! One cell alone, for callgrind:
//! `contended <system|mimalloc> <direct|counted|table|uncounted> <threads>`.
//!
//! `cargo run --release -p keepalloc-allocators --features mimalloc --example contended`
//!
//! Every thread does `TOTAL / threads` alloc + free pairs (the same total work at every thread
//! count), all released at once by a barrier; the figure is wall time per pair over all
//! threads, from the first worker's start to the last worker's end (read by the workers). Each
//! cell is the median of 12 runs, every column interleaved run by run so that machine load
//! hits them alike, and each run starting one column later than the one before (every column
//! runs first, second, third and last equally often: a fixed order always ran `uncounted`
//! last and `direct` first); each ratio to direct is the median of the 12 runs' own ratios
//! (paired: a slow phase of the machine divides out), not the ratio of the two medians.
//! A fifth column runs the direct calls again, as a control: its ratio to the first is what
//! the harness reads between two identical columns (1.00× when the position of a column in
//! the run and the machine's phases do not bias the ratios), so a ratio of the table to
//! direct beyond that spread is the table's.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Counting, Mimalloc, System};

const TOTAL: usize = 8_000_000;
const SIZE: usize = 64;
/// A multiple of the five columns: each takes every position in a run equally often.
const RUNS: usize = 15;
const _: () = assert!(RUNS % 5 == 0);

static SYSTEM: System = System;
static MIMALLOC: Mimalloc = Mimalloc;
static SYSTEM_OWNER: Counting<System> = Counting::new(System);
static MIMALLOC_OWNER: Counting<Mimalloc> = Counting::new(Mimalloc);
// The same counting wrapper called through its Rust face (no table), for the third column.
static SYSTEM_COUNTED: Counting<System> = Counting::new(System);
static MIMALLOC_COUNTED: Counting<Mimalloc> = Counting::new(Mimalloc);
// The owner of `GlobalProvider::new_uncounted`.
static SYSTEM_UNCOUNTED: Counting<System> = Counting::uncounted(System);
static MIMALLOC_UNCOUNTED: Counting<Mimalloc> = Counting::uncounted(Mimalloc);

/// Nanoseconds of wall time per alloc + free, `threads` threads at once: from the first
/// thread's start to the last thread's end, each read by the workers themselves (the main
/// thread's own clock, read after it leaves the barrier, can start after the workers have run
/// when there are more threads than cores).
fn run(threads: usize, work: &(dyn Fn(usize) + Sync)) -> f64 {
    let per_thread = TOTAL / threads;
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    work(per_thread);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("a thread");
    let end = spans.iter().map(|s| s.1).max().expect("a thread");
    (end - start).as_nanos() as f64 / (per_thread * threads) as f64
}

fn direct<A: Allocator + Sync>(a: &'static A) -> impl Fn(usize) + Sync {
    let layout = core::alloc::Layout::from_size_align(SIZE, 16).expect("layout");
    move |n| {
        for _ in 0..n {
            let p = a.allocate(black_box(layout)).expect("allocation");
            // SAFETY: `p` is live with `layout`.
            unsafe { a.deallocate(black_box(p).cast(), layout) }
        }
    }
}

fn table(t: &'static AllocatorTable) -> impl Fn(usize) + Sync {
    let (alloc, free) = (t.allocate().expect("slot"), t.deallocate().expect("slot"));
    move |n| {
        for _ in 0..n {
            // SAFETY: a `for_allocator` table; each block is freed once, through it.
            unsafe {
                let p = alloc(t.context(), black_box(SIZE));
                assert!(!p.is_null());
                free(t.context(), black_box(p));
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

static SYSTEM_TABLE: AllocatorTable = AllocatorTable::for_allocator(&SYSTEM_OWNER);
static MIMALLOC_TABLE: AllocatorTable = AllocatorTable::for_allocator(&MIMALLOC_OWNER);
// What `Owner::table` builds for an uncounted owner: the table of the backend inside it.
static SYSTEM_UNCOUNTED_TABLE: AllocatorTable =
    AllocatorTable::for_allocator(SYSTEM_UNCOUNTED.inner());
static MIMALLOC_UNCOUNTED_TABLE: AllocatorTable =
    AllocatorTable::for_allocator(MIMALLOC_UNCOUNTED.inner());

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [backend, mode, threads] = args.as_slice() {
        // One run, for callgrind or perf: `contended mimalloc table 1`.
        let threads: usize = threads.parse().expect("threads");
        let work: Box<dyn Fn(usize) + Sync> = match (backend.as_str(), mode.as_str()) {
            ("system", "direct") => Box::new(direct(&SYSTEM)),
            ("system", "counted") => Box::new(direct(&SYSTEM_COUNTED)),
            ("system", "uncounted") => Box::new(table(&SYSTEM_UNCOUNTED_TABLE)),
            ("system", _) => Box::new(table(&SYSTEM_TABLE)),
            (_, "direct") => Box::new(direct(&MIMALLOC)),
            (_, "counted") => Box::new(direct(&MIMALLOC_COUNTED)),
            (_, "uncounted") => Box::new(table(&MIMALLOC_UNCOUNTED_TABLE)),
            _ => Box::new(table(&MIMALLOC_TABLE)),
        };
        println!("{backend} {mode} {threads}: {:.2} ns", run(threads, &*work));
        return;
    }
    println!(
        "alloc+free of {SIZE} B, {TOTAL} pairs split over the threads; ns of wall time per \
         pair, median of {RUNS}"
    );
    println!(
        "backend   threads  direct  counted  owner-table  uncounted   \
         table/direct  uncounted/direct  direct-again/direct (control)"
    );
    for backend in ["system", "mimalloc"] {
        type Work = Box<dyn Fn(usize) + Sync>;
        let modes: [Work; 5] = match backend {
            "system" => [
                Box::new(direct(&SYSTEM)),
                Box::new(direct(&SYSTEM_COUNTED)),
                Box::new(table(&SYSTEM_TABLE)),
                Box::new(table(&SYSTEM_UNCOUNTED_TABLE)),
                Box::new(direct(&SYSTEM)),
            ],
            _ => [
                Box::new(direct(&MIMALLOC)),
                Box::new(direct(&MIMALLOC_COUNTED)),
                Box::new(table(&MIMALLOC_TABLE)),
                Box::new(table(&MIMALLOC_UNCOUNTED_TABLE)),
                Box::new(direct(&MIMALLOC)),
            ],
        };
        for threads in [1usize, 2, 8, 32] {
            let mut v: [Vec<f64>; 5] = Default::default();
            for r in 0..RUNS {
                for j in 0..modes.len() {
                    let i = (r + j) % modes.len();
                    v[i].push(run(threads, &*modes[i]));
                }
            }
            // Each ratio is the median of the runs' own ratios: a run's columns ran back to
            // back, so a slow phase of the machine divides out.
            let ratio = |col: &[f64]| median(col.iter().zip(&v[0]).map(|(x, d)| x / d).collect());
            let (rt, ru, ra) = (ratio(&v[2]), ratio(&v[3]), ratio(&v[4]));
            let [d, c, t, u, _] = v.map(median);
            println!(
                "{backend:9} {threads:<8} {d:6.2}  {c:6.2}   {t:6.2}       {u:6.2}      \
                 {rt:.3}x        {ru:.3}x            {ra:.3}x"
            );
        }
    }
    assert!(!SYSTEM_UNCOUNTED.is_counted() && !MIMALLOC_UNCOUNTED.is_counted());
    assert_eq!(
        SYSTEM_UNCOUNTED.stats().allocations,
        0,
        "uncounted reads zero"
    );
    let (s, m) = (SYSTEM_OWNER.stats(), MIMALLOC_OWNER.stats());
    assert_eq!(s.allocations, s.deallocations);
    assert_eq!(
        (s.live_bytes, m.live_bytes),
        (0, 0),
        "the owners' counts balance"
    );
    println!(
        "owner counts: system {} allocations, mimalloc {} allocations, live bytes 0",
        s.allocations, m.allocations
    );
}
