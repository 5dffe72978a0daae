//! The tile and GEMV bodies of the kernels that hold a panel row in two vectors (AVX2:
//! 2 × 8 floats, NEON: 2 × 4), written once over the few operations they differ in. The
//! operations and bodies are `#[inline(always)]` and each ISA's `#[target_feature]` entry
//! calls a body, so the body compiles inside that entry, with its features.

use super::Tile;
use super::edge::EdgeTile;
use super::kernel::Kernel;

/// One ISA's vector operations, each a single instruction (or a load folded into one).
///
/// # Safety
/// Every method needs the ISA's target features: call them only from a function compiled
/// with them.
pub(super) unsafe trait TwoVectors: Kernel {
    /// A vector of `NR / 2` floats.
    type V: Copy;
    /// An A value as the FMA takes it: a broadcast vector, or the float itself.
    type A: Copy;

    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// Loads a vector from 64-byte aligned `p` (B panels, biases).
    unsafe fn load(p: *const f32) -> Self::V;
    /// Loads a vector from `p`, any alignment (C).
    unsafe fn loadu(p: *const f32) -> Self::V;
    /// Stores `v` at `p`, any alignment.
    unsafe fn storeu(p: *mut f32, v: Self::V);
    /// The A value at `p`, ready for [`fma`](Self::fma).
    unsafe fn a(p: *const f32) -> Self::A;
    /// `acc + a · b`, fused.
    unsafe fn fma(acc: Self::V, a: Self::A, b: Self::V) -> Self::V;
    /// `x + y`.
    unsafe fn add(x: Self::V, y: Self::V) -> Self::V;
    /// `min(hi, max(lo, v))`, a NaN `v` passing through.
    unsafe fn clamp(v: Self::V, lo: Self::V, hi: Self::V) -> Self::V;
}

/// A tile of exactly `MR` rows: full tiles read and write C in place, edge tiles a local
/// copy (`EdgeTile`).
///
/// # Safety
/// `t` describes valid buffers (see `gemm::run`) with `MR` rows, `NR` is `S::NR`, and the
/// caller is compiled with `S`'s target features.
#[inline(always)]
pub(super) unsafe fn tile<S: TwoVectors, const NR: usize, const MR: usize>(t: &Tile) {
    const { assert!(NR == S::NR && NR.is_multiple_of(2)) };
    let half = NR / 2;
    let mut edge = EdgeTile::<NR, MR>::new();
    // Whole body: B has kc rows of NR floats (64-byte aligned); A is MR rows of kc floats
    // at stride `lda` in place, or packed k-major (kc * MR floats); `c` is either the caller's full C tile or the local edge tile, MR rows of
    // NR columns at stride `ldc`.
    // SAFETY: every access stays inside the tiles described above; features on (caller).
    unsafe {
        let (c, ldc) = edge.begin(t, MR);
        let mut acc = [[S::splat(0.0); 2]; MR];
        if t.bias.is_null() {
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = S::loadu(c.add(r * ldc));
                acc[1] = S::loadu(c.add(r * ldc + half));
            }
        } else {
            let b0 = S::load(t.bias);
            let b1 = S::load(t.bias.add(half));
            for acc in acc.iter_mut() {
                *acc = [b0, b1];
            }
        }
        // One pointer per A row, indexed by k: in place at `a + r · lda` (broadcast loads,
        // no copy of A), or in the packed block (k-major, MR floats a step).
        let rows: [*const f32; MR] =
            core::array::from_fn(|r| t.a.wrapping_add(if S::A_IN_PLACE { r * t.lda } else { r }));
        let step = if S::A_IN_PLACE { 1 } else { MR };
        // A macro, not a closure: a closure over the accumulators was not always inlined.
        macro_rules! fmas {
            ($kk:expr) => {{
                let kk = $kk;
                let b = t.b.add(kk * NR);
                let (b0, b1) = (S::load(b), S::load(b.add(half)));
                for (acc, row) in acc.iter_mut().zip(rows) {
                    let av = S::a(row.add(kk * step));
                    acc[0] = S::fma(acc[0], av, b0);
                    acc[1] = S::fma(acc[1], av, b1);
                }
            }};
        }
        // In place, two k steps an iteration: less loop overhead per FMA (measured on Zen 3,
        // docs/bench-history.md). Each accumulator still sees k in order: the same results.
        let unroll = if S::A_IN_PLACE { 2 } else { 1 };
        let mut kk = 0;
        while kk + unroll <= t.kc {
            for u in 0..unroll {
                fmas!(kk + u);
            }
            kk += unroll;
        }
        if kk < t.kc {
            fmas!(kk);
        }
        if t.clamp {
            let lo = S::splat(t.min);
            let hi = S::splat(t.max);
            for acc in acc.iter_mut() {
                for v in acc.iter_mut() {
                    *v = S::clamp(*v, lo, hi);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            S::storeu(c.add(r * ldc), acc[0]);
            S::storeu(c.add(r * ldc + half), acc[1]);
        }
        edge.finish(t, MR);
    }
}

/// `P` consecutive panels of `y = clamp(x · B + bias)`, each in two registers per k-phase
/// (`PHASES` of them, summed at the end). Reading several panels at once keeps as many
/// weight streams in flight, which bounds a batch-1 run from DRAM. A panel's arithmetic
/// depends on `PHASES` only, so a caller that keeps it fixed and groups panels in any way
/// gets the same bits.
///
/// # Safety
/// `panel` is the first of `P` 64-byte aligned packed panels (NR biases then k × NR
/// weights each) `panel_len` floats apart; `x` has `k` floats; `y` has `(P - 1) · NR +
/// g.nvalid` writable floats (only the last panel may be partial); `NR` is `S::NR`;
/// `P · PHASES <= 4`; the caller is compiled with `S`'s target features.
#[inline(always)]
pub(super) unsafe fn gemv<S: TwoVectors, const NR: usize, const P: usize, const PHASES: usize>(
    k: usize,
    x: *const f32,
    panel: *const f32,
    panel_len: usize,
    y: *mut f32,
    g: &Tile,
) {
    const { assert!(NR == S::NR && NR.is_multiple_of(2) && P >= 1 && PHASES >= 1 && P * PHASES <= 4) };
    let half = NR / 2;
    // All loads are within the P panels (NR * (k + 1) floats each) and x (k floats); the
    // results go to a local row, then to y (NR floats a panel, nvalid for the last).
    // SAFETY: every access stays inside the panels, x and the local row; features on (caller).
    unsafe {
        // Slot `u * P + j`: k-phase u of panel j.
        let mut acc = [[S::splat(0.0); 2]; 4];
        for (j, acc) in acc.iter_mut().take(P).enumerate() {
            let bias = panel.add(j * panel_len);
            *acc = [S::load(bias), S::load(bias.add(half))];
        }
        let mut b = panel.add(NR);
        let mut kk = 0;
        while kk + PHASES <= k {
            for u in 0..PHASES {
                let xv = S::a(x.add(kk + u));
                for j in 0..P {
                    let w = b.add(j * panel_len + u * NR);
                    let acc = &mut acc[u * P + j];
                    acc[0] = S::fma(acc[0], xv, S::load(w));
                    acc[1] = S::fma(acc[1], xv, S::load(w.add(half)));
                }
            }
            b = b.add(PHASES * NR);
            kk += PHASES;
        }
        while kk < k {
            let xv = S::a(x.add(kk));
            for (j, acc) in acc.iter_mut().take(P).enumerate() {
                let w = b.add(j * panel_len);
                acc[0] = S::fma(acc[0], xv, S::load(w));
                acc[1] = S::fma(acc[1], xv, S::load(w.add(half)));
            }
            b = b.add(NR);
            kk += 1;
        }
        let lo = S::splat(g.min);
        let hi = S::splat(g.max);
        let mut out = [[0.0f32; NR]; P];
        for (j, out) in out.iter_mut().enumerate() {
            // Pairwise, as the single-panel GEMV always summed its four phases.
            let sum = |h: usize| {
                let v = |u: usize| acc[u * P + j][h];
                match PHASES {
                    1 => v(0),
                    2 => S::add(v(0), v(1)),
                    3 => S::add(S::add(v(0), v(1)), v(2)),
                    _ => S::add(S::add(v(0), v(1)), S::add(v(2), v(3))),
                }
            };
            for h in 0..2 {
                S::storeu(out.as_mut_ptr().add(half * h), S::clamp(sum(h), lo, hi));
            }
        }
        core::ptr::copy_nonoverlapping(out.as_ptr().cast::<f32>(), y, (P - 1) * NR + g.nvalid);
    }
}
