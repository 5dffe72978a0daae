//! Dynamic per-row int8 quantization of f32 activations (qd8), with XNNPACK's rule
//! (`xnn_qd8_asymmetric_quantization_params` and its f32 → qd8 convert):
//!
//! * `rmin = min(0, min(row))`, `rmax = max(0, max(row))` (zero is always representable);
//! * `inv_scale = 255 / (rmax - rmin)` (1 when `rmin == rmax`), computed in f32;
//! * the zero point is `-128 - rmin·inv_scale` or `127 - rmax·inv_scale`, whichever end
//!   has the smaller error, clamped to [-128, 127] and rounded to nearest-even;
//! * `q = clamp(round_ne(x · inv_scale) + zero_point, -128, 127)`, and the row's
//!   dequantization scale is `1 / inv_scale` (f32): `x ≈ scale · (q - zero_point)`, with
//!   `|x - scale·(q - zero_point)| ≤ scale / 2` up to f32 rounding for finite rows.
//!
//! Rows must be finite: a NaN or infinity gives an unspecified (but memory-safe) result.
//! The kernels store `q + 128` (unsigned, for `vpdpbusd`) and `zero_point + 128`.

use super::{DotIsa, RowQuant};

/// `(zero_point, inv_scale)` of a row whose extremes are `min` and `max`.
pub(crate) fn params(min: f32, max: f32) -> (i32, f32) {
    let (qmin, qmax) = (-128.0f32, 127.0f32);
    let rmin = min.min(0.0);
    let rmax = max.max(0.0);
    let inv_scale = if rmin == rmax {
        1.0
    } else {
        (qmax - qmin) / (rmax - rmin)
    };
    let dmin = rmin * inv_scale;
    let dmax = rmax * inv_scale;
    let zp = if (qmin + dmin) + (qmax + dmax) > 0.0 {
        qmin - dmin
    } else {
        qmax - dmax
    };
    let zp = zp.clamp(qmin, qmax).round_ties_even() as i32;
    (zp, inv_scale)
}

/// Quantizes one value: `clamp(round_ne(x · inv_scale) + zp, -128, 127)`.
#[inline]
pub(crate) fn quantize(x: f32, inv_scale: f32, zp: i32) -> i8 {
    ((x * inv_scale).round_ties_even() as i32 + zp).clamp(-128, 127) as i8
}

/// Quantizes `x` into `out` (`q + 128`, `out.len() >= x.len()`), portable code.
pub(crate) fn row_scalar(x: &[f32], out: &mut [u8]) -> RowQuant {
    let (mut lo, mut hi) = (0.0f32, 0.0f32);
    for &v in x {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let (zp, inv) = params(lo, hi);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (quantize(v, inv, zp) as u8) ^ 0x80;
    }
    RowQuant {
        zpu: zp + 128,
        scale: 1.0 / inv,
    }
}

/// Quantizes `m` rows of `k` floats (`x` rows `ldx` floats apart) into `a` (rows `lda`
/// bytes apart, the bytes from `k` to the next multiple of 4 zeroed) and `rows`.
///
/// # Safety
/// `x` holds `m` rows of `k` floats at stride `ldx`; `a` holds `m` rows of
/// `k.next_multiple_of(4)` writable bytes at stride `lda`; `rows` holds `m` writable entries;
/// `isa` is supported by this CPU.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rows(
    isa: DotIsa,
    m: usize,
    k: usize,
    x: *const f32,
    ldx: usize,
    a: *mut u8,
    lda: usize,
    rows: *mut RowQuant,
) {
    #[cfg(target_arch = "x86_64")]
    match isa {
        DotIsa::Avx512Vnni | DotIsa::Amx => {
            // SAFETY: forwarded (caller); both ISAs imply AVX-512F/BW/VL.
            return unsafe { avx512::rows(m, k, x, ldx, a, lda, rows) };
        }
        DotIsa::Avx2 | DotIsa::AvxVnni => {
            // SAFETY: forwarded (caller); both ISAs imply AVX2.
            return unsafe { avx2::rows(m, k, x, ldx, a, lda, rows) };
        }
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    let kp = k.next_multiple_of(4);
    for r in 0..m {
        // SAFETY: row r of each buffer is in bounds (caller).
        unsafe {
            let dst = a.add(r * lda);
            let q = row_scalar(
                core::slice::from_raw_parts(x.add(r * ldx), k),
                core::slice::from_raw_parts_mut(dst, k),
            );
            core::ptr::write_bytes(dst.add(k), 0, kp - k);
            rows.add(r).write(q);
        }
    }
}

/// [`rows`]' arguments: `(m, k, x, ldx, a, lda, rows)`.
#[cfg(target_arch = "x86_64")]
type Rows = (
    usize,
    usize,
    *const f32,
    usize,
    *mut u8,
    usize,
    *mut RowQuant,
);

/// Rows quantized together: their ranges first, then their bytes. A row's range ends in a
/// serial chain (reductions, the division in `params`) that the next row's range loop
/// hides, and no quantizing loop waits on one. At most [`GROUP`] rows, within
/// [`GROUP_BYTES`] of input so that it stays in L1 between the two passes while the next
/// group's is prefetched.
#[cfg(target_arch = "x86_64")]
const GROUP: usize = 8;
#[cfg(target_arch = "x86_64")]
const GROUP_BYTES: usize = 16 << 10;

/// [`rows`] in groups, with an ISA's `range(x, k, ahead)` (the row's extremes and 0,
/// prefetching the row at `ahead` unless NULL) and `quantize(x, k, out, zp, inv)`.
/// Inlined into each ISA's entry, so both compile with its features.
///
/// # Safety
/// As [`rows`] for `args`; `range` and `quantize` may be called on any row of them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn grouped(
    (m, k, x, ldx, a, lda, rows): Rows,
    range: impl Fn(*const f32, usize, *const f32) -> (f32, f32),
    quantize: impl Fn(*const f32, usize, *mut u8, i32, f32),
) {
    let kp = k.next_multiple_of(4);
    let group = (GROUP_BYTES / (4 * k.max(1))).clamp(1, GROUP);
    let mut q = [(0i32, 0f32); GROUP];
    let mut r0 = 0;
    while r0 < m {
        let g = group.min(m - r0);
        for (i, q) in q[..g].iter_mut().enumerate() {
            let r = r0 + i;
            // The same row of the next group, while this one's input is in L1.
            let ahead = if r + group < m {
                x.wrapping_add((r + group) * ldx)
            } else {
                core::ptr::null()
            };
            // SAFETY: row r of the input is in bounds (caller); `ahead` is only prefetched.
            let (lo, hi) = range(unsafe { x.add(r * ldx) }, k, ahead);
            *q = params(lo, hi);
        }
        for (i, &(zp, inv)) in q[..g].iter().enumerate() {
            let r = r0 + i;
            // SAFETY: row r of each buffer is in bounds (caller).
            unsafe {
                let dst = a.add(r * lda);
                quantize(x.add(r * ldx), k, dst, zp, inv);
                core::ptr::write_bytes(dst.add(k), 0, kp - k);
                rows.add(r).write(RowQuant {
                    zpu: zp + 128,
                    scale: 1.0 / inv,
                });
            }
        }
        r0 += g;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    use super::{RowQuant, grouped};

    /// [`super::rows`] with AVX2.
    ///
    /// # Safety
    /// As [`super::rows`], and the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn rows(
        m: usize,
        k: usize,
        x: *const f32,
        ldx: usize,
        a: *mut u8,
        lda: usize,
        rows: *mut RowQuant,
    ) {
        // SAFETY: forwarded (caller); both passes run with this function's features.
        unsafe {
            grouped(
                (m, k, x, ldx, a, lda, rows),
                |x, k, ahead| range(x, k, ahead),
                |x, k, out, zp, inv| quantize(x, k, out, zp, inv),
            )
        }
    }

    /// The smallest and largest of `x[..k]` and 0, prefetching into L1 the first `k`
    /// rounded down to 32 floats from `ahead` unless it is NULL.
    ///
    /// # Safety
    /// `x` holds `k` floats; the CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn range(x: *const f32, k: usize, ahead: *const f32) -> (f32, f32) {
        // SAFETY: every load is within `x[..k]`; prefetches never fault.
        unsafe {
            // Four independent min and max chains over 32 values a step, then the tail.
            let mut lo = [_mm256_setzero_ps(); 4];
            let mut hi = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= k {
                if !ahead.is_null() {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(i).cast());
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(i + 16).cast());
                }
                for j in 0..4 {
                    let v = _mm256_loadu_ps(x.add(i + 8 * j));
                    lo[j] = _mm256_min_ps(lo[j], v);
                    hi[j] = _mm256_max_ps(hi[j], v);
                }
                i += 32;
            }
            let lo = _mm256_min_ps(_mm256_min_ps(lo[0], lo[1]), _mm256_min_ps(lo[2], lo[3]));
            let hi = _mm256_max_ps(_mm256_max_ps(hi[0], hi[1]), _mm256_max_ps(hi[2], hi[3]));
            let (mut l, mut h) = ([0f32; 8], [0f32; 8]);
            _mm256_storeu_ps(l.as_mut_ptr(), lo);
            _mm256_storeu_ps(h.as_mut_ptr(), hi);
            let (mut l, mut h) = (
                l.into_iter().fold(0f32, f32::min),
                h.into_iter().fold(0f32, f32::max),
            );
            while i < k {
                l = l.min(*x.add(i));
                h = h.max(*x.add(i));
                i += 1;
            }
            (l, h)
        }
    }

    /// [`super::row_scalar`]'s quantizing loop with AVX2: the same f32 operations
    /// (multiply, round to nearest-even by `vcvtps2dq` under the default MXCSR, add, clamp
    /// by saturation), so bit-identical, as the AVX-512 one.
    ///
    /// # Safety
    /// `x` holds `k` floats, `out` `k` writable bytes; the CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quantize(x: *const f32, k: usize, out: *mut u8, zp: i32, inv: f32) {
        // SAFETY: every access is within `x[..k]` or `out[..k]`.
        unsafe {
            let vinv = _mm256_set1_ps(inv);
            // `clamp(q + zp, -128, 127) + 128` is `clamp(q + zp + 128, 0, 255)`: the stored
            // byte straight from an unsigned saturation.
            let vzpu = _mm256_set1_epi32(zp + 128);
            let q = |i: usize| {
                _mm256_add_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x.add(i)), vinv)),
                    vzpu,
                )
            };
            // 32 values a step: the signed pack to i16 (exact) and the unsigned saturating
            // pack to u8 interleave the four vectors by 128-bit lane; `vpermd` restores
            // their order.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let mut i = 0;
            while i + 32 <= k {
                let ab = _mm256_packs_epi32(q(i), q(i + 8));
                let cd = _mm256_packs_epi32(q(i + 16), q(i + 24));
                let u = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
                _mm256_storeu_si256(out.add(i).cast(), u);
                i += 32;
            }
            while i < k {
                let v = (*x.add(i) * inv).round_ties_even() as i32 + zp + 128;
                *out.add(i) = v.clamp(0, 255) as u8;
                i += 1;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{RowQuant, grouped};

    fn mask(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }

    /// [`super::rows`] with AVX-512.
    ///
    /// # Safety
    /// As [`super::rows`], and the CPU has AVX-512F/BW/VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn rows(
        m: usize,
        k: usize,
        x: *const f32,
        ldx: usize,
        a: *mut u8,
        lda: usize,
        rows: *mut RowQuant,
    ) {
        // SAFETY: forwarded (caller); both passes run with this function's features.
        unsafe {
            grouped(
                (m, k, x, ldx, a, lda, rows),
                |x, k, ahead| range(x, k, ahead),
                |x, k, out, zp, inv| quantize(x, k, out, zp, inv),
            )
        }
    }

    /// The smallest and largest of `x[..k]` and 0, prefetching into L1 the first
    /// `k` rounded down to 64 floats from `ahead` unless it is NULL (any address: a
    /// prefetch never faults).
    ///
    /// # Safety
    /// `x` holds `k` floats; the CPU has AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn range(x: *const f32, k: usize, ahead: *const f32) -> (f32, f32) {
        // Masked loads touch only the first `k` elements (masked-off lanes do not fault).
        // SAFETY: every load is within `x[..k]`; prefetches never fault.
        unsafe {
            // Four independent min and max chains over 64 values a step (the latency of
            // `vminps`), then the masked tail (its masked-off lanes are 0, always in range).
            let mut lo = [_mm512_setzero_ps(); 4];
            let mut hi = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= k {
                if !ahead.is_null() {
                    for j in 0..4 {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(i + 16 * j).cast());
                    }
                }
                for j in 0..4 {
                    let v = _mm512_loadu_ps(x.add(i + 16 * j));
                    lo[j] = _mm512_min_ps(lo[j], v);
                    hi[j] = _mm512_max_ps(hi[j], v);
                }
                i += 64;
            }
            while i < k {
                let v = _mm512_maskz_loadu_ps(mask(k - i), x.add(i));
                lo[0] = _mm512_min_ps(lo[0], v);
                hi[0] = _mm512_max_ps(hi[0], v);
                i += 16;
            }
            let lo = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]));
            let hi = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]));
            (_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
        }
    }

    /// [`super::row_scalar`]'s quantizing loop with AVX-512: the same f32 operations
    /// (multiply, round to nearest-even by `vcvtps2dq` under the default MXCSR, add, clamp
    /// by saturation), so bit-identical. (The i32 sum cannot overflow: `|x · inv| <= 255`
    /// for a finite row, and a non-finite row has an unspecified result anyway.)
    ///
    /// # Safety
    /// `x` holds `k` floats, `out` `k` writable bytes; the CPU has AVX-512F/BW/VL.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn quantize(x: *const f32, k: usize, out: *mut u8, zp: i32, inv: f32) {
        // Masked loads and stores touch only the first `k` elements (masked-off lanes
        // neither fault nor write).
        // SAFETY: every access is within `x[..k]` or `out[..k]`.
        unsafe {
            let vinv = _mm512_set1_ps(inv);
            // `clamp(q + zp, -128, 127) + 128` is `clamp(q + zp + 128, 0, 255)`: the stored
            // byte straight from an unsigned saturation, no sign flip.
            let vzpu = _mm512_set1_epi32(zp + 128);
            let q = |i: usize| {
                _mm512_add_epi32(
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x.add(i)), vinv)),
                    vzpu,
                )
            };
            // 64 values a step: a signed pack to i16 (exact: `|q + zp + 128| < 2^15`) and an
            // unsigned saturating pack to u8 interleave the four vectors by 128-bit lane,
            // `vpermd` restores their order.
            let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            let mut i = 0;
            while i + 64 <= k {
                let ab = _mm512_packs_epi32(q(i), q(i + 16));
                let cd = _mm512_packs_epi32(q(i + 32), q(i + 48));
                let u = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(ab, cd));
                _mm512_storeu_si512(out.add(i).cast(), u);
                i += 64;
            }
            // Clamped below at 0, `vpmovusdb` saturates above at 255.
            let zero = _mm512_setzero_si512();
            while i < k {
                let mk = mask(k - i);
                let v = _mm512_maskz_loadu_ps(mk, x.add(i));
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vinv)), vzpu);
                let u = _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, zero));
                _mm_mask_storeu_epi8(out.add(i).cast(), mk, u);
                i += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Extremes whose rounded products land one past the clamp: `(low end, high end)`, found
    /// by search. Low: `lo · inv` rounds to -129 - zp; high: `hi · inv` to 128 - zp.
    const PAST_LOW: (f32, f32) = (f32::from_bits(0xbfe0_9f2e), f32::from_bits(0x415f_24dd));
    const PAST_HIGH: (f32, f32) = (f32::from_bits(0xc116_3334), f32::from_bits(0x406a_1965));

    /// Row `r` of length `k`: mixed signs, one sign only, zeros, a constant, an outlier,
    /// values on the rounding ties of their row's scale, and rows that saturate at either
    /// end (both in the 64-value steps and in the last value, a tail when `k % 16 != 0`), by `r`.
    fn row(r: usize, k: usize, seed: &mut u32) -> Vec<f32> {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 17;
            *seed ^= *seed << 5;
            (*seed >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        };
        (0..k)
            .map(|i| match r % 9 {
                0 => next() * 3.0,
                1 => next().abs() * 100.0 + 0.5,
                2 => -next().abs() * 1e-3,
                3 => 0.0,
                4 => 2.5,
                5 if i == k / 2 => 1e4,
                5 => next(),
                // Multiples of half a step of a row spanning [-1, 1]: ties of `x · inv_scale`.
                6 => ((i % 511) as f32 - 255.0) / 255.0,
                _ => {
                    let (lo, hi) = if r % 9 == 7 { PAST_LOW } else { PAST_HIGH };
                    let past = if r % 9 == 7 { lo } else { hi };
                    match i {
                        0 => lo + hi - past,
                        _ if i == k - 1 || i % 64 == 3 => past,
                        _ => 0.25 * (lo + hi),
                    }
                }
            })
            .collect()
    }

    #[test]
    fn the_saturating_rows_reach_past_the_clamp() {
        let past = |(lo, hi): (f32, f32), x: f32| {
            let (zp, inv) = params(lo, hi);
            (x * inv).round_ties_even() as i32 + zp
        };
        assert_eq!(past(PAST_LOW, PAST_LOW.0), -129);
        assert_eq!(past(PAST_HIGH, PAST_HIGH.1), 128);
    }

    #[test]
    fn the_simd_quantizer_writes_the_scalar_rule_s_bytes_padding_and_parameters() {
        // Every K tail (1..=140), whole 64-value steps, long rows; 19 rows make groups of
        // 8, 8 and 3 (or one row per group for long K), the last group without a row ahead.
        let isas: Vec<DotIsa> = [
            DotIsa::Avx512Vnni,
            DotIsa::Amx,
            DotIsa::Avx2,
            DotIsa::AvxVnni,
        ]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect();
        let mut seed = 0x2545_f491;
        for k in (1..=140).chain([255, 256, 257, 512, 1000, 4099]) {
            let (m, ldx) = (19, k + 5);
            let x: Vec<f32> = (0..m)
                .flat_map(|r| {
                    let mut v = row(r, k, &mut seed);
                    v.resize(ldx, f32::NAN);
                    v
                })
                .collect();
            let kp = k.next_multiple_of(4);
            let lda = kp + 8;
            let mut want = vec![0u8; m * lda];
            let mut want_rows = vec![RowQuant::default(); m];
            for r in 0..m {
                want_rows[r] = row_scalar(&x[r * ldx..][..k], &mut want[r * lda..][..k]);
                want[r * lda + kp..][..lda - kp].fill(0xa5);
            }
            for &isa in &isas {
                let mut a = vec![0xa5u8; m * lda];
                let mut rows_out = vec![RowQuant::default(); m];
                // SAFETY: `x` holds m rows of k floats at stride ldx, `a` m rows of lda >= kp bytes, `rows_out` m entries; `isa` is supported.
                unsafe {
                    rows(
                        isa,
                        m,
                        k,
                        x.as_ptr(),
                        ldx,
                        a.as_mut_ptr(),
                        lda,
                        rows_out.as_mut_ptr(),
                    )
                };
                for r in 0..m {
                    let (got, exp) = (&a[r * lda..][..lda], &want[r * lda..][..lda]);
                    let at = got.iter().zip(exp).position(|(g, e)| g != e);
                    assert_eq!(at, None, "{isa} k={k} row {r}: byte {at:?}");
                    assert_eq!(rows_out[r], want_rows[r], "{isa} k={k} row {r}: parameters");
                }
            }
        }
    }
}
