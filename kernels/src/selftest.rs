//! A small end-to-end use of the low-precision operators through the captured table, for
//! the fault campaign's scenarios (its out-of-memory plan fails each allocation site in
//! turn) and for anything else that wants to see them allocate, compute and free.

use crate::error::KernelError;
use crate::operators::fc_bf16::{
    FullyConnectedBf16F32, FullyConnectedBf16F32Desc, bf16_from_f32, bf16_to_f32,
};
use crate::operators::fc_qc8w::{FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc};
use crate::operators::fc_qd8::{
    FullyConnectedQd8F32Qc8w, FullyConnectedQd8F32Qc8wDesc, quantize_qd8,
};

/// Table allocations one [`low_precision_path`] makes, in this order: the packed block of a
/// `bf16_f32`, of a `qd8_f32_qc8w` and of an `f32_qc8w` operator (one each).
pub const LOW_PRECISION_ALLOCATIONS: usize = FullyConnectedBf16F32::CREATE_ALLOCATIONS
    + FullyConnectedQd8F32Qc8w::CREATE_ALLOCATIONS
    + FullyConnectedF32Qc8w::CREATE_ALLOCATIONS;

/// Input channels, output channels and batch of the path (odd, so edge tiles run).
const K: usize = 37;
const N: usize = 29;
const M: usize = 3;

/// Deterministic values in [-1, 1).
pub(crate) fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Creates one operator of each low-precision kind through the table captured by
/// [`initialize`](crate::initialize) (the [`LOW_PRECISION_ALLOCATIONS`] sites, all three
/// alive at once), runs a batch of 3 rows through each, checks every output against an f64
/// reference of the operator's own arithmetic (the tolerance rules of the crate's tests),
/// and drops them (each block goes back through the table).
///
/// `Ok(true)`: all outputs right; `Ok(false)`: a wrong answer; `Err`: the first error (an
/// [`KernelError::OutOfMemory`] under a failing table), after every block already taken was
/// given back. The inputs and the qd8 workspace come from the global allocator, as a
/// caller's buffers would.
pub fn low_precision_path() -> Result<bool, KernelError> {
    let x = values(1, M * K);
    let bias = values(2, N);
    let xb: Vec<u16> = x.iter().map(|&v| bf16_from_f32(v)).collect();
    let wb: Vec<u16> = values(3, N * K).iter().map(|&v| bf16_from_f32(v)).collect();
    let w8: Vec<i8> = values(4, N * K)
        .iter()
        .map(|&v| (v * 127.0) as i8)
        .collect();
    let scales: Vec<f32> = values(5, N)
        .iter()
        .map(|&v| (v.abs() + 0.01) / 64.0)
        .collect();

    let bf16 =
        FullyConnectedBf16F32::create(&FullyConnectedBf16F32Desc::new(K, N, &wb).with_bias(&bias))?;
    let qd8 = FullyConnectedQd8F32Qc8w::create(
        &FullyConnectedQd8F32Qc8wDesc::new(K, N, &w8, &scales).with_bias(&bias),
    )?;
    let qc8w = FullyConnectedF32Qc8w::create(
        &FullyConnectedF32Qc8wDesc::new(K, N, &w8, &scales).with_bias(&bias),
    )?;

    let eps = f32::EPSILON as f64;
    let mut ok = true;
    let mut y = vec![0.0f32; M * N];
    let mut check = |y: &[f32], want: &dyn Fn(usize, usize) -> (f64, f64)| {
        for m in 0..M {
            for n in 0..N {
                let (v, tol) = want(m, n);
                ok &= (y[m * N + n] as f64 - v).abs() <= tol + 1e-30;
            }
        }
    };

    bf16.run(M, &xb, &mut y)?;
    check(&y, &|m, n| {
        let (mut s, mut t) = (bias[n] as f64, (bias[n] as f64).abs());
        for k in 0..K {
            let v = bf16_to_f32(xb[m * K + k]) as f64 * bf16_to_f32(wb[n * K + k]) as f64;
            s += v;
            t += v.abs();
        }
        (s, (K as f64 + 2.0) * eps * t)
    });

    let mut workspace = vec![0u8; qd8.workspace_size(M)?];
    qd8.run(M, &x, &mut y, &mut workspace)?;
    let mut q = [0i8; M * K];
    let params: Vec<_> = (0..M)
        .map(|m| quantize_qd8(&x[m * K..(m + 1) * K], &mut q[m * K..(m + 1) * K]))
        .collect();
    check(&y, &|m, n| {
        let s: i64 = (0..K)
            .map(|k| (q[m * K + k] as i64 - params[m].zero_point as i64) * w8[n * K + k] as i64)
            .sum();
        let p = s as f64 * params[m].scale as f64 * scales[n] as f64;
        let b = bias[n] as f64;
        (p + b, 2.0 * eps * (p.abs() + b.abs()))
    });

    qc8w.run(M, &x, &mut y)?;
    check(&y, &|m, n| {
        let (mut s, mut t) = (bias[n] as f64, (bias[n] as f64).abs());
        for k in 0..K {
            let v = x[m * K + k] as f64 * w8[n * K + k] as f64;
            s += v;
            t += v.abs();
        }
        let ws = scales[n] as f64;
        (ws * s, eps * ((K as f64 + 2.0) * ws * t + (ws * s).abs()))
    });

    drop((bf16, qd8, qc8w));
    Ok(ok)
}
