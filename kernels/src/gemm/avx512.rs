//! AVX-512F microkernels: up to 8×32 tiles (16 zmm accumulators, two B registers, the A
//! values broadcast straight from the caller's rows, nothing copied), masked stores for
//! the N edge, the tile's own weights prefetched into L1 a few steps ahead and, when the
//! driver asks, the next tile's into L2 as the current ones are read; up to 6×64 tiles over
//! two panels;
//! and a 32-wide GEMV with eight independent accumulator chains.
//!
//! Eight rows, not the 14 that the register file allows: on Zen 4, 8-row tiles measured
//! 1-2% faster than 14 rows on every M >= 16 shape of the benchmark, and eight row
//! pointers leave general registers to spare, so A needs no copy to a fixed stride (reading
//! it in place measured 1-4% faster than copying it).

use core::arch::x86_64::*;

use super::Tile;
use super::kernel::{self, Kernel};

const NR: usize = <kernel::Avx512 as Kernel>::NR;
/// Where the next tile's weights, and the GEMV's weights ahead, are prefetched to (L2).
const HINT: i32 = _MM_HINT_T1;
/// How far ahead in its panel a tile prefetches the weights into L1: 16 k steps (2 KiB).
const L1_AHEAD: usize = 16 * NR;

/// Runs `$step!(kk)` for `kk` in `0..$kc`, two steps per loop iteration (less loop overhead
/// per FMA: measured 0-4% on the M >= 32 shapes of the benchmark on a Xeon for `tile_n`,
/// +0.7-0.8% on 4x512x512 and 3x256x1000 for `pair_n`). Each accumulator still sees k in
/// order, so results are those of the plain loop.
macro_rules! k_unrolled_by_two {
    ($kc:expr, $step:ident) => {{
        let kc = $kc;
        let mut kk = 0;
        while kk + 2 <= kc {
            $step!(kk);
            $step!(kk + 1);
            kk += 2;
        }
        if kk < kc {
            $step!(kk);
        }
    }};
}

/// The mask of the first `n` (0..=16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// # Safety
/// `t` describes valid buffers (see `gemm::run`), `1 <= mr <= 8`, and the CPU has
/// AVX-512F.
pub(super) unsafe fn tile(mr: usize, t: &Tile) {
    // SAFETY: forwarded; the CPU has AVX-512F (caller).
    unsafe {
        if t.pf_off == 0 {
            match mr {
                1 => tile_n::<1, false>(t),
                2 => tile_n::<2, false>(t),
                3 => tile_n::<3, false>(t),
                4 => tile_n::<4, false>(t),
                5 => tile_n::<5, false>(t),
                6 => tile_n::<6, false>(t),
                7 => tile_n::<7, false>(t),
                _ => tile_n::<8, false>(t),
            }
        } else {
            match mr {
                1 => tile_n::<1, true>(t),
                2 => tile_n::<2, true>(t),
                3 => tile_n::<3, true>(t),
                4 => tile_n::<4, true>(t),
                5 => tile_n::<5, true>(t),
                6 => tile_n::<6, true>(t),
                7 => tile_n::<7, true>(t),
                _ => tile_n::<8, true>(t),
            }
        }
    }
}

/// # Safety
/// As [`tile`], with `MR` rows; prefetching `t.pf_off` floats ahead of the weights when
/// `PF` (without, `t.pf_off` is 0: nothing to prefetch, and no prefetch instruction).
#[target_feature(enable = "avx512f")]
unsafe fn tile_n<const MR: usize, const PF: bool>(t: &Tile) {
    let m0 = lanes(t.nvalid);
    let m1 = lanes(t.nvalid.saturating_sub(16));
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    // Whole body: B rows are 64-byte aligned NR-float rows, kc of them; A has MR
    // rows of kc floats, t.lda apart; C rows 0..MR have nvalid valid columns, and masked-off
    // lanes are neither read nor written (AVX-512 masks suppress faults). Column addresses past the
    // tile use wrapping arithmetic since they may lie outside the C slice.
    // SAFETY: every unmasked access stays inside the tiles described above.
    unsafe {
        if t.bias.is_null() {
            for (r, acc) in acc.iter_mut().enumerate() {
                let c = t.c.add(r * t.ldc);
                acc[0] = _mm512_maskz_loadu_ps(m0, c);
                acc[1] = _mm512_maskz_loadu_ps(m1, c.wrapping_add(16));
            }
        } else {
            let b0 = _mm512_load_ps(t.bias);
            let b1 = _mm512_load_ps(t.bias.add(16));
            for acc in acc.iter_mut() {
                *acc = [b0, b1];
            }
        }
        // One pointer per A row, indexed by k (see `k_unrolled_by_two`).
        let rows: [*const f32; MR] = core::array::from_fn(|r| t.a.wrapping_add(r * t.lda));
        macro_rules! step {
            ($kk:expr) => {{
                let kk = $kk;
                let b = t.b.add(kk * NR);
                let b0 = _mm512_load_ps(b);
                let b1 = _mm512_load_ps(b.add(16));
                // This panel's weights 16 steps ahead, into L1 (past the panel's end, the
                // next panel's first ones; prefetches never fault). Measured on a Xeon,
                // in-process A/B: +2-14% on every M > 1 shape of the benchmark (4x512x512
                // the most), none slower beyond noise.
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(L1_AHEAD).cast());
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(L1_AHEAD + 16).cast());
                if PF {
                    // The next tile's weights, one panel ahead, into L2 (prefetches never
                    // fault).
                    let pf = b.wrapping_offset(t.pf_off);
                    _mm_prefetch::<HINT>(pf.cast());
                    _mm_prefetch::<HINT>(pf.wrapping_add(16).cast());
                }
                for (acc, row) in acc.iter_mut().zip(rows) {
                    let av = _mm512_set1_ps(*row.add(kk));
                    acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                }
            }};
        }
        k_unrolled_by_two!(t.kc, step);
        if t.clamp {
            clamp(acc.as_flattened_mut(), t);
        }
        for (r, acc) in acc.iter().enumerate() {
            let c = t.c.add(r * t.ldc);
            _mm512_mask_storeu_ps(c, m0, acc[0]);
            _mm512_mask_storeu_ps(c.wrapping_add(16), m1, acc[1]);
        }
    }
}

/// Clamps every accumulator to `[t.min, t.max]`; max(lo, v) / min(hi, v) return v when v is
/// NaN, so NaN propagates.
#[inline]
#[target_feature(enable = "avx512f")]
fn clamp(acc: &mut [__m512], t: &Tile) {
    let lo = _mm512_set1_ps(t.min);
    let hi = _mm512_set1_ps(t.max);
    for v in acc {
        *v = _mm512_min_ps(hi, _mm512_max_ps(lo, *v));
    }
}

/// Two adjacent panels at once for a tile of at most 6 rows: `MR × 64` outputs in `4 * MR`
/// accumulators (16 at 4 rows, where one panel gives only 8: too few chains to cover the FMA
/// latency while the weights stream from L2; 24 at 6 rows).
///
/// At 6 rows a k step issues 4 weight loads and 6 broadcasts for 24 FMAs (0.42 loads per
/// FMA, plus 4 L1 prefetches), where the 8-row single-panel tile issues 2 loads and 8
/// broadcasts for 16 (0.63, plus 2): a third fewer load-port slots per FMA. On the Xeon this
/// was tuned on, a core often runs this kernel at two thirds of its speed for seconds at a
/// time while an FMA-only probe reads full speed (another tenant sharing the core's load
/// ports, most likely); `gemm::run` says where the 6-row pairs are used and what they
/// measured.
///
/// # Safety
/// `t` and `u` each describe a valid tile as for [`tile`], with the same A, K range, row
/// stride of C and clamp; `1 <= mr <= 6`; the CPU has AVX-512F.
pub(super) unsafe fn tile_pair(mr: usize, t: &Tile, u: &Tile) {
    // SAFETY: forwarded; the CPU has AVX-512F (caller).
    unsafe {
        match mr {
            1 => pair_n::<1>(t, u),
            2 => pair_n::<2>(t, u),
            3 => pair_n::<3>(t, u),
            4 => pair_n::<4>(t, u),
            5 => pair_n::<5>(t, u),
            _ => pair_n::<6>(t, u),
        }
    }
}

/// # Safety
/// As [`tile_pair`], with `MR` rows.
#[target_feature(enable = "avx512f")]
unsafe fn pair_n<const MR: usize>(t: &Tile, u: &Tile) {
    let masks = [
        lanes(t.nvalid),
        lanes(t.nvalid.saturating_sub(16)),
        lanes(u.nvalid),
        lanes(u.nvalid.saturating_sub(16)),
    ];
    let cs = [t.c, t.c.wrapping_add(16), u.c, u.c.wrapping_add(16)];
    let mut acc = [[_mm512_setzero_ps(); 4]; MR];
    // As in `tile_n`, for each of the two tiles.
    // SAFETY: every unmasked access stays inside the two tiles (caller).
    unsafe {
        if t.bias.is_null() {
            for (r, acc) in acc.iter_mut().enumerate() {
                for j in 0..4 {
                    acc[j] = _mm512_maskz_loadu_ps(masks[j], cs[j].wrapping_add(r * t.ldc));
                }
            }
        } else {
            let bias = [
                _mm512_load_ps(t.bias),
                _mm512_load_ps(t.bias.add(16)),
                _mm512_load_ps(u.bias),
                _mm512_load_ps(u.bias.add(16)),
            ];
            for acc in acc.iter_mut() {
                *acc = bias;
            }
        }
        let rows: [*const f32; MR] = core::array::from_fn(|r| t.a.wrapping_add(r * t.lda));
        macro_rules! step {
            ($kk:expr) => {{
                let kk = $kk;
                let b = t.b.add(kk * NR);
                let c = u.b.add(kk * NR);
                let w = [
                    _mm512_load_ps(b),
                    _mm512_load_ps(b.add(16)),
                    _mm512_load_ps(c),
                    _mm512_load_ps(c.add(16)),
                ];
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(L1_AHEAD).cast());
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(L1_AHEAD + 16).cast());
                _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(L1_AHEAD).cast());
                _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(L1_AHEAD + 16).cast());
                for (acc, row) in acc.iter_mut().zip(rows) {
                    let av = _mm512_set1_ps(*row.add(kk));
                    for j in 0..4 {
                        acc[j] = _mm512_fmadd_ps(av, w[j], acc[j]);
                    }
                }
            }};
        }
        k_unrolled_by_two!(t.kc, step);
        if t.clamp {
            clamp(acc.as_flattened_mut(), t);
        }
        for (r, acc) in acc.iter().enumerate() {
            for j in 0..4 {
                _mm512_mask_storeu_ps(cs[j].wrapping_add(r * t.ldc), masks[j], acc[j]);
            }
        }
    }
}

/// One panel of `y = clamp(x · B + bias)` with eight accumulator chains (four k-phases of
/// two registers), so the FMA latency never limits a batch-1 run.
///
/// # Safety
/// `panel` is a 64-byte aligned packed panel (NR biases then k × NR weights); `x` has `k`
/// floats; `y` has `g.nvalid` writable floats; the CPU has AVX-512F.
pub(super) unsafe fn gemv(k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe {
        match (g.pf_off, g.pf_l1) {
            (0, _) => gemv_p::<false, HINT>(k, x, panel, y, g),
            (_, true) => gemv_p::<true, _MM_HINT_T0>(k, x, panel, y, g),
            (_, false) => gemv_p::<true, HINT>(k, x, panel, y, g),
        }
    }
}

/// [`gemv`], prefetching `g.pf_off` floats ahead with hint `H` (into L2, or L1 with
/// `_MM_HINT_T0`), every fourth line (the hardware brings the neighbours) when `PF`.
///
/// # Safety
/// As [`gemv`].
#[target_feature(enable = "avx512f")]
unsafe fn gemv_p<const PF: bool, const H: i32>(
    k: usize,
    x: *const f32,
    panel: *const f32,
    y: *mut f32,
    g: &Tile,
) {
    // All loads are within the panel (NR * (k + 1) floats) and x (k floats); the
    // stores are masked to the nvalid columns of y.
    // SAFETY: loads stay in the panel and x; stores are masked to y.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        acc[0] = [_mm512_load_ps(panel), _mm512_load_ps(panel.add(16))];
        let mut b = panel.add(NR);
        let mut kk = 0;
        // The code from here starts on a 64-byte boundary (the directive also raises this
        // function's section alignment to 64), and with it the loop of the variant without
        // prefetches: where that loop fell otherwise depended on unrelated code, and a
        // placement 32 bytes off a boundary cost 1x96x64 7-10% (against current XNNPACK,
        // 1.36-1.51x instead of 1.50-1.55x; with LLVM's `-align-loops=64`, 1.54-1.58x).
        // SAFETY: an assembler directive only: padding, no instruction that runs.
        core::arch::asm!(".p2align 6", options(nomem, nostack, preserves_flags));
        while kk + 4 <= k {
            if PF {
                // Prefetches never fault, so running past the block is harmless.
                // Weights from L3 or DRAM into L2 (T1), not L1: measured +15-25% on
                // 1x4096x4096 over T0 (T2 and 32 KiB ahead the same within noise; two
                // streamed panels at once, none). Weights in L2 into L1 (T0).
                let pf = b.wrapping_offset(g.pf_off);
                _mm_prefetch::<H>(pf.cast());
                _mm_prefetch::<H>(pf.wrapping_add(64).cast());
            }
            for (u, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*x.add(kk + u));
                acc[0] = _mm512_fmadd_ps(xv, _mm512_load_ps(b.add(u * NR)), acc[0]);
                acc[1] = _mm512_fmadd_ps(xv, _mm512_load_ps(b.add(u * NR + 16)), acc[1]);
            }
            b = b.add(4 * NR);
            kk += 4;
        }
        while kk < k {
            let xv = _mm512_set1_ps(*x.add(kk));
            acc[0][0] = _mm512_fmadd_ps(xv, _mm512_load_ps(b), acc[0][0]);
            acc[0][1] = _mm512_fmadd_ps(xv, _mm512_load_ps(b.add(16)), acc[0][1]);
            b = b.add(NR);
            kk += 1;
        }
        let lo = _mm512_set1_ps(g.min);
        let hi = _mm512_set1_ps(g.max);
        for (h, acc) in [
            (0, [acc[0][0], acc[1][0], acc[2][0], acc[3][0]]),
            (1, [acc[0][1], acc[1][1], acc[2][1], acc[3][1]]),
        ] {
            let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            let s = _mm512_min_ps(hi, _mm512_max_ps(lo, s));
            let mask = lanes(g.nvalid.saturating_sub(16 * h));
            _mm512_mask_storeu_ps(y.wrapping_add(16 * h), mask, s);
        }
    }
}
