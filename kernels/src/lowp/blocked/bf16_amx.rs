//! `bf16_f32` on AMX-BF16: `tdpbf16ps` blocks of 32 (or 16) rows over K rounded down to
//! 32, the AVX-512 microkernel adding the K tail and clamping.

use super::super::{Job, Kind, amx, panel_bytes};
use super::bf16::{MR, NR, ROW, bf16, bf16_tile, widen};
use super::{Blk, Tiles};
use crate::tuning::{AMX_A_BYTES, AMX_MC};

/// A 32 × 32 block of f32 on the stack, 64-byte aligned.
#[repr(C, align(64))]
struct Block32([f32; 32 * 32]);

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
// Its stack buffers stay out of `lowp::run`'s frame (see the module docs).
#[inline(never)]
pub(crate) unsafe fn bf16_amx(job: &Job) {
    use amx::BLOCK_ROWS;
    static CONFIG: amx::Config = amx::Config::new();
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
    unsafe { amx::load(&CONFIG) };
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
            for (m0, height) in amx::row_blocks(rows) {
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
                        amx::block_bf16(a, job.lda, w, groups, bias, dst, ld);
                    } else {
                        amx::block_bf16_16(a, job.lda, w, groups, bias, dst, ld);
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
                            w: base.add(ROW + amx_pairs * ROW),
                            steps: pairs - amx_pairs,
                            c: c.add(t0 * job.ldc),
                            ..Blk::panel(job, base, nvalid)
                        };
                        bf16_tile(mr, &b);
                    }
                }
            }
        }
        r0 += rows;
    }
    // SAFETY: as above.
    unsafe { amx::release() };
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
