//! Alloc + free of 64 B, 4 KiB and 1 MiB through the C table against the same backend
//! called directly (`Allocator::allocate`/`deallocate`), for System and (with the feature)
//! mimalloc; `direct` is 16-byte aligned like the table's `allocate`, `direct_aligned64` is the
//! peer of `table_aligned64` (XNNPACK's alignment). Run: `cargo bench -p keepalloc-allocators --all-features`.

use core::alloc::Layout;
use std::hint::black_box;

use allocator_api2::alloc::Allocator;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keepalloc_allocators::{AllocatorTable, System};

const SIZES: [usize; 3] = [64, 4096, 1 << 20];

fn bench_backend<A: Allocator + Sync + 'static>(c: &mut Criterion, name: &str, a: &'static A) {
    let table = AllocatorTable::for_allocator(a);
    let mut group = c.benchmark_group(format!("alloc_free/{name}"));
    for size in SIZES {
        let layout = Layout::from_size_align(size, 16).unwrap();
        group.bench_with_input(BenchmarkId::new("direct", size), &size, |b, _| {
            b.iter(|| {
                let p = a.allocate(black_box(layout)).unwrap();
                // SAFETY: `p` is live with `layout`.
                unsafe { a.deallocate(black_box(p).cast(), layout) };
            })
        });
        let layout64 = Layout::from_size_align(size, 64).unwrap();
        group.bench_with_input(BenchmarkId::new("direct_aligned64", size), &size, |b, _| {
            b.iter(|| {
                let p = a.allocate(black_box(layout64)).unwrap();
                // SAFETY: `p` is live with `layout64`.
                unsafe { a.deallocate(black_box(p).cast(), layout64) };
            })
        });
        group.bench_with_input(BenchmarkId::new("table", size), &size, |b, &size| {
            let (alloc, free) = (table.allocate().unwrap(), table.deallocate().unwrap());
            b.iter(|| {
                // SAFETY: the table comes from `for_allocator`; the block is freed once.
                unsafe {
                    let p = alloc(table.context(), black_box(size));
                    assert!(!p.is_null(), "allocation");
                    free(table.context(), black_box(p));
                }
            })
        });
        group.bench_with_input(
            BenchmarkId::new("table_aligned64", size),
            &size,
            |b, &size| {
                let (alloc, free) = (
                    table.aligned_allocate().unwrap(),
                    table.aligned_deallocate().unwrap(),
                );
                b.iter(|| {
                    // SAFETY: as above.
                    unsafe {
                        let p = alloc(table.context(), 64, black_box(size));
                        assert!(!p.is_null(), "allocation");
                        free(table.context(), black_box(p));
                    }
                })
            },
        );
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    static SYSTEM: System = System;
    bench_backend(c, "system", &SYSTEM);
    #[cfg(feature = "mimalloc")]
    {
        static MIMALLOC: keepalloc_allocators::Mimalloc = keepalloc_allocators::Mimalloc;
        bench_backend(c, "mimalloc", &MIMALLOC);
    }
}

criterion_group!(table, benches);
criterion_main!(table);
