//! Criterion benches of `FullyConnected::run` on the shapes, once per ISA this CPU
//! has (the cross-library comparison is `cargo xtask bench`).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, Isa};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

const SHAPES: [(usize, usize, usize); 11] = [
    (1, 96, 64),
    (1, 256, 256),
    (1, 1536, 1536),
    (1, 4096, 4096),
    (4, 512, 512),
    (16, 1024, 1024),
    (32, 96, 1536),
    (64, 1024, 1024),
    (128, 2048, 2048),
    (256, 512, 2048),
    (512, 512, 512),
];

fn fully_connected(c: &mut Criterion) {
    for isa in Isa::available() {
        let mut group = c.benchmark_group(format!("fully_connected/{isa}"));
        group.sample_size(20);
        for (m, k, n) in SHAPES {
            let w: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 * 0.01).collect();
            let bias = vec![0.5f32; n];
            let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let mut y = vec![0.0f32; m * n];
            let op = FullyConnected::create_with_table(
                &TABLE,
                &FullyConnectedDesc::new(k, n, &w)
                    .with_bias(&bias)
                    .with_isa(isa),
            )
            .expect("create");
            group.throughput(Throughput::Elements((2 * m * k * n) as u64));
            group.bench_function(format!("{m}x{k}x{n}"), |b| {
                b.iter(|| op.run(m, black_box(&x), black_box(&mut y)).unwrap())
            });
        }
        group.finish();
    }
}

fn create(c: &mut Criterion) {
    let (k, n) = (1024, 1024);
    let w = vec![0.25f32; k * n];
    c.bench_function("create/1024x1024", |b| {
        b.iter(|| {
            FullyConnected::create_with_table(&TABLE, &FullyConnectedDesc::new(k, n, black_box(&w)))
                .unwrap()
        })
    });
}

criterion_group!(benches, fully_connected, create);
criterion_main!(benches);
