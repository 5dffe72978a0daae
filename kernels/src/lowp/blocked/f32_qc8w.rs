//! `f32_qc8w` on AVX-512 for batches of several row tiles, in one of two ways, partial sums
//! in C between K blocks:
//!
//! * [`sliced`] (where widening shares the FMA ports, as on Intel): per row chunk and
//!   panel, each K block of the int8 weights is widened to f32 once, into a slice on the
//!   stack that every 12 × 32 row tile of the chunk reads, FMAs only.
//! * [`by_tiles`] (AMD with A rows a multiple of 4 KiB apart: see
//!   [`f32_qc8w_driver`](crate::tuning::f32_qc8w_driver)): the tiles widen the weights as
//!   they read them, as the unblocked kernel does, but from a copy of their rows of A on
//!   the stack, one cache line apart beyond a K block, since rows 4 KiB apart all fall in
//!   one L1 set.
//!
//! Each output is the same chain of FMAs as in the unblocked kernel (from the bias, in k
//! order, then the scale and the clamp), so the bits are the same.

use core::arch::x86_64::*;

use super::super::{Job, Kind, panel_bytes};
use super::{Blk, Tiles, lanes, start32};
use crate::gemm::row_tiles;
use crate::tuning::{
    F32_QC8W_A_BYTES, F32_QC8W_KC, F32_QC8W_MC, F32_QC8W_TILE_KC, LOWP_N_BLOCK_BYTES,
};

/// Columns per panel (the packing's NR on AVX-512).
const NR: usize = 32;
/// Most rows per tile (12 × 2 = 24 zmm accumulators).
const MR: usize = 12;

/// Aligned stack storage of one widened K block of a panel.
#[repr(C, align(64))]
struct Slice([f32; F32_QC8W_KC * NR]);

/// Floats between the copied A rows of one tile: a K block plus one cache line.
const TILE_LD: usize = F32_QC8W_TILE_KC + 16;

/// Aligned stack storage of one row tile's K block of A.
#[repr(C, align(64))]
struct TileRows([f32; MR * TILE_LD]);

/// Runs an `f32_qc8w` job on AVX-512F, row chunks sharing each panel's widened K block (see
/// the module's docs).
///
/// # Safety
/// As `lowp::run`, with `job.kind` `F32Qc8w`, `job.isa` AVX-512 and the panels packed for
/// NR = 32.
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn sliced(job: &Job) {
    let panel = panel_bytes(Kind::F32Qc8w, NR, job.k);
    let panels = job.n.div_ceil(NR);
    // Rows per chunk: their A (read once per panel) stays within half of L2.
    let chunk = (F32_QC8W_A_BYTES / job.lda).clamp(MR, F32_QC8W_MC);
    // Uninitialized: each K block is widened into it before the tiles read it.
    let mut slice = core::mem::MaybeUninit::<Slice>::uninit();
    let w = slice.as_mut_ptr().cast::<f32>();
    let mut r0 = 0;
    while r0 < job.m {
        let rows = chunk.min(job.m - r0);
        let tiles = Tiles::new(rows, MR);
        for p in 0..panels {
            // SAFETY: panel p is inside the packed block.
            let base = unsafe { job.packed.add(p * panel) };
            let nvalid = NR.min(job.n - p * NR);
            let mut k0 = 0;
            while k0 < job.k {
                let k1 = (k0 + F32_QC8W_KC).min(job.k);
                // The panel's weights follow its 2 × 32 header floats, 32 bytes a k.
                // SAFETY: weights k0..k1 of panel p are inside it; the slice holds KC · 32 floats.
                unsafe { widen(base.add(2 * 4 * NR + k0 * NR), (k1 - k0) * NR, w) };
                for (m0, mr) in tiles.iter() {
                    // SAFETY: rows r0+m0.. of A and C, the panel's columns and the widened slice are in bounds (caller).
                    unsafe {
                        let b = Blk {
                            a: job.a.add((r0 + m0) * job.lda + 4 * k0),
                            w: w.cast_const().cast(),
                            steps: k1 - k0,
                            c: job.c.add((r0 + m0) * job.ldc + p * NR),
                            first: k0 == 0,
                            last: k1 == job.k,
                            ..Blk::panel(job, base, nvalid)
                        };
                        tile::<false>(mr, &b);
                    }
                }
                k0 = k1;
            }
        }
        r0 += rows;
    }
}

/// Runs an `f32_qc8w` job on AVX-512F, row tiles widening their weights as they read them
/// from a copy of their rows of A (see the module's docs).
///
/// # Safety
/// As [`sliced`].
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn by_tiles(job: &Job) {
    let panel = panel_bytes(Kind::F32Qc8w, NR, job.k);
    let panels = job.n.div_ceil(NR);
    // An N block's K block of weights stays in L2 while every row tile reads it, and each
    // copy of a tile's rows serves the whole N block.
    let per_block = (LOWP_N_BLOCK_BYTES / (F32_QC8W_TILE_KC * NR)).max(1);
    // Uninitialized: each K block of a tile's rows is copied into it before the tile reads it.
    let mut rows = core::mem::MaybeUninit::<TileRows>::uninit();
    let a = rows.as_mut_ptr().cast::<f32>();
    let mut p0 = 0;
    while p0 < panels {
        let p1 = (p0 + per_block).min(panels);
        let mut k0 = 0;
        while k0 < job.k {
            let k1 = (k0 + F32_QC8W_TILE_KC).min(job.k);
            for (m0, mr) in row_tiles(job.m, MR) {
                for r in 0..mr {
                    // Row m0 + r of A holds k floats (caller), k0..k1 of them are read.
                    // SAFETY: as above; row r of the stack copy holds TILE_LD >= k1 - k0 floats (mr <= MR).
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            job.a.add((m0 + r) * job.lda + 4 * k0).cast::<f32>(),
                            a.add(r * TILE_LD),
                            k1 - k0,
                        );
                    }
                }
                for p in p0..p1 {
                    // Panel p's weights k0..k1 follow its 2 × 32 header floats, 32 bytes a k.
                    // SAFETY: panel p, those weights, rows m0.. of C and the panel's columns are in bounds (caller).
                    unsafe {
                        let base = job.packed.add(p * panel);
                        let b = Blk {
                            a: a.cast_const().cast(),
                            lda: 4 * TILE_LD,
                            w: base.add(2 * 4 * NR + k0 * NR),
                            steps: k1 - k0,
                            c: job.c.add(m0 * job.ldc + p * NR),
                            first: k0 == 0,
                            last: k1 == job.k,
                            ..Blk::panel(job, base, NR.min(job.n - p * NR))
                        };
                        tile::<true>(mr, &b);
                    }
                }
            }
            k0 = k1;
        }
        p0 = p1;
    }
}

/// Widens `n` (a multiple of 32) int8 values at `src` to f32 at `dst`.
///
/// # Safety
/// `src` holds `n` bytes, `dst` `n` writable floats, 64-byte aligned; the CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn widen(src: *const u8, n: usize, dst: *mut f32) {
    // SAFETY: every access is within `src[..n]` or `dst[..n]`.
    unsafe {
        let mut i = 0;
        while i < n {
            let v = _mm512_cvtepi8_epi32(_mm_loadu_si128(src.add(i).cast()));
            _mm512_store_ps(dst.add(i), _mm512_cvtepi32_ps(v));
            i += 16;
        }
    }
}

/// # Safety
/// `b` describes valid buffers (`b.w`: `b.steps` rows of 32 int8 weights if `WIDEN`, else
/// of 32 widened floats, 64-byte aligned), `1 <= mr <= MR`, and the CPU has AVX-512F.
unsafe fn tile<const WIDEN: bool>(mr: usize, b: &Blk) {
    // SAFETY: forwarded (caller).
    unsafe {
        match mr {
            1 => f32_qc8w_n::<1, WIDEN>(b),
            2 => f32_qc8w_n::<2, WIDEN>(b),
            3 => f32_qc8w_n::<3, WIDEN>(b),
            4 => f32_qc8w_n::<4, WIDEN>(b),
            5 => f32_qc8w_n::<5, WIDEN>(b),
            6 => f32_qc8w_n::<6, WIDEN>(b),
            7 => f32_qc8w_n::<7, WIDEN>(b),
            8 => f32_qc8w_n::<8, WIDEN>(b),
            9 => f32_qc8w_n::<9, WIDEN>(b),
            10 => f32_qc8w_n::<10, WIDEN>(b),
            11 => f32_qc8w_n::<11, WIDEN>(b),
            _ => f32_qc8w_n::<12, WIDEN>(b),
        }
    }
}

/// # Safety
/// As [`tile`], with `R` rows.
// Indexed loops with constant bounds: they unroll, and the accumulators stay in registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn f32_qc8w_n<const R: usize, const WIDEN: bool>(b: &Blk) {
    // A: R rows of `steps` floats at stride lda bytes; the weights: steps rows of 32 int8
    // or f32 values; C: R rows of nvalid floats; the header: 32 biases, 32 scales.
    // SAFETY: every load and store below stays inside those.
    unsafe {
        // Each row starts from the bias or from its partial sums in C.
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for r in 0..R {
            acc[r] = start32(b, r);
        }
        let p = b.panel.cast::<f32>();
        let w = b.w.cast::<f32>();
        let widen = |at: usize| {
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(b.w.add(at).cast())))
        };
        for s in 0..b.steps {
            let (w0, w1) = if WIDEN {
                (widen(32 * s), widen(32 * s + 16))
            } else {
                (
                    _mm512_load_ps(w.add(32 * s)),
                    _mm512_load_ps(w.add(32 * s + 16)),
                )
            };
            for r in 0..R {
                let x = _mm512_set1_ps(b.a.add(r * b.lda).cast::<f32>().add(s).read());
                acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
            }
        }
        let scale = [_mm512_load_ps(p.add(32)), _mm512_load_ps(p.add(48))];
        let (lo, hi) = (_mm512_set1_ps(b.min), _mm512_set1_ps(b.max));
        for r in 0..R {
            let c = b.c.add(r * b.ldc);
            for h in 0..2 {
                // The last block scales and clamps (NaN propagating, as the other kernels).
                let v = if b.last {
                    _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(acc[r][h], scale[h])))
                } else {
                    acc[r][h]
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
