//! `fully_connected_nc_qd8_f32_qc8w`: f32 activations quantized dynamically per row to
//! int8 inside the operator, int8 weights with one f32 scale per output channel, f32
//! output with bias and clamp.

use super::desc::FcDesc;
use super::kind::Qd8F32Qc8w;
use super::lowp_common::FcLowp;
use crate::buffer::ALIGNMENT;
use crate::error::KernelError;
use crate::lowp::{self, Job, Kind, RowQuant, quant};
use crate::pool::Parallel;

/// One row's dynamic quantization, laid out as XNNPACK's `struct xnn_quantization_params`:
/// `x ≈ scale · (q - zero_point)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Qd8Params {
    /// Zero point, in -128..=127.
    pub zero_point: i32,
    /// Dequantization scale (`1 / inv_scale`, see [`quantize_qd8`]).
    pub scale: f32,
}

/// Quantizes one row of finite floats to int8 with the operator's rule (XNNPACK's qd8
/// rule, spelled out in the `lowp::quant` docs: the range always includes 0,
/// `inv_scale = 255 / (max - min)`, the zero point from the end with the smaller error,
/// `q = clamp(round_ne(x · inv_scale) + zero_point, -128, 127)`). `out` must hold at least
/// `row.len()` values; the operator's SIMD quantizer produces the same bits.
pub fn quantize_qd8(row: &[f32], out: &mut [i8]) -> Qd8Params {
    assert!(
        out.len() >= row.len(),
        "quantize_qd8: output shorter than the row"
    );
    let (mut lo, mut hi) = (0.0f32, 0.0f32);
    for &v in row {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let (zero_point, inv) = quant::params(lo, hi);
    for (o, &v) in out.iter_mut().zip(row) {
        *o = quant::quantize(v, inv, zero_point);
    }
    Qd8Params {
        zero_point,
        scale: 1.0 / inv,
    }
}

/// Everything `xnn_create_fully_connected_nc_qd8_f32_qc8w` takes: int8 weights with one
/// positive finite scale per output channel; K at most 65,536 (see
/// [`FullyConnectedQd8F32Qc8w`]).
pub type FullyConnectedQd8F32Qc8wDesc<'a> = FcDesc<'a, Qd8F32Qc8w>;

/// The dynamically quantized int8 fully-connected operator:
/// `y[m][n] = clamp(sₘ · wsₙ · Σₖ (q[m][k] - zₘ) · W[n][k] + b[n], min, max)`, where row `m`
/// of the f32 input is quantized by [`quantize_qd8`] to `q[m]` with zero point `zₘ` and
/// scale `sₘ` as part of the run, and `wsₙ` is channel `n`'s weight scale. The integer sum
/// is exact (K ≤ 65,536); the result is then rounded in f32 (`i32 → f32`, `sₘ · wsₙ`, one
/// fused multiply-add with the bias).
///
/// Quantized activations need scratch: like XNNPACK's workspace, the caller provides it
/// ([`workspace_size`](Self::workspace_size) bytes for a batch, any alignment) and `run`
/// allocates nothing. One workspace per concurrent run.
pub type FullyConnectedQd8F32Qc8w = FcLowp<Qd8F32Qc8w>;

impl FcLowp<Qd8F32Qc8w> {
    /// Bytes between quantized rows in the workspace: K rounded up to an odd number of
    /// cache lines, so the rows of a tile (read together, 4 bytes each per step) fall in
    /// different L1 sets instead of all in one when K is a multiple of 4 KiB.
    fn row_bytes(&self) -> usize {
        let lines = self.core.geometry.k.div_ceil(ALIGNMENT);
        (lines | 1) * ALIGNMENT
    }

    /// Workspace bytes a run of `batch` rows needs: the quantized rows (K bytes each,
    /// rounded up to an odd multiple of 64), 8 bytes of parameters per row, and 64 bytes of alignment slack.
    pub fn workspace_size(&self, batch: usize) -> Result<usize, KernelError> {
        let overflow = KernelError::BatchOverflow { batch };
        let params = batch
            .checked_mul(size_of::<RowQuant>())
            .and_then(|b| b.checked_next_multiple_of(ALIGNMENT))
            .ok_or(overflow)?;
        batch
            .checked_mul(self.row_bytes())
            .and_then(|b| b.checked_add(params))
            .and_then(|b| b.checked_add(ALIGNMENT))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(overflow)
    }

    /// Quantizes `batch` f32 rows (`input_stride` apart) into `workspace` and computes the
    /// output rows (`output_stride` apart; only the first `output_channels` of each are
    /// written). `workspace` must hold [`workspace_size(batch)`](Self::workspace_size)
    /// bytes; its contents on entry do not matter. A batch of 0 does nothing. Never
    /// allocates.
    pub fn run(
        &self,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        workspace: &mut [u8],
    ) -> Result<(), KernelError> {
        self.execute(batch, input, output, workspace, None)
    }

    /// [`run`](Self::run) on `pool`, a [`ThreadPool`](crate::ThreadPool) or a runtime's own
    /// [`Parallel`] implementation, with as many threads as it has: the output panels (or,
    /// for a tall batch, its rows in units of 32) are shared out, and the result is
    /// bit-identical to a one-thread run. Never allocates; the input is quantized on the pool too. A pool that skips tasks gets
    /// [`KernelError::ParallelIncomplete`].
    pub fn run_in(
        &self,
        pool: &dyn Parallel,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        workspace: &mut [u8],
    ) -> Result<(), KernelError> {
        self.execute(batch, input, output, workspace, Some(pool))
    }

    fn execute(
        &self,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        workspace: &mut [u8],
        pool: Option<&dyn Parallel>,
    ) -> Result<(), KernelError> {
        let c = &self.core;
        let g = &c.geometry;
        if !g.check_run(batch, input.len(), output.len())? {
            return Ok(());
        }
        let needed = self.workspace_size(batch)?;
        if workspace.len() < needed {
            return Err(KernelError::BufferTooShort {
                which: "workspace",
                needed,
                actual: workspace.len(),
            });
        }
        let skip = workspace.as_ptr().align_offset(ALIGNMENT);
        let ws = &mut workspace[skip..];
        let params_bytes = (batch * size_of::<RowQuant>()).next_multiple_of(ALIGNMENT);
        let rows = ws.as_mut_ptr().cast::<RowQuant>();
        // SAFETY: `ws` holds at least `params_bytes + batch * row_bytes` bytes (checked against workspace_size, which includes the alignment slack).
        let a = unsafe { ws.as_mut_ptr().add(params_bytes) };
        let lda = self.row_bytes();
        // The input holds `batch` rows of K floats at its stride (checked); the workspace
        // parts are disjoint, aligned (RowQuant needs 4, the base is 64-aligned) and big
        // enough; the ISA was checked at create.
        let deferred = lowp::quantizes_in_driver(c.isa);
        if !deferred {
            // SAFETY: as stated above.
            unsafe {
                quant::rows(
                    c.isa,
                    batch,
                    g.k,
                    input.as_ptr(),
                    g.input_stride,
                    a,
                    lda,
                    rows,
                );
            }
        }
        let job = Job {
            kind: Kind::Qd8F32Qc8w,
            isa: c.isa,
            m: batch,
            k: g.k,
            n: g.n,
            a,
            lda,
            packed: c.packed.as_byte_ptr(),
            c: output.as_mut_ptr(),
            ldc: g.output_stride,
            min: g.min,
            max: g.max,
            rows,
            x: if deferred {
                input.as_ptr()
            } else {
                core::ptr::null()
            },
            ldx: g.input_stride,
        };
        // SAFETY: the quantized rows (K bytes padded with zeros to a multiple of 4) and their parameters were just written, or the driver writes them from `x` (the same workspace parts, writable); the output holds `batch` rows (checked); the block was packed for (kind, isa) by `create`.
        unsafe { c.execute(&job, pool) }
    }
}
