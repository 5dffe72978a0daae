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
            check(&format!("{isa} {m}x{k}x{n}"), (m, k, n), &x, &w, &bias, &y);
        }
        group.finish();
    }
}

/// Panics unless `y` (what the timed runs wrote) is `x · wᵀ + bias` within f32 rounding: a
/// bench of a wrong kernel must not report a speed.
fn check(
    what: &str,
    (m, k, n): (usize, usize, usize),
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    y: &[f32],
) {
    for r in 0..m {
        for c in 0..n {
            let (mut sum, mut magnitude) = (f64::from(bias[c]), f64::from(bias[c]).abs());
            for i in 0..k {
                let p = f64::from(x[r * k + i]) * f64::from(w[c * k + i]);
                sum += p;
                magnitude += p.abs();
            }
            // Each of the K + 1 f32 additions rounds by at most half an ulp of the sum so far.
            let tol = (k + 1) as f64 * f64::from(f32::EPSILON) * magnitude + 1e-6;
            let got = f64::from(y[r * n + c]);
            assert!(
                (got - sum).abs() <= tol,
                "{what}: y[{r}][{c}] = {got}, want {sum} ± {tol}"
            );
        }
    }
}

fn create(c: &mut Criterion) {
    let (k, n) = (1024, 1024);
    let w = vec![0.25f32; k * n];
    // Creating only: each operator is dropped (its block freed through the table) outside
    // the timed part.
    c.bench_function("create/1024x1024", |b| {
        b.iter_with_large_drop(|| {
            FullyConnected::create_with_table(&TABLE, &FullyConnectedDesc::new(k, n, black_box(&w)))
                .unwrap()
        })
    });
}

criterion_group!(benches, fully_connected, create);
criterion_main!(benches);
