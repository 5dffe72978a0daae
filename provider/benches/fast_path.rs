//! The fast path after publication against `std::sync::OnceLock::get`.
//! Run: `cargo bench -p keepalloc-provider`.

use std::hint::black_box;
use std::sync::OnceLock;

use criterion::{Criterion, criterion_group, criterion_main};
use keepalloc_allocators::System;
use keepalloc_provider::{GlobalProvider, KeepCell, Provider};

static ONCE_LOCK: OnceLock<u64> = OnceLock::new();
static KEEP_CELL: KeepCell<u64> = KeepCell::new();
static GLOBAL: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

fn fast_path(c: &mut Criterion) {
    ONCE_LOCK.get_or_init(|| 7);
    KEEP_CELL
        .get_or_try_init(|| Ok::<_, ()>(7), |_| Ok(()))
        .unwrap();
    let provider = Provider::with_global(&GLOBAL);
    provider.preferred_allocator().unwrap();

    let mut g = c.benchmark_group("fast_path");
    g.bench_function("OnceLock::get", |b| {
        b.iter(|| black_box(black_box(&ONCE_LOCK).get()))
    });
    g.bench_function("KeepCell::get", |b| {
        b.iter(|| black_box(black_box(&KEEP_CELL).get()))
    });
    g.bench_function("KeepCell::get_or_try_init", |b| {
        b.iter(|| black_box(black_box(&KEEP_CELL).get_or_try_init(|| Ok::<_, ()>(0), |_| Err(()))))
    });
    g.bench_function("Provider::preferred_allocator", |b| {
        b.iter(|| black_box(black_box(provider).preferred_allocator()))
    });
    g.finish();
}

criterion_group!(benches, fast_path);
criterion_main!(benches);
