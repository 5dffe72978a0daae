//! `qd8_f32_qc8w` on AVX2 without VNNI, for batches of several row tiles. The tile kernel
//! (`avx2::qd8`) widens its int8 weights and the `q + 128` bytes of A to i16 at every step
//! and holds two rows: most of its instructions are conversions, not `vpmaddwd`. Here, per
//! row chunk and K block, A is widened once into a stack buffer, and per panel its K block
//! of weights once into pairs `(w[j][2p], w[j][2p+1])` per column. The 6 × 16 microkernel
//! then runs only `vpbroadcastd` (a load), `vpmaddwd` and `vpaddd`: 12 accumulators, each
//! lane one column's exact i32 sum. The i32 partial sums wait in C's slots between K blocks;
//! the last block runs the tile kernel's epilogue, so the outputs are the same bits.

use core::arch::x86_64::*;

use super::super::avx2::qd8_finish;
use super::super::{Job, Kind, Tile, panel_bytes};
use super::Tiles;
use crate::tuning::{QD8_AVX2_KC, QD8_AVX2_MC};

/// Columns per panel (the packing's NR on AVX2).
const NR: usize = 16;
/// Most rows per tile (6 × 2 ymm accumulators, two weight vectors and a broadcast).
const MR: usize = 6;
/// Bytes of a panel's header: 16 biases, 16 scales, 16 column sums.
const HEADER: usize = 3 * 4 * NR;

/// A chunk's K block of A, widened to i16.
#[repr(C, align(64))]
struct ABlock([i16; QD8_AVX2_MC * QD8_AVX2_KC]);

/// A panel's K block of weights as i16 pairs: per pair of k, 16 columns × 2 values (64
/// bytes).
#[repr(C, align(64))]
struct WBlock([i16; QD8_AVX2_KC * NR]);

/// One microkernel call.
struct Call {
    /// Row 0's first pair of the block (rows `QD8_AVX2_KC` values apart).
    a: *const i16,
    /// The widened weights of the block.
    w: *const i16,
    /// Pairs of k in the block.
    pairs: usize,
    /// The epilogue's view of the tile (C, clamp, panel header, row parameters).
    t: Tile,
    /// Start from the partial sums in C (not the first K block).
    resume: bool,
    /// The last K block: apply the epilogue; else store the partial sums in C.
    last: bool,
}

/// Runs a `qd8_f32_qc8w` job on AVX2.
///
/// # Safety
/// As `lowp::run`, with `job.kind` `Qd8F32Qc8w`, `job.isa` AVX2 (supported), the panels
/// packed for NR = 16, and the rows of `job.a` and entries of `job.rows` already written.
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn qd8_avx2(job: &Job) {
    let panel = panel_bytes(Kind::Qd8F32Qc8w, NR, job.k);
    let panels = job.n.div_ceil(NR);
    // A's rows hold K padded with zeros to a multiple of 4, as do the panels' weights.
    let kpad = job.k.next_multiple_of(4);
    let mut a16 = core::mem::MaybeUninit::<ABlock>::uninit();
    let mut w16 = core::mem::MaybeUninit::<WBlock>::uninit();
    let (a16, w16) = (
        a16.as_mut_ptr().cast::<i16>(),
        w16.as_mut_ptr().cast::<i16>(),
    );
    let mut r0 = 0;
    while r0 < job.m {
        let rows = QD8_AVX2_MC.min(job.m - r0);
        let tiles = Tiles::new(rows, MR);
        let mut k0 = 0;
        while k0 < kpad {
            let k1 = (k0 + QD8_AVX2_KC).min(kpad);
            for r in 0..rows {
                // SAFETY: row r0+r holds kpad bytes; the buffer holds MC rows of KC values.
                unsafe {
                    let src = job.a.add((r0 + r) * job.lda + k0);
                    widen_a(src, k1 - k0, a16.add(r * QD8_AVX2_KC));
                }
            }
            for p in 0..panels {
                // SAFETY: panel p is inside the packed block; its groups k0/4..k1/4 exist.
                let base = unsafe { job.packed.add(p * panel) };
                // SAFETY: as above; the buffer holds KC / 2 pairs of 16 columns (32 i16 each).
                unsafe { widen_w(base.add(HEADER + 16 * k0), (k1 - k0) / 4, w16) };
                let nvalid = NR.min(job.n - p * NR);
                for (m0, mr) in tiles.iter() {
                    // SAFETY: rows r0+m0.. of C and of the row parameters, the panel and both buffers are in bounds (caller).
                    unsafe {
                        let call = Call {
                            a: a16.add(m0 * QD8_AVX2_KC),
                            w: w16,
                            pairs: (k1 - k0) / 2,
                            t: Tile {
                                k: job.k,
                                a: core::ptr::null(),
                                lda: 0,
                                panel: base,
                                c: job.c.add((r0 + m0) * job.ldc + p * NR),
                                ldc: job.ldc,
                                nvalid,
                                min: job.min,
                                max: job.max,
                                rows: job.rows.add(r0 + m0),
                                pf: 0,
                            },
                            resume: k0 > 0,
                            last: k1 == kpad,
                        };
                        tile(mr, &call);
                    }
                }
            }
            k0 = k1;
        }
        r0 += rows;
    }
}

/// Zero-extends `n` (a multiple of 4) bytes at `src` to i16 at `dst`.
///
/// # Safety
/// `src` holds `n` bytes, `dst` `n` writable i16 (64-byte aligned); the CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn widen_a(src: *const u8, n: usize, dst: *mut i16) {
    // SAFETY: every access is within `src[..n]` or `dst[..n]`.
    unsafe {
        let mut i = 0;
        while i + 16 <= n {
            let v = _mm256_cvtepu8_epi16(_mm_loadu_si128(src.add(i).cast()));
            _mm256_store_si256(dst.add(i).cast(), v);
            i += 16;
        }
        while i < n {
            *dst.add(i) = i16::from(*src.add(i));
            i += 1;
        }
    }
}

/// Widens `groups` packed groups of four k (16 columns × 4 int8 weights, 64 bytes each) at
/// `src` into pairs at `dst`: for pair `2g` the 16 columns' `(w[4g], w[4g+1])` as i16 (32
/// values), then for pair `2g + 1` their `(w[4g+2], w[4g+3])`.
///
/// # Safety
/// `src` holds `64 · groups` bytes, `dst` `64 · groups` writable i16 (64-byte aligned); the
/// CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn widen_w(src: *const u8, groups: usize, dst: *mut i16) {
    // Every store is 32-byte aligned (`dst` is 64-byte aligned).
    // SAFETY: every access is within `src[..64 · groups]` or `dst[..64 · groups]`.
    unsafe {
        for g in 0..groups {
            for h in 0..2 {
                // Column j's 32-bit word: bytes b0..b3 = w[4g..4g+4], little-endian.
                let v = _mm256_loadu_si256(src.add(64 * g + 32 * h).cast());
                // 16-bit lanes: even = (b0, b2) and odd = (b1, b3), sign-extended.
                let even = _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(v));
                let odd = _mm256_srai_epi16::<8>(v);
                let p0 = _mm256_blend_epi16::<0xaa>(even, _mm256_slli_epi32::<16>(odd));
                let p1 = _mm256_blend_epi16::<0xaa>(_mm256_srli_epi32::<16>(even), odd);
                _mm256_store_si256(dst.add(64 * g + 16 * h).cast(), p0);
                _mm256_store_si256(dst.add(64 * g + 32 + 16 * h).cast(), p1);
            }
        }
    }
}

/// # Safety
/// `c` describes valid buffers (see [`qd8_avx2`]) with `1 <= mr <= MR` rows; the CPU has
/// AVX2.
unsafe fn tile(mr: usize, c: &Call) {
    // SAFETY: forwarded (caller).
    unsafe {
        match mr {
            1 => tile_n::<1>(c),
            2 => tile_n::<2>(c),
            3 => tile_n::<3>(c),
            4 => tile_n::<4>(c),
            5 => tile_n::<5>(c),
            _ => tile_n::<6>(c),
        }
    }
}

/// # Safety
/// As [`tile`], with `MR` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_n<const MR: usize>(c: &Call) {
    let t = &c.t;
    // SAFETY: the loads stay inside the two buffers; C's rows hold nvalid slots (caller).
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        if c.resume {
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = load_partial(t.c.add(r * t.ldc).cast(), t.nvalid);
            }
        }
        let mut w = c.w;
        for p in 0..c.pairs {
            let w0 = _mm256_load_si256(w.cast());
            let w1 = _mm256_load_si256(w.add(16).cast());
            for (r, acc) in acc.iter_mut().enumerate() {
                let pair = c.a.add(r * QD8_AVX2_KC + 2 * p).cast::<i32>().read();
                let x = _mm256_set1_epi32(pair);
                acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x, w0));
                acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x, w1));
            }
            w = w.add(32);
        }
        for (r, acc) in acc.into_iter().enumerate() {
            if c.last {
                qd8_finish(t, r, acc);
            } else {
                store_partial(t.c.add(r * t.ldc).cast(), t.nvalid, acc);
            }
        }
    }
}

/// The first `n` (1..=16) i32 partial sums at `p`, the rest zero.
///
/// # Safety
/// `p` holds `n` readable i32; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load_partial(p: *const i32, n: usize) -> [__m256i; 2] {
    let mut tmp = [0i32; NR];
    // SAFETY: n values of p (caller), straight or through a 16-slot array.
    unsafe {
        if n == NR {
            return [
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(8).cast()),
            ];
        }
        core::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), n);
        [
            _mm256_loadu_si256(tmp.as_ptr().cast()),
            _mm256_loadu_si256(tmp.as_ptr().add(8).cast()),
        ]
    }
}

/// Stores the first `n` (1..=16) i32 sums of `v` at `p`.
///
/// # Safety
/// `p` holds `n` writable i32; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_partial(p: *mut i32, n: usize, v: [__m256i; 2]) {
    // SAFETY: n values to p (caller); full stores when all 16 are valid.
    unsafe {
        if n == NR {
            _mm256_storeu_si256(p.cast(), v[0]);
            _mm256_storeu_si256(p.add(8).cast(), v[1]);
        } else {
            let mut tmp = [0i32; NR];
            _mm256_storeu_si256(tmp.as_mut_ptr().cast(), v[0]);
            _mm256_storeu_si256(tmp.as_mut_ptr().add(8).cast(), v[1]);
            core::ptr::copy_nonoverlapping(tmp.as_ptr(), p, n);
        }
    }
}
