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
    let kp = k.next_multiple_of(4);
    for r in 0..m {
        // SAFETY: row r of each buffer is in bounds (caller).
        unsafe {
            let src = x.add(r * ldx);
            let dst = a.add(r * lda);
            let q = match isa {
                #[cfg(target_arch = "x86_64")]
                DotIsa::Avx512Vnni | DotIsa::Amx => avx512::row(src, k, dst),
                _ => row_scalar(
                    core::slice::from_raw_parts(src, k),
                    core::slice::from_raw_parts_mut(dst, k),
                ),
            };
            core::ptr::write_bytes(dst.add(k), 0, kp - k);
            rows.add(r).write(q);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{RowQuant, params};

    fn mask(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }

    /// [`super::row_scalar`] with AVX-512: the same f32 operations (multiply, round to
    /// nearest-even by `vcvtps2dq` under the default MXCSR, add, clamp by saturation), so
    /// bit-identical. (The i32 sum cannot overflow: `|x · inv_scale| <= 255` for a finite
    /// row, and a non-finite row has an unspecified result anyway.)
    ///
    /// # Safety
    /// `x` holds `k` floats, `out` `k` writable bytes; the CPU has AVX-512F/BW/VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn row(x: *const f32, k: usize, out: *mut u8) -> RowQuant {
        // Masked loads and stores touch only the first `k` elements (masked-off lanes
        // neither fault nor write).
        // SAFETY: every access is within `x[..k]` or `out[..k]`.
        unsafe {
            // Four independent min and max chains over 64 values a step (the latency of
            // `vminps`), then the masked tail (its masked-off lanes are 0, always in range).
            let mut lo = [_mm512_setzero_ps(); 4];
            let mut hi = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= k {
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
            let (zp, inv) = params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi));
            let vinv = _mm512_set1_ps(inv);
            let vzp = _mm512_set1_epi32(zp);
            let q = |i: usize| {
                _mm512_add_epi32(
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x.add(i)), vinv)),
                    vzp,
                )
            };
            // 64 values a step: two saturating packs (i32 → i16 → i8: the clamp to
            // [-128, 127]) interleave the four vectors by 128-bit lane, `vpermd` restores
            // their order, flipping the sign bit adds 128.
            let flip = _mm512_set1_epi8(-128);
            let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            let mut i = 0;
            while i + 64 <= k {
                let ab = _mm512_packs_epi32(q(i), q(i + 16));
                let cd = _mm512_packs_epi32(q(i + 32), q(i + 48));
                let u = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(ab, cd));
                _mm512_storeu_si512(out.add(i).cast(), _mm512_xor_si512(u, flip));
                i += 64;
            }
            // `vpmovsdb` saturates the same way.
            let flip = _mm_set1_epi8(-128);
            while i < k {
                let mk = mask(k - i);
                let v = _mm512_maskz_loadu_ps(mk, x.add(i));
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vinv)), vzp);
                let u = _mm_xor_si128(_mm512_cvtsepi32_epi8(q), flip);
                _mm_mask_storeu_epi8(out.add(i).cast(), mk, u);
                i += 16;
            }
            RowQuant {
                zpu: zp + 128,
                scale: 1.0 / inv,
            }
        }
    }
}
