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

use crate::cpu::{cache, caches};
use crate::isa::Isa;
#[cfg(target_arch = "x86_64")]
use crate::tuning::pairs_outer;
use crate::tuning::{blocking, gemv_alternates, gemv_prefetch, lone_panel, pair_rows};
pub(crate) use kernel::shape;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod edge;
pub(crate) mod kernel;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod simd;

/// One microkernel call: `C[0..mr][0..nvalid] (=|+=) A(mr × kc) · B(kc × NR)`.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// Depth of this call.
    pub kc: usize,
    /// A: the caller's rows in place, `lda` floats apart, when the ISA's
    /// [`Shape::a_in_place`](kernel::Shape::a_in_place) is set; else a copy packed k-major, `a[k * mr + r]`.
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
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub pf_off: isize,
    /// A GEMV call's prefetches go to L1 (`prefetcht0`: its weights are in L2), not L2.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub pf_l1: bool,
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
            Isa::Avx2 => kernel::tile::<kernel::Avx2>(mr, t),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => kernel::tile::<kernel::Neon>(mr, t),
            _ => kernel::tile::<kernel::Scalar>(mr, t),
        }
    }
}

/// Dispatches one GEMV call over `count` consecutive panels (1 outside AVX2; see
/// [`Shape::gemv_panels`](kernel::Shape::gemv_panels)).
///
/// # Safety
/// See [`run`]; `isa` must be supported by the CPU; `count` panels from `panel` (the last
/// with `g.nvalid` valid columns) and their outputs are in bounds.
#[inline]
unsafe fn gemv(
    isa: Isa,
    k: usize,
    x: *const f32,
    panel: *const f32,
    count: usize,
    y: *mut f32,
    g: &Tile,
) {
    debug_assert!(count >= 1 && count <= shape(isa).gemv_panels);
    // SAFETY: forwarded; the operator only holds an ISA that `is_supported`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::gemv(k, x, panel, y, g),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::gemv(k, x, panel, shape(isa).nr * (k + 1), count, y, g),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::gemv(k, x, panel, y, g),
            _ => scalar::gemv(k, x, panel, y, g),
        }
    }
}

/// Batch 1: `panels` of the packed block through the ISA's GEMV kernel, in the order of
/// [`GEMV_BACKWARDS`]. A function of its own, so that a batch-1 run pays neither the GEMM
/// driver's stack frame (8 KiB for the A buffer, probed page by page on every call) nor
/// its setup: 1.02-1.29x on the small batch-1 shapes on Zen 4 (docs/bench-history.md,
/// "A batch-1 run of its own").
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
    // Up to `gemv_panels` panels a call: the range's full groups, then its rest in one.
    let group = shape(p.isa).gemv_panels;
    let mut call = |first: usize, count: usize| {
        let last = first + count - 1;
        g.nvalid = nr.min(p.n - last * nr);
        // The panels are in range (caller), so they and their output columns (the last
        // possibly fewer than NR) are in bounds.
        // SAFETY: the panels and their output columns are in bounds.
        unsafe {
            gemv(
                p.isa,
                p.k,
                p.a,
                p.packed.add(first * panel_len),
                count,
                p.c.add(first * nr),
                &g,
            )
        };
    };
    let starts = (panels.start..panels.end).step_by(group);
    let mut one = |first: usize| call(first, group.min(panels.end - first));
    // Every other batch-1 run on this thread goes through the panels backwards, so it
    // starts on the panels the previous run read last (where [`gemv_alternates`] says it
    // pays). Each panel is computed by the same instructions in either order and in any
    // group: the result does not change.
    let call_bytes = panels.len() * panel_len * size_of::<f32>();
    if gemv_alternates(call_bytes, c) && GEMV_BACKWARDS.with(|b| b.replace(!b.get())) {
        starts.rev().for_each(&mut one);
    } else {
        starts.for_each(&mut one);
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
    use super::{Isa, row_tiles, shape};
    use crate::cpu::Caches;
    use crate::cpu::test_cpus::{XEON, ZEN4, ZEN5};
    use crate::tuning::{
        GEMV_L1_PREFETCH_FLOATS, GEMV_PREFETCH_FLOATS, blocking, gemv_alternates, gemv_prefetch,
        lone_panel, pair_rows_on, pairs_outer,
    };

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
