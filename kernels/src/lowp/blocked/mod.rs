//! The K-blocked AVX-512 driver and microkernels of `bf16_f32` (widened to f32 and FMA),
//! `qd8_f32_qc8w` (AVX512-VNNI `vpdpbusd`) and batches of `f32_qc8w`, the compute-bound paths,
//! and the AVX2 ones of `bf16_f32` and `qd8_f32_qc8w` batches on CPUs without AVX-512 or VNNI
//! (`bf16_avx2.rs`, `qd8_avx2.rs`). Tiles hold 24 zmm
//! accumulators, A operands are broadcast straight from memory (a load, no shuffle port),
//! and one or two rows (batch 1 or 2, bound by memory) split each accumulator into four or
//! two independent chains.
//!
//! Every driver here that holds a buffer on its stack is `#[inline(never)]`: each has one
//! call site, in `lowp::run`, and inlined there its buffers (64 KiB in all) made every
//! low-precision call, batch 1 on the tile path too, probe them page by page.
//!
//! * bf16 on AVX-512F, tiles of 12 rows × 32 columns. On Intel cores `vdpbf16ps` zmm issues
//!   at a quarter of the rate of `vfmadd231ps` zmm (measured here: 1.3 G/s against
//!   5.4 G/s), half its multiply-adds, so two FMAs on bf16 widened to f32 (a shift for the
//!   even element of a packed pair, an AND for the odd one: exact) do twice the work per
//!   cycle. The products of two bf16 values are exact in f32 and each FMA rounds its sum
//!   once, as `vdpbf16ps` does per element (but keeping denormals). Loop order (B stationary
//!   in L1): for each chunk of 48 rows and each K block of 256 values (longer for a smaller
//!   batch: K up to 13,040 in one block at batch 1), A is widened to f32 on the stack
//!   (51 KiB), then for each panel every row tile passes over the panel's slice (16 KiB for
//!   a full chunk); partial sums stay in C between K blocks (the first block starts from
//!   the bias, the last clamps).
//! * qd8 on AVX512-VNNI, tiles of 6 rows × 64 columns (4 zmm of weights per step, one
//!   broadcast per row). Loop order: for each chunk of at most 128 rows (their quantized A
//!   within 1 MiB, so it stays in L2), quantize the chunk's input rows (prefetched into L2
//!   while the previous chunk computed), then for each panel every row tile runs the whole
//!   K (up to 4096;
//!   longer K in blocks of 4096 with the i32 partial sums on the stack, never in C). The
//!   last block applies the exact zero-point correction and the f32 epilogue (see
//!   `avx512.rs` for the `+128` rule), bit-identical to the scalar kernel. Few long calls:
//!   measured here, 128-word K blocks (slices in L1) lost 10% to per-call overhead.
//!
//! * bf16 on AMX-BF16 (`DotIsa::Amx`, the default where available): in chunks of up to 128
//!   rows, panel by panel, every block of 32 rows (then one of 16) is multiplied by
//!   `tdpbf16ps` straight from the bf16 input over K rounded down to 32, each output starting
//!   from its bias; the AVX-512 microkernel above adds the rest of K (widened on the stack)
//!   and clamps. The rows left over (under 16) run the AVX-512 path.
//! * qd8 on AMX-INT8 (`DotIsa::Amx`, the default where the CPU and the kernel allow it): the
//!   same driver, quantization, packing and epilogue; in each panel, every full block of 32
//!   rows (then one of 16) of a chunk is multiplied by `tdpbusd` over K rounded up to 64
//!   (the quantized bytes past K zeroed; see `amx.rs`), its sums stored to the stack partial
//!   sums, and the VNNI microkernel applies the epilogue; the rows left over (under 16) run
//!   the VNNI path. Bit-identical to the VNNI and scalar kernels.
//!
//! * f32_qc8w on AVX-512 from [`F32_QC8W_BLOCKED_FROM`](crate::tuning::F32_QC8W_BLOCKED_FROM)
//!   rows: in chunks of up to 96 rows (their A within 1 MiB), panel by panel, each K block of
//!   256 int8 weights a column is widened to f32 into a 32 KiB slice on the stack, which
//!   every 12-row tile of the chunk reads (FMAs only, where the tile kernel spends a seventh
//!   of its FMA ports widening); partial sums in C between K blocks, the last block scales
//!   and clamps. The same FMA chain per output as the tile kernel, so the same bits. On
//!   Zen 5, whose widening does not take FMA pipes, the tile kernel runs instead, and when
//!   A's rows are a multiple of 4 KiB apart (all in one L1 set) the tiles read a copy of
//!   them: per N block of 16 panels and K block of 512, each tile's rows are copied to the
//!   stack one cache line apart, then every panel of the block runs on them, widening as
//!   it reads (`f32_qc8w::by_tiles`).
//!
//! * bf16 on AVX2 from [`BF16_AVX2_BLOCKED_FROM`](crate::tuning::BF16_AVX2_BLOCKED_FROM)
//!   rows: in chunks of up to 48 rows and K blocks of 256, A is widened to f32 on the stack,
//!   then each panel's K block of weights into f32 rows, and the f32 GEMM's 6 × 16 AVX2
//!   microkernel runs on them (partial sums in C). The same FMA chains as the tile kernel.
//! * qd8 on AVX2 without VNNI from [`QD8_AVX2_BLOCKED_FROM`](crate::tuning::QD8_AVX2_BLOCKED_FROM)
//!   rows: in chunks of up to 48 rows and K blocks of 512, A is widened to i16 on the stack,
//!   then each panel's K block of weights into i16 pairs, which every 6 × 16 tile reads
//!   (`vpmaddwd` + `vpaddd` only); i32 partial sums in C between K blocks, the tile kernel's
//!   epilogue at the last. Bit-identical to the tile and scalar kernels.
//!
//! Above 1 MiB of packed weights the first row tiles of each slice prefetch the next slice
//! into L2, one line a step each (two tiles for bf16, four for qd8: measured here, better
//! than one tile prefetching whole steps), except for the fewest rows (see [`blocked_prefetches`](crate::tuning::blocked_prefetches)).

mod bf16;
mod bf16_amx;
mod bf16_avx2;
pub(super) mod f32_qc8w;
mod qd8;
mod qd8_avx2;
#[cfg(test)]
mod tests;

use core::arch::x86_64::*;

use super::{Job, RowQuant};

pub(super) use bf16::bf16;
pub(super) use bf16_amx::bf16_amx;
pub(super) use bf16_avx2::bf16_avx2;
pub(super) use qd8::{NR_QD8, qd8, qd8_amx, qd8_prepare};
pub(super) use qd8_avx2::qd8_avx2;

/// One microkernel call: `mr` rows × one panel's K slice.
struct Blk {
    /// First A element of the slice (f32 for bf16, `q + 128` bytes for qd8).
    a: *const u8,
    /// Distance between A rows in bytes.
    lda: usize,
    /// The panel (its header: biases, scales, column sums).
    panel: *const u8,
    /// First packed word row of the slice.
    w: *const u8,
    /// Word rows in the slice.
    steps: usize,
    /// Top-left element of the C tile.
    c: *mut f32,
    /// Row stride of C in floats.
    ldc: usize,
    /// Valid columns (1..=NR of the kind).
    nvalid: usize,
    /// The first K block: start from the bias (bf16) or zero (qd8), not from the partial
    /// sums.
    first: bool,
    /// The last K block: apply the epilogue.
    last: bool,
    min: f32,
    max: f32,
    /// qd8: the tile's rows' quantization.
    rows: *const RowQuant,
    /// Where this tile prefetches into L2, one line a step (NULL: nowhere).
    pf: *const u8,
    /// qd8: the tile's i32 partial sums between K blocks (rows `NR_QD8` apart), on the
    /// driver's stack; NULL for bf16 (its partial sums live in C).
    part: *mut i32,
}

impl Blk {
    /// A call on `panel` of `job` (`nvalid` columns): the K-independent fields; the caller
    /// sets A, the slice, C and what else its call needs (zero steps, last block otherwise).
    fn panel(job: &Job, panel: *const u8, nvalid: usize) -> Blk {
        Blk {
            a: core::ptr::null(),
            lda: job.lda,
            panel,
            w: panel,
            steps: 0,
            c: core::ptr::null_mut(),
            ldc: job.ldc,
            nvalid,
            first: false,
            last: true,
            min: job.min,
            max: job.max,
            rows: core::ptr::null(),
            pf: core::ptr::null(),
            part: core::ptr::null_mut(),
        }
    }
}

/// Balanced row tiles of at most `mr` rows (`gemm::row_tiles`'s split), computed once per
/// chunk instead of once per slice (two divisions each time).
#[derive(Clone, Copy)]
struct Tiles {
    count: usize,
    base: usize,
    extra: usize,
}

impl Tiles {
    fn new(rows: usize, mr: usize) -> Tiles {
        let count = rows.div_ceil(mr);
        Tiles {
            count,
            base: rows / count,
            extra: rows % count,
        }
    }

    /// `(first row, rows)` of each tile.
    fn iter(self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.count).map(move |t| {
            (
                t * self.base + t.min(self.extra),
                self.base + usize::from(t < self.extra),
            )
        })
    }
}

/// A cursor over input rows `row..end` (`ldx` floats apart, `k` floats each) that
/// prefetches `per_call` cache lines into L2 per [`step`](Self::step).
struct PrefetchRows {
    x: *const f32,
    ldx: usize,
    k: usize,
    row: usize,
    end: usize,
    /// Float offset within the current row.
    at: usize,
    per_call: usize,
}

impl PrefetchRows {
    #[inline]
    fn step(&mut self) {
        for _ in 0..self.per_call {
            if self.row >= self.end {
                return;
            }
            let line = self.x.wrapping_add(self.row * self.ldx + self.at);
            // SAFETY: a prefetch never faults; the address is inside the input (rows below `end`).
            unsafe { _mm_prefetch::<_MM_HINT_T1>(line.cast()) };
            self.at += 64 / size_of::<f32>();
            if self.at >= self.k {
                self.at = 0;
                self.row += 1;
            }
        }
    }
}

/// Row `r`'s starting sums of a 32-column f32 tile: the panel's first 32 floats (its biases)
/// in the first K block, else the row's partial sums in C (masked to the valid columns).
///
/// # Safety
/// `b.panel` starts with 32 floats, 64-byte aligned; unless `b.first`, row `r` of `b.c`
/// holds `b.nvalid` floats; the CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn start32(b: &Blk, r: usize) -> [__m512; 2] {
    let m = if b.first { 0 } else { b.nvalid };
    let p = b.panel.cast::<f32>();
    // Masked-off lanes are not read (all of them in the first block).
    // SAFETY: the biases and row r's valid columns are in bounds (caller).
    unsafe {
        let c = b.c.add(r * b.ldc);
        core::array::from_fn(|h| {
            _mm512_mask_loadu_ps(
                _mm512_load_ps(p.add(16 * h)),
                lanes(m.saturating_sub(16 * h)),
                c.wrapping_add(16 * h),
            )
        })
    }
}

/// The mask of the first `n` (0..=16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}
