//! The inputs of one low-precision shape, shared by every library the bench runs on it, and
//! the f64 references their outputs are checked against.

use keepalloc_kernels::{bf16_from_f32, bf16_to_f32, quantize_qd8};

use crate::lowp_kind::Kind;
use crate::onednn;
use crate::peers::Aligned;

/// One shape's data.
pub struct Data {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// m × k f32 (plus XNN_EXTRA_BYTES), 64-byte aligned as a runtime's tensors are.
    pub x: Aligned<f32>,
    /// m × k bf16 (plus slack), 64-byte aligned.
    pub xb: Aligned<u16>,
    /// n × k.
    pub wb: Vec<u16>,
    /// n × k.
    pub w8: Vec<i8>,
    pub scales: Vec<f32>,
    pub bias: Vec<f32>,
    /// m × k: `x` quantized per tensor to u8 (`tensor_q`), oneDNN's pre-quantized input.
    pub xq: Aligned<u8>,
    /// `(scale, zero point)` of `xq`.
    pub tensor_q: (f32, i32),
}

impl Data {
    pub fn new(m: usize, k: usize, n: usize) -> Data {
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ ((m * 31 + k) * 131 + n) as u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut unit = || ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        let mut x: Vec<f32> = (0..m * k).map(|_| unit()).collect();
        x.extend([0.0; 16]);
        let xb = Aligned::copied(&x.iter().map(|&v| bf16_from_f32(v)).collect::<Vec<u16>>());
        let x = Aligned::copied(&x);
        let wb = (0..n * k).map(|_| bf16_from_f32(unit())).collect();
        let w8 = (0..n * k).map(|_| (unit() * 127.0) as i8).collect();
        let scales = (0..n).map(|_| (unit().abs() + 0.01) / 128.0).collect();
        let bias = (0..n).map(|_| unit()).collect();
        let tensor_q = onednn::tensor_params(&x[..m * k]);
        let q: Vec<u8> = x[..m * k]
            .iter()
            .map(|&v| {
                ((v / tensor_q.0).round_ties_even() + tensor_q.1 as f32).clamp(0.0, 255.0) as u8
            })
            .collect();
        Data {
            m,
            k,
            n,
            x,
            xb,
            wb,
            w8,
            scales,
            bias,
            xq: Aligned::copied(&q),
            tensor_q,
        }
    }

    /// The rows whose outputs are checked.
    pub fn rows(&self) -> Vec<usize> {
        if self.m * self.k * self.n <= 1 << 28 || self.m <= 8 {
            (0..self.m).collect()
        } else {
            (0..8).map(|i| i * (self.m - 1) / 7).collect()
        }
    }

    /// oneDNN's u8s8 on `xq`: `(row, value, tolerance)` per checked output. The i32 sums
    /// are exact; with `requantized`, the input was quantized in the run by oneDNN's
    /// reorder, whose rounding may differ from ours by one step per value.
    /// With `saturating`, each pair of products saturates to i16 as oneDNN's int8 GEMM does
    /// without VNNI ([`onednn::dot_u8s8_pairs_saturating`]).
    pub fn reference_u8s8(
        &self,
        requantized: bool,
        saturating: bool,
    ) -> Vec<(usize, Vec<(f64, f64)>)> {
        let eps = f32::EPSILON as f64;
        let (k, n) = (self.k, self.n);
        let (sx, zp) = (self.tensor_q.0 as f64, self.tensor_q.1 as i64);
        self.rows()
            .into_iter()
            .map(|r| {
                let q = &self.xq[r * k..(r + 1) * k];
                let vals = (0..n)
                    .map(|j| {
                        let w = &self.w8[j * k..(j + 1) * k];
                        let sum_w: i64 = w.iter().map(|&b| b as i64).sum();
                        let s = if saturating {
                            onednn::dot_u8s8_pairs_saturating(q, w) - zp * sum_w
                        } else {
                            q.iter()
                                .zip(w)
                                .map(|(&a, &b)| (a as i64 - zp) * b as i64)
                                .sum()
                        };
                        let abs_w: i64 = w.iter().map(|&b| (b as i64).abs()).sum();
                        let ws = self.scales[j] as f64;
                        let b = self.bias[j] as f64;
                        let v = s as f64 * sx * ws;
                        let step = if requantized {
                            sx * ws * abs_w as f64
                        } else {
                            0.0
                        };
                        (v + b, 4.0 * eps * (v.abs() + b.abs()) + step)
                    })
                    .collect();
                (r, vals)
            })
            .collect()
    }

    /// `(row, value, tolerance)` per checked output, the rules of the kernels' tests.
    pub fn reference(&self, kind: Kind) -> Vec<(usize, Vec<(f64, f64)>)> {
        let eps = f32::EPSILON as f64;
        let (k, n) = (self.k, self.n);
        let mut q = vec![0i8; k];
        self.rows()
            .into_iter()
            .map(|r| {
                let row = &self.x[r * k..(r + 1) * k];
                let p = quantize_qd8(row, &mut q);
                let vals = (0..n)
                    .map(|j| {
                        let b = self.bias[j] as f64;
                        let w = |kk: usize| j * k + kk;
                        match kind {
                            Kind::Bf16F32 => {
                                let (mut s, mut t) = (0.0, 0.0);
                                for kk in 0..k {
                                    let v = bf16_to_f32(self.xb[r * k + kk]) as f64
                                        * bf16_to_f32(self.wb[w(kk)]) as f64;
                                    s += v;
                                    t += f64::abs(v);
                                }
                                (s + b, (k as f64 + 2.0) * eps * (t + b.abs()))
                            }
                            Kind::Qd8F32Qc8w => {
                                let mut s = 0i64;
                                for (kk, &qv) in q.iter().enumerate() {
                                    s += (qv as i64 - p.zero_point as i64) * self.w8[w(kk)] as i64;
                                }
                                let v = s as f64 * p.scale as f64 * self.scales[j] as f64;
                                (v + b, 2.0 * eps * (v.abs() + b.abs()))
                            }
                            Kind::F32Qc8w => {
                                let (mut s, mut t) = (0.0, 0.0);
                                for (kk, &xv) in row.iter().enumerate() {
                                    let v = xv as f64 * self.w8[w(kk)] as f64;
                                    s += v;
                                    t += f64::abs(v);
                                }
                                let ws = self.scales[j] as f64;
                                let v = ws * (s + b);
                                (v, eps * ((k as f64 + 2.0) * ws * (t + b.abs()) + v.abs()))
                            }
                        }
                    })
                    .collect();
                (r, vals)
            })
            .collect()
    }
}
