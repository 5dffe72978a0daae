//! The GEMM / GEMV drivers and the per-ISA microkernels they call.
//!
//! `C[M][N] = clamp(A[M][K] · B + bias)` where B is packed in panels (see `pack`).
//!
//! * M = 1 goes to the ISA's GEMV kernel: each weight is read once, with several
//!   independent accumulator chains per panel so that the FMA latency never limits it, and
//!   every other run on a thread takes the panels last to first, so that it starts on the
//!   weights the previous run left in L2 (on Zen 4 only when they fit in L2: see
//!   [`gemv_alternates`]).
//! * M > 1 is cache-blocked: NC panels of B at a time (an L2-sized block, or all of them
//!   for AVX-512 when the weights fit well in L3, except on Intel and Zen 5, where a row
//!   tile's sweep outruns the L3: see [`blocking`]), K in KC steps (partial sums stored to C
//!   and reloaded, which keeps the k order, and so the result, exactly that of one long
//!   loop), and M in balanced row tiles of at most MR rows (AVX-512 runs a tile of 4 rows
//!   or fewer on two panels at once, for enough accumulator chains, and on Intel tiles of
//!   at most 6 rows on two panels whenever the weights fit in L2 or M >= 64: see
//!   [`pair_rows`]). AVX-512 reads A in place
//!   (every row a broadcast-from-memory operand at a register offset, nothing copied);
//!   the other ISAs copy each row tile of A k-major into a stack buffer (no allocation,
//!   safe for many threads running one operator at once) and reuse it across the NC
//!   panels.
//!
//! Threads split the panels, never K or M, so every output element is computed by the same
//! instructions in the same order whatever the thread count: results are bit-identical.

use core::mem::MaybeUninit;
use core::ops::Range;

use crate::cpu::{Caches, cache, caches};
use crate::isa::Isa;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;

/// One microkernel call: `C[0..mr][0..nvalid] (=|+=) A(mr × kc) · B(kc × NR)`.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// Depth of this call.
    pub kc: usize,
    /// A: the caller's rows in place, `lda` floats apart, when the ISA's
    /// [`Shape::a_in_place`] is set; else a copy packed k-major, `a[k * mr + r]`.
    pub a: *const f32,
    /// Row stride of `a` when it is read in place.
    pub lda: usize,
    /// B rows `k0 .. k0 + kc` of one panel, `NR` floats each, aligned.
    pub b: *const f32,
    /// NR biases to start from, or NULL to accumulate onto what C holds.
    pub bias: *const f32,
    /// Top-left element of the C tile.
    pub c: *mut f32,
    /// Row stride of C.
    pub ldc: usize,
    /// Valid columns (1..=NR).
    pub nvalid: usize,
    /// Apply the clamp (on the last K step).
    pub clamp: bool,
    /// Clamp bounds.
    pub min: f32,
    /// Clamp bounds.
    pub max: f32,
    /// Where the next tile's weights are, in floats from `b` (a kernel may prefetch
    /// `b + pf_off ..` as it reads `b ..`; 0 when there is nothing to prefetch). For a
    /// GEMV call, the distance to prefetch ahead of the weights it reads (0: none).
    pub pf_off: isize,
    /// A GEMV call's prefetches go to L1 (`prefetcht0`: its weights are in L2), not L2.
    pub pf_l1: bool,
}

/// Packed weights (bytes) above which batch 1 is DRAM-bound and the GEMV kernels that
/// support it prefetch ([`GEMV_PREFETCH_FLOATS`] ahead): half of the 32 MiB L3 of the Zen 4
/// this was tuned on. Below it the weights mostly stream from L3, where the extra prefetches cost more
/// than they bring (measured on 1x1536x1536: -5%; on 1x4096x4096: +30%).
const GEMV_PREFETCH_ABOVE: usize = 16 << 20;

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
fn gemv_prefetch_above(shared: bool, c: Caches) -> usize {
    if c.zen5 && !shared {
        usize::MAX
    } else if c.intel && c.l2 > 0 {
        c.l2
    } else {
        GEMV_PREFETCH_ABOVE
    }
}

std::thread_local! {
    /// The next batch-1 run on this thread reads the panels last to first. Alternating
    /// (boustrophedon order) makes a run start on the weights the previous one read last,
    /// which are still in L2 (L1 for small weights) when the same operator runs back to
    /// back (a benchmark's loop, or a model of one layer): measured on a 2 MiB-L2 Xeon,
    /// 1x1536x1536 (9.4 MiB of weights, L3-bound) +20%, 1x256x256 +6%. A decode loop gains
    /// nothing from it: it runs every other layer between two runs of this one, and their
    /// weights evict these. When other work evicted them it costs nothing either. Which
    /// calls alternate: [`gemv_alternates`].
    /// `const`-initialized: no allocation, no destructor.
    static GEMV_BACKWARDS: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether a batch-1 call over `call_bytes` of weights (its own panels: a thread's share when
/// the run is cut) takes part in the alternating order of [`GEMV_BACKWARDS`].
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
fn gemv_alternates(call_bytes: usize, c: Caches) -> bool {
    !c.amd || c.zen5 || call_bytes <= c.l2
}

/// GEMV prefetch distance: 16 KiB.
const GEMV_PREFETCH_FLOATS: usize = 4096;

/// GEMV prefetch distance into L1 when the weights are in L2: 4 KiB, 32 k steps of a panel.
const GEMV_L1_PREFETCH_FLOATS: usize = 1024;

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
fn gemv_prefetch(packed_bytes: usize, shared: bool, c: Caches) -> (isize, bool) {
    if packed_bytes > gemv_prefetch_above(shared, c) {
        (GEMV_PREFETCH_FLOATS as isize, false)
    } else if c.intel && c.l1 > 0 && packed_bytes > c.l1 && packed_bytes <= c.l2 {
        (GEMV_L1_PREFETCH_FLOATS as isize, true)
    } else {
        (0, false)
    }
}

/// Largest packed A tile (`MR * KC`) of the ISAs that copy it: the buffer on the stack.
const A_BUF: usize = 8 * 256;
const _: () = {
    let mut i = 0;
    let isas = [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar];
    while i < isas.len() {
        let s = shape(isas[i]);
        assert!(s.a_in_place || s.mr * s.kc <= A_BUF);
        i += 1;
    }
};

#[repr(C, align(64))]
struct ABuf([MaybeUninit<f32>; A_BUF]);

/// Tile shape and blocking of one ISA.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    /// Most rows per microkernel call.
    pub mr: usize,
    /// Columns per panel.
    pub nr: usize,
    /// K block.
    pub kc: usize,
    /// Panels per N block.
    pub nc: usize,
    /// Packed weights (bytes) below which one N block holds all panels.
    pub stream_below: usize,
    /// The kernel reads A in place (each row a broadcast-from-memory stream), so nothing
    /// is copied; otherwise each row tile of A is packed k-major into a stack buffer.
    pub a_in_place: bool,
}

/// The tile shape and blocking of `isa`.
pub(crate) const fn shape(isa: Isa) -> Shape {
    match isa {
        Isa::Avx512 => Shape {
            mr: 8,
            nr: 32,
            // K 1024 (one block for K <= 1024): measured faster than 512 on the K = 1024 and
            // 2048 shapes, the same elsewhere.
            kc: 1024,
            nc: 8,
            // Up to 8 MiB of packed weights (well inside L3), all panels run per row tile:
            // the tile's A rows stay in cache across the whole N range while the weights
            // stream from L2/L3 (128 B per 16 FMAs, the next panel prefetched); measured
            // better than L2-sized N blocks on 64x1024x1024 and 256x512x2048. Above that the
            // weights would come from DRAM once per row tile, and N blocks (read from DRAM
            // once, then from L2) win.
            stream_below: 8 << 20,
            a_in_place: true,
        },
        Isa::Avx2 => Shape {
            mr: 6,
            nr: 16,
            kc: 256,
            nc: 16,
            stream_below: 0,
            a_in_place: false,
        },
        Isa::Neon => Shape {
            mr: 8,
            nr: 8,
            kc: 256,
            nc: 32,
            stream_below: 0,
            a_in_place: false,
        },
        Isa::Scalar => Shape {
            mr: 4,
            nr: 8,
            kc: 256,
            nc: 32,
            stream_below: 0,
            a_in_place: false,
        },
    }
}

/// A whole problem: the operator's packed weights and one run's buffers.
#[derive(Clone, Copy)]
pub(crate) struct Problem {
    pub isa: Isa,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a: *const f32,
    pub lda: usize,
    pub packed: *const f32,
    pub c: *mut f32,
    pub ldc: usize,
    pub min: f32,
    pub max: f32,
    /// The run is cut over more than one thread (this is one task's share).
    pub shared: bool,
}

// SAFETY: a `Problem` is handed to the threads of a `Parallel` (a pool's workers, a
// runtime's threads), which write disjoint row and column ranges of C and only read A and
// the packed weights; all of them outlive the run, since `run_ranges` returns only after
// every range has (the `Parallel` contract).
unsafe impl Send for Problem {}
// SAFETY: as above; `&Problem` only exposes the pointers to copy them.
unsafe impl Sync for Problem {}

/// Balanced row tiles: as few tiles as MR allows, sizes differing by at most one.
pub(crate) fn row_tiles(m: usize, mr: usize) -> impl Iterator<Item = (usize, usize)> {
    let tiles = m.div_ceil(mr);
    let base = m / tiles;
    let extra = m % tiles;
    (0..tiles).map(move |t| {
        let rows = base + usize::from(t < extra);
        (t * base + t.min(extra), rows)
    })
}

/// Dispatches one tile to the ISA's microkernel.
///
/// # Safety
/// See [`run`]; `isa` must be supported by the CPU.
#[inline]
unsafe fn tile(isa: Isa, mr: usize, t: &Tile) {
    // SAFETY: forwarded; the operator only holds an ISA that `is_supported`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::tile(mr, t),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::tile(mr, t),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::tile(mr, t),
            _ => scalar::tile(mr, t),
        }
    }
}

/// Dispatches one GEMV panel.
///
/// # Safety
/// See [`run`]; `isa` must be supported by the CPU.
#[inline]
unsafe fn gemv(isa: Isa, k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // SAFETY: forwarded; the operator only holds an ISA that `is_supported`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::gemv(k, x, panel, y, g),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::gemv(k, x, panel, y, g),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::gemv(k, x, panel, y, g),
            _ => scalar::gemv(k, x, panel, y, g),
        }
    }
}

/// Batch 1: `panels` of the packed block through the ISA's GEMV kernel, in the order of
/// [`GEMV_BACKWARDS`]. A function of its own, so that a batch-1 run pays neither the GEMM
/// driver's stack frame (8 KiB for the A buffer, probed page by page on every call) nor
/// its setup, with one `Tile` for all panels, no iterator behind a `dyn` and the cache
/// facts read in one load. Measured on Zen 4 against the batch-1 branch of the GEMM driver
/// it replaced (throwaway code switching between the two at run time in one process,
/// 41–61 alternating rounds, outputs equal; old/new, median of the rounds' ratios, two
/// runs): 1×16×32 1.12× and 1.10× (39–51 against 44–56 ns a run), 1×16×256 1.29× and
/// 1.22×, 1×96×64 1.04× both, 1×256×256 1.02× both, 1×1536×1536 1.00×.
/// With [`run`] then made a thin dispatcher (the GEMM driver's frame in `gemm_run`
/// alone) and the panel width a constant per ISA (no division), against current XNNPACK
/// (`keepalloc-kernels-bench --libs keepalloc,XNNPACK-2026 --shapes
/// 1x16x32,1x16x256,1x96x64,1x256x256,1x1536x1536`, the binaries before and after in one
/// session): 1×16×32 0.76× and 0.78× before (0.92× after the first change alone), 1.06×
/// after; 1×16×256 0.96× before (0.97×), 1.10× after; 1×256×256 0.95–1.02× in four runs
/// before, 1.03× after; every cell ahead after (the lower quartile of the rounds' ratios
/// above 1).
///
/// # Safety
/// As [`run`], with `p.m == 1`.
#[inline(never)]
unsafe fn gemv_run(p: &Problem, panels: Range<usize>) {
    // A constant per ISA (a power of two): no division below.
    let nr = shape(p.isa).nr;
    let panel_len = nr * (p.k + 1);
    let packed_bytes = panel_len * p.n.div_ceil(nr) * size_of::<f32>();
    // The GEMV prefetches this far ahead in the packed block (whose panels are
    // contiguous), into L2 or L1 by where the weights come from.
    let c = caches();
    let (pf_off, pf_l1) = gemv_prefetch(packed_bytes, p.shared, c);
    let mut g = Tile {
        kc: p.k,
        a: p.a,
        b: core::ptr::null(),
        bias: core::ptr::null(),
        c: p.c,
        ldc: p.ldc,
        nvalid: nr,
        clamp: true,
        min: p.min,
        max: p.max,
        pf_off,
        pf_l1,
        lda: p.lda,
    };
    let mut one = |panel: usize| {
        g.nvalid = nr.min(p.n - panel * nr);
        // The panel index is in range (caller), so the panel and the NR (possibly fewer
        // valid) output columns are in bounds.
        // SAFETY: the panel and its output columns are in bounds.
        unsafe {
            gemv(
                p.isa,
                p.k,
                p.a,
                p.packed.add(panel * panel_len),
                p.c.add(panel * nr),
                &g,
            )
        };
    };
    // Every other batch-1 run on this thread goes through the panels backwards, so it
    // starts on the panels the previous run read last (where [`gemv_alternates`] says it
    // pays). Each panel is computed by the same instructions in either order: the result
    // does not change.
    let call_bytes = panels.len() * panel_len * size_of::<f32>();
    if gemv_alternates(call_bytes, c) && GEMV_BACKWARDS.with(|b| b.replace(!b.get())) {
        panels.rev().for_each(&mut one);
    } else {
        panels.for_each(&mut one);
    }
}

/// Computes the output columns of panels `panels` for all M rows.
///
/// # Safety
/// `p.a` holds `m` rows of `k` floats at stride `lda`; `p.c` holds `m` rows of `n` writable
/// floats at stride `ldc`, not aliased by A; `p.packed` is the packed block of the operator
/// (`pack::packed_len` floats for `p.isa`'s NR, 64-byte aligned); `panels` lies within
/// `0..n.div_ceil(nr)`; `p.isa` is supported by this CPU.
#[inline]
pub(crate) unsafe fn run(p: &Problem, panels: Range<usize>) {
    // SAFETY: forwarded (caller).
    unsafe {
        if p.m == 1 {
            gemv_run(p, panels);
        } else {
            gemm_run(p, panels);
        }
    }
}

/// [`run`] for `p.m > 1`.
///
/// # Safety
/// As [`run`].
#[inline(never)]
unsafe fn gemm_run(p: &Problem, panels: Range<usize>) {
    let s = shape(p.isa);
    let panel_len = s.nr * (p.k + 1);
    let proto = Tile {
        kc: 0,
        a: core::ptr::null(),
        b: core::ptr::null(),
        bias: core::ptr::null(),
        c: p.c,
        ldc: p.ldc,
        nvalid: 0,
        clamp: true,
        min: p.min,
        max: p.max,
        pf_off: 0,
        pf_l1: false,
        lda: p.lda,
    };
    let packed_bytes = panel_len * p.n.div_ceil(s.nr) * size_of::<f32>();
    let mut abuf = ABuf([MaybeUninit::uninit(); A_BUF]);
    let abuf = abuf.0.as_mut_ptr().cast::<f32>();
    let (stream_below, nc) = blocking(p.isa, &s, p.k, caches());
    let nc = if packed_bytes < stream_below {
        usize::MAX
    } else {
        nc
    };
    // Prefetching the next panel into L2 is for weights that come from L3 and that enough
    // row tiles then read from L2. On Intel it is skipped when the weights fit in L2 (they
    // stay there from run to run) or when fewer than 8 row tiles share an N block: the
    // prefetches then only take load slots. Measured on a 2 MiB-L2 Xeon, in-process A/B
    // (with the kernel's L1 prefetch): 4x512x512 +13%, 16x1024x1024 +8%; with it kept on
    // 128x2048x2048 (16 row tiles) stays 6% faster. Elsewhere (Zen 4) as before.
    let pair_rows = pair_rows(p.isa, p.m, packed_bytes);
    let tile_rows = if pair_rows > 4 { pair_rows } else { s.mr };
    let pf_next_panel =
        !cache::is_intel() || (packed_bytes > cache::l2_bytes() && p.m.div_ceil(tile_rows) >= 8);
    let mut nc0 = panels.start;
    while nc0 < panels.end {
        let nc1 = nc0.saturating_add(nc).min(panels.end);
        let (paired_end, lone) = lone_panel(nc0..nc1, pair_rows);
        let mut k0 = 0;
        while k0 < p.k {
            let kc = s.kc.min(p.k - k0);
            // The tile of panel `panel` (in range: then the panel and its NR, possibly fewer
            // valid, output columns are in bounds) for rows from `m0` on, reading A at `a`,
            // and this K block.
            let tile_of = |panel: usize, m0: usize, a: *const f32| {
                let base = p.packed.wrapping_add(panel * panel_len);
                Tile {
                    kc,
                    a,
                    b: base.wrapping_add(s.nr + k0 * s.nr),
                    bias: if k0 == 0 { base } else { core::ptr::null() },
                    c: p.c.wrapping_add(m0 * p.ldc + panel * s.nr),
                    nvalid: s.nr.min(p.n - panel * s.nr),
                    clamp: k0 + kc == p.k,
                    ..proto
                }
            };
            // Rows m0..m0+mr of A at K offset k0, packed when the ISA reads A packed.
            let a_of = |m0: usize, mr: usize| {
                // SAFETY: rows m0..m0+mr and columns k0..k0+kc of A are in bounds.
                let src = unsafe { p.a.add(m0 * p.lda + k0) };
                if s.a_in_place {
                    src
                } else {
                    // SAFETY: as above; the stack buffer holds MR * KC >= mr * kc floats.
                    unsafe { pack_a(abuf, src, p.lda, mr, kc) };
                    abuf.cast_const()
                }
            };
            // Rows m0..m0+mr (at most `pair_rows`) of panels `panel` and `panel + 1`, both
            // in the block, reading A at `a`: one two-panel call on AVX-512 (see
            // `pair_rows`). The same FMAs in the same order for every output: results do not
            // change.
            #[cfg(target_arch = "x86_64")]
            let pair = |panel: usize, m0: usize, mr: usize, a: *const f32| {
                // Both tiles are in bounds (the caller's `panel + 1 < paired_end <= nc1`)
                // and share A, K and C's stride.
                // SAFETY: in-bounds tiles; the ISA is AVX-512 and supported (caller).
                unsafe { avx512::tile_pair(mr, &tile_of(panel, m0, a), &tile_of(panel + 1, m0, a)) }
            };
            // Few pairs in the block (a task's share of a cut run) and their K block small
            // enough to stay in L1 with the rows of A: pair by pair, every row tile (see
            // `pairs_outer`).
            #[cfg(target_arch = "x86_64")]
            let by_pairs = p.isa == Isa::Avx512
                && pairs_outer(
                    pair_rows,
                    (paired_end - nc0) / 2,
                    s.nr * kc,
                    p.m * kc,
                    cache::l1d_bytes(),
                );
            #[cfg(not(target_arch = "x86_64"))]
            let by_pairs = false;
            if by_pairs {
                #[cfg(target_arch = "x86_64")]
                for panel in (nc0..paired_end).step_by(2) {
                    // Every row tile is at most `pair_rows` rows (`tile_rows`).
                    for (m0, mr) in row_tiles(p.m, tile_rows) {
                        pair(panel, m0, mr, a_of(m0, mr));
                    }
                }
            } else {
                for (m0, mr) in row_tiles(p.m, tile_rows) {
                    let a = a_of(m0, mr);
                    let mut panel = nc0;
                    while panel < paired_end {
                        // Pairs never prefetch the next tile into L2: measured on
                        // 64x1024x1024 and 128x2048x2048, the same or 1-4% slower with it.
                        #[cfg(target_arch = "x86_64")]
                        if p.isa == Isa::Avx512 && mr <= pair_rows && panel + 1 < paired_end {
                            pair(panel, m0, mr, a);
                            panel += 2;
                            continue;
                        }
                        // The next call reads the next panel (or, after the last, the first
                        // panel again for the next row tile) at the same K offset. In an N
                        // block, only the first row tile prefetches: it brings the block into
                        // L2, where the other row tiles find it (their prefetches would only
                        // cost load slots). Streaming all the panels per row tile, every row
                        // tile prefetches.
                        let next = if panel + 1 < nc1 { panel + 1 } else { nc0 };
                        let pf_off = if pf_next_panel && (m0 == 0 || nc == usize::MAX) {
                            (next as isize - panel as isize) * panel_len as isize
                        } else {
                            0
                        };
                        let t = Tile {
                            pf_off,
                            ..tile_of(panel, m0, a)
                        };
                        // The tile covers rows m0..m0+mr of an in-range panel.
                        // SAFETY: an in-bounds tile; the ISA is supported (caller).
                        unsafe { tile(p.isa, mr, &t) };
                        panel += 1;
                    }
                }
            }
            if let Some(panel) = lone {
                for (m0, mr) in row_tiles(p.m, s.mr) {
                    let t = tile_of(panel, m0, a_of(m0, mr));
                    // The tile covers rows m0..m0+mr of an in-range panel.
                    // SAFETY: an in-bounds tile; the ISA is supported (caller).
                    unsafe { tile(p.isa, mr, &t) };
                }
            }
            k0 += kc;
        }
        nc0 = nc1;
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
fn lone_panel(block: Range<usize>, pair_rows: usize) -> (usize, Option<usize>) {
    if pair_rows > 4 {
        let end = block.start + ((block.end - block.start) & !1);
        (end, (end < block.end).then_some(end))
    } else {
        (block.end, None)
    }
}

/// Most pairs of panels in an N block for which [`pairs_outer`] holds.
const PAIRS_OUTER_MAX: usize = 8;

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
fn pairs_outer(
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
const PAIR6_MIN_ROWS: usize = 64;

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
fn pair_rows(isa: Isa, m: usize, packed_bytes: usize) -> usize {
    pair_rows_on(isa, m, packed_bytes, cache::l2_bytes(), cache::is_intel())
}

/// [`pair_rows`] on a CPU with `l2` bytes of L2 per core (0: unknown), Intel or not.
fn pair_rows_on(isa: Isa, m: usize, packed_bytes: usize, l2: usize, intel: bool) -> usize {
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
fn blocking(isa: Isa, s: &Shape, k: usize, c: Caches) -> (usize, usize) {
    let l2 = c.l2;
    if isa != Isa::Avx512 || !(c.intel || c.zen5) || l2 == 0 {
        return (s.stream_below, s.nc);
    }
    let kc = s.kc.min(k).max(1);
    let panel_block = kc * s.nr * size_of::<f32>();
    // An even count, so that two-panel calls never leave one panel alone in a block.
    (0, (l2 / 2 / panel_block).max(2) & !1)
}

/// Copies an `mr × kc` block of A (row stride `lda`) to `dst`, k-major.
///
/// # Safety
/// `src` has `mr` rows of `kc` readable floats at stride `lda`; `dst` has `mr * kc`
/// writable floats.
#[inline]
unsafe fn pack_a(dst: *mut f32, src: *const f32, lda: usize, mr: usize, kc: usize) {
    for r in 0..mr {
        // SAFETY: row r of the block is in bounds (caller).
        let row = unsafe { core::slice::from_raw_parts(src.add(r * lda), kc) };
        for (k, &v) in row.iter().enumerate() {
            // SAFETY: k * mr + r < kc * mr.
            unsafe { dst.add(k * mr + r).write(v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Caches, GEMV_L1_PREFETCH_FLOATS, GEMV_PREFETCH_FLOATS, Isa, blocking, gemv_alternates,
        gemv_prefetch, lone_panel, pair_rows_on, pairs_outer, row_tiles, shape,
    };
    use crate::cpu::test_cpus::{XEON, ZEN4, ZEN5};

    const MIB: usize = 1 << 20;

    #[test]
    fn gemv_prefetches_by_where_the_weights_come_from_and_the_cpu() {
        let l2_ahead = (GEMV_PREFETCH_FLOATS as isize, false);
        let l1_ahead = (GEMV_L1_PREFETCH_FLOATS as isize, true);
        let none = (0, false);
        // 1x4096x4096 (DRAM), 1x1536x1536 (L3), 1x256x256 (L2), 1x96x64 (L1).
        let (dram, l3, l2, l1) = (64 * MIB, 9 * MIB, 256 << 10, 24 << 10);
        // Zen 5: nothing on one thread; DRAM-resident weights prefetched when cut over threads.
        for bytes in [dram, l3, l2, l1] {
            assert_eq!(gemv_prefetch(bytes, false, ZEN5), none, "{bytes}");
        }
        assert_eq!(gemv_prefetch(dram, true, ZEN5), l2_ahead);
        assert_eq!(gemv_prefetch(l3, true, ZEN5), none);
        assert_eq!(gemv_prefetch(l2, true, ZEN5), none);
        // Intel: everything past its L2 into L2, what is in L2 into L1, threads or not.
        for shared in [false, true] {
            assert_eq!(gemv_prefetch(dram, shared, XEON), l2_ahead);
            assert_eq!(gemv_prefetch(l3, shared, XEON), l2_ahead);
            assert_eq!(gemv_prefetch(l2, shared, XEON), l1_ahead);
            assert_eq!(gemv_prefetch(l1, shared, XEON), none);
        }
        // Elsewhere (Zen 4): past half its L3 only.
        for shared in [false, true] {
            assert_eq!(gemv_prefetch(dram, shared, ZEN4), l2_ahead);
            assert_eq!(gemv_prefetch(l3, shared, ZEN4), none);
            assert_eq!(gemv_prefetch(l2, shared, ZEN4), none);
        }
    }

    #[test]
    fn gemv_alternates_on_zen4_only_within_l2() {
        // 1x1536x1536 (L3), 1x256x256 (L2), 1x96x64 (L1), and a thread's share exactly L2.
        let (l3, l2, l1) = (9 * MIB, 256 << 10, 24 << 10);
        for bytes in [l2, l1, MIB] {
            assert!(gemv_alternates(bytes, ZEN4), "{bytes}");
        }
        assert!(!gemv_alternates(l3, ZEN4));
        assert!(!gemv_alternates(MIB + 1, ZEN4));
        for cpu in [ZEN5, XEON] {
            for bytes in [64 * MIB, l3, l2, l1] {
                assert!(gemv_alternates(bytes, cpu), "{bytes}");
            }
        }
        // A CPU of unknown vendor keeps the order it was tuned with.
        let unknown = Caches {
            l1: 0,
            l2: 0,
            intel: false,
            amd: false,
            zen5: false,
        };
        assert!(gemv_alternates(l3, unknown));
    }

    #[test]
    fn n_blocks_of_half_the_l2_on_intel_and_zen5_streaming_elsewhere() {
        let s = shape(Isa::Avx512);
        // K = 512: a panel's K block is 512 * 32 * 4 = 64 KiB.
        assert_eq!(blocking(Isa::Avx512, &s, 512, ZEN5), (0, 8));
        assert_eq!(blocking(Isa::Avx512, &s, 512, XEON), (0, 16));
        // K past KC: the block is KC deep (128 KiB a panel), and never fewer than 2 panels.
        assert_eq!(blocking(Isa::Avx512, &s, 4096, ZEN5), (0, 4));
        let tiny = Caches {
            l2: 64 << 10,
            ..ZEN5
        };
        assert_eq!(blocking(Isa::Avx512, &s, 4096, tiny), (0, 2));
        // Zen 4, or an unknown L2: the shape's own streaming rule.
        assert_eq!(blocking(Isa::Avx512, &s, 512, ZEN4), (s.stream_below, s.nc));
        let unknown = Caches { l2: 0, ..ZEN5 };
        assert_eq!(
            blocking(Isa::Avx512, &s, 512, unknown),
            (s.stream_below, s.nc)
        );
        // Other ISAs keep their shapes.
        let avx2 = shape(Isa::Avx2);
        assert_eq!(
            blocking(Isa::Avx2, &avx2, 512, ZEN5),
            (avx2.stream_below, avx2.nc)
        );
    }

    #[test]
    fn six_row_pairs_where_the_weights_stay_in_l2_or_enough_rows_share_them() {
        let l2 = 2 << 20;
        let pairs = |m, packed, l2, intel| pair_rows_on(Isa::Avx512, m, packed, l2, intel);
        // Weights in L2: any batch (32x96x1536, 512x512x512).
        assert_eq!(pairs(32, 96 * 1536 * 4, l2, true), 6);
        assert_eq!(pairs(2, 1 << 20, l2, true), 6);
        assert_eq!(pairs(512, l2, l2, true), 6);
        // Past L2: 64 rows or more (64x1024x1024, 128x2048x2048), else the 8-row tiles.
        assert_eq!(pairs(64, 4 << 20, l2, true), 6);
        assert_eq!(pairs(128, 16 << 20, l2, true), 6);
        assert_eq!(pairs(63, l2 + 1, l2, true), 4);
        assert_eq!(pairs(16, 4 << 20, l2, true), 4);
        // Not Intel, or an unknown L2: as before.
        assert_eq!(pairs(512, 1 << 20, l2, false), 4);
        assert_eq!(pairs(512, 1 << 20, 0, true), 4);
        // The other ISAs have no two-panel kernel.
        for isa in [Isa::Avx2, Isa::Neon, Isa::Scalar] {
            assert_eq!(pair_rows_on(isa, 512, 1 << 20, l2, true), 0);
        }
    }

    #[test]
    fn an_odd_panel_runs_alone_only_beside_six_row_pairs() {
        // 6-row pairs: the pairs stop at an even count, the odd panel runs alone.
        assert_eq!(lone_panel(0..3, 6), (2, Some(2)));
        assert_eq!(lone_panel(4..5, 6), (4, Some(4)));
        assert_eq!(lone_panel(2..6, 6), (6, None));
        // 4-row pairs (and no pairs): every panel stays in the row-tile loop, as before.
        assert_eq!(lone_panel(0..3, 4), (3, None));
        assert_eq!(lone_panel(0..3, 0), (3, None));
    }

    #[test]
    fn few_pairs_over_weights_that_fit_l1_run_pair_by_pair() {
        // The rule only changes speed (each output sees the same FMAs in the same order in
        // either loop order), so the rule itself is pinned. A task of 32x96x1536 cut for
        // two threads: up to 8 pairs, K = 96, 32 rows: 24.6 KB of weights and 12.3 KB of A.
        let (panel, a) = (32 * 96, 32 * 96);
        assert!(pairs_outer(6, 1, panel, a, 48 << 10));
        assert!(pairs_outer(6, 8, panel, a, 48 << 10));
        assert!(!pairs_outer(6, 9, panel, a, 48 << 10), "a long sweep");
        assert!(!pairs_outer(6, 4, panel, a, 32 << 10), "a 32 KiB L1");
        assert!(!pairs_outer(4, 4, panel, a, 48 << 10), "no 6-row pairs");
        assert!(!pairs_outer(6, 4, panel, a, 0), "L1 unknown");
        // K = 256: one pair's weights alone are 64 KiB.
        assert!(!pairs_outer(6, 2, 32 * 256, 32 * 256, 48 << 10));
    }

    #[test]
    fn row_tiles_cover_m_in_balanced_tiles() {
        for mr in 1..=16 {
            for m in 1..=300 {
                let tiles: Vec<_> = row_tiles(m, mr).collect();
                assert_eq!(tiles.len(), m.div_ceil(mr));
                let mut next = 0;
                for &(m0, rows) in &tiles {
                    assert_eq!(m0, next);
                    assert!(rows >= 1 && rows <= mr);
                    next += rows;
                }
                assert_eq!(next, m);
                let min = tiles.iter().map(|t| t.1).min().unwrap();
                let max = tiles.iter().map(|t| t.1).max().unwrap();
                assert!(max - min <= 1);
            }
        }
    }
}
