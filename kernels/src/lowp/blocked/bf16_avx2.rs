//! `bf16_f32` on AVX2 (no bf16 arithmetic) for batches of several row tiles. The tile kernel
//! (`avx2::bf16`) splits every packed weight word and converts every A pair in its loop, so
//! a third of its instructions are not FMAs. Here, per row chunk and K block, A is widened
//! to f32 once into a stack buffer, and per panel its K block of weights once into a slice
//! of f32 rows; the f32 GEMM's own 6 × 16 AVX2 microkernel then runs on them. bf16 products
//! are exact in f32 and each output is the same chain of FMAs as in the tile kernel (from
//! the bias, in k order over K rounded up to even, then the clamp), so the bits are the same.

use core::arch::x86_64::*;

use super::super::{Job, Kind, panel_bytes};
use crate::gemm::{Tile as F32Tile, kernel};
use crate::tuning::{BF16_AVX2_KC, BF16_AVX2_MC};

/// Columns per panel (the packing's NR on AVX2, the f32 kernel's NR).
const NR: usize = 16;
// The f32 kernel must read A in place (the widened block's rows, `KC` floats apart).
const _: () = assert!(
    NR == <kernel::Avx2 as kernel::Kernel>::NR
        && <kernel::Avx2 as kernel::Kernel>::A_IN_PLACE
        && BF16_AVX2_KC.is_multiple_of(2)
);

/// A chunk's K block of A, widened to f32.
#[repr(C, align(64))]
struct ABlock([f32; BF16_AVX2_MC * BF16_AVX2_KC]);

/// A panel's K block of weights, widened: one row of 16 floats per k.
#[repr(C, align(64))]
struct BBlock([f32; BF16_AVX2_KC * NR]);

/// Runs a `bf16_f32` job on AVX2.
///
/// # Safety
/// As `lowp::run`, with `job.kind` `Bf16F32`, `job.isa` AVX2 (supported) and the panels
/// packed for NR = 16.
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn bf16_avx2(job: &Job) {
    let panel = panel_bytes(Kind::Bf16F32, NR, job.k);
    let panels = job.n.div_ceil(NR);
    // The packing pads an odd K with a zero weight; A gets a zero there too.
    let kpad = job.k.next_multiple_of(2);
    let mut a32 = core::mem::MaybeUninit::<ABlock>::uninit();
    let mut b32 = core::mem::MaybeUninit::<BBlock>::uninit();
    let (a32, b32) = (
        a32.as_mut_ptr().cast::<f32>(),
        b32.as_mut_ptr().cast::<f32>(),
    );
    let mr = <kernel::Avx2 as kernel::Kernel>::MR;
    let mut r0 = 0;
    while r0 < job.m {
        let rows = BF16_AVX2_MC.min(job.m - r0);
        let mut k0 = 0;
        while k0 < kpad {
            let k1 = (k0 + BF16_AVX2_KC).min(kpad);
            for r in 0..rows {
                // SAFETY: row r0+r holds K bf16 values; the buffer holds MC rows of KC floats.
                unsafe {
                    let src = job.a.add((r0 + r) * job.lda).cast::<u16>();
                    widen_a(src, k0, k1.min(job.k), k1, a32.add(r * BF16_AVX2_KC));
                }
            }
            for p in 0..panels {
                // SAFETY: panel p is inside the packed block.
                let base = unsafe { job.packed.add(p * panel) };
                // The words follow the 16 biases, 64 bytes a pair of k.
                // SAFETY: pairs k0/2..k1/2 of panel p exist; the slice holds KC rows.
                unsafe { widen_b(base.add(4 * NR + 32 * k0), (k1 - k0) / 2, b32) };
                for (m0, mr) in crate::gemm::row_tiles(rows, mr) {
                    let t = F32Tile {
                        kc: k1 - k0,
                        // SAFETY: rows m0.. of the widened block.
                        a: unsafe { a32.add(m0 * BF16_AVX2_KC) },
                        lda: BF16_AVX2_KC,
                        b: b32,
                        bias: if k0 == 0 {
                            base.cast()
                        } else {
                            core::ptr::null()
                        },
                        // SAFETY: rows r0+m0.. and panel p's columns of C are in bounds (caller).
                        c: unsafe { job.c.add((r0 + m0) * job.ldc + p * NR) },
                        ldc: job.ldc,
                        nvalid: NR.min(job.n - p * NR),
                        clamp: k1 == kpad,
                        min: job.min,
                        max: job.max,
                        pf_off: 0,
                        pf_l1: false,
                    };
                    // SAFETY: an in-bounds tile of `mr` rows on the f32 AVX2 kernel, which reads A in place (`a_in_place`); AVX2 and FMA are supported (caller).
                    unsafe { kernel::tile::<kernel::Avx2>(mr, &t) };
                }
            }
            k0 = k1;
        }
        r0 += rows;
    }
}

/// Widens bf16 values `k0..k1` of the row at `src` to f32 at `dst`, then zeros up to `kpad`.
///
/// # Safety
/// `src` holds `k1` values, `dst` `kpad - k0` writable floats; the CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn widen_a(src: *const u16, k0: usize, k1: usize, kpad: usize, dst: *mut f32) {
    // SAFETY: every access is within `src[k0..k1]` or `dst[..kpad - k0]`.
    unsafe {
        let mut i = k0;
        while i + 8 <= k1 {
            let v = _mm256_cvtepu16_epi32(_mm_loadu_si128(src.add(i).cast()));
            _mm256_storeu_ps(
                dst.add(i - k0),
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
            );
            i += 8;
        }
        while i < k1 {
            *dst.add(i - k0) = f32::from_bits(u32::from(*src.add(i)) << 16);
            i += 1;
        }
        while i < kpad {
            *dst.add(i - k0) = 0.0;
            i += 1;
        }
    }
}

/// Widens `pairs` packed pair rows (16 words `lo | hi << 16`, 64 bytes each) at `src` to two
/// rows of 16 floats each at `dst` (the even k, then the odd one).
///
/// # Safety
/// `src` holds `64 · pairs` bytes, `dst` `32 · pairs` writable floats (64-byte aligned); the
/// CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn widen_b(src: *const u8, pairs: usize, dst: *mut f32) {
    // Every store is 32-byte aligned (`dst` is 64-byte aligned, each row 32 floats).
    // SAFETY: every access is within `src[..64 · pairs]` or `dst[..32 · pairs]`.
    unsafe {
        let high = _mm256_set1_epi32(0xffff_0000u32 as i32);
        for s in 0..pairs {
            for h in 0..2 {
                let v = _mm256_loadu_si256(src.add(64 * s + 32 * h).cast());
                let even = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
                let odd = _mm256_castsi256_ps(_mm256_and_si256(v, high));
                _mm256_store_ps(dst.add(32 * s + 8 * h), even);
                _mm256_store_ps(dst.add(32 * s + 16 + 8 * h), odd);
            }
        }
    }
}
