//! What the C table costs over calling the backend directly: alloc + free of one size in a
//! tight loop, about 25 ms of pairs a run (up to 2,000,000), median of 48 rounds (the four
//! modes take turns within each round, each round starting one mode later, so every mode
//! runs first, second, third and last equally often), for System and mimalloc, with 16-byte
//! (`allocate`) and 64-byte (`aligned_allocate`) alignment; prints each ratio and the worst
//! one. A ratio is the median of the rounds' own table/direct ratios (paired: the two ran
//! back to back, so a slow phase of the machine divides out), not the ratio of the two
//! medians. Both backends free without a size, so their tables are headerless: the table
//! adds one indirect call.
//!
//! Runs are short so that the two halves of a pair see the same machine: with 2,000,000
//! pairs a run at every size, a mimalloc 1 MiB run (about 550 ns a pair) lasted 1.1 s, and
//! that cell read table/direct 1.06× on medians of 516 against 551 ns (the table faster):
//! the ratio then measured the machine, not the one indirect call.
//!
//! `cargo run --release -p keepalloc-allocators --features mimalloc --example table_overhead`
//! prints the table. For instruction counts that do not depend on machine load, run one
//! loop under callgrind, counting only the loop:
//! `valgrind --tool=callgrind --toggle-collect='*run_n*' target/release/examples/table_overhead mimalloc table 64 100000`
//! (backend `system|mimalloc`, mode `direct|table|direct64|table64`, size in bytes, and
//! optionally the number of alloc + free pairs, 2,000,000 by default). `-- --machine` adds a
//! tab-separated line per ratio, for `cargo xtask alloc-bench`, which runs this binary in
//! several link layouts (see there).

use std::hint::black_box;
use std::time::Instant;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Mimalloc, System};

static SYSTEM: System = System;
static MIMALLOC: Mimalloc = Mimalloc;
/// Most pairs a run (the small sizes), and the default of the one-cell command line.
const ITERATIONS: u32 = 2_000_000;
/// Fewest pairs a run.
const MIN_ITERATIONS: u32 = 10_000;
/// Nanoseconds a run aims at.
const RUN_NS: f64 = 25e6;
/// A multiple of the four modes: each takes every position in the round equally often.
const ROUNDS: usize = 48;
const _: () = assert!(ROUNDS.is_multiple_of(MODES.len()));
const MODES: [&str; 4] = ["direct", "table", "direct64", "table64"];

/// Nanoseconds per alloc + free over `iterations` pairs.
#[inline(never)]
fn run_n<A: Allocator + Sync>(a: &'static A, mode: &str, size: usize, iterations: u32) -> f64 {
    let t = AllocatorTable::for_allocator(a);
    let l16 = core::alloc::Layout::from_size_align(size, 16).expect("layout");
    let l64 = core::alloc::Layout::from_size_align(size, 64).expect("layout");
    let (alloc, free) = (t.allocate().expect("slot"), t.deallocate().expect("slot"));
    let (aalloc, afree) = (
        t.aligned_allocate().expect("slot"),
        t.aligned_deallocate().expect("slot"),
    );
    // The mode is chosen once, outside the timed loops: each loop holds only its own calls
    // (and, like the direct path's `expect`, a NULL check of what the table returned).
    let direct = |l: core::alloc::Layout| {
        for _ in 0..iterations {
            let p = a.allocate(black_box(l)).expect("allocation");
            // SAFETY: `p` is live with `l`.
            unsafe { a.deallocate(black_box(p).cast(), l) }
        }
    };
    let start = Instant::now();
    match mode {
        "direct" => direct(l16),
        "direct64" => direct(l64),
        "table" => {
            for _ in 0..iterations {
                // SAFETY: a `for_allocator` table; the block is freed once.
                unsafe {
                    let p = alloc(t.context(), black_box(size));
                    assert!(!p.is_null(), "allocation");
                    free(t.context(), black_box(p));
                }
            }
        }
        "table64" => {
            for _ in 0..iterations {
                // SAFETY: as above; 64 is a power of two.
                unsafe {
                    let p = aalloc(t.context(), 64, black_box(size));
                    assert!(!p.is_null(), "allocation");
                    afree(t.context(), black_box(p));
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
    start.elapsed().as_nanos() as f64 / f64::from(iterations.max(1))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn one_n(backend: &str, mode: &str, size: usize, iterations: u32) -> f64 {
    match backend {
        "mimalloc" => run_n(&MIMALLOC, mode, size, iterations),
        "system" => run_n(&SYSTEM, mode, size, iterations),
        other => panic!("backend: system or mimalloc, not {other:?}"),
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let machine = args.iter().any(|a| a == "--machine");
    args.retain(|a| a != "--machine");
    if let [backend, mode, size, rest @ ..] = args.as_slice() {
        let size = size.parse().expect("size in bytes");
        let n = rest
            .first()
            .map_or(ITERATIONS, |n| n.parse().expect("iterations"));
        println!(
            "{backend} {mode} {size} x{n}: {:.2} ns",
            one_n(backend, mode, size, n)
        );
        return;
    }
    println!(
        "backend   size     direct  table (ratio)   direct64  table64 (ratio)   [ns per alloc+free, median of {ROUNDS}; ratio: median of the rounds' ratios]"
    );
    let mut worst = 0f64;
    let mut machine_lines = Vec::new();
    for backend in ["system", "mimalloc"] {
        for size in [64usize, 4096, 1 << 20] {
            // The four modes take turns round by round, so machine load and the heap's state
            // hit direct and table alike; round r starts with mode r % 4, so no mode always
            // runs right after the same one (a fixed order measured table after direct
            // every time).
            // Pairs a run: about RUN_NS of the direct loop, after a warm-up that also times it.
            one_n(backend, "direct", size, MIN_ITERATIONS);
            let ns = one_n(backend, "direct", size, MIN_ITERATIONS);
            let n = (RUN_NS / ns.max(1.0)).clamp(f64::from(MIN_ITERATIONS), f64::from(ITERATIONS))
                as u32;
            let mut runs: [Vec<f64>; 4] = Default::default();
            for r in 0..ROUNDS {
                for j in 0..MODES.len() {
                    let i = (r + j) % MODES.len();
                    runs[i].push(one_n(backend, MODES[i], size, n));
                }
            }
            let ratio =
                |x: &[f64], d: &[f64]| median(x.iter().zip(d).map(|(x, d)| x / d).collect());
            let (r, r64) = (ratio(&runs[1], &runs[0]), ratio(&runs[3], &runs[2]));
            if machine {
                machine_lines.push(format!(
                    "cell\ttable_overhead\t{backend}\t{size}\ttable\t{r:.4}"
                ));
                machine_lines.push(format!(
                    "cell\ttable_overhead\t{backend}\t{size}\ttable64\t{r64:.4}"
                ));
            }
            let [d, t, d64, t64] = runs.map(median);
            worst = worst.max(r).max(r64);
            println!(
                "{backend:9} {size:<8} {d:6.2} {t:6.2} ({r:.2}x)   {d64:6.2} {t64:6.2} ({r64:.2}x)   {n} pairs a run"
            );
        }
    }
    println!("worst table/direct: {worst:.2}x");
    for line in machine_lines {
        println!("{line}");
    }
}
