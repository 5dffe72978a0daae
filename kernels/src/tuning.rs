//! Every per-CPU threshold and tuning rule of the kernels, in one place: what a rule decides
//! from the CPU's caches and vendor ([`crate::cpu`]) and the problem's shape. The drivers
//! (`gemm`, `lowp`, the f32 operator's grid) call these and hold no per-CPU thresholds of
//! their own.

use core::ops::Range;

use crate::cpu::{Caches, cache};
use crate::gemm::Shape;
use crate::isa::Isa;

/// Packed weights (bytes) above which batch 1 is DRAM-bound and the GEMV kernels that
/// support it prefetch ([`GEMV_PREFETCH_FLOATS`] ahead): half of the 32 MiB L3 of the Zen 4
/// this was tuned on. Below it the weights mostly stream from L3, where the extra prefetches cost more
/// than they bring (measured on 1x1536x1536: -5%; on 1x4096x4096: +30%).
pub(crate) const GEMV_PREFETCH_ABOVE: usize = 16 << 20;

/// [`GEMV_PREFETCH_ABOVE`], except:
///
/// - On Intel, whose per-core L3 bandwidth is close to its DRAM bandwidth (about 26 GB/s
///   against 140 GB/s from L2 on the Xeon this was tuned on): there everything past the L2
///   is prefetched (1x1536x1536: +5%).
/// - On Zen 5 (AMD family 0x1A), for a run on one thread (`shared` false): never. There a
///   batch-1 run on DRAM-resident weights is faster on the hardware prefetchers alone.
///   Measured on 1x4096x4096 (64 MiB of weights) against current XNNPACK in the same runs,
///   with throwaway code setting the distance at run time (`keepalloc-kernels-bench --libs
///   keepalloc,XNNPACK-2026 --shapes 1x4096x4096`, two runs of each): none 1.00–1.01×, 8 KiB
///   ahead 0.99–1.00×, 16 KiB 0.95–0.96×, 32 KiB 0.94×, 64 KiB 0.93–0.94×; then three
///   alternating runs with OpenBLAS too, none 1.01–1.04× (25.2–25.3 GFLOPS), 16 KiB
///   0.94–1.05× (22.6–23.3). Two threads sharing the memory's bandwidth are faster with the
///   prefetches: the same switch through `--threads 2`, three alternating runs, with them
///   1.03–1.08× Debian's XNNPACK and 1.00–1.07× current, without 0.96–0.97× and 0.97–1.09×.
pub(crate) fn gemv_prefetch_above(shared: bool, c: Caches) -> usize {
    if c.zen5 && !shared {
        usize::MAX
    } else if c.intel && c.l2 > 0 {
        c.l2
    } else {
        GEMV_PREFETCH_ABOVE
    }
}

/// Whether a batch-1 call over `call_bytes` of weights (its own panels: a thread's share when
/// the run is cut) takes part in the alternating order of `GEMV_BACKWARDS` (gemm).
///
/// Everywhere but Zen 4 it always does (measured on the Xeon: 1x1536x1536 +20%, its
/// weights L3-bound). On Zen 4 (AMD before family 0x1A) only when the weights fit in L2:
/// there the whole block is found in L2 whichever end a run starts from, while a run over
/// L3-resident weights taken backwards restarts the hardware's stream at every panel
/// (each panel is read forward, and the previous panel lies behind it), which costs more
/// than the megabyte it finds still in L2. Measured on Zen 4 against current XNNPACK in
/// the same runs, with throwaway switches (`keepalloc-kernels-bench --libs
/// keepalloc,XNNPACK-2026 --shapes ...`, interleaved runs): 1x1536x1536 (9.4 MiB) always
/// alternating 46.3–47.0 GFLOPS (0.97–1.00×, 0.98× in most runs), never 46.9–47.3
/// (0.99–1.02×), alternating only within L2 47.1–47.2 (0.99–1.00×); 1x256x256 (256 KiB)
/// alternating 57.0–57.2 (1.03×), never 54.7–54.8 (0.99×). Then the binaries before and
/// after, four alternating runs each (`--shapes 1x16x32,1x256x256,1x1536x1536`):
/// 1x1536x1536 46.6–46.8 GFLOPS (0.98× in all four) before, 47.1–47.6 (0.98–1.01×) after;
/// 1x256x256 1.03–1.04× and 1.02–1.03×. Also tried there and not kept:
/// the backward order with a head start (16 or 64 lines of the next panel prefetched into
/// L2 at each panel's start: 0.97–1.00×), software prefetch of the L3-resident stream 1, 4,
/// 8 or 16 KiB ahead (into L2 or L1: 0.93–0.95×), and two panels streamed at once (47.2,
/// the same as never alternating).
pub(crate) fn gemv_alternates(call_bytes: usize, c: Caches) -> bool {
    !c.amd || c.zen5 || call_bytes <= c.l2
}

/// GEMV prefetch distance: 16 KiB.
pub(crate) const GEMV_PREFETCH_FLOATS: usize = 4096;

/// GEMV prefetch distance into L1 when the weights are in L2: 4 KiB, 32 k steps of a panel.
pub(crate) const GEMV_L1_PREFETCH_FLOATS: usize = 1024;

/// How a batch-1 run over `packed_bytes` of weights prefetches (`shared`: the run is cut over
/// threads): the distance ahead in floats (0: none) and whether into L1.
///
/// - Past [`gemv_prefetch_above`] the weights come from L3 or DRAM: into L2, 16 KiB ahead.
/// - Past L1 but within L2, on Intel: into L1, 4 KiB ahead. The L2 streamer
///   fills L2, not L1, and a panel's two lines per k step outrun what the L1 brings in by
///   itself. Measured on a 2 MiB-L2 Xeon against current XNNPACK in the same runs
///   (`keepalloc-kernels-bench --libs keepalloc,XNNPACK-2026 --shapes 1x256x256`): with a
///   throwaway switch, 1.16× and 1.17× without, 1.23–1.28× 4 KiB ahead, 1.21–1.32× 8 KiB and
///   1.18–1.25× 16 KiB ahead; one or two prefetches per four k steps the same, four or eight
///   worse (1.11–1.21×). The binaries before and after, three runs each, alternating:
///   1.17–1.20× before, 1.26–1.31× after (72.7–78.8 GFLOPS against 67.3–71.1). Not on
///   Zen 5 (AMD family 0x1A, 1 MiB L2, 48 KiB L1): there the same prefetches took
///   1x256x256 from 1.31× current XNNPACK to 1.08–1.10× (three runs each, alternating).
/// - Within L1 (1×96×64's 24 KiB), nothing: the weights are there already.
pub(crate) fn gemv_prefetch(packed_bytes: usize, shared: bool, c: Caches) -> (isize, bool) {
    if packed_bytes > gemv_prefetch_above(shared, c) {
        (GEMV_PREFETCH_FLOATS as isize, false)
    } else if c.intel && c.l1 > 0 && packed_bytes > c.l1 && packed_bytes <= c.l2 {
        (GEMV_L1_PREFETCH_FLOATS as isize, true)
    } else {
        (0, false)
    }
}

/// Where the row tiles of N block `block` stop (the rest of the block, one panel at most,
/// runs alone in MR-row tiles) and that lone panel, for a problem whose two-panel calls take
/// up to `pair_rows` rows.
///
/// With 6-row pairs every row tile is 6 rows or fewer, so a panel left over by an odd block
/// would run in single-panel tiles of 5 or 6 rows: 0.83-0.9 load slots per FMA (the
/// broadcasts, two weight loads and two L1 prefetches per k step), the most of any tile. It
/// runs in 8-row tiles instead (0.75), after the pairs of each K block. Results do not
/// change (each output sees the same FMAs in the same order). Measured on the Xeon, one
/// thread, in-process A/B as for [`pair_rows`] (throwaway code switching the rule at run
/// time; 200 rounds, outputs identical), fast rounds / slow rounds: 32x1536x96 (MxKxN, three
/// panels) +1.7% / +3.2%, 16x1536x96 +1.7% / +2.6%, 64x768x160 +0.7% / +1.5%. Through the
/// bench, binaries before and after alternating (`cargo xtask bench --libs keepalloc,gemm
/// --shapes 32x1536x96,16x1536x96,64x768x160 --quick`, five runs each), keepalloc/gemm
/// medians 1.21x -> 1.33x, 1.21x -> 1.22x, 1.19x -> 1.22x.
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

/// Whether an N block of `pairs` pairs of panels runs pair by pair, every row tile of the
/// pair before the next pair (instead of row tile by row tile, every pair of the block):
/// with 6-row pairs (`pair_rows == 6`), at most [`PAIRS_OUTER_MAX`] pairs, and the pair's
/// weights (two panels of `panel_floats` in the K block) plus the `a_floats` of A it is
/// multiplied with within `l1` bytes.
///
/// A row tile's sweep over the pairs of a block starts on weights that are not in L1 (the
/// kernel prefetches its own panel's next steps, not another pair's first ones), so a
/// short sweep pays that start often: a cut run's tasks cover a few pairs each. Pair by
/// pair, each pair's weights are fetched once and read from L1 by every row tile. Long
/// sweeps (one thread's whole block) gain nothing from it. Measured on the Xeon with
/// throwaway code switching the order at run time, 32×96×1536 at two threads against the
/// mean core (1,500 rounds of the output_alignment example's protocol, outputs identical):
/// 1.797× → 1.831×; the same cut computed with a fixed split, each thread's half in calls
/// of two pairs: 1.808× → 1.838× in the rounds with equal cores, where one call per half
/// read 1.860× (another run). Through that example, binaries before and after
/// alternating (`cargo run --release -p keepalloc-kernels-bench --example output_alignment
/// -- --rounds 1000`, five runs each): 1.791–1.824× → 1.818–1.846× (medians 1.813× →
/// 1.841×). One thread, one call over all 24 pairs (300 rounds): −0.6%, −1.0%, −2.3% on
/// 32, 16 and 64×96×1536 (+2.7% and +0.4% in two earlier runs of 32×96×1536), hence the
/// cap on the pairs; one thread on blocks of 8 pairs or fewer (32×64×512, 16×96×512; the
/// bench's binaries before and after, three runs each) stayed at 163–168 GFLOPS, 91–95% of
/// the FMA peak.
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

/// Packed weights can stay in L2 (at most its size), or at least this many rows share each
/// block of them: then AVX-512 on Intel runs 6-row tiles over two panels (see
/// [`pair_rows`]).
pub(crate) const PAIR6_MIN_ROWS: usize = 64;

/// The most rows of a two-panel AVX-512 call (`avx512::tile_pair`) for an `m`-row problem
/// with `packed_bytes` of weights; 0 for the other ISAs.
///
/// * 4 by default: four rows or fewer get two panels per call (16 accumulators where one
///   panel gives 8). Measured on a Xeon, in-process A/B: 4x512x512 +19%, 3x256x1000
///   +20-27%, 4x4096x1024 +7-11%.
/// * 6 on Intel when the weights fit in L2 or `m >= PAIR6_MIN_ROWS`: every row tile is
///   then at most 6 rows on two panels (an odd panel left in an N block runs alone in
///   8-row tiles: [`lone_panel`]), which takes a third fewer load slots per FMA than the
///   8-row single-panel tile. In 10-50% of the rounds of the runs below, one core of
///   this Xeon ran the 8-row kernel at about 110 GFLOPS instead of 160, its FMA probe
///   unchanged (another tenant sharing the core's load ports, most likely); there the 6-row
///   pairs keep 120-134. Measured in-process, this rule against 8-row tiles everywhere
///   (150 rounds alternating between the two cores, outputs identical; a round is slow when
///   its best result is under 85% of the 90th percentile of all rounds' best), fast rounds
///   / slow rounds: 512x512x512 +1.7% / +14.9%, 256x512x2048 +2.3% / +13.2%,
///   64x1024x1024 −0.4% / +13.7%, 128x2048x2048 −0.3% / +3.5%, 32x96x1536 −0.2% / +7.2%;
///   16x1024x1024 and 4x512x512 (which the rule leaves alone) within ±0.8%. In those slow
///   rounds gemm (timed in the same rounds) had led the 8-row kernel by 4.6% and 10.3% on
///   256x512x2048 and 512x512x512; the rule puts keepalloc 7% and 3% ahead of it. Other
///   shapes, pairs against 8 rows: 32x512x512 +0.8% / +12.0%, 16x512x512 +1.1% / +13.0%,
///   12x512x512 +2.8% / +21.5%, 16x256x1024 −2.8% / +8.8%.
/// * Below 64 rows with weights past L2, 8-row tiles stay: each block of weights comes from
///   L3 and serves only a few row tiles, and fewer, taller tiles read it fewer times.
///   Pairs measured 16x1024x1024 −10% / +3%, 32x1024x1024 −4.4% / +10%, 48x1024x1024
///   −6.1% / +8.1%, 32x2048x2048 −4.6% / +5.3%.
/// * Elsewhere (Zen 4) as tuned there: 4.
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

/// `(stream_below, nc)` for this CPU: the shape's own, except for AVX-512 on Intel, whose
/// per-core L3 bandwidth is far below Zen 4's (about 26 GB/s on the Xeon this was tuned on,
/// against 140 GB/s from L2): there every M > 1 problem runs in N blocks sized to half the
/// L2 (read from L3 once, then from L2 by every row tile), never streaming all the panels
/// per row tile. Measured on a 2 MiB-L2 Xeon: 64x1024x1024 and 256x512x2048 +30-50%.
///
/// Zen 5 (AMD family 0x1A, 1 MiB of L2 per core) too: streaming, its 8-row tiles fell as K
/// grew while current XNNPACK's did not (256xKx512 against it: K = 128 1.00×, 512 0.94×,
/// 1024 0.90×: the weights a row tile sweeps no longer fit in L2, and the L3 does not
/// feed 128 bytes per 8 cycles). Measured with throwaway code switching the rule at run
/// time, against current XNNPACK in the same runs (`keepalloc-kernels-bench --libs
/// keepalloc,XNNPACK-2026`), streaming / blocks of half the L2: 256x1024x512 0.93× / 1.01×,
/// 64x1024x1024 1.05× / 1.09–1.11×, 128x2048x2048 1.01× / 1.05–1.07×, 256x512x2048 0.97× /
/// 1.00–1.02×, 512x512x512 0.96× / 1.00–1.01×; blocks of a quarter and three quarters of
/// the L2 in between or the same. Zen 4, where streaming measured better, keeps it.
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

/// Floating-point operations below which a whole run stays on the calling thread (see
/// [`min_parallel_flops`]). Handing work to the pool and waiting for it cost about 1.3 µs a
/// run on the Xeon this was measured on (16×32×256, 262 Kflop: 1.8 µs on one thread, 3.1 µs
/// on two), so a second thread only paid once half the run took longer than that:
/// 16×64×256 (524 Kflop) tied (3.6 against 4.0 µs and 5.1 against 4.6 in two runs),
/// 16×64×512 (1 Mflop) was 1.3–1.8× faster on two.
pub(crate) const MIN_PARALLEL_FLOPS: usize = 1 << 19;

/// [`MIN_PARALLEL_FLOPS`] on Zen 4 (AMD family 0x19), where a hand-off costs a fraction of
/// that: two threads against one (`cargo run --release -p keepalloc-kernels-bench
/// --example output_alignment -- --shape S --rounds 150`, with throwaway code setting the
/// threshold at run time, median of the rounds' ratios) 16×32×256 1.23×, 4×128×256 1.41×,
/// 1×256×256 1.41× (262, 262 and 131 Kflop), 1×512×256 1.68×; at 65 Kflop it stops paying:
/// 1×128×256 1.13×, 2×128×128 0.89×. Batch 1 at 1×256×256 matters: current XNNPACK on a
/// two-thread pthreadpool cuts it, and in `cargo xtask bench --threads 2` reached 1.3–1.5×
/// keepalloc's one-thread run in some runs.
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

/// True on Intel cores, where `vdpbf16ps` zmm does half the multiply-adds per cycle of
/// `vfmadd231ps` zmm (measured on this machine's Xeon: 1.3 G/s against 5.4 G/s, two
/// products per lane against one), so widening bf16 to f32 and using two FMAs
/// (`DotIsa::Avx512`) does twice the work per cycle. Elsewhere (AMD Zen 4) `vdpbf16ps` keeps its place as the best.
pub(crate) fn bf16_dot_is_half_rate() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // `cpuid` leaf 0 exists on every x86-64 CPU.
        let id = core::arch::x86_64::__cpuid(0);
        (id.ebx, id.edx, id.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e) // "GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Packed weights per N block. 256 KiB measured best of 128 KiB – 1 GiB on
/// qd8 128x4096x4096 (291-314 GOPS against 230-250 at 1 MiB, noisy shared machine); bf16 was
/// indifferent (bound by `vdpbf16ps` throughput at every size).
pub(crate) const LOWP_N_BLOCK_BYTES: usize = 256 << 10;

/// Packed weights above which batch 1 is DRAM-bound and prefetches (half of a 32 MiB L3).
pub(crate) const LOWP_GEMV_PREFETCH_ABOVE: usize = 16 << 20;

/// Prefetch distance of a DRAM-bound batch 1.
pub(crate) const LOWP_GEMV_PREFETCH_BYTES: isize = 16 << 10;

/// qd8: quantized A bytes per row chunk (half of a 2 MiB L2): the chunk's rows are read
/// once per panel.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QD8_A_BYTES: usize = 1 << 20;

/// Packed weights above which the first row tile of each slice blocked_prefetches the next slice
/// into L2 (below, they stay in L2 between runs and the blocked_prefetches only take load slots).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const BLOCKED_PREFETCH_ABOVE: usize = 1 << 20;

/// Whether a job of `m` rows over `packed` bytes of weights blocked_prefetches the next slice: with
/// weights beyond L2, and rows enough (`from_rows`) that each slice is worked on long enough
/// for the prefetch to pay. bf16 blocked_prefetches from 2 rows, qd8 from a full VNNI tile of 6.
///
/// Fewer rows stream each slice about as fast as the L2 hardware prefetcher brings it, and
/// the blocked_prefetches only take load slots. Measured with throwaway code that switched the rule
/// at run time (40–60 rounds alternating, outputs identical; 1536 and 4096 square weights),
/// without the blocked_prefetches (each figure one run's median ratio; runs of the same case differ
/// by up to 5%):
/// * batch 1: 1.5–5% faster, qd8 and bf16, 8 runs of 8;
/// * qd8, 2–5 rows: 1–6% faster, 11 of 11; 6 rows: -2.4% to +1.4%, 4 runs; 7, 8 and 12
///   rows: 4–9% slower, 3 runs;
/// * bf16, 2 rows: -7% to +7%, 6 runs, no clear sign; 3–4 rows: 3–8% slower in 6 of 8 (the
///   other two 2% and 6% faster).
///
/// So batch 1 never blocked_prefetches, qd8 starts at a full tile and bf16 at 2 rows.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn blocked_prefetches(m: usize, from_rows: usize, packed: usize) -> bool {
    m >= from_rows && packed > BLOCKED_PREFETCH_ABOVE
}
