//! Shared test helpers: a seeded RNG, problem generation and the f64 reference.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use keepalloc_kernels::kinds::FcKind;
use keepalloc_kernels::{FcDesc, FullyConnected, FullyConnectedDesc, Parallel};

/// [`check_output`] of a case struct with the usual field names (f32 and low-precision):
/// `check_case!(case, out, reference, what)`.
macro_rules! check_case {
    ($c:expr, $out:expr, $reference:expr, $what:expr) => {
        $crate::common::check_output(
            $out,
            ($c.m, $c.n, $c.output_stride),
            $reference,
            &$crate::common::CaseText(
                $c.m,
                $c.k,
                $c.n,
                ($c.input_stride, $c.output_stride),
                $c.transposed,
                $c.bias.is_some(),
                ($c.min, $c.max),
            ),
            $what,
        )
    };
}

/// A command that runs this test binary again, as a child process: directly, or through
/// the emulator `KEEPALLOC_TEST_RUNNER` names when a cross-compiled test runs under one
/// (cargo's target runner starts only the parent; .ci/run's aarch64 step sets both).
pub fn this_test_binary() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    match std::env::var_os("KEEPALLOC_TEST_RUNNER") {
        Some(runner) => {
            let mut command = std::process::Command::new(runner);
            command.arg(exe);
            command
        }
        None => std::process::Command::new(exe),
    }
}

/// xorshift64*: seeded, reproducible, no dependencies.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.f32()).collect()
    }
    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

/// One fully-connected problem with its data.
#[derive(Clone, Debug)]
pub struct Case {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub input_stride: usize,
    pub output_stride: usize,
    pub transposed: bool,
    pub weights: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub min: f32,
    pub max: f32,
    pub input: Vec<f32>,
}

impl Case {
    pub fn random(rng: &mut Rng, m: usize, k: usize, n: usize) -> Case {
        let input_stride = if rng.bool() { k } else { k + rng.range(1, 7) };
        let output_stride = if rng.bool() { n } else { n + rng.range(1, 9) };
        let (min, max) = match rng.range(0, 3) {
            0 => (f32::NEG_INFINITY, f32::INFINITY),
            1 => (0.0, f32::INFINITY),
            2 => (-0.25, 0.25),
            _ => (f32::NEG_INFINITY, 0.5),
        };
        Case {
            m,
            k,
            n,
            input_stride,
            output_stride,
            transposed: rng.bool(),
            weights: rng.vec(k * n),
            bias: rng.bool().then(|| rng.vec(n)),
            min,
            max,
            input: rng.vec((m - 1) * input_stride + k),
        }
    }

    pub fn desc(&self) -> FullyConnectedDesc<'_> {
        let strides = (self.input_stride, self.output_stride);
        let d = FullyConnectedDesc::new(self.k, self.n, &self.weights);
        with_case(
            d,
            strides,
            (self.min, self.max),
            self.bias.as_deref(),
            self.transposed,
        )
    }

    pub fn weight(&self, n: usize, k: usize) -> f32 {
        if self.transposed {
            self.weights[k * self.n + n]
        } else {
            self.weights[n * self.k + k]
        }
    }

    /// `(value, bound on |error|)` per output, dense `m × n`, accumulated in f64.
    pub fn reference(&self) -> Vec<(f32, f64)> {
        let mut out = Vec::with_capacity(self.m * self.n);
        for m in 0..self.m {
            for n in 0..self.n {
                let b = self.bias.as_ref().map_or(0.0, |b| b[n] as f64);
                let (mut sum, mut abs) = (b, b.abs());
                for k in 0..self.k {
                    let t = self.input[m * self.input_stride + k] as f64 * self.weight(n, k) as f64;
                    sum += t;
                    abs += t.abs();
                }
                let v = sum as f32;
                let v = if v.is_nan() {
                    v
                } else {
                    v.max(self.min).min(self.max)
                };
                let tol = abs * (self.k as f64 + 2.0) * f32::EPSILON as f64 + 1e-30;
                out.push((v, tol));
            }
        }
        out
    }

    /// Output buffer filled with a sentinel (so untouched padding can be checked), with
    /// [`TAIL`] more sentinels past the last output, which no run may write.
    pub fn output(&self) -> Vec<f32> {
        vec![SENTINEL; (self.m - 1) * self.output_stride + self.n + TAIL]
    }

    /// Checks `out` against the reference, and that the stride padding and the tail past the
    /// last output are untouched.
    pub fn check(&self, out: &[f32], what: &str) {
        let reference = self.reference();
        check_case!(
            self,
            out,
            |i: usize| (reference[i].0 as f64, reference[i].1),
            what
        );
    }

    /// Creates through `table`, runs, checks; returns the output.
    pub fn run_and_check(
        &self,
        table: &'static keepalloc_kernels::AllocatorTable,
        isa: keepalloc_kernels::Isa,
        what: &str,
    ) -> Vec<f32> {
        let op = FullyConnected::create_with_table(table, &self.desc().with_isa(isa))
            .unwrap_or_else(|e| panic!("{what}: create failed: {e}"));
        assert_eq!(op.isa(), isa);
        let mut out = self.output();
        op.run(self.m, &self.input, &mut out).unwrap();
        self.check(&out, what);
        out
    }
}

pub const SENTINEL: f32 = -12345.678;

/// Sentinel floats after the last output of [`Case::output`]: two tiles' width, more than any
/// masked store could reach past it.
pub const TAIL: usize = 64;

/// `out` up to its last output (`m` rows of `n` at `stride`), after checking that every
/// float past it still holds [`SENTINEL`].
pub fn without_tail<'a>(
    out: &'a [f32],
    m: usize,
    n: usize,
    stride: usize,
    what: &str,
) -> &'a [f32] {
    let end = ((m - 1) * stride + n).min(out.len());
    if let Some(i) = out[end..]
        .iter()
        .position(|v| v.to_bits() != SENTINEL.to_bits())
    {
        panic!("{what}: written {i} floats past the last output (m={m} n={n} stride {stride})");
    }
    &out[..end]
}

/// `d` with a case's strides, output range, bias and weight layout (the f32 and the
/// low-precision cases have the same fields).
pub fn with_case<'a, K: FcKind>(
    d: FcDesc<'a, K>,
    (input_stride, output_stride): (usize, usize),
    (min, max): (f32, f32),
    bias: Option<&'a [f32]>,
    transposed: bool,
) -> FcDesc<'a, K> {
    let mut d = d
        .with_strides(input_stride, output_stride)
        .with_range(min, max);
    if let Some(b) = bias {
        d = d.with_bias(b);
    }
    if transposed {
        d = d.transposed();
    }
    d
}

/// A case's parameters, for a failure message: m, k, n, (input, output) strides, transposed,
/// bias, (min, max).
pub struct CaseText(
    pub usize,
    pub usize,
    pub usize,
    pub (usize, usize),
    pub bool,
    pub bool,
    pub (f32, f32),
);

impl core::fmt::Display for CaseText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let CaseText(m, k, n, (si, so), t, b, (lo, hi)) = self;
        write!(
            f,
            "m={m} k={k} n={n} strides=({si}, {so}) transposed={t} bias={b} range=[{lo}, {hi}]"
        )
    }
}

/// Checks `out` (`m` rows of `n` at `stride`) against `reference(row * n + col)`, a value and
/// its tolerance (a NaN wants a NaN), and that the stride padding and the tail past the last
/// output still hold [`SENTINEL`].
pub fn check_output(
    out: &[f32],
    (m, n, stride): (usize, usize, usize),
    reference: impl Fn(usize) -> (f64, f64),
    case: &CaseText,
    what: &str,
) {
    let out = without_tail(out, m, n, stride, what);
    for row in 0..m {
        for col in 0..stride {
            let i = row * stride + col;
            if i >= out.len() {
                break;
            }
            if col >= n {
                assert_eq!(
                    out[i].to_bits(),
                    SENTINEL.to_bits(),
                    "{what}: padding written at row {row} col {col}"
                );
                continue;
            }
            let got = out[i];
            let (want, tol) = reference(row * n + col);
            let ok = if want.is_nan() {
                got.is_nan()
            } else {
                (got as f64 - want).abs() <= tol
            };
            assert!(
                ok,
                "{what}: y[{row}][{col}] = {got}, reference {want} (tolerance {tol:e}); case {case}"
            );
        }
    }
}

pub mod fail_nth;
pub mod lowp;

/// A runtime's pool: its own std threads, each task index claimed from a counter.
pub struct RuntimePool(pub usize);

impl Parallel for RuntimePool {
    fn threads(&self) -> usize {
        self.0
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let next = AtomicUsize::new(0);
        let claim = || {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tasks {
                    return;
                }
                task(i);
            }
        };
        std::thread::scope(|s| {
            for _ in 1..self.0 {
                s.spawn(claim);
            }
            claim();
        });
    }
}
