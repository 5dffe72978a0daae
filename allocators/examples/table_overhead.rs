//! What the C table costs over calling the backend directly: alloc + free of one size in a
//! tight loop, 2,000,000 times, median of 7 rounds, for System and mimalloc, with 16-byte
//! (`allocate`) and 64-byte (`aligned_allocate`) alignment.
//!
//! `cargo run --release -p keepalloc-allocators --features mimalloc --example table_overhead`
//! prints the table. For instruction counts that do not depend on machine load, run one
//! loop under callgrind:
//! `valgrind --tool=callgrind target/release/examples/table_overhead mimalloc table 64`
//! (backend `system|mimalloc`, mode `direct|table|direct64|table64`, size in bytes).

use std::hint::black_box;
use std::time::Instant;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Mimalloc, System};

static SYSTEM: System = System;
static MIMALLOC: Mimalloc = Mimalloc;
const ITERATIONS: u32 = 2_000_000;

/// Nanoseconds per alloc + free.
fn run<A: Allocator + Sync>(a: &'static A, mode: &str, size: usize) -> f64 {
    let t = AllocatorTable::for_allocator(a);
    let l16 = core::alloc::Layout::from_size_align(size, 16).expect("layout");
    let l64 = core::alloc::Layout::from_size_align(size, 64).expect("layout");
    let (alloc, free) = (t.allocate().expect("slot"), t.deallocate().expect("slot"));
    let (aalloc, afree) = (
        t.aligned_allocate().expect("slot"),
        t.aligned_deallocate().expect("slot"),
    );
    let start = Instant::now();
    for _ in 0..ITERATIONS {
        match mode {
            "direct" | "direct64" => {
                let l = if mode == "direct" { l16 } else { l64 };
                let p = a.allocate(black_box(l)).expect("allocation");
                // SAFETY: `p` is live with `l`.
                unsafe { a.deallocate(black_box(p).cast(), l) }
            }
            "table" => {
                // SAFETY: a `for_allocator` table; the block is freed once.
                unsafe { free(t.context(), black_box(alloc(t.context(), black_box(size)))) }
            }
            _ => {
                // SAFETY: as above.
                unsafe {
                    afree(
                        t.context(),
                        black_box(aalloc(t.context(), 64, black_box(size))),
                    )
                }
            }
        }
    }
    start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

fn one(backend: &str, mode: &str, size: usize) -> f64 {
    if backend == "mimalloc" {
        run(&MIMALLOC, mode, size)
    } else {
        run(&SYSTEM, mode, size)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [backend, mode, size] = args.as_slice() {
        let size = size.parse().expect("size in bytes");
        println!(
            "{backend} {mode} {size}: {:.2} ns",
            one(backend, mode, size)
        );
        return;
    }
    println!(
        "backend   size     direct  table (ratio)   direct64  table64 (ratio)   [ns, median of 7]"
    );
    for backend in ["system", "mimalloc"] {
        for size in [64usize, 4096, 1 << 20] {
            let median = |mode: &str| {
                let mut v: Vec<f64> = (0..7).map(|_| one(backend, mode, size)).collect();
                v.sort_by(f64::total_cmp);
                v[3]
            };
            let [d, t, d64, t64] = ["direct", "table", "direct64", "table64"].map(median);
            println!(
                "{backend:9} {size:<8} {d:6.2} {t:6.2} ({:.2}x)   {d64:6.2} {t64:6.2} ({:.2}x)",
                t / d,
                t64 / d64
            );
        }
    }
}
