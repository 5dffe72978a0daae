//! The K-blocked AVX-512 driver and microkernels of `bf16_f32` (widened to f32 and FMA) and
//! `qd8_f32_qc8w` (AVX512-VNNI `vpdpbusd`), the compute-bound paths. Tiles hold 24 zmm
//! accumulators, A operands are broadcast straight from memory (a load, no shuffle port),
//! and one or two rows (batch 1 or 2, bound by memory) split each accumulator into four or
//! two independent chains.
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
//! Above 1 MiB of packed weights the first row tiles of each slice prefetch the next slice
//! into L2, one line a step each (two tiles for bf16, four for qd8: measured here, better
//! than one tile prefetching whole steps), except for the fewest rows (see [`blocked_prefetches`]).

use core::arch::x86_64::*;

use super::{DotIsa, Job, Kind, RowQuant, panel_bytes, quant};
use crate::tuning::{QD8_A_BYTES, blocked_prefetches};

/// bf16: columns per panel (the packing's NR on AVX-512).
const NR: usize = super::shape(Kind::Bf16F32, DotIsa::Avx512Bf16).nr;
/// bf16: most rows per tile (12 × 2 = 24 zmm accumulators).
const MR: usize = 12;
/// bf16: packed pairs per K block of a full chunk: a 16 KiB slice of one panel.
const KC_WORDS: usize = 128;
/// bf16: rows per chunk of A widened to f32 on the stack.
const MC_BF16: usize = 48;
/// Floats between the widened A rows of a bf16 chunk: 2·KC_WORDS plus one cache line, so
/// the rows of a tile fall in different L1 sets.
const CHUNK_LD: usize = 2 * KC_WORDS + 16;
/// qd8: columns per panel (four zmm per tile row).
pub(super) const NR_QD8: usize = 64;
/// qd8: most rows per tile (6 × 4 = 24 zmm accumulators).
const MR_QD8: usize = 6;
/// qd8: 4-byte words per K block (K = 4096): longer calls beat L1-sized slices here.
const KC_QD8: usize = 1024;
/// qd8: most rows per chunk (their partial sums: 64 KiB of stack). 256 read 0.99-1.06x
/// oneDNN where 128 read 0.92-0.98x at 256x512x2048 and 512x512x2048 (docs/bench-history.md).
const QD8_MC: usize = 256;

/// Aligned stack storage of a qd8 chunk's i32 partial sums.
#[repr(C, align(64))]
struct Partial([i32; QD8_MC * NR_QD8]);

/// bf16: bytes of one packed pair row of a panel.
const ROW: usize = 4 * NR;

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

/// The mask of the first `n` (0..=16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// Aligned stack storage of the widened A chunk.
#[repr(C, align(64))]
struct Chunk([f32; MC_BF16 * CHUNK_LD]);

/// Runs a `bf16_f32` job on AVX-512F (FMA on widened bf16).
///
/// # Safety
/// As `lowp::run`, with `job.isa` AVX-512 and the panels packed for NR = 32.
pub(super) unsafe fn bf16(job: &Job) {
    let panel = panel_bytes(Kind::Bf16F32, NR, job.k);
    let panels = job.n.div_ceil(NR);
    let pairs = job.k.div_ceil(2);
    let prefetch = blocked_prefetches(job.m, 2, panel * panels);
    // Uninitialized: each row's slice is written (widen) before the kernels read it.
    let mut chunk = core::mem::MaybeUninit::<Chunk>::uninit();
    let chunk_ptr = chunk.as_mut_ptr().cast::<f32>();
    // Fewer rows than a full chunk take longer K blocks in the same buffer (batch 1: K up to
    // 13,040 in one block, so each panel streams in one sequential pass).
    let kc = (MC_BF16 * CHUNK_LD / MC_BF16.min(job.m) - 16) / 2;
    let ld = 2 * kc + 16;
    let lda = ld * size_of::<f32>();
    let mut r0 = 0;
    while r0 < job.m {
        let rows = MC_BF16.min(job.m - r0);
        let tiles = Tiles::new(rows, MR);
        let mut q0 = 0;
        while q0 < pairs {
            let q1 = (q0 + kc).min(pairs);
            let vals = (2 * q1).min(job.k) - 2 * q0;
            for r in 0..rows {
                // SAFETY: row r0 + r of A holds k bf16 values (caller), values 2·q0.. of it are read; the chunk row holds ld floats (rows · ld <= MC_BF16 · CHUNK_LD) and `vals + 1 <= 2·kc` are written.
                unsafe {
                    widen(
                        job.a.add((r0 + r) * job.lda + 4 * q0).cast(),
                        vals,
                        chunk_ptr.add(r * ld),
                    );
                }
            }
            for p in 0..panels {
                // SAFETY: panel p and its slice q0..q1 are inside the packed block; the next slice's address is only prefetched.
                let (base, next) = unsafe {
                    let base = job.packed.add(p * panel);
                    let next = if p + 1 < panels {
                        base.add(panel + ROW + q0 * ROW)
                    } else {
                        job.packed.add(ROW + q1 * ROW)
                    };
                    (base, next)
                };
                for (i, (m0, mr)) in tiles.iter().enumerate() {
                    // SAFETY: rows r0+m0.. of C and of the chunk, and the panel's columns, are in bounds (caller).
                    unsafe {
                        let b = Blk {
                            a: chunk_ptr.add(m0 * ld).cast_const().cast(),
                            lda,
                            panel: base,
                            w: base.add(ROW + q0 * ROW),
                            steps: q1 - q0,
                            c: job.c.add((r0 + m0) * job.ldc + p * NR),
                            ldc: job.ldc,
                            nvalid: NR.min(job.n - p * NR),
                            first: q0 == 0,
                            last: q1 == pairs,
                            min: job.min,
                            max: job.max,
                            rows: core::ptr::null(),
                            // One line a step: tiles 0 and 1 cover the two halves of the
                            // next slice.
                            pf: if prefetch && i < 2 {
                                next.wrapping_add(64 * i * (q1 - q0))
                            } else {
                                core::ptr::null()
                            },
                            part: core::ptr::null_mut(),
                        };
                        bf16_tile(mr, &b);
                    }
                }
            }
            q0 = q1;
        }
        r0 += rows;
    }
}

/// A 32 × 32 block of f32 on the stack, 64-byte aligned.
#[repr(C, align(64))]
struct Block32([f32; 32 * 32]);

/// bf16 on AMX: most rows per chunk (a multiple of 32), within [`AMX_A_BYTES`] of A. A
/// chunk reads every panel once, so fewer chunks stream the weights fewer times; 256 beat
/// 128 and 512 on the Xeon (docs/bench-history.md).
const AMX_MC: usize = 256;

/// bf16 on AMX: most bytes of A per chunk (it stays in L2 while the panels pass).
const AMX_A_BYTES: usize = 1 << 20;

/// bf16 on AMX: the widened K tails (under 32 values) of a chunk's rows, 32 floats each.
#[repr(C, align(64))]
struct Tail([f32; AMX_MC * 32]);

/// Runs a `bf16_f32` job on AMX-BF16: every block of 32 rows (then one of 16) is multiplied
/// by `tdpbf16ps` over K rounded down to 32, straight from the bf16 input, each output
/// starting from its bias (see `amx::block_bf16`); the AVX-512 microkernel then adds the
/// rest of K (widened, under 32 values) and clamps. The rows left over run [`bf16()`].
///
/// # Safety
/// As [`bf16()`], and `amx::supported()` returned true.
pub(super) unsafe fn bf16_amx(job: &Job) {
    use super::amx::BLOCK_ROWS;
    static CONFIG: super::amx::Config = super::amx::Config::new();
    let groups = job.k / 32;
    let amx_rows = if groups == 0 {
        0
    } else {
        job.m / BLOCK_ROWS * BLOCK_ROWS + (job.m % BLOCK_ROWS) / 16 * 16
    };
    if amx_rows == 0 {
        // SAFETY: forwarded (caller).
        return unsafe { bf16(job) };
    }
    let panel = panel_bytes(Kind::Bf16F32, NR, job.k);
    let panels = job.n.div_ceil(NR);
    let pairs = job.k.div_ceil(2);
    let amx_pairs = 16 * groups;
    let tail_vals = job.k - 32 * groups;
    let unclamped = job.min == f32::NEG_INFINITY && job.max == f32::INFINITY;
    let mut tail = core::mem::MaybeUninit::<Tail>::uninit();
    let tail = tail.as_mut_ptr().cast::<f32>();
    let mut scratch = core::mem::MaybeUninit::<Block32>::uninit();
    let scratch = scratch.as_mut_ptr().cast::<f32>();
    // SAFETY: AMX is supported and permitted (caller); the configuration is valid.
    unsafe { super::amx::load(&CONFIG) };
    let chunk = (AMX_A_BYTES / job.lda / 32 * 32).clamp(32, AMX_MC);
    // Chunks of up to `chunk` rows (their bf16 A, read once per panel, stays in L2); in each,
    // panel by panel, every row block of the chunk (each panel read once per chunk).
    let mut r0 = 0;
    while r0 < amx_rows {
        let rows = chunk.min(amx_rows - r0);
        for r in 0..rows {
            // SAFETY: row r0 + r of A holds K bf16 values, of which the last `tail_vals` are read; the tail row holds 32 floats and `tail_vals + 1 <= 32` are written.
            unsafe {
                widen(
                    job.a.add((r0 + r) * job.lda + 64 * groups).cast(),
                    tail_vals,
                    tail.add(32 * r),
                );
            }
        }
        for p in 0..panels {
            let nvalid = NR.min(job.n - p * NR);
            for (m0, height) in super::amx::row_blocks(rows) {
                // Rows r0 + m0 .. + height of A and C, panel p and its columns are in
                // bounds (caller); a partial panel goes through the scratch block, whose
                // rows are then copied to C's valid columns.
                // SAFETY: as above; the configuration is loaded.
                unsafe {
                    let base = job.packed.add(p * panel);
                    let c = job.c.add((r0 + m0) * job.ldc + p * NR);
                    let (dst, ld) = if nvalid == NR {
                        (c, job.ldc * size_of::<f32>())
                    } else {
                        (scratch, 32 * size_of::<f32>())
                    };
                    let a = job.a.add((r0 + m0) * job.lda);
                    let w = base.add(ROW);
                    let bias = base.cast::<f32>();
                    if height == BLOCK_ROWS {
                        super::amx::block_bf16(a, job.lda, w, groups, bias, dst, ld);
                    } else {
                        super::amx::block_bf16_16(a, job.lda, w, groups, bias, dst, ld);
                    }
                    if nvalid < NR {
                        for r in 0..height {
                            core::ptr::copy_nonoverlapping(
                                scratch.add(32 * r),
                                c.add(r * job.ldc),
                                nvalid,
                            );
                        }
                    }
                    // Nothing left to add or clamp: the tiles wrote C's final values.
                    let done = pairs == amx_pairs && unclamped;
                    for (t0, mr) in Tiles::new(height, MR).iter().filter(|_| !done) {
                        let b = Blk {
                            a: tail.add(32 * (m0 + t0)).cast_const().cast(),
                            lda: 32 * size_of::<f32>(),
                            panel: base,
                            w: base.add(ROW + amx_pairs * ROW),
                            steps: pairs - amx_pairs,
                            c: c.add(t0 * job.ldc),
                            ldc: job.ldc,
                            nvalid,
                            first: false,
                            last: true,
                            min: job.min,
                            max: job.max,
                            rows: core::ptr::null(),
                            pf: core::ptr::null(),
                            part: core::ptr::null_mut(),
                        };
                        bf16_tile(mr, &b);
                    }
                }
            }
        }
        r0 += rows;
    }
    // SAFETY: as above.
    unsafe { super::amx::release() };
    if amx_rows < job.m {
        let rest = Job {
            m: job.m - amx_rows,
            // SAFETY: row `amx_rows` < m is inside A and C (caller).
            a: unsafe { job.a.add(amx_rows * job.lda) },
            // SAFETY: as above.
            c: unsafe { job.c.add(amx_rows * job.ldc) },
            ..*job
        };
        // SAFETY: the remaining rows of the same job.
        unsafe { bf16(&rest) };
    }
}

/// Widens `n` bf16 values at `src` to f32 at `dst`, then writes one zero after them when
/// `n` is odd (the missing half of the last pair, whose packed weight is zero too).
///
/// # Safety
/// `src` holds `n` values, `dst` `n + 1` writable floats; the CPU has AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn widen(src: *const u16, n: usize, dst: *mut f32) {
    // Masked-off lanes are neither read nor written.
    // SAFETY: every access is within `src[..n]` or `dst[..n + 1]`.
    unsafe {
        let mut i = 0;
        while i < n {
            let m = lanes(n - i);
            let v = _mm256_maskz_loadu_epi16(m, src.add(i).cast());
            let f = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v));
            _mm512_mask_storeu_ps(dst.add(i), m, _mm512_castsi512_ps(f));
            i += 16;
        }
        if n % 2 == 1 {
            dst.add(n).write(0.0);
        }
    }
}

/// Dispatches `mr` rows to `$kernel::<R, U>`: U independent chains per accumulator (four
/// for one row, two for two, else one), each a separate array so the accumulators stay in
/// registers.
macro_rules! by_rows {
    ($kernel:ident, $mr:expr, $b:expr) => {
        match $mr {
            1 => $kernel::<1, 4>($b),
            2 => $kernel::<2, 2>($b),
            3 => $kernel::<3, 1>($b),
            4 => $kernel::<4, 1>($b),
            5 => $kernel::<5, 1>($b),
            6 => $kernel::<6, 1>($b),
            7 => $kernel::<7, 1>($b),
            8 => $kernel::<8, 1>($b),
            9 => $kernel::<9, 1>($b),
            10 => $kernel::<10, 1>($b),
            11 => $kernel::<11, 1>($b),
            _ => $kernel::<12, 1>($b),
        }
    };
}

/// # Safety
/// `b` describes valid buffers, `1 <= mr <= MR`, and the CPU has AVX-512F.
unsafe fn bf16_tile(mr: usize, b: &Blk) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(bf16_n, mr, b) }
}

/// # Safety
/// As [`bf16_tile`], with `R` rows and `U` chains.
// Indexed loops with constant bounds: they unroll, and the accumulators stay in registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn bf16_n<const R: usize, const U: usize>(b: &Blk) {
    let u = U;
    // A: R rows of 2·steps floats at stride lda; the slice: steps rows of 128 bytes; C: R rows of nvalid floats; the header's first 32 floats are the biases.
    // SAFETY: every load and store below stays inside those; prefetches never fault.
    unsafe {
        // Chain 0 starts from the bias (first block: the C loads are masked off entirely)
        // or from the partial sums in C; the other chains from zero.
        let p = b.panel.cast::<f32>();
        let bias = [_mm512_load_ps(p), _mm512_load_ps(p.add(16))];
        let m = if b.first { 0 } else { b.nvalid };
        let start = |r: usize, h: usize| {
            let c = b.c.add(r * b.ldc).wrapping_add(16 * h);
            _mm512_mask_loadu_ps(bias[h], lanes(m.saturating_sub(16 * h)), c)
        };
        let mut acc = [[[_mm512_setzero_ps(); 2]; R]; U];
        for r in 0..R {
            acc[0][r] = [start(r, 0), start(r, 1)];
        }
        let hi = _mm512_set1_epi32(0xffff_0000u32 as i32);
        let x = |r: usize, s: usize, h: usize| {
            _mm512_set1_ps(b.a.add(r * b.lda + 8 * s + 4 * h).cast::<f32>().read())
        };
        let mut w = b.w;
        let mut s = 0;
        while s + u <= b.steps {
            for c in 0..u {
                let wc = w.add(ROW * c);
                if !b.pf.is_null() {
                    _mm_prefetch::<_MM_HINT_T1>(b.pf.wrapping_add(64 * (s + c)).cast());
                }
                let v0 = _mm512_load_si512(wc.cast());
                let v1 = _mm512_load_si512(wc.add(64).cast());
                let e0 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v0));
                let e1 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v1));
                let o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
                let o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
                for (r, acc) in acc[c].iter_mut().enumerate() {
                    let xe = x(r, s + c, 0);
                    acc[0] = _mm512_fmadd_ps(xe, e0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xe, e1, acc[1]);
                    let xo = x(r, s + c, 1);
                    acc[0] = _mm512_fmadd_ps(xo, o0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xo, o1, acc[1]);
                }
            }
            w = w.add(ROW * u);
            s += u;
        }
        while s < b.steps {
            let v0 = _mm512_load_si512(w.cast());
            let v1 = _mm512_load_si512(w.add(64).cast());
            let e0 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v0));
            let e1 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v1));
            let o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
            let o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let xe = x(r, s, 0);
                acc[0] = _mm512_fmadd_ps(xe, e0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xe, e1, acc[1]);
                let xo = x(r, s, 1);
                acc[0] = _mm512_fmadd_ps(xo, o0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xo, o1, acc[1]);
            }
            w = w.add(ROW);
            s += 1;
        }
        let (lo, hi) = (_mm512_set1_ps(b.min), _mm512_set1_ps(b.max));
        // Unbounded: the clamp is the identity (NaN included), skip it.
        let clamp = b.min != f32::NEG_INFINITY || b.max != f32::INFINITY;
        for r in 0..R {
            let mut v = acc[0][r];
            for chain in acc.iter().take(u).skip(1) {
                v = [
                    _mm512_add_ps(v[0], chain[r][0]),
                    _mm512_add_ps(v[1], chain[r][1]),
                ];
            }
            let c = b.c.add(r * b.ldc);
            for (h, v) in v.into_iter().enumerate() {
                // Clamp with NaN propagating (as the other kernels).
                let v = if b.last && clamp {
                    _mm512_min_ps(hi, _mm512_max_ps(lo, v))
                } else {
                    v
                };
                _mm512_mask_storeu_ps(
                    c.wrapping_add(16 * h),
                    lanes(b.nvalid.saturating_sub(16 * h)),
                    v,
                );
            }
        }
    }
}

/// Runs a `qd8_f32_qc8w` job on AVX512-VNNI.
///
/// # Safety
/// As `lowp::run`, with `job.isa` AVX512-VNNI and the panels packed for NR = [`NR_QD8`].
pub(super) unsafe fn qd8(job: &Job) {
    // SAFETY: forwarded (caller); AVX512-VNNI kernels only.
    unsafe { qd8_with(job, false) }
}

/// Runs a `qd8_f32_qc8w` job on AMX-INT8: [`qd8`] with the rows of every full block of 32
/// (or 16) multiplied by `tdpbusd` over K rounded up to 64 (see `amx`).
///
/// # Safety
/// As [`qd8`], and `amx::supported()` returned true.
pub(super) unsafe fn qd8_amx(job: &Job) {
    static CONFIG: super::amx::Config = super::amx::Config::new();
    if job.m < 16 || job.k < 4 * super::amx::STEP_WORDS {
        // No full tile: the VNNI path alone, without configuring (and releasing) the tiles,
        // which would cost a batch-1 run more than its arithmetic.
        // SAFETY: forwarded (caller).
        return unsafe { qd8_with(job, false) };
    }
    // SAFETY: AMX is supported and permitted (caller); the configuration is valid.
    unsafe { super::amx::load(&CONFIG) };
    // SAFETY: forwarded (caller); the configuration is loaded on this thread.
    unsafe { qd8_with(job, true) };
    // SAFETY: as above.
    unsafe { super::amx::release() };
}

/// Quantizes the rows `rows` of a qd8 job as the driver would (`job.x` set): their bytes
/// into A, each zero-padded to a whole AMX tile step, and their parameters; a later run of
/// the job with `x` NULL then reads them.
///
/// # Safety
/// As [`qd8`] with `job.x` set, and `rows` within `0..job.m`.
pub(super) unsafe fn qd8_prepare(job: &Job, rows: core::ops::Range<usize>) {
    use super::amx::STEP_WORDS;
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
    use super::amx::{BLOCK_ROWS, STEP_WORDS};
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
    // Uninitialized: the first K block of every tile writes its rows before any read.
    let mut part = core::mem::MaybeUninit::<Partial>::uninit();
    let part = part.as_mut_ptr().cast::<i32>();
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
            for (m0, height) in super::amx::row_blocks(amx_rows) {
                pf_x.step();
                // Rows r0+m0 .. +height of A, their partial sums, and the panel's first
                // `amx_words` word rows are in bounds (caller; `groups` words fit in K).
                // SAFETY: as above; the configuration is loaded (`amx`: caller).
                unsafe {
                    let a = job.a.add((r0 + m0) * job.lda);
                    let w = base.add(3 * row);
                    let part = part.add(m0 * NR_QD8);
                    if height == BLOCK_ROWS {
                        super::amx::block(a, job.lda, w, groups, part);
                    } else {
                        super::amx::block16(a, job.lda, w, groups, part);
                    }
                }
                // The epilogue (no K left: zero steps), six rows a call.
                for (t0, mr) in Tiles::new(height, MR_QD8).iter() {
                    let m = m0 + t0;
                    // No A or weight is read (zero steps).
                    // SAFETY: rows r0+m.. of C, row parameters and sums, the header: in bounds.
                    unsafe {
                        let b = Blk {
                            a: job.a.add((r0 + m) * job.lda),
                            lda: job.lda,
                            panel: base,
                            w: base.add(3 * row),
                            steps: 0,
                            c: job.c.add((r0 + m) * job.ldc + p * NR_QD8),
                            ldc: job.ldc,
                            nvalid,
                            first: false,
                            last: true,
                            min: job.min,
                            max: job.max,
                            rows: job.rows.add(r0 + m),
                            pf: core::ptr::null(),
                            part: part.add(m * NR_QD8),
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
                            lda: job.lda,
                            panel: base,
                            w: base.add(3 * row + q0 * row),
                            steps: q1 - q0,
                            c: job.c.add((r0 + m0) * job.ldc + p * NR_QD8),
                            ldc: job.ldc,
                            nvalid: NR_QD8.min(job.n - p * NR_QD8),
                            first: q0 == 0,
                            last: q1 == words,
                            min: job.min,
                            max: job.max,
                            rows: job.rows.add(r0 + m0),
                            // One line a step: tile i covers the i-th run of `steps` lines
                            // of the next slice (spread over the first four tiles).
                            pf: if prefetch && i < spread && (p + 1 < panels || q1 < words) {
                                next.wrapping_add(64 * i * (q1 - q0))
                            } else {
                                core::ptr::null()
                            },
                            part: part.add(m0 * NR_QD8),
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

#[cfg(test)]
mod tests {
    use keepalloc_allocators::{AllocatorTable, System};

    use crate::{
        DotIsa, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedQd8F32Qc8w,
        FullyConnectedQd8F32Qc8wDesc, bf16_from_f32, bf16_to_f32,
    };

    static SYSTEM: System = System;
    static TABLE: AllocatorTable = AllocatorTable::for_allocator(&SYSTEM);

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn only_enough_rows_over_a_mebibyte_of_weights_prefetch() {
        // The rule only changes speed (prefetches never change a result), so the rule
        // itself is what is pinned.
        use super::{MR_QD8, blocked_prefetches};
        assert!(!blocked_prefetches(1, 2, 64 << 20), "bf16 batch 1 streams");
        assert!(blocked_prefetches(2, 2, (1 << 20) + 1));
        assert!(
            !blocked_prefetches(2, 2, 1 << 20),
            "weights that stay in L2"
        );
        assert!(
            !blocked_prefetches(5, MR_QD8, 64 << 20),
            "qd8 below a full tile streams"
        );
        assert!(blocked_prefetches(6, MR_QD8, 2 << 20));
        assert!(blocked_prefetches(128, MR_QD8, 16 << 20));
    }

    #[test]
    fn bf16_row_chunks_and_k_blocks_match_the_f64_reference() {
        // 100 rows: three chunks of widened A (48, 48, 4); K = 601: three K blocks, the
        // last with an odd tail; N = 70: an N edge; strided rows.
        if !DotIsa::Avx512.is_supported() {
            return;
        }
        check_bf16(DotIsa::Avx512, 100, 601, 70, 605, 73);
    }

    #[test]
    fn bf16_amx_blocks_edges_and_k_tails_match_the_f64_reference() {
        // Rows: under one 16-row block, exact 16/32-row blocks, blocks plus AVX-512 rows;
        // K: under one 32-value step (no AMX), exact steps, steps plus an odd tail; N: full
        // panels (stored straight to C) and partial ones (through the scratch block);
        // strided rows.
        if !DotIsa::Amx.is_supported() {
            eprintln!("AMX not available here: test skipped");
            return;
        }
        for &(m, k, n, lda, ldc) in &[
            (15, 100, 70, 100, 70),
            (16, 32, 32, 32, 32),
            (17, 64, 40, 70, 41),
            (32, 31, 64, 31, 64),
            (32, 601, 70, 605, 73),
            (50, 1000, 33, 1000, 33),
            (100, 601, 70, 605, 73),
        ] {
            check_bf16(DotIsa::Amx, m, k, n, lda, ldc);
        }
    }

    /// Runs a bf16 operator on `isa` and checks every output against the f64 sum with the
    /// rounding rule's bound: `(K + 2) · ε · Σ|terms|`.
    fn check_bf16(isa: DotIsa, m: usize, k: usize, n: usize, lda: usize, ldc: usize) {
        let x: Vec<u16> = values(m * lda, 1)
            .iter()
            .map(|&v| bf16_from_f32(v))
            .collect();
        let w: Vec<u16> = values(n * k, 2).iter().map(|&v| bf16_from_f32(v)).collect();
        let bias = values(n, 3);
        let op = FullyConnectedBf16F32::create_with_table(
            &TABLE,
            &FullyConnectedBf16F32Desc::new(k, n, &w)
                .with_bias(&bias)
                .with_strides(lda, ldc)
                .with_range(-30.0, 30.0)
                .with_isa(isa),
        )
        .unwrap();
        let mut y = vec![f32::NAN; (m - 1) * ldc + n];
        op.run(m, &x, &mut y).unwrap();
        let eps = f64::from(f32::EPSILON);
        for r in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (f64::from(bias[j]), f64::from(bias[j].abs()));
                for kk in 0..k {
                    let p = f64::from(bf16_to_f32(x[r * lda + kk]))
                        * f64::from(bf16_to_f32(w[j * k + kk]));
                    s += p;
                    t += p.abs();
                }
                let want = s.clamp(-30.0, 30.0);
                let got = f64::from(y[r * ldc + j]);
                assert!(
                    (got - want).abs() <= (k as f64 + 2.0) * eps * t,
                    "{isa} {m}x{k}x{n} row {r} column {j}: {got} against {want}"
                );
            }
        }
    }

    #[test]
    fn qd8_k_blocks_and_row_chunks_are_bit_identical_to_scalar() {
        // K = 4500: two K blocks with partial sums on the stack; 140 rows: two row chunks
        // of at most 128 (the stack partial sums); N = 130: an N edge in the third panel.
        if !DotIsa::Avx512Vnni.is_supported() {
            return;
        }
        qd8_matches_scalar(DotIsa::Avx512Vnni, 140, 4500, 130);
    }

    #[test]
    fn qd8_amx_blocks_edges_and_k_tails_are_bit_identical_to_scalar() {
        // Rows: under one 16-row block, exact 16/32-row blocks, blocks plus VNNI rows, and
        // two row chunks (140); K: under one 64-value step (no AMX), exact steps, and steps
        // whose last one reaches past K (into the next panel, or the slack after the last
        // one, against zeroed activation bytes: the workspace starts full of garbage); N:
        // one full panel and an edge.
        if !DotIsa::Amx.is_supported() {
            eprintln!("AMX-INT8 not available here: test skipped");
            return;
        }
        for &(m, k, n) in &[
            (15, 256, 64),
            (16, 256, 64),
            (17, 100, 130),
            (32, 64, 64),
            (33, 1000, 130),
            (48, 60, 64),
            (50, 4500, 130),
            (140, 257, 70),
        ] {
            qd8_matches_scalar(DotIsa::Amx, m, k, n);
        }
    }

    /// Runs a qd8 operator on `isa` and on the scalar kernels, each with a workspace full
    /// of garbage, and requires bit-identical outputs.
    fn qd8_matches_scalar(isa: DotIsa, m: usize, k: usize, n: usize) {
        let x = values(m * k, 8 + m as u64);
        let w: Vec<i8> = values(n * k, 9 + k as u64)
            .iter()
            .map(|&v| (v * 127.0) as i8)
            .collect();
        let scales: Vec<f32> = values(n, 6).iter().map(|v| v.abs() / 64.0 + 1e-3).collect();
        let bias = values(n, 7);
        let run = |isa: DotIsa| {
            let op = FullyConnectedQd8F32Qc8w::create_with_table(
                &TABLE,
                &FullyConnectedQd8F32Qc8wDesc::new(k, n, &w, &scales)
                    .with_bias(&bias)
                    .with_range(-2.0, 3.0)
                    .with_isa(isa),
            )
            .unwrap();
            let mut ws = vec![0xab_u8; op.workspace_size(m).unwrap()];
            let mut y = vec![f32::NAN; m * n];
            op.run(m, &x, &mut y, &mut ws).unwrap();
            y
        };
        let (got, scalar) = (run(isa), run(DotIsa::Scalar));
        for (i, (a, b)) in got.iter().zip(&scalar).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{isa} {m}x{k}x{n} output {i}: {a} against {b}"
            );
        }
    }
}
