//! The low-precision fully-connected operators' machinery: instruction-set choice, weight
//! packing, the driver and the per-ISA microkernels.
//!
//! Every packed panel covers NR output columns and is 64-byte aligned:
//!
//! * `bf16_f32`: NR f32 biases, then for each pair of input channels `(2p, 2p+1)` one
//!   32-bit word per column holding `W[j][2p]` (low half) and `W[j][2p+1]` (high half), the
//!   operand order of `vdpbf16ps`. An odd K is padded with a zero weight.
//! * `qd8_f32_qc8w`: NR f32 biases, NR f32 weight scales, NR i32 column sums
//!   `Σ_k W[j][k]`, then for each group of four input channels one word per column holding
//!   the four int8 weights, the operand order of `vpdpbusd`. K is padded to a multiple of
//!   four with zero weights.
//! * `f32_qc8w`: NR f32 biases, NR f32 weight scales, then for each input channel NR int8
//!   weights (k-major, so a batch-1 run streams the block once, 4x fewer bytes than f32).
//!
//! NR is 32 on AVX-512, except `qd8_f32_qc8w` on AVX512-VNNI (64), 16 on AVX2, 8 scalar.
//!
//! Two drivers:
//!
//! * `bf16_f32` on AVX-512F (bf16 widened to f32 and FMA, the default on Intel cores where
//!   `vdpbf16ps` is half-rate) and `qd8_f32_qc8w` on AVX512-VNNI, the compute-bound paths,
//!   run the K-blocked driver of `blocked/`: tiles of 12×32 (bf16) or 6×64 (qd8), 24 zmm
//!   accumulators, the packed weights streamed once per row chunk, partial sums kept
//!   between K blocks (see its docs). So does `f32_qc8w` on AVX-512 from 16 rows, each K
//!   block of its int8 weights widened to f32 once per row chunk, except on AMD (the tile
//!   kernel, its rows of A copied first when they lie a multiple of 4 KiB apart;
//!   `tuning::f32_qc8w_driver`). So does `qd8_f32_qc8w` on
//!   AVX2 (no VNNI) from six rows: A and each panel's K block widened to i16 once, 6 × 16
//!   tiles of `vpmaddwd`; and `bf16_f32` on AVX2 from six rows, widened to f32 for the f32
//!   GEMM's AVX2 microkernel.
//! * Every other (kind, ISA) runs [`run`]'s driver: N blocks of 256 KiB of packed weights
//!   (kept in L2 while every row tile of the batch passes over them), balanced row tiles of
//!   at most MR rows, and the full K in one microkernel call, epilogue included (no K
//!   blocking and no partial sums in C: simpler than the f32 driver, at the price of A rows
//!   and panels that outgrow L1/L2 for very long K). On AVX-512, batch 1 with more than
//!   16 MiB of packed weights (DRAM-bound) prefetches 16 KiB ahead into L2 (the AVX2
//!   kernels do not prefetch); `f32_qc8w` on AVX2 runs batch 1 apart, its panels read in
//!   pairs (`avx2::f32_qc8w_batch1`).
//!
//! A run is on the calling thread, or cut over a pool's threads by `parallel`.

mod isa;
mod pack;
mod parallel;
pub(crate) mod quant;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod blocked;

pub use isa::{DOT_ISA_ENV, DotIsa};
pub(crate) use isa::{Kind, choose, forced};
pub(crate) use pack::{pack_bf16, pack_f32_qc8w, pack_qd8, panel_bytes, panel_bytes_checked};
pub(crate) use parallel::run_in;

use crate::gemm::row_tiles;
#[cfg(target_arch = "x86_64")]
use crate::tuning::{self, BF16_AVX2_BLOCKED_FROM, F32Qc8wDriver, QD8_AVX2_BLOCKED_FROM};
use crate::tuning::{
    self as lowp_tuning, LOWP_GEMV_PREFETCH_ABOVE, LOWP_GEMV_PREFETCH_BYTES, LOWP_N_BLOCK_BYTES,
};

/// Per-row quantization of a qd8 activation row as the kernels read it: the zero point
/// plus 128 (the activations are stored as `q + 128`, unsigned, for `vpdpbusd`) and the
/// dequantization scale.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub(crate) struct RowQuant {
    /// `zero_point + 128`, in 0..=255.
    pub zpu: i32,
    /// Dequantization scale (`x ≈ scale · (q - zero_point)`).
    pub scale: f32,
}

/// Tile shape of one kind on one instruction set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// Most rows per microkernel call.
    pub mr: usize,
    /// Columns per panel.
    pub nr: usize,
}

/// The tile shape of `kind` on `isa`.
pub(crate) const fn shape(kind: Kind, isa: DotIsa) -> Shape {
    match (kind, isa) {
        #[cfg(target_arch = "x86_64")]
        (Kind::Qd8F32Qc8w, DotIsa::Avx512Vnni | DotIsa::Amx) => Shape {
            mr: 6,
            nr: blocked::NR_QD8,
        },
        // Two widenings (4 uops on the FMA ports) per k feed 24 FMAs instead of 16; bf16's
        // two weight loads per pair feed 24 `vdpbf16ps` (see `tuning::bf16_tile_rows`).
        (Kind::F32Qc8w, DotIsa::Avx512) | (Kind::Bf16F32, DotIsa::Avx512Bf16) => {
            Shape { mr: 12, nr: 32 }
        }
        (_, DotIsa::Avx512 | DotIsa::Avx512Vnni | DotIsa::Avx512Bf16 | DotIsa::Amx) => {
            Shape { mr: 8, nr: 32 }
        }
        (Kind::Qd8F32Qc8w, DotIsa::Avx2) => Shape { mr: 2, nr: 16 },
        (_, DotIsa::Avx2 | DotIsa::AvxVnni) => Shape { mr: 4, nr: 16 },
        (_, DotIsa::Scalar) => Shape { mr: 1, nr: 8 },
    }
}

/// One microkernel call: rows `0..mr` of A against one packed panel, the epilogue
/// (scales, bias, clamp) applied, `nvalid` columns of C written.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// Input channels (K, unpadded).
    pub k: usize,
    /// First A row: bf16 (`u16`) values, f32 values or qd8 bytes (`q + 128`, K padded to a
    /// multiple of 4 with zeros), by kind.
    pub a: *const u8,
    /// Distance between A rows in bytes.
    pub lda: usize,
    /// The packed panel (64-byte aligned).
    pub panel: *const u8,
    /// Top-left element of the C tile.
    pub c: *mut f32,
    /// Row stride of C in floats.
    pub ldc: usize,
    /// Valid columns (1..=NR).
    pub nvalid: usize,
    /// Clamp bounds.
    pub min: f32,
    /// Clamp bounds.
    pub max: f32,
    /// qd8: the quantization of each of the tile's rows; NULL for the other kinds.
    pub rows: *const RowQuant,
    /// Bytes ahead of the weights being read to prefetch into L2 (0: none).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub pf: isize,
}

/// A whole problem: the operator's packed weights and one run's buffers.
pub(crate) struct Job {
    pub kind: Kind,
    pub isa: DotIsa,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a: *const u8,
    pub lda: usize,
    pub packed: *const u8,
    pub c: *mut f32,
    pub ldc: usize,
    pub min: f32,
    pub max: f32,
    /// qd8: the rows' quantization. When `x` is not NULL, the driver writes them and the
    /// rows of `a` (both then point into the run's mutably borrowed workspace).
    pub rows: *const RowQuant,
    /// qd8 on ISAs where [`quantizes_in_driver`]: the f32 input rows (`ldx` floats apart)
    /// the driver quantizes into `a` and `rows` chunk by chunk; NULL otherwise.
    pub x: *const f32,
    pub ldx: usize,
}

/// True when the driver of `isa` quantizes qd8 rows itself (chunk by chunk, prefetching
/// the next chunk's input while it computes), so `run` must not quantize them first.
pub(crate) fn quantizes_in_driver(isa: DotIsa) -> bool {
    cfg!(target_arch = "x86_64") && matches!(isa, DotIsa::Avx512Vnni | DotIsa::Amx)
}

/// Runs `job`.
///
/// # Safety
/// `job.a` holds `m` rows at stride `lda` bytes of what `kind` reads (K bf16 values, K f32
/// values, or K bytes padded with zeros to a multiple of 4 for qd8); `job.c` holds `m` rows
/// of `n` writable floats at stride `ldc`, aliased by nothing else; `job.packed` is the
/// operator's packed block for `(kind, isa)` (64-byte aligned); for qd8 `job.rows` holds
/// `m` entries; `job.isa` is supported by this CPU and has a kernel for `kind`. For qd8 with
/// `job.x` set (only where [`quantizes_in_driver`]), the rows of `job.a` and the entries of
/// `job.rows` are writable and not yet written, and `job.x` holds `m` rows of K floats at
/// stride `ldx`.
pub(crate) unsafe fn run(job: &Job) {
    #[cfg(target_arch = "x86_64")]
    match (job.kind, job.isa) {
        // SAFETY: forwarded (caller); the panels are packed for the driver's NR (`shape`).
        (Kind::Bf16F32, DotIsa::Avx512) => return unsafe { blocked::bf16(job) },
        // SAFETY: as above.
        (Kind::Qd8F32Qc8w, DotIsa::Avx512Vnni) => return unsafe { blocked::qd8(job) },
        // SAFETY: as above; the operator holds `Amx` only where it is supported.
        (Kind::Qd8F32Qc8w, DotIsa::Amx) => return unsafe { blocked::qd8_amx(job) },
        // SAFETY: as above; the panels are packed for NR = 32 (`shape`).
        (Kind::Bf16F32, DotIsa::Amx) => return unsafe { blocked::bf16_amx(job) },
        (Kind::Bf16F32, DotIsa::Avx2) if job.m >= BF16_AVX2_BLOCKED_FROM => {
            // SAFETY: as above; the panels are packed for NR = 16 (`shape`).
            return unsafe { blocked::bf16_avx2(job) };
        }
        (Kind::Qd8F32Qc8w, DotIsa::Avx2) if job.m >= QD8_AVX2_BLOCKED_FROM => {
            // `run`'s caller quantized the rows (not in the driver on AVX2).
            // SAFETY: as above; the rows are written; the panels are packed for NR = 16.
            return unsafe { blocked::qd8_avx2(job) };
        }
        (Kind::F32Qc8w, DotIsa::Avx2) if job.m == 1 => {
            // SAFETY: as above; the panels are packed for NR = 16 (`shape`).
            return unsafe { avx2::f32_qc8w_batch1(job) };
        }
        (Kind::F32Qc8w, DotIsa::Avx512) => {
            match tuning::f32_qc8w_driver(job.m, job.lda, crate::cpu::caches()) {
                F32Qc8wDriver::Sliced => {
                    // SAFETY: as above; the panels are packed for NR = 32 (`shape`).
                    return unsafe { blocked::f32_qc8w::sliced(job) };
                }
                F32Qc8wDriver::TilesCopied => {
                    // SAFETY: as above; the panels are packed for NR = 32 (`shape`).
                    return unsafe { blocked::f32_qc8w::by_tiles(job) };
                }
                F32Qc8wDriver::Tiles => {}
            }
        }
        _ => {}
    }
    let s = shape(job.kind, job.isa);
    let mr = if job.kind == Kind::Bf16F32 {
        lowp_tuning::bf16_tile_rows(s.mr, job.lda)
    } else {
        s.mr
    };
    let panel = panel_bytes(job.kind, s.nr, job.k);
    let panels = job.n.div_ceil(s.nr);
    let total = panel * panels;
    let pf = if job.m == 1 && total > LOWP_GEMV_PREFETCH_ABOVE {
        LOWP_GEMV_PREFETCH_BYTES
    } else {
        0
    };
    let per_block = (LOWP_N_BLOCK_BYTES / panel).max(1);
    let mut p0 = 0;
    while p0 < panels {
        let p1 = (p0 + per_block).min(panels);
        for (m0, mr) in row_tiles(job.m, mr) {
            for p in p0..p1 {
                // Rows m0..m0+mr, panel p and its nvalid columns are in bounds (caller).
                // SAFETY: every pointer below stays inside the buffers described above.
                unsafe {
                    let t = Tile {
                        k: job.k,
                        a: job.a.add(m0 * job.lda),
                        lda: job.lda,
                        panel: job.packed.add(p * panel),
                        c: job.c.add(m0 * job.ldc + p * s.nr),
                        ldc: job.ldc,
                        nvalid: s.nr.min(job.n - p * s.nr),
                        min: job.min,
                        max: job.max,
                        rows: if job.rows.is_null() {
                            job.rows
                        } else {
                            job.rows.add(m0)
                        },
                        pf,
                    };
                    tile(job.kind, job.isa, mr, &t);
                }
            }
        }
        p0 = p1;
    }
}

/// Dispatches one tile.
///
/// # Safety
/// See [`run`]; `1 <= mr <= shape(kind, isa).mr`.
#[inline]
unsafe fn tile(kind: Kind, isa: DotIsa, mr: usize, t: &Tile) {
    // SAFETY: forwarded; operators only hold an ISA that is supported and has a kernel for their kind (checked by `choose` at create).
    unsafe {
        match (kind, isa) {
            #[cfg(target_arch = "x86_64")]
            (Kind::Bf16F32, DotIsa::Avx512Bf16) => avx512::bf16(mr, t),
            #[cfg(target_arch = "x86_64")]
            (Kind::Qd8F32Qc8w, DotIsa::Avx512Vnni | DotIsa::Amx)
            | (Kind::Bf16F32, DotIsa::Avx512 | DotIsa::Amx) => {
                unreachable!("run by the K-blocked driver")
            }
            #[cfg(target_arch = "x86_64")]
            (Kind::F32Qc8w, DotIsa::Avx512) => avx512::f32_qc8w(mr, t),
            #[cfg(target_arch = "x86_64")]
            (Kind::Bf16F32, DotIsa::Avx2) => avx2::bf16(mr, t),
            #[cfg(target_arch = "x86_64")]
            (Kind::Qd8F32Qc8w, DotIsa::Avx2) => avx2::qd8(mr, t),
            #[cfg(target_arch = "x86_64")]
            (Kind::Qd8F32Qc8w, DotIsa::AvxVnni) => avx2::qd8_vnni(mr, t),
            #[cfg(target_arch = "x86_64")]
            (Kind::F32Qc8w, DotIsa::Avx2) => avx2::f32_qc8w(mr, t),
            (Kind::Bf16F32, _) => scalar::bf16(mr, t),
            (Kind::Qd8F32Qc8w, _) => scalar::qd8(mr, t),
            (Kind::F32Qc8w, _) => scalar::f32_qc8w(mr, t),
        }
    }
}
