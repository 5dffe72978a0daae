//! The low-precision operators' test cases and their f64 references.
//!
//! Tolerance rules (eps = f32::EPSILON = 2⁻²³; `P` is the exact value before the bias,
//! `T` the sum of the absolute values of the terms that make it up):
//!
//! * bf16_f32: every product of two bf16 values is exact in f32 (8 + 8 significant bits),
//!   so only the K additions onto the bias round, each by at most eps/2 of the running
//!   sum, whatever the order: `|y - ref| ≤ (K + 2) · eps · (T + |b|)`.
//! * qd8_f32_qc8w: the integer sum `S = Σ (q - z)·w` is exact; then three roundings
//!   (`f32(S)`, `s·ws`, the fused `·  + b`), each ≤ eps/2 relative:
//!   `|y - ref| ≤ 2 · eps · (|P| + |b|)`. Separately, against the unquantized f32 math,
//!   each activation is off by at most half a quantization step:
//!   `|y - Σ x·ws·w - b| ≤ (s/2)·(1 + 2⁻¹⁰)·Σ |ws·w| + the rounding bound`.
//! * f32_qc8w (XNNPACK's definition `y = ws · (b + Σ x·w)`): the K fused multiply-adds of
//!   f32 activations by exactly widened int8 weights onto the bias round like an f32 dot
//!   product (`(K + 2)·eps·(Σ|x·w| + |b|)`), then one multiply by ws:
//!   `|y - ref| ≤ eps · ((K + 2)·ws·(Σ|x·w| + |b|) + |ref|)`.
//!
//! A clamp is 1-Lipschitz, so the same bound holds after it.
#![allow(dead_code)]

use keepalloc_kernels::kinds::{LowpKind, Unquantized};
use keepalloc_kernels::{
    AllocatorTable, DotIsa, FcDesc, FcLowp, FullyConnectedBf16F32, FullyConnectedBf16F32Desc,
    FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w,
    FullyConnectedQd8F32Qc8wDesc, bf16_from_f32, bf16_to_f32, quantize_qd8,
};

use super::{Rng, SENTINEL, TAIL, with_case};

/// Which operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bf16F32,
    Qd8F32Qc8w,
    F32Qc8w,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Bf16F32, Kind::Qd8F32Qc8w, Kind::F32Qc8w];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Bf16F32 => "bf16_f32",
            Kind::Qd8F32Qc8w => "qd8_f32_qc8w",
            Kind::F32Qc8w => "f32_qc8w",
        }
    }

    /// The instruction sets this CPU can run with a kernel for this kind.
    pub fn isas(self) -> Vec<DotIsa> {
        DotIsa::kernels_for(self.name())
            .iter()
            .copied()
            .filter(|i| i.is_supported())
            .collect()
    }
}

/// One problem: f32 activations (and their bf16 rounding), bf16 and int8 weights.
#[derive(Clone, Debug)]
pub struct LCase {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub input_stride: usize,
    pub output_stride: usize,
    pub transposed: bool,
    pub input: Vec<f32>,
    pub input_bf16: Vec<u16>,
    pub weights_bf16: Vec<u16>,
    pub weights_i8: Vec<i8>,
    pub scales: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub min: f32,
    pub max: f32,
}

impl LCase {
    pub fn random(rng: &mut Rng, m: usize, k: usize, n: usize) -> LCase {
        let input_stride = if rng.bool() { k } else { k + rng.range(1, 7) };
        let output_stride = if rng.bool() { n } else { n + rng.range(1, 9) };
        let (min, max) = match rng.range(0, 3) {
            0 => (f32::NEG_INFINITY, f32::INFINITY),
            1 => (0.0, f32::INFINITY),
            2 => (-0.25, 0.25),
            _ => (f32::NEG_INFINITY, 0.5),
        };
        // Rows of different magnitudes (so the per-row scales differ) and offsets (so the
        // zero points do).
        let len = (m - 1) * input_stride + k;
        let mut input = rng.vec(len);
        for r in 0..m {
            let scale = [0.01, 1.0, 7.5, 100.0][r % 4];
            let shift = [0.0, 0.3, -0.6, 0.9][(r / 4) % 4];
            for v in &mut input[r * input_stride..r * input_stride + k] {
                *v = (*v + shift) * scale;
            }
        }
        let input_bf16 = input.iter().map(|&v| bf16_from_f32(v)).collect();
        let weights_bf16 = rng.vec(k * n).iter().map(|&v| bf16_from_f32(v)).collect();
        let weights_i8 = (0..k * n)
            .map(|_| (rng.next_u64() % 256) as u8 as i8)
            .collect();
        let scales = (0..n).map(|_| (rng.f32().abs() + 0.01) / 64.0).collect();
        LCase {
            m,
            k,
            n,
            input_stride,
            output_stride,
            transposed: rng.bool(),
            input,
            input_bf16,
            weights_bf16,
            weights_i8,
            scales,
            bias: rng.bool().then(|| rng.vec(n)),
            min,
            max,
        }
    }

    fn widx(&self, n: usize, k: usize) -> usize {
        if self.transposed {
            k * self.n + n
        } else {
            n * self.k + k
        }
    }

    fn bias_of(&self, n: usize) -> f64 {
        self.bias.as_ref().map_or(0.0, |b| b[n] as f64)
    }

    fn clamp(&self, v: f64) -> f64 {
        v.max(self.min as f64).min(self.max as f64)
    }

    /// `(value, tolerance)` per output (dense m × n) of `kind`'s own dequantized
    /// arithmetic, accumulated in f64, with the tolerance of the module docs.
    pub fn reference(&self, kind: Kind) -> Vec<(f64, f64)> {
        let eps = f32::EPSILON as f64;
        let mut out = Vec::with_capacity(self.m * self.n);
        let mut q = vec![0i8; self.k];
        for m in 0..self.m {
            let row = &self.input[m * self.input_stride..m * self.input_stride + self.k];
            let params = quantize_qd8(row, &mut q);
            for n in 0..self.n {
                let b = self.bias_of(n);
                let (value, tol) = match kind {
                    Kind::Bf16F32 => {
                        let (mut s, mut t) = (0.0f64, 0.0f64);
                        for k in 0..self.k {
                            let x = bf16_to_f32(self.input_bf16[m * self.input_stride + k]) as f64;
                            let w = bf16_to_f32(self.weights_bf16[self.widx(n, k)]) as f64;
                            s += x * w;
                            t += (x * w).abs();
                        }
                        (s + b, (self.k as f64 + 2.0) * eps * (t + b.abs()))
                    }
                    Kind::Qd8F32Qc8w => {
                        let mut s = 0i64;
                        for (k, &qk) in q.iter().enumerate() {
                            s += (qk as i64 - params.zero_point as i64)
                                * self.weights_i8[self.widx(n, k)] as i64;
                        }
                        let p = s as f64 * params.scale as f64 * self.scales[n] as f64;
                        (p + b, 2.0 * eps * (p.abs() + b.abs()))
                    }
                    Kind::F32Qc8w => {
                        let (mut s, mut t) = (0.0f64, 0.0f64);
                        for (k, &x) in row.iter().enumerate() {
                            let v = x as f64 * self.weights_i8[self.widx(n, k)] as f64;
                            s += v;
                            t += v.abs();
                        }
                        let ws = self.scales[n] as f64;
                        let v = ws * (s + b);
                        (
                            v,
                            eps * ((self.k as f64 + 2.0) * ws * (t + b.abs()) + v.abs()),
                        )
                    }
                };
                out.push((self.clamp(value), tol + 1e-30));
            }
        }
        out
    }

    /// For qd8: `(value, tolerance)` of the unquantized f32 math (f32 activations, dequantized
    /// weights), with the half-step quantization bound added.
    pub fn unquantized_reference(&self) -> Vec<(f64, f64)> {
        let exact = self.reference(Kind::Qd8F32Qc8w);
        let mut q = vec![0i8; self.k];
        let mut out = Vec::with_capacity(self.m * self.n);
        for m in 0..self.m {
            let row = &self.input[m * self.input_stride..m * self.input_stride + self.k];
            let s = quantize_qd8(row, &mut q).scale as f64;
            for n in 0..self.n {
                let ws = self.scales[n] as f64;
                let (mut v, mut t) = (self.bias_of(n), 0.0f64);
                for (k, &x) in row.iter().enumerate() {
                    let w = ws * self.weights_i8[self.widx(n, k)] as f64;
                    v += x as f64 * w;
                    t += w.abs();
                }
                let tol = s / 2.0 * (1.0 + 1.0 / 1024.0) * t + exact[m * self.n + n].1;
                out.push((self.clamp(v), tol));
            }
        }
        out
    }

    /// Output buffer of sentinels, with [`TAIL`] more past the last output, which no run may
    /// write.
    pub fn output(&self) -> Vec<f32> {
        vec![SENTINEL; (self.m - 1) * self.output_stride + self.n + TAIL]
    }

    /// Checks `out` against `reference` (dense m × n), and that the padding and the tail past
    /// the last output are untouched.
    pub fn check_against(&self, out: &[f32], reference: &[(f64, f64)], what: &str) {
        check_case!(self, out, |i: usize| reference[i], what);
    }

    /// Creates `kind` on `isa` through `table`, runs it, checks it against its own
    /// reference; returns the output.
    pub fn run_and_check(
        &self,
        table: &'static AllocatorTable,
        kind: Kind,
        isa: DotIsa,
        what: &str,
    ) -> Vec<f32> {
        let out = self.run(table, kind, Some(isa), what);
        self.check_against(&out, &self.reference(kind), what);
        out
    }

    /// Creates `kind` with this case's descriptor through `table` and drops it.
    pub fn try_create(
        &self,
        table: &'static AllocatorTable,
        kind: Kind,
    ) -> Result<(), keepalloc_kernels::KernelError> {
        match kind {
            Kind::Bf16F32 => FullyConnectedBf16F32::create_with_table(
                table,
                &FullyConnectedBf16F32Desc::new(self.k, self.n, &self.weights_bf16),
            )
            .map(drop),
            Kind::Qd8F32Qc8w => FullyConnectedQd8F32Qc8w::create_with_table(
                table,
                &FullyConnectedQd8F32Qc8wDesc::new(self.k, self.n, &self.weights_i8, &self.scales),
            )
            .map(drop),
            Kind::F32Qc8w => FullyConnectedF32Qc8w::create_with_table(
                table,
                &FullyConnectedF32Qc8wDesc::new(self.k, self.n, &self.weights_i8, &self.scales),
            )
            .map(drop),
        }
    }

    /// Creates `kind` (on `isa`, or the default choice) through `table` and runs it.
    pub fn run(
        &self,
        table: &'static AllocatorTable,
        kind: Kind,
        isa: Option<DotIsa>,
        what: &str,
    ) -> Vec<f32> {
        self.try_run_on(table, kind, isa, None, what)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// As [`run`](Self::run), on `pool` when given (`run_in`); a run's error is returned.
    pub fn try_run_on(
        &self,
        table: &'static AllocatorTable,
        kind: Kind,
        isa: Option<DotIsa>,
        pool: Option<&dyn keepalloc_kernels::Parallel>,
        what: &str,
    ) -> Result<Vec<f32>, keepalloc_kernels::KernelError> {
        let mut out = self.output();
        match kind {
            Kind::Bf16F32 => {
                let d = FullyConnectedBf16F32Desc::new(self.k, self.n, &self.weights_bf16);
                let op = self.create(table, d, isa, what);
                run_unquantized(&op, pool, self.m, &self.input_bf16, &mut out)?;
            }
            Kind::Qd8F32Qc8w => {
                let d = FullyConnectedQd8F32Qc8wDesc::new(
                    self.k,
                    self.n,
                    &self.weights_i8,
                    &self.scales,
                );
                let op = self.create(table, d, isa, what);
                // A workspace full of garbage, at an odd address: neither may matter.
                let size = op.workspace_size(self.m).unwrap();
                let mut ws = vec![0x5au8; size + 1];
                match pool {
                    Some(p) => op.run_in(p, self.m, &self.input, &mut out, &mut ws[1..])?,
                    None => op.run(self.m, &self.input, &mut out, &mut ws[1..])?,
                }
            }
            Kind::F32Qc8w => {
                let d =
                    FullyConnectedF32Qc8wDesc::new(self.k, self.n, &self.weights_i8, &self.scales);
                let op = self.create(table, d, isa, what);
                run_unquantized(&op, pool, self.m, &self.input, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Creates the operator of `d` with this case's strides, range, bias and layout (and
    /// `isa`, checked, when given) through `table`.
    fn create<'a, K: LowpKind>(
        &'a self,
        table: &'static AllocatorTable,
        d: FcDesc<'a, K>,
        isa: Option<DotIsa>,
        what: &str,
    ) -> FcLowp<K> {
        let strides = (self.input_stride, self.output_stride);
        let range = (self.min, self.max);
        let mut d = with_case(d, strides, range, self.bias.as_deref(), self.transposed);
        if let Some(isa) = isa {
            d = d.with_isa(isa);
        }
        let op = FcLowp::create_with_table(table, &d).unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(isa) = isa {
            assert_eq!(op.isa(), isa);
        }
        op
    }
}

/// `op.run`, or `op.run_in(pool)` when given.
fn run_unquantized<K: Unquantized>(
    op: &FcLowp<K>,
    pool: Option<&dyn keepalloc_kernels::Parallel>,
    m: usize,
    input: &[K::Input],
    out: &mut [f32],
) -> Result<(), keepalloc_kernels::KernelError> {
    match pool {
        Some(p) => op.run_in(p, m, input, out),
        None => op.run(m, input, out),
    }
}
