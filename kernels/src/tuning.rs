//! Every per-CPU threshold and tuning rule of the kernels, in one place: what a rule decides
//! from the CPU's caches and vendor ([`crate::cpu`]) and the problem's shape. The drivers
//! (`gemm`, `lowp`, the f32 operator's grid) call these and hold no per-CPU thresholds of
//! their own. Each says why in a few lines and the command that measures it; the
//! measurements themselves are in docs/bench-history.md, "Tuning rules".

use core::ops::Range;

use crate::cpu::{Caches, cache};
use crate::gemm::kernel::Shape;
use crate::isa::Isa;

/// Packed bytes above which batch 1 is DRAM-bound and the GEMV prefetches (half of Zen 4's
/// 32 MiB L3); below it the weights stream from L3 and prefetches cost more than they bring.
/// Measure: `cargo xtask bench --libs keepalloc,XNNPACK-2026 --shapes 1x1536x1536,1x4096x4096`
pub(crate) const GEMV_PREFETCH_ABOVE: usize = 16 << 20;

/// [`GEMV_PREFETCH_ABOVE`] on this CPU: past L2 on Intel (its L3 is nearly as slow as DRAM);
/// never on Zen 5 for one thread (its hardware prefetchers do better alone).
/// Measure: `cargo xtask bench --libs keepalloc,XNNPACK-2026 --shapes 1x1536x1536,1x4096x4096` (and `--threads 2`)
pub(crate) fn gemv_prefetch_above(shared: bool, c: Caches) -> usize {
    if c.zen5 && !shared {
        usize::MAX
    } else if c.intel && c.l2 > 0 {
        c.l2
    } else {
        GEMV_PREFETCH_ABOVE
    }
}

/// Whether a batch-1 call over `call_bytes` of weights alternates its direction
/// (`GEMV_BACKWARDS` in gemm): everywhere but on Zen 4 past L2, where reading L3-resident
/// panels backwards restarts the hardware stream at every panel.
/// Measure: `cargo xtask bench --libs keepalloc,XNNPACK-2026 --shapes 1x16x32,1x256x256,1x1536x1536`
pub(crate) fn gemv_alternates(call_bytes: usize, c: Caches) -> bool {
    !c.amd || c.zen5 || call_bytes <= c.l2
}

/// GEMV prefetch distance into L2: 16 KiB.
pub(crate) const GEMV_PREFETCH_FLOATS: usize = 4096;

/// GEMV prefetch distance into L1 when the weights are in L2: 4 KiB, 32 k steps of a panel.
pub(crate) const GEMV_L1_PREFETCH_FLOATS: usize = 1024;

/// How a batch-1 run over `packed_bytes` prefetches (`shared`: cut over threads): distance in
/// floats (0: none) and whether into L1. Past [`gemv_prefetch_above`] into L2; on Intel within
/// L2 into L1 (the L2 streamer does not fill L1 fast enough); within L1 nothing.
/// Measure: `cargo xtask bench --libs keepalloc,XNNPACK-2026 --shapes 1x96x64,1x256x256`
pub(crate) fn gemv_prefetch(packed_bytes: usize, shared: bool, c: Caches) -> (isize, bool) {
    if packed_bytes > gemv_prefetch_above(shared, c) {
        (GEMV_PREFETCH_FLOATS as isize, false)
    } else if c.intel && c.l1 > 0 && packed_bytes > c.l1 && packed_bytes <= c.l2 {
        (GEMV_L1_PREFETCH_FLOATS as isize, true)
    } else {
        (0, false)
    }
}

/// Where an N block's paired row tiles stop and its lone odd panel (run in MR-row tiles),
/// for two-panel calls of up to `pair_rows` rows: a lone panel in 5–6-row tiles would take
/// the most load slots per FMA of any tile. Measure: `cargo xtask bench --libs keepalloc,gemm
/// --shapes 32x1536x96,16x1536x96,64x768x160 --quick`
pub(crate) fn lone_panel(block: Range<usize>, pair_rows: usize) -> (usize, Option<usize>) {
    if pair_rows > 4 {
        let end = block.start + ((block.end - block.start) & !1);
        (end, (end < block.end).then_some(end))
    } else {
        (block.end, None)
    }
}

/// Most pairs of panels in an N block for which [`pairs_outer`] holds.
pub(crate) const PAIRS_OUTER_MAX: usize = 8;

/// Whether an N block runs pair by pair (every row tile of a pair before the next): 6-row
/// pairs, at most [`PAIRS_OUTER_MAX`] pairs, the pair's weights and A within `l1`; short
/// sweeps of a cut run then fetch each pair once. Measure: `cargo run --release -p keepalloc-kernels-bench --example output_alignment -- --rounds 1000`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn pairs_outer(
    pair_rows: usize,
    pairs: usize,
    panel_floats: usize,
    a_floats: usize,
    l1: usize,
) -> bool {
    let bytes = (2 * panel_floats + a_floats).saturating_mul(size_of::<f32>());
    pair_rows == 6 && pairs <= PAIRS_OUTER_MAX && bytes <= l1
}

/// Rows from which AVX-512 on Intel runs 6-row two-panel tiles on weights past L2 (see
/// [`pair_rows`]).
pub(crate) const PAIR6_MIN_ROWS: usize = 64;

/// The most rows of a two-panel AVX-512 call for `m` rows over `packed_bytes` (0 off
/// AVX-512): 6 on Intel when the weights fit in L2 or `m >= PAIR6_MIN_ROWS` (fewer load slots
/// per FMA), else 4. Measure: `cargo xtask bench --libs keepalloc,gemm --shapes
/// 4x512x512,64x1024x1024,512x512x512,16x1024x1024`
pub(crate) fn pair_rows(isa: Isa, m: usize, packed_bytes: usize) -> usize {
    pair_rows_on(isa, m, packed_bytes, cache::l2_bytes(), cache::is_intel())
}

/// [`pair_rows`] on a CPU with `l2` bytes of L2 per core (0: unknown), Intel or not.
pub(crate) fn pair_rows_on(
    isa: Isa,
    m: usize,
    packed_bytes: usize,
    l2: usize,
    intel: bool,
) -> usize {
    if isa != Isa::Avx512 {
        0
    } else if intel && l2 > 0 && (packed_bytes <= l2 || m >= PAIR6_MIN_ROWS) {
        6
    } else {
        4
    }
}

/// `(stream_below, nc)` on this CPU: the shape's own, but AVX-512 on Intel and Zen 5 runs
/// every M > 1 problem in N blocks of half the L2 (their L3 cannot feed a row tile's sweep).
/// Measure: `cargo xtask bench --libs keepalloc,XNNPACK-2026 --shapes 64x1024x1024,256x512x2048,512x512x512,256x1024x512`
pub(crate) fn blocking(isa: Isa, s: &Shape, k: usize, c: Caches) -> (usize, usize) {
    let l2 = c.l2;
    if isa != Isa::Avx512 || !(c.intel || c.zen5) || l2 == 0 {
        return (s.stream_below, s.nc);
    }
    let kc = s.kc.min(k).max(1);
    let panel_block = kc * s.nr * size_of::<f32>();
    // An even count, so that two-panel calls never leave one panel alone in a block.
    (0, (l2 / 2 / panel_block).max(2) & !1)
}

// The f32 operator: when a run is worth cutting over threads.

/// Flops below which a run stays on the calling thread (see [`min_parallel_flops`]): a
/// hand-off to the pool cost about 1.3 µs on the Xeon. Measure:
/// `cargo run --release -p keepalloc-kernels-bench --example output_alignment -- --shape 16x64x256 --rounds 150`
pub(crate) const MIN_PARALLEL_FLOPS: usize = 1 << 19;

/// [`MIN_PARALLEL_FLOPS`] on Zen 4, where a hand-off costs a fraction of that (two threads
/// pay from 131 Kflop). Measure: `cargo run --release -p keepalloc-kernels-bench --example
/// output_alignment -- --shape 1x256x256 --rounds 150`
pub(crate) const MIN_PARALLEL_FLOPS_ZEN4: usize = 1 << 17;

/// The floating-point operations below which a run stays on the calling thread on CPU `c`:
/// [`MIN_PARALLEL_FLOPS_ZEN4`] on an AMD CPU before Zen 5, [`MIN_PARALLEL_FLOPS`] elsewhere
/// (the Xeon's figure; Zen 5 was measured at or above current XNNPACK at two threads with
/// it).
pub(crate) fn min_parallel_flops(c: crate::cpu::Caches) -> usize {
    if c.amd && !c.zen5 {
        MIN_PARALLEL_FLOPS_ZEN4
    } else {
        MIN_PARALLEL_FLOPS
    }
}

// The low-precision operators.

/// True on Intel, where `vdpbf16ps` zmm does half the multiply-adds per cycle of two
/// `vfmadd231ps`, so widened bf16 on FMA (`DotIsa::Avx512`) goes first. Measure:
/// `KEEPALLOC_KERNELS_DOT_ISA=avx512bf16` (then `avx512`) `cargo xtask bench --op bf16_f32
/// --shapes 1x1536x1536,128x1536x1536`
pub(crate) fn bf16_dot_is_half_rate() -> bool {
    crate::cpu::cache::is_intel()
}

/// Multiply-adds below which a low-precision run stays on the calling thread: a hand-off
/// costs about a microsecond, and at 1×96×64 and 1×256×256 two threads read 14 and 61 GOPS
/// against 69 and 72 on one (Xeon; bf16). The kinds that run faster or slower a
/// multiply-add have their own (below). Measure: `cargo xtask bench --threads 2 --op all`.
pub(crate) const LOWP_MIN_PARALLEL_MACS: usize = 1 << 17;

/// qd8 batches of two rows or more, twice bf16's pace on VNNI (and a cut by panels quantizes
/// first): a second thread paid from 8x256x256 on Zen 4; batch 1 keeps
/// [`LOWP_MIN_PARALLEL_MACS`] (docs/bench-history.md, "Small low-precision runs kept on one
/// thread by their kind"). Measure: `cargo xtask bench --op qd8_f32_qc8w --libs keepalloc
/// --quick --shapes 2x256x256,4x256x256,6x256x256,8x256x256,1x512x512 [--threads 2]`
pub(crate) const QD8_BATCH_MIN_PARALLEL_MACS: usize = 1 << 19;

/// f32_qc8w, half bf16's pace: a second thread paid from 1x256x256 on Zen 4 (the same
/// entry). Measure: `cargo xtask bench --op f32_qc8w --libs keepalloc --quick --shapes
/// 1x128x256,1x256x256,2x256x256 [--threads 2]`
pub(crate) const F32_QC8W_MIN_PARALLEL_MACS: usize = 1 << 16;

/// How many weight columns one row of a qd8 input quantized in the run counts as when the run
/// is cut over threads (`lowp::parallel::Cut`): a row cut quantizes inside the driver,
/// overlapped with the work; a panel cut needs a quantizing pass of its own first. VNNI only:
/// AMX runs weigh rows as 1 until measured on an AMX CPU.
/// Measure: `cargo xtask bench --threads 2 --op qd8_f32_qc8w --shapes 512x512x512,256x512x2048,128x1024x1024,128x2048x2048`
pub(crate) const QD8_ROW_WEIGHT: usize = 16;

/// Rows per tile of the low-precision tile driver for bf16, whose tiles hold at most `mr`
/// rows on its ISA: 12-row tiles keep to 8 when A's rows are a multiple of the
/// 4 KiB an L1 way spans apart, where 12 rows and their weights would share one L1 set
/// (the conflict `f32_qc8w_driver` copies A for). Figures from Zen 5 and Zen 4 in
/// docs/bench-history.md. Measure: `cargo xtask bench --op bf16_f32`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn bf16_tile_rows(mr: usize, lda: usize) -> usize {
    if lda.is_multiple_of(4096) {
        mr.min(8)
    } else {
        mr
    }
}

/// Packed weights per N block of the low-precision driver: best of 128 KiB – 1 GiB for qd8;
/// bf16 indifferent. Measure: `cargo xtask bench --op qd8_f32_qc8w --shapes 128x4096x4096`
pub(crate) const LOWP_N_BLOCK_BYTES: usize = 256 << 10;

/// Packed weights above which batch 1 is DRAM-bound and prefetches (half of a 32 MiB L3).
pub(crate) const LOWP_GEMV_PREFETCH_ABOVE: usize = 16 << 20;

/// Prefetch distance of a DRAM-bound batch 1.
pub(crate) const LOWP_GEMV_PREFETCH_BYTES: isize = 16 << 10;

/// qd8: quantized A bytes per row chunk (half of a 2 MiB L2): the chunk's rows are read
/// once per panel.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_A_BYTES: usize = 1 << 20;

/// Packed weights above which the first row tiles of each slice prefetch the next slice into
/// L2 (below, the weights stay in L2 between runs).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const BLOCKED_PREFETCH_ABOVE: usize = 1 << 20;

/// Whether a job of `m` rows over `packed` bytes prefetches the next slice: weights past L2
/// and at least `from_rows` rows (bf16 2, qd8 6); fewer rows stream as fast as the hardware
/// prefetcher. Measure: `cargo xtask bench --op all --shapes 1x1536x1536,6x4096x4096`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn blocked_prefetches(m: usize, from_rows: usize, packed: usize) -> bool {
    m >= from_rows && packed > BLOCKED_PREFETCH_ABOVE
}

/// qd8 (VNNI and AMX): most rows per chunk (their i32 partial sums: 64 KiB of stack). Each
/// chunk streams every panel once, so fewer chunks read the weights fewer times; 256 beat
/// 128 against oneDNN at 256x512x2048 and 512x512x2048 on the Xeon.
/// Measure: `cargo xtask bench --op qd8_f32_qc8w --shapes 256x512x2048,512x512x2048`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_MC: usize = 256;

/// f32_qc8w on AVX-512: batches from this many rows (two row tiles) take the blocked
/// drivers where [`f32_qc8w_driver`] says (`lowp::blocked::f32_qc8w`); fewer widen the
/// weights at every k in the tile, since one tile a chunk would widen as often plus a round
/// trip through L1.
/// Measure: `cargo xtask bench --op f32_qc8w --shapes 8x512x512,12x1024x1024,16x1024x1024,24x1024x1024`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const F32_QC8W_BLOCKED_FROM: usize = 16;

/// How `f32_qc8w` on AVX-512 runs a batch (see `lowp::blocked::f32_qc8w`).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum F32Qc8wDriver {
    /// The tile kernel, widening at every k, A read in place.
    Tiles,
    /// Tiles widening at every k over K blocks of their rows of A copied to the stack.
    TilesCopied,
    /// Row chunks sharing each panel's K block widened once.
    Sliced,
}

/// The driver of an `f32_qc8w` batch of `m` rows `lda` bytes apart on AVX-512. On AMD
/// (Zen 4 and 5) the tiles widen as they go, copying A when its rows all fall in one L1 set
/// (`lda` a multiple of the 4 KiB a way spans), ahead of the slice on both (figures in
/// docs/bench-history.md). Intel, where widening takes the FMA ports, and other vendors
/// keep the slice.
/// Measure: `cargo xtask bench --op f32_qc8w --shapes 64x1024x1024,64x1000x1024,256x512x2048`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn f32_qc8w_driver(m: usize, lda: usize, c: Caches) -> F32Qc8wDriver {
    if m < F32_QC8W_BLOCKED_FROM {
        return F32Qc8wDriver::Tiles;
    }
    #[cfg(all(test, target_arch = "x86_64"))]
    if let Some(driver) = F32_QC8W_DRIVER.get() {
        return driver;
    }
    if !c.amd {
        F32Qc8wDriver::Sliced
    } else if lda.is_multiple_of(4096) {
        F32Qc8wDriver::TilesCopied
    } else {
        F32Qc8wDriver::Tiles
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
std::thread_local! {
    /// Tests run every [`F32Qc8wDriver`] on any AVX-512 CPU: the one this thread's batches
    /// of [`F32_QC8W_BLOCKED_FROM`] rows or more take (None: the CPU's).
    pub(crate) static F32_QC8W_DRIVER: core::cell::Cell<Option<F32Qc8wDriver>> =
        const { core::cell::Cell::new(None) };
}

/// f32_qc8w blocked: k values per widened K block (a 32 KiB f32 slice of a panel); 128 and
/// 512 measured no better. Measure: `cargo xtask bench --op f32_qc8w`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const F32_QC8W_KC: usize = 256;

/// f32_qc8w blocked: most rows per chunk (every row tile of a chunk reads each widened
/// slice); 48 measured lower, 192 the same. Measure: `cargo xtask bench --op f32_qc8w`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const F32_QC8W_MC: usize = 96;

/// f32_qc8w blocked: most bytes of A per chunk, so it stays in L2 while the panels pass.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const F32_QC8W_A_BYTES: usize = 1 << 20;

/// f32_qc8w blocked by tiles: k values per K block of a tile's A copied to the stack
/// (12 rows: 24 KiB); not tuned further.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const F32_QC8W_TILE_KC: usize = 512;

/// bf16 on AVX2: batches from this many rows take the blocked driver (A and each panel's
/// K block widened to f32 once, the f32 kernel on them). Measure: `cargo xtask bench --op
/// bf16_f32` on a CPU without AVX-512.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const BF16_AVX2_BLOCKED_FROM: usize = 6;

/// bf16 on AVX2 blocked: k values per K block (even; a panel's widened slice is `64 · KC`
/// bytes, 16 KiB).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const BF16_AVX2_KC: usize = 256;

/// bf16 on AVX2 blocked: most rows per chunk (their widened K block, `4 · MC · KC` bytes, is
/// on the stack).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const BF16_AVX2_MC: usize = 48;

/// qd8 on AVX2 (no VNNI): batches from this many rows take the blocked driver (A and each
/// panel's K block widened to i16 once). Measure: `cargo xtask bench --op qd8_f32_qc8w`
/// on a CPU without VNNI.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_AVX2_BLOCKED_FROM: usize = 6;

/// qd8 on AVX2 blocked: k values per K block (a multiple of 4): a panel's block of i16
/// weight pairs is `32 · KC` bytes (16 KiB), a tile's rows of A `12 · KC`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_AVX2_KC: usize = 512;

/// qd8 on AVX2 blocked: most rows per chunk (their widened K block, `2 · MC · KC` bytes, is
/// on the stack and in L2 while the panels pass).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_AVX2_MC: usize = 48;

/// bf16 on AMX: most rows per chunk (a multiple of 32), within [`AMX_A_BYTES`] of A; as
/// [`QD8_MC`], 256 beat 128 and 512 on the Xeon.
/// Measure: `cargo xtask bench --op bf16_f32 --shapes 512x512x512,256x512x2048`
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const AMX_MC: usize = 256;

/// bf16 on AMX: most bytes of A per chunk, so it stays in L2 while the panels pass.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const AMX_A_BYTES: usize = 1 << 20;
