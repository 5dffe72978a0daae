//! AVX-512 low-precision microkernels: up to 12 rows × 32 columns (24 zmm accumulators, A
//! broadcast straight from its rows), masked stores for the N edge. A taller tile shares
//! each weight load (and `f32_qc8w`'s widening at every k) among more instructions.
//!
//! * `bf16`: AVX512-BF16 `vdpbf16ps`: each instruction adds, per f32 lane, the two products
//!   of a bf16 pair of A (broadcast) with the pair of W packed for that column. The products
//!   are exact in f32 (8-bit significands); the sums round as f32 additions (and the
//!   instruction treats denormal inputs and outputs as zero).
//! * `qd8` (AVX512-VNNI) runs in the K-blocked driver of `blocked/`, which keeps the
//!   correction rule: A is stored as `u = q + 128` (0..=255), so `Σ u·w = Σ q·w + 128·Σ w`
//!   and, with `zpu = zero_point + 128`, `Σ (q - zero_point)·w = Σ u·w - zpu·Σ w`: the
//!   column sums `Σ w` are packed with the weights and the correction is one `vpmulld` +
//!   `vpsubd` per output vector. The i32 lanes wrap (no saturation), and wrapping arithmetic
//!   is exact modulo 2³², so the result is exact whenever the true
//!   `|Σ (q - zero_point)·w| ≤ K·255·128 < 2³¹`, i.e. K ≤ 65,536 (the operator rejects
//!   larger K).
//! * `f32_qc8w`: 32 int8 weights per k widened with `vpmovsxbd` + `vcvtdq2ps`, then FMA
//!   onto the bias; the per-channel scale multiplies the sum once at the end (XNNPACK's
//!   definition: `y = scale · (bias + Σ x·w)`).
//!
//! Tiles of under six rows would be latency-bound on one accumulator chain per register,
//! so they split K over four (one or two rows) or two (three to five rows) independent
//! chains.

use core::arch::x86_64::*;

use super::Tile;

/// The mask of the first `n` (0..=16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// Independent chains per accumulator of a tile of `mr` rows: under six rows, one chain
/// per register would leave the FMA (or `vdpbf16ps`) pipes waiting on their latency. Tiles
/// of 1–5 rows only come from batches under 32 rows, which a pool never cuts by rows, so a
/// row's chain count is the same in every cut.
const fn chains(mr: usize) -> usize {
    match mr {
        1 | 2 => 4,
        3..=5 => 2,
        _ => 1,
    }
}

/// Clamps `v` (NaN propagates) and stores row `r`'s valid columns.
///
/// # Safety
/// Row `r` of the tile's C has `t.nvalid` writable floats; the CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn finish(t: &Tile, r: usize, v: [__m512; 2]) {
    let lo = _mm512_set1_ps(t.min);
    let hi = _mm512_set1_ps(t.max);
    // Masked-off lanes are neither written nor faulted; the second half's address may lie
    // past the slice, hence the wrapping arithmetic.
    // SAFETY: only the first nvalid columns of row r are written (caller).
    unsafe {
        let c = t.c.add(r * t.ldc);
        for (h, v) in v.into_iter().enumerate() {
            let v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
            _mm512_mask_storeu_ps(
                c.wrapping_add(16 * h),
                lanes(t.nvalid.saturating_sub(16 * h)),
                v,
            );
        }
    }
}

/// Dispatches `mr` rows to `$kernel::<R, chains(R), PF>` (PF: batch 1 prefetches).
macro_rules! by_rows {
    ($kernel:ident, $mr:expr, $t:expr) => {
        match ($mr, $t.pf != 0) {
            (1, true) => $kernel::<1, { chains(1) }, true>($t),
            (1, false) => $kernel::<1, { chains(1) }, false>($t),
            (2, _) => $kernel::<2, { chains(2) }, false>($t),
            (3, _) => $kernel::<3, { chains(3) }, false>($t),
            (4, _) => $kernel::<4, { chains(4) }, false>($t),
            (5, _) => $kernel::<5, { chains(5) }, false>($t),
            (6, _) => $kernel::<6, { chains(6) }, false>($t),
            (7, _) => $kernel::<7, { chains(7) }, false>($t),
            (8, _) => $kernel::<8, { chains(8) }, false>($t),
            (9, _) => $kernel::<9, { chains(9) }, false>($t),
            (10, _) => $kernel::<10, { chains(10) }, false>($t),
            (11, _) => $kernel::<11, { chains(11) }, false>($t),
            _ => $kernel::<12, { chains(12) }, false>($t),
        }
    };
}

/// # Safety
/// `t` describes valid buffers (see `lowp::run`), `1 <= mr <= 12`, and the CPU has
/// AVX-512F and AVX512-BF16.
pub(super) unsafe fn bf16(mr: usize, t: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(bf16_n, mr, t) }
}

/// # Safety
/// As [`bf16()`], with `MR` rows.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_n<const MR: usize, const U: usize, const PF: bool>(t: &Tile) {
    // A rows hold k bf16 values (pairs read as unaligned u32 words, the odd tail as one
    // u16); the panel holds 32 biases and ceil(k/2) words of 32 columns, 64-byte aligned.
    // SAFETY: every load below stays inside A's rows or the panel; prefetches never fault.
    unsafe {
        let p = t.panel.cast::<f32>();
        let bias = [_mm512_load_ps(p), _mm512_load_ps(p.add(16))];
        let mut acc = [[[_mm512_setzero_ps(); 2]; MR]; U];
        acc[0] = [bias; MR];
        let mut w = t.panel.add(128);
        let kw = t.k / 2;
        let word = |r: usize, s: usize| -> __m512bh {
            let v = t.a.add(r * t.lda + 4 * s).cast::<i32>().read_unaligned();
            core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(v))
        };
        let wload = |w: *const u8| -> __m512bh {
            core::mem::transmute::<__m512i, __m512bh>(_mm512_load_si512(w.cast()))
        };
        let mut s = 0;
        while s + U <= kw {
            for c in 0..U {
                let wc = w.add(128 * c);
                if PF {
                    _mm_prefetch::<_MM_HINT_T1>(wc.wrapping_offset(t.pf).cast());
                    _mm_prefetch::<_MM_HINT_T1>(wc.wrapping_offset(t.pf + 64).cast());
                }
                let (w0, w1) = (wload(wc), wload(wc.add(64)));
                for (r, acc) in acc[c].iter_mut().enumerate() {
                    let x = word(r, s + c);
                    acc[0] = _mm512_dpbf16_ps(acc[0], x, w0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], x, w1);
                }
            }
            w = w.add(128 * U);
            s += U;
        }
        while s < kw {
            let (w0, w1) = (wload(w), wload(w.add(64)));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let x = word(r, s);
                acc[0] = _mm512_dpbf16_ps(acc[0], x, w0);
                acc[1] = _mm512_dpbf16_ps(acc[1], x, w1);
            }
            w = w.add(128);
            s += 1;
        }
        if t.k % 2 == 1 {
            // The odd last value alone in its pair (the packed high half is a zero weight).
            let (w0, w1) = (wload(w), wload(w.add(64)));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let v =
                    t.a.add(r * t.lda + 2 * (t.k - 1))
                        .cast::<u16>()
                        .read_unaligned();
                let x = core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(i32::from(v)));
                acc[0] = _mm512_dpbf16_ps(acc[0], x, w0);
                acc[1] = _mm512_dpbf16_ps(acc[1], x, w1);
            }
        }
        for r in 0..MR {
            let mut v = acc[0][r];
            for chain in acc.iter().skip(1) {
                v = [
                    _mm512_add_ps(v[0], chain[r][0]),
                    _mm512_add_ps(v[1], chain[r][1]),
                ];
            }
            finish(t, r, v);
        }
    }
}

/// # Safety
/// `t` describes valid buffers (see `lowp::run`), `1 <= mr <= 12`, and the CPU has
/// AVX-512F.
pub(super) unsafe fn f32_qc8w(mr: usize, t: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(f32_qc8w_n, mr, t) }
}

/// # Safety
/// As [`f32_qc8w`], with `MR` rows.
#[target_feature(enable = "avx512f")]
unsafe fn f32_qc8w_n<const MR: usize, const U: usize, const PF: bool>(t: &Tile) {
    // A rows hold k floats; the panel holds 2 × 32 header slots and k × 32 weight bytes.
    // SAFETY: every load below stays inside A's rows or the panel; prefetches never fault.
    unsafe {
        let p = t.panel.cast::<f32>();
        let mut acc = [[[_mm512_setzero_ps(); 2]; MR]; U];
        acc[0] = [[_mm512_load_ps(p), _mm512_load_ps(p.add(16))]; MR];
        let mut w = t.panel.add(2 * 128);
        let a =
            |r: usize, kk: usize| _mm512_set1_ps(t.a.add(r * t.lda).cast::<f32>().add(kk).read());
        let widen =
            |w: *const u8| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(w.cast())));
        let mut kk = 0;
        while kk + U <= t.k {
            if PF {
                _mm_prefetch::<_MM_HINT_T1>(w.wrapping_offset(t.pf).cast());
                if U == 4 {
                    _mm_prefetch::<_MM_HINT_T1>(w.wrapping_offset(t.pf + 64).cast());
                }
            }
            for c in 0..U {
                let wc = w.add(32 * c);
                let (w0, w1) = (widen(wc), widen(wc.add(16)));
                for (r, acc) in acc[c].iter_mut().enumerate() {
                    let x = a(r, kk + c);
                    acc[0] = _mm512_fmadd_ps(x, w0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(x, w1, acc[1]);
                }
            }
            w = w.add(32 * U);
            kk += U;
        }
        while kk < t.k {
            let (w0, w1) = (widen(w), widen(w.add(16)));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let x = a(r, kk);
                acc[0] = _mm512_fmadd_ps(x, w0, acc[0]);
                acc[1] = _mm512_fmadd_ps(x, w1, acc[1]);
            }
            w = w.add(32);
            kk += 1;
        }
        let scale = [_mm512_load_ps(p.add(32)), _mm512_load_ps(p.add(48))];
        for r in 0..MR {
            let mut v = acc[0][r];
            for chain in acc.iter().skip(1) {
                v = [
                    _mm512_add_ps(v[0], chain[r][0]),
                    _mm512_add_ps(v[1], chain[r][1]),
                ];
            }
            finish(
                t,
                r,
                [_mm512_mul_ps(v[0], scale[0]), _mm512_mul_ps(v[1], scale[1])],
            );
        }
    }
}
