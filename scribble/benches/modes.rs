//! What each Scribble mode costs: alloc + free of a 64-byte block (XNNPACK's alignment) per
//! mode against the plain backend, all in one run (compare the ratios, not the nanoseconds),
//! and the unwinder's cost per captured stack at several depths (the per-allocation cost of
//! `stacks:both` is two of these, one at allocation and one at free).
//! Run: `cargo bench -p keepalloc-scribble`.

use core::alloc::Layout;
use std::hint::black_box;
use std::time::Duration;

use allocator_api2::alloc::Allocator;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keepalloc_allocators::System;
use keepalloc_scribble::{Scribble, ScribbleConfig, Stack};

fn alloc_free<A: Allocator>(a: &A, layout: Layout) {
    let p = a.allocate(black_box(layout)).unwrap();
    // SAFETY: `p` is live with `layout`, freed once.
    unsafe { a.deallocate(black_box(p).cast(), layout) };
}

fn modes(c: &mut Criterion) {
    let layout = Layout::from_size_align(64, 64).unwrap();
    let mut group = c.benchmark_group("alloc_free_64");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("plain", |b| b.iter(|| alloc_free(&System, layout)));
    for (name, spec) in [
        ("scribble", ""),
        ("scribble_stacks_free", "stacks:free"),
        ("scribble_stacks_both", "stacks:both"),
        ("guard_1_in_64", "guard:1/64"),
        ("guard_1_in_64_stacks_both", "guard:1/64,stacks:both"),
        ("guard_1_in_1", "guard:1/1"),
    ] {
        let heap: Scribble<System> =
            Scribble::new(System, ScribbleConfig::from_env_spec(spec).unwrap());
        group.bench_function(name, |b| b.iter(|| alloc_free(&heap, layout)));
        assert!(heap.violations().is_empty());
    }
    group.finish();
}

/// Nested calls so that the unwinder has `depth` real frames to walk.
#[inline(never)]
fn nested(depth: usize, keep: usize) -> Stack {
    if depth == 0 {
        Stack::capture(keep)
    } else {
        let s = nested(depth - 1, keep);
        black_box(&s);
        s
    }
}

fn capture(c: &mut Criterion) {
    let mut group = c.benchmark_group("capture");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for depth in [8usize, 16, 24, 32] {
        group.bench_with_input(BenchmarkId::new("dwarf", depth), &depth, |b, &depth| {
            b.iter(|| nested(black_box(depth + 8), depth))
        });
    }
    group.finish();
}

criterion_group!(benches, modes, capture);
criterion_main!(benches);
