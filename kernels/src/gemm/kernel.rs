//! Each f32 microkernel's tile shape, declared once (as matrixmultiply's `GemmKernel`):
//! the ISA's own file and [`shape`] both read it; [`shape`] adds each ISA's blocking.
//! Compiled on every target, so the shape table stays whole where an ISA's kernels are
//! not built.

use super::Tile;
use crate::isa::Isa;

/// The tile of one ISA's microkernel.
pub(crate) trait Kernel {
    /// Most rows per call.
    const MR: usize;
    /// Columns per panel: the packing's NR.
    const NR: usize;
    /// The kernel broadcasts A from its rows in place (see [`Shape::a_in_place`]).
    const A_IN_PLACE: bool = false;
}

/// A kernel whose tile body is generic over its row count.
pub(crate) trait Rows: Kernel {
    /// One tile of exactly `MR` rows (1 to 8).
    ///
    /// # Safety
    /// `t` describes valid buffers (see `gemm::run`) with `MR` rows, and the CPU has the
    /// kernel's ISA.
    unsafe fn rows<const MR: usize>(t: &Tile);
}

/// Runs a tile of `mr` rows (1 to `K::MR`) on K's body for exactly that many rows.
///
/// # Safety
/// As [`Rows::rows`] with `mr` rows.
#[inline(always)]
pub(crate) unsafe fn tile<K: Rows>(mr: usize, t: &Tile) {
    const { assert!(K::MR <= 8) };
    // SAFETY: forwarded; the arms past K::MR are never taken.
    unsafe {
        match mr.clamp(1, K::MR) {
            1 => K::rows::<1>(t),
            2 => K::rows::<2>(t),
            3 => K::rows::<3>(t),
            4 => K::rows::<4>(t),
            5 => K::rows::<5>(t),
            6 => K::rows::<6>(t),
            7 => K::rows::<7>(t),
            _ => K::rows::<8>(t),
        }
    }
}

/// AVX-512F: 8 × 32 (16 zmm accumulators).
pub(crate) struct Avx512;
impl Kernel for Avx512 {
    const MR: usize = 8;
    const NR: usize = 32;
    const A_IN_PLACE: bool = true;
}

/// AVX2 + FMA: 6 × 16 (12 ymm accumulators).
pub(crate) struct Avx2;
impl Kernel for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
    const A_IN_PLACE: bool = true;
}

/// NEON: 8 × 8.
pub(crate) struct Neon;
impl Kernel for Neon {
    const MR: usize = 8;
    const NR: usize = 8;
}

/// Portable: 4 × 8.
pub(crate) struct Scalar;
impl Kernel for Scalar {
    const MR: usize = 4;
    const NR: usize = 8;
}

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
    /// Panels one batch-1 call reads at once (a weight stream each).
    pub gemv_panels: usize,
}

/// The tile shape and blocking of `isa`.
pub(crate) const fn shape(isa: Isa) -> Shape {
    match isa {
        Isa::Avx512 => Shape {
            mr: Avx512::MR,
            nr: Avx512::NR,
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
            a_in_place: Avx512::A_IN_PLACE,
            gemv_panels: 1,
        },
        Isa::Avx2 => Shape {
            mr: Avx2::MR,
            nr: Avx2::NR,
            // K 1024: with the tile's two-step loop, 3-8% faster than 256 on most shapes
            // on Zen 3, and 512 or 2048 no better (docs/bench-history.md).
            kc: 1024,
            nc: 16,
            stream_below: 0,
            a_in_place: Avx2::A_IN_PLACE,
            // One core pulls more from DRAM over four streams than over one (Zen 3,
            // 1x4096x4096: 7.1-7.6 GFLOPS a panel at a time, 9.0-9.3 four at a time), and
            // in cache one broadcast of x feeds eight FMAs: docs/bench-history.md.
            gemv_panels: 4,
        },
        Isa::Neon => Shape {
            mr: Neon::MR,
            nr: Neon::NR,
            kc: 256,
            nc: 32,
            stream_below: 0,
            a_in_place: false,
            gemv_panels: 1,
        },
        Isa::Scalar => Shape {
            mr: Scalar::MR,
            nr: Scalar::NR,
            kc: 256,
            nc: 32,
            stream_below: 0,
            a_in_place: false,
            gemv_panels: 1,
        },
    }
}
