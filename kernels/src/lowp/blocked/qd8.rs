//! `qd8_f32_qc8w` on AVX512-VNNI (tiles of 6 rows × 64 columns, `vpdpbusd`) and on
//! AMX-INT8 (`tdpbusd` blocks of 32 or 16 rows, the VNNI microkernel applying the epilogue).

use core::arch::x86_64::*;

use super::super::{DotIsa, Job, Kind, amx, panel_bytes, quant};
use super::{Blk, PrefetchRows, Tiles, lanes};
use crate::tuning::{QD8_A_BYTES, QD8_MC, blocked_prefetches};

/// qd8: columns per panel (four zmm per tile row).
pub(crate) const NR_QD8: usize = 64;
/// qd8: most rows per tile (6 × 4 = 24 zmm accumulators).
pub(super) const MR_QD8: usize = 6;
/// qd8: 4-byte words per K block (K = 4096): longer calls beat L1-sized slices here.
const KC_QD8: usize = 1024;

/// Aligned stack storage of a qd8 chunk's i32 partial sums.
#[repr(C, align(64))]
struct Partial([i32; QD8_MC * NR_QD8]);

/// Runs a `qd8_f32_qc8w` job on AVX512-VNNI.
///
/// # Safety
/// As `lowp::run`, with `job.isa` AVX512-VNNI and the panels packed for NR = [`NR_QD8`].
pub(crate) unsafe fn qd8(job: &Job) {
    // SAFETY: forwarded (caller); AVX512-VNNI kernels only.
    unsafe { qd8_with(job, false) }
}

/// Runs a `qd8_f32_qc8w` job on AMX-INT8: [`qd8`] with the rows of every full block of 32
/// (or 16) multiplied by `tdpbusd` over K rounded up to 64 (see `amx`).
///
/// # Safety
/// As [`qd8`], and `amx::supported()` returned true.
pub(crate) unsafe fn qd8_amx(job: &Job) {
    static CONFIG: amx::Config = amx::Config::new();
    if job.m < 16 || job.k < 4 * amx::STEP_WORDS {
        // No full tile: the VNNI path alone, without configuring (and releasing) the tiles,
        // which would cost a batch-1 run more than its arithmetic.
        // SAFETY: forwarded (caller).
        return unsafe { qd8_with(job, false) };
    }
    // SAFETY: AMX is supported and permitted (caller); the configuration is valid.
    unsafe { amx::load(&CONFIG) };
    // SAFETY: forwarded (caller); the configuration is loaded on this thread.
    unsafe { qd8_with(job, true) };
    // SAFETY: as above.
    unsafe { amx::release() };
}

/// Quantizes the rows `rows` of a qd8 job as the driver would (`job.x` set): their bytes
/// into A, each zero-padded to a whole AMX tile step, and their parameters; a later run of
/// the job with `x` NULL then reads them.
///
/// # Safety
/// As [`qd8`] with `job.x` set, and `rows` within `0..job.m`.
pub(crate) unsafe fn qd8_prepare(job: &Job, rows: core::ops::Range<usize>) {
    use amx::STEP_WORDS;
    let words = job.k.div_ceil(4);
    let padded = words.div_ceil(STEP_WORDS) * STEP_WORDS * 4;
    // SAFETY: rows `rows` of the input, of A and of the row parameters are in bounds, A and the parameters writable (caller).
    unsafe {
        quant::rows(
            DotIsa::Avx512Vnni,
            rows.len(),
            job.k,
            job.x.add(rows.start * job.ldx),
            job.ldx,
            job.a.add(rows.start * job.lda).cast_mut(),
            job.lda,
            job.rows.add(rows.start).cast_mut(),
        );
    }
    for r in rows {
        // Bytes 4·words .. padded lie within the row's `lda` bytes (whole cache lines).
        // SAFETY: inside row r of the workspace's A (caller).
        unsafe {
            core::ptr::write_bytes(
                job.a.add(r * job.lda + 4 * words).cast_mut(),
                0,
                padded - 4 * words,
            );
        }
    }
}

/// [`qd8`], with AMX blocks when `amx` (the tile configuration of `amx::Config::new` then
/// loaded on this thread).
///
/// # Safety
/// As [`qd8_amx`] when `amx`, else as [`qd8`].
unsafe fn qd8_with(job: &Job, amx: bool) {
    if amx || job.k.div_ceil(4) > KC_QD8 {
        // SAFETY: forwarded (caller).
        unsafe { qd8_with_partials(job, amx) }
    } else {
        // One K block and no AMX block: every tile's sums start and end in registers, so
        // no 64 KiB frame of partial sums, which every call probed page by page (batch 1
        // ran up to 5% faster without it; docs/bench-history.md).
        // SAFETY: forwarded (caller); with one K block and no AMX, `part` is never read or written.
        unsafe { qd8_driver(job, false, core::ptr::null_mut()) }
    }
}

/// [`qd8_with`] with its partial sums on this frame's stack.
///
/// # Safety
/// As [`qd8_with`].
#[inline(never)]
unsafe fn qd8_with_partials(job: &Job, amx: bool) {
    // Uninitialized: the first K block of every tile writes its rows before any read.
    let mut part = core::mem::MaybeUninit::<Partial>::uninit();
    // SAFETY: forwarded (caller); `part` holds QD8_MC rows of NR_QD8 i32, 64-byte aligned.
    unsafe { qd8_driver(job, amx, part.as_mut_ptr().cast()) }
}

/// The driver of [`qd8_with`], its partial sums at `part`.
///
/// # Safety
/// As [`qd8_with`]; `part` holds [`QD8_MC`] rows of [`NR_QD8`] writable i32, 64-byte
/// aligned, or is NULL when `!amx` and K is one block ([`KC_QD8`] words or fewer).
#[inline(always)]
unsafe fn qd8_driver(job: &Job, amx: bool, part: *mut i32) {
    use amx::{BLOCK_ROWS, STEP_WORDS};
    let panel = panel_bytes(Kind::Qd8F32Qc8w, NR_QD8, job.k);
    let panels = job.n.div_ceil(NR_QD8);
    let words = job.k.div_ceil(4);
    // K in steps of 16 words through the tiles, the last one reaching past K: the rows'
    // quantized bytes from K to the end of the step are zeroed below, so whatever the
    // panel holds there (the next panel's header and weights, or the block's zeroed
    // slack after the last panel) adds nothing. The VNNI microkernel then only applies
    // the epilogue.
    let groups = if amx { words.div_ceil(STEP_WORDS) } else { 0 };
    let amx_bytes = groups * STEP_WORDS * 4;
    let row = 4 * NR_QD8;
    // Rows per chunk: their quantized A (read once per panel) stays within half of L2, and
    // their partial sums within the stack buffer.
    let chunk = (QD8_A_BYTES / job.lda).clamp(MR_QD8, QD8_MC);
    let prefetch = blocked_prefetches(job.m, MR_QD8, panel * panels);
    let blocks = words.div_ceil(KC_QD8);
    let x_line = 64 / size_of::<f32>();
    let mut r0 = 0;
    while r0 < job.m {
        let rows = chunk.min(job.m - r0);
        // Rows run by AMX blocks (32 at a time, then one of 16), the rest by VNNI tiles.
        let (big, small) = if groups > 0 {
            (rows / BLOCK_ROWS, (rows % BLOCK_ROWS) / 16)
        } else {
            (0, 0)
        };
        let amx_rows = big * BLOCK_ROWS + small * 16;
        let tiles = Tiles::new((rows - amx_rows).max(1), MR_QD8);
        let vnni_rows = rows - amx_rows;
        // Input rows of the next chunk, prefetched into L2 a few lines before each tile
        // call so that quantizing them reads L2, not L3 (the read then overlaps the
        // arithmetic instead of preceding it).
        let mut pf_x = PrefetchRows {
            x: job.x,
            ldx: job.ldx,
            k: job.k,
            row: r0 + rows,
            end: if job.x.is_null() {
                0
            } else {
                (r0 + rows + chunk).min(job.m)
            },
            at: 0,
            per_call: 0,
        };
        let calls = big
            + small
            + if vnni_rows > 0 {
                tiles.count * blocks
            } else {
                0
            };
        pf_x.per_call =
            (pf_x.end.saturating_sub(pf_x.row) * job.k.div_ceil(x_line)).div_ceil(panels * calls);
        if !job.x.is_null() {
            // SAFETY: rows r0.. of the input, of A and of the row parameters are in bounds, A and the parameters writable (caller: `x` set).
            unsafe {
                quant::rows(
                    DotIsa::Avx512Vnni,
                    rows,
                    job.k,
                    job.x.add(r0 * job.ldx),
                    job.ldx,
                    job.a.add(r0 * job.lda).cast_mut(),
                    job.lda,
                    job.rows.add(r0).cast_mut(),
                );
            }
            if groups > 0 {
                for r in 0..rows {
                    // Bytes 4·words .. amx_bytes of the row lie within its `lda` bytes
                    // (`lda` is K rounded up to whole cache lines, and so is `amx_bytes`).
                    // SAFETY: inside row r0 + r of the workspace's A (caller).
                    unsafe {
                        core::ptr::write_bytes(
                            job.a.add((r0 + r) * job.lda + 4 * words).cast_mut(),
                            0,
                            amx_bytes - 4 * words,
                        );
                    }
                }
            }
        }
        for p in 0..panels {
            // SAFETY: panel p is inside the packed block.
            let base = unsafe { job.packed.add(p * panel) };
            let nvalid = NR_QD8.min(job.n - p * NR_QD8);
            for (m0, height) in amx::row_blocks(amx_rows) {
                pf_x.step();
                // Rows r0+m0 .. +height of A, their partial sums, and the panel's first
                // `amx_words` word rows are in bounds (caller; `groups` words fit in K).
                // SAFETY: as above; the configuration is loaded (`amx`: caller).
                unsafe {
                    let a = job.a.add((r0 + m0) * job.lda);
                    let w = base.add(3 * row);
                    let part = part.add(m0 * NR_QD8);
                    if height == BLOCK_ROWS {
                        amx::block(a, job.lda, w, groups, part);
                    } else {
                        amx::block16(a, job.lda, w, groups, part);
                    }
                }
                // The epilogue (no K left: zero steps), six rows a call.
                for (t0, mr) in Tiles::new(height, MR_QD8).iter() {
                    let m = m0 + t0;
                    // No A or weight is read (zero steps).
                    // SAFETY: rows r0+m.. of C, row parameters and sums, the header: in bounds.
                    unsafe {
                        let b = Blk {
                            c: job.c.add((r0 + m) * job.ldc + p * NR_QD8),
                            rows: job.rows.add(r0 + m),
                            part: part.add(m * NR_QD8),
                            ..Blk::panel(job, base, nvalid)
                        };
                        qd8_tile(mr, &b);
                    }
                }
            }
            if vnni_rows == 0 {
                continue;
            }
            let mut q0 = 0;
            while q0 < words {
                let q1 = (q0 + KC_QD8).min(words);
                // The slice after this one (the panel's next, or the next panel's first):
                // only prefetched, by the first row tiles.
                let next = if q1 < words {
                    base.wrapping_add(3 * row + q1 * row)
                } else {
                    base.wrapping_add(panel + 3 * row)
                };
                // The next slice is VQ times as many lines as a tile has steps; a batch
                // with fewer tiles prefetches part of it.
                let spread = VQ;
                for (i, (m0, mr)) in tiles.iter().enumerate() {
                    let m0 = amx_rows + m0;
                    pf_x.step();
                    // SAFETY: rows r0+m0.. of A, of C and of the row parameters, and the panel's columns and slice, are in bounds (caller).
                    unsafe {
                        let b = Blk {
                            a: job.a.add((r0 + m0) * job.lda + 4 * q0),
                            w: base.add(3 * row + q0 * row),
                            steps: q1 - q0,
                            c: job.c.add((r0 + m0) * job.ldc + p * NR_QD8),
                            first: q0 == 0,
                            last: q1 == words,
                            rows: job.rows.add(r0 + m0),
                            // One line a step: tile i covers the i-th run of `steps` lines
                            // of the next slice (spread over the first four tiles).
                            pf: if prefetch && i < spread && (p + 1 < panels || q1 < words) {
                                next.wrapping_add(64 * i * (q1 - q0))
                            } else {
                                core::ptr::null()
                            },
                            // Not dereferenced when NULL (one K block).
                            part: part.wrapping_add(m0 * NR_QD8),
                            ..Blk::panel(job, base, nvalid)
                        };
                        qd8_tile(mr, &b);
                    }
                }
                q0 = q1;
            }
        }
        r0 += rows;
    }
}

/// # Safety
/// `b` describes valid buffers with `b.rows` holding `mr` entries, `1 <= mr <= MR_QD8`,
/// and the CPU has AVX-512F and AVX512-VNNI.
unsafe fn qd8_tile(mr: usize, b: &Blk) {
    // SAFETY: forwarded (caller).
    unsafe {
        match mr {
            1 => qd8_n::<1, 4>(b),
            2 => qd8_n::<2, 2>(b),
            3 => qd8_n::<3, 1>(b),
            4 => qd8_n::<4, 1>(b),
            5 => qd8_n::<5, 1>(b),
            _ => qd8_n::<6, 1>(b),
        }
    }
}

/// Vectors (16 columns each) per qd8 tile row.
const VQ: usize = NR_QD8 / 16;

/// # Safety
/// As [`qd8_tile`], with `R` rows and `U` chains.
// Indexed loops with constant bounds: they unroll, and the accumulators stay in registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn qd8_n<const R: usize, const U: usize>(b: &Blk) {
    let row = 4 * NR_QD8;
    // A: R rows of 4·steps bytes at stride lda; the slice: steps rows of 256 bytes; the partial sums: R rows of NR_QD8 i32 (64-byte aligned); the header: biases, scales, column sums; C: R rows of nvalid floats (last block); the row parameters: R entries.
    // SAFETY: every load and store below stays inside those; prefetches never fault.
    unsafe {
        // Chain 0 starts from the partial sums on the stack (zero in the first K block), the
        // other chains from zero.
        let mut acc = [[[_mm512_setzero_si512(); VQ]; R]; U];
        if !b.first {
            for r in 0..R {
                for h in 0..VQ {
                    acc[0][r][h] = _mm512_load_epi32(b.part.add(r * NR_QD8 + 16 * h));
                }
            }
        }
        let x = |r: usize, s: usize| {
            _mm512_set1_epi32(b.a.add(r * b.lda + 4 * s).cast::<i32>().read_unaligned())
        };
        let mut w = b.w;
        let mut s = 0;
        while s + U <= b.steps {
            for c in 0..U {
                let wc = w.add(row * c);
                if !b.pf.is_null() {
                    _mm_prefetch::<_MM_HINT_T1>(b.pf.wrapping_add(64 * (s + c)).cast());
                }
                let mut wv = [_mm512_setzero_si512(); VQ];
                for (h, wv) in wv.iter_mut().enumerate() {
                    *wv = _mm512_load_si512(wc.add(64 * h).cast());
                }
                for (r, acc) in acc[c].iter_mut().enumerate() {
                    let xv = x(r, s + c);
                    for h in 0..VQ {
                        acc[h] = _mm512_dpbusd_epi32(acc[h], xv, wv[h]);
                    }
                }
            }
            w = w.add(row * U);
            s += U;
        }
        while s < b.steps {
            let mut wv = [_mm512_setzero_si512(); VQ];
            for (h, wv) in wv.iter_mut().enumerate() {
                *wv = _mm512_load_si512(w.add(64 * h).cast());
            }
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let xv = x(r, s);
                for h in 0..VQ {
                    acc[h] = _mm512_dpbusd_epi32(acc[h], xv, wv[h]);
                }
            }
            w = w.add(row);
            s += 1;
        }
        for r in 0..R {
            for chain in 1..U {
                for h in 0..VQ {
                    acc[0][r][h] = _mm512_add_epi32(acc[0][r][h], acc[chain][r][h]);
                }
            }
        }
        if b.last {
            let p = b.panel.cast::<f32>();
            let (lo, hi) = (_mm512_set1_ps(b.min), _mm512_set1_ps(b.max));
            // Unbounded: the clamp is the identity (NaN included), skip it.
            let clamp = b.min != f32::NEG_INFINITY || b.max != f32::INFINITY;
            // Unrolled by hand with constant indices, in this function: a loop, a call or a
            // reference into `acc` would keep the accumulators in memory.
            macro_rules! rows {
                ($($r:literal)*) => {$(
                    if $r < R {
                        let v = acc[0][$r.min(R - 1)];
                        let q = b.rows.add($r).read();
                        let zpu = _mm512_set1_epi32(q.zpu);
                        let sa = _mm512_set1_ps(q.scale);
                        let c = b.c.add($r * b.ldc);
                        for (h, v) in v.into_iter().enumerate() {
                            let bias = _mm512_load_ps(p.add(16 * h));
                            let wscale = _mm512_load_ps(p.add(NR_QD8 + 16 * h));
                            let colsum = _mm512_load_si512(p.add(2 * NR_QD8 + 16 * h).cast());
                            let exact = _mm512_sub_epi32(v, _mm512_mullo_epi32(zpu, colsum));
                            let out = _mm512_fmadd_ps(
                                _mm512_cvtepi32_ps(exact),
                                _mm512_mul_ps(sa, wscale),
                                bias,
                            );
                            let out = if clamp {
                                _mm512_min_ps(hi, _mm512_max_ps(lo, out))
                            } else {
                                out
                            };
                            _mm512_mask_storeu_ps(
                                c.wrapping_add(16 * h),
                                lanes(b.nvalid.saturating_sub(16 * h)),
                                out,
                            );
                        }
                    }
                )*};
            }
            rows!(0 1 2 3 4 5);
        } else {
            for r in 0..R {
                for h in 0..VQ {
                    _mm512_store_epi32(b.part.add(r * NR_QD8 + 16 * h), acc[0][r][h]);
                }
            }
        }
    }
}
