//! `bf16_f32` on AVX-512F: bf16 widened to f32 and FMA, tiles of 12 rows × 32 columns over
//! K blocks of A widened on the stack (see the module's docs).

use core::arch::x86_64::*;

use super::super::{DotIsa, Job, Kind, panel_bytes, shape};
use super::{Blk, Tiles, lanes, start32};
use crate::tuning::blocked_prefetches;

/// bf16: columns per panel (the packing's NR on AVX-512).
pub(super) const NR: usize = shape(Kind::Bf16F32, DotIsa::Avx512Bf16).nr;
/// bf16: most rows per tile (12 × 2 = 24 zmm accumulators).
pub(super) const MR: usize = 12;
/// bf16: packed pairs per K block of a full chunk: a 16 KiB slice of one panel.
const KC_WORDS: usize = 128;
/// bf16: rows per chunk of A widened to f32 on the stack.
const MC_BF16: usize = 48;
/// Floats between the widened A rows of a bf16 chunk: 2·KC_WORDS plus one cache line, so
/// the rows of a tile fall in different L1 sets.
const CHUNK_LD: usize = 2 * KC_WORDS + 16;
/// bf16: bytes of one packed pair row of a panel.
pub(super) const ROW: usize = 4 * NR;

/// Aligned stack storage of the widened A chunk.
#[repr(C, align(64))]
struct Chunk([f32; MC_BF16 * CHUNK_LD]);

/// Runs a `bf16_f32` job on AVX-512F (FMA on widened bf16).
///
/// # Safety
/// As `lowp::run`, with `job.isa` AVX-512 and the panels packed for NR = 32.
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn bf16(job: &Job) {
    let panel = panel_bytes(Kind::Bf16F32, NR, job.k);
    let panels = job.n.div_ceil(NR);
    let pairs = job.k.div_ceil(2);
    let prefetch = blocked_prefetches(job.m, 2, panel * panels);
    // Uninitialized: each row's slice is written (widen) before the kernels read it.
    let mut chunk = core::mem::MaybeUninit::<Chunk>::uninit();
    let chunk_ptr = chunk.as_mut_ptr().cast::<f32>();
    // Fewer rows than a full chunk take longer K blocks in the same buffer (batch 1: K up to
    // 13,040 in one block, so each panel streams in one sequential pass).
    let kc = (MC_BF16 * CHUNK_LD / MC_BF16.min(job.m) - 16) / 2;
    let ld = 2 * kc + 16;
    let lda = ld * size_of::<f32>();
    let mut r0 = 0;
    while r0 < job.m {
        let rows = MC_BF16.min(job.m - r0);
        let tiles = Tiles::new(rows, MR);
        let mut q0 = 0;
        while q0 < pairs {
            let q1 = (q0 + kc).min(pairs);
            let vals = (2 * q1).min(job.k) - 2 * q0;
            for r in 0..rows {
                // SAFETY: row r0 + r of A holds k bf16 values (caller), values 2·q0.. of it are read; the chunk row holds ld floats (rows · ld <= MC_BF16 · CHUNK_LD) and `vals + 1 <= 2·kc` are written.
                unsafe {
                    widen(
                        job.a.add((r0 + r) * job.lda + 4 * q0).cast(),
                        vals,
                        chunk_ptr.add(r * ld),
                    );
                }
            }
            for p in 0..panels {
                // SAFETY: panel p and its slice q0..q1 are inside the packed block; the next slice's address is only prefetched.
                let (base, next) = unsafe {
                    let base = job.packed.add(p * panel);
                    let next = if p + 1 < panels {
                        base.add(panel + ROW + q0 * ROW)
                    } else {
                        job.packed.add(ROW + q1 * ROW)
                    };
                    (base, next)
                };
                for (i, (m0, mr)) in tiles.iter().enumerate() {
                    // SAFETY: rows r0+m0.. of C and of the chunk, and the panel's columns, are in bounds (caller).
                    unsafe {
                        let b = Blk {
                            a: chunk_ptr.add(m0 * ld).cast_const().cast(),
                            lda,
                            w: base.add(ROW + q0 * ROW),
                            steps: q1 - q0,
                            c: job.c.add((r0 + m0) * job.ldc + p * NR),
                            first: q0 == 0,
                            last: q1 == pairs,
                            // One line a step: tiles 0 and 1 cover the two halves of the
                            // next slice.
                            pf: if prefetch && i < 2 {
                                next.wrapping_add(64 * i * (q1 - q0))
                            } else {
                                core::ptr::null()
                            },
                            ..Blk::panel(job, base, NR.min(job.n - p * NR))
                        };
                        bf16_tile(mr, &b);
                    }
                }
            }
            q0 = q1;
        }
        r0 += rows;
    }
}

/// Widens `n` bf16 values at `src` to f32 at `dst`, then writes one zero after them when
/// `n` is odd (the missing half of the last pair, whose packed weight is zero too).
///
/// # Safety
/// `src` holds `n` values, `dst` `n + 1` writable floats; the CPU has AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn widen(src: *const u16, n: usize, dst: *mut f32) {
    // Masked-off lanes are neither read nor written.
    // SAFETY: every access is within `src[..n]` or `dst[..n + 1]`.
    unsafe {
        let mut i = 0;
        while i < n {
            let m = lanes(n - i);
            let v = _mm256_maskz_loadu_epi16(m, src.add(i).cast());
            let f = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v));
            _mm512_mask_storeu_ps(dst.add(i), m, _mm512_castsi512_ps(f));
            i += 16;
        }
        if n % 2 == 1 {
            dst.add(n).write(0.0);
        }
    }
}

/// Dispatches `mr` rows to `$kernel::<R, U>`: U independent chains per accumulator (four
/// for one row, two for two, else one), each a separate array so the accumulators stay in
/// registers.
macro_rules! by_rows {
    ($kernel:ident, $mr:expr, $b:expr) => {
        match $mr {
            1 => $kernel::<1, 4>($b),
            2 => $kernel::<2, 2>($b),
            3 => $kernel::<3, 1>($b),
            4 => $kernel::<4, 1>($b),
            5 => $kernel::<5, 1>($b),
            6 => $kernel::<6, 1>($b),
            7 => $kernel::<7, 1>($b),
            8 => $kernel::<8, 1>($b),
            9 => $kernel::<9, 1>($b),
            10 => $kernel::<10, 1>($b),
            11 => $kernel::<11, 1>($b),
            _ => $kernel::<12, 1>($b),
        }
    };
}

/// # Safety
/// `b` describes valid buffers, `1 <= mr <= MR`, and the CPU has AVX-512F.
pub(super) unsafe fn bf16_tile(mr: usize, b: &Blk) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(bf16_n, mr, b) }
}

/// # Safety
/// As [`bf16_tile`], with `R` rows and `U` chains.
// Indexed loops with constant bounds: they unroll, and the accumulators stay in registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn bf16_n<const R: usize, const U: usize>(b: &Blk) {
    let u = U;
    // A: R rows of 2·steps floats at stride lda; the slice: steps rows of 128 bytes; C: R rows of nvalid floats; the header's first 32 floats are the biases.
    // SAFETY: every load and store below stays inside those; prefetches never fault.
    unsafe {
        // Chain 0 starts from the bias or the partial sums in C; the other chains from zero.
        let mut acc = [[[_mm512_setzero_ps(); 2]; R]; U];
        for r in 0..R {
            acc[0][r] = start32(b, r);
        }
        let hi = _mm512_set1_epi32(0xffff_0000u32 as i32);
        let x = |r: usize, s: usize, h: usize| {
            _mm512_set1_ps(b.a.add(r * b.lda + 8 * s + 4 * h).cast::<f32>().read())
        };
        let mut w = b.w;
        let mut s = 0;
        while s + u <= b.steps {
            for c in 0..u {
                let wc = w.add(ROW * c);
                if !b.pf.is_null() {
                    _mm_prefetch::<_MM_HINT_T1>(b.pf.wrapping_add(64 * (s + c)).cast());
                }
                let v0 = _mm512_load_si512(wc.cast());
                let v1 = _mm512_load_si512(wc.add(64).cast());
                let e0 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v0));
                let e1 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v1));
                let o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
                let o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
                for (r, acc) in acc[c].iter_mut().enumerate() {
                    let xe = x(r, s + c, 0);
                    acc[0] = _mm512_fmadd_ps(xe, e0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xe, e1, acc[1]);
                    let xo = x(r, s + c, 1);
                    acc[0] = _mm512_fmadd_ps(xo, o0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xo, o1, acc[1]);
                }
            }
            w = w.add(ROW * u);
            s += u;
        }
        while s < b.steps {
            let v0 = _mm512_load_si512(w.cast());
            let v1 = _mm512_load_si512(w.add(64).cast());
            let e0 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v0));
            let e1 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v1));
            let o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
            let o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let xe = x(r, s, 0);
                acc[0] = _mm512_fmadd_ps(xe, e0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xe, e1, acc[1]);
                let xo = x(r, s, 1);
                acc[0] = _mm512_fmadd_ps(xo, o0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xo, o1, acc[1]);
            }
            w = w.add(ROW);
            s += 1;
        }
        let (lo, hi) = (_mm512_set1_ps(b.min), _mm512_set1_ps(b.max));
        // Unbounded: the clamp is the identity (NaN included), skip it.
        let clamp = b.min != f32::NEG_INFINITY || b.max != f32::INFINITY;
        for r in 0..R {
            let mut v = acc[0][r];
            for chain in acc.iter().take(u).skip(1) {
                v = [
                    _mm512_add_ps(v[0], chain[r][0]),
                    _mm512_add_ps(v[1], chain[r][1]),
                ];
            }
            let c = b.c.add(r * b.ldc);
            for (h, v) in v.into_iter().enumerate() {
                // Clamp with NaN propagating (as the other kernels).
                let v = if b.last && clamp {
                    _mm512_min_ps(hi, _mm512_max_ps(lo, v))
                } else {
                    v
                };
                _mm512_mask_storeu_ps(
                    c.wrapping_add(16 * h),
                    lanes(b.nvalid.saturating_sub(16 * h)),
                    v,
                );
            }
        }
    }
}
