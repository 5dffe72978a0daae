//! `fully_connected_nc_f32_qc8w`: f32 activations, int8 weights with one f32 scale per
//! output channel, dequantized in registers.

use keepalloc_allocators::AllocatorTable;

use super::desc::desc_builders;
use super::lowp_common::{Core, core_accessors};
use crate::error::KernelError;
use crate::init;
use crate::lowp::{self, DotIsa, Kind};
use crate::pool::Parallel;

/// Everything `xnn_create_fully_connected_nc_f32_qc8w` takes.
#[derive(Debug, Clone, Copy)]
pub struct FullyConnectedF32Qc8wDesc<'a> {
    /// K: values per input row.
    pub input_channels: usize,
    /// N: values per output row.
    pub output_channels: usize,
    /// Distance between input rows, in floats (≥ `input_channels`).
    pub input_stride: usize,
    /// Distance between output rows, in floats (≥ `output_channels`).
    pub output_stride: usize,
    /// `N` positive finite scales, one per output channel (`kernel_scale`).
    pub weight_scales: &'a [f32],
    /// `N × K` int8 weights `[output][input]`, or `K × N` when `transposed_weights`.
    pub weights: &'a [i8],
    /// `N` floats, or none (zero bias).
    pub bias: Option<&'a [f32]>,
    /// Lower output bound (`-inf` for none).
    pub output_min: f32,
    /// Upper output bound (`+inf` for none).
    pub output_max: f32,
    /// Weights are `[input][output]`.
    pub transposed_weights: bool,
    /// The instruction set; `None` is the environment's or the best with an int8 kernel.
    pub isa: Option<DotIsa>,
    /// Transparent huge pages under the packed weights (the default); see
    /// `with_huge_pages`.
    pub huge_pages: bool,
}

impl<'a> FullyConnectedF32Qc8wDesc<'a> {
    /// `input_channels` → `output_channels` with `[output][input]` int8 weights and their
    /// per-channel scales, dense rows, no bias, no clamp.
    pub fn new(
        input_channels: usize,
        output_channels: usize,
        weights: &'a [i8],
        weight_scales: &'a [f32],
    ) -> Self {
        FullyConnectedF32Qc8wDesc {
            input_channels,
            output_channels,
            input_stride: input_channels,
            output_stride: output_channels,
            weight_scales,
            weights,
            bias: None,
            output_min: f32::NEG_INFINITY,
            output_max: f32::INFINITY,
            transposed_weights: false,
            isa: None,
            huge_pages: true,
        }
    }

    desc_builders!(lowp);
}

/// The f32 × int8-weight fully-connected operator:
/// `y[m][n] = clamp(wsₙ · (b[n] + Σₖ x[m][k] · W[n][k]), min, max)`. Note that the channel
/// scale multiplies the bias too: that is XNNPACK's definition of
/// `fully_connected_nc_f32_qc8w` (its operator tester scales `bias + Σ` by the kernel
/// scale), unlike `qd8_f32_qc8w`, whose bias is added after scaling. The int8 weights are
/// widened to f32 in registers (exactly) and accumulated with FMA onto the bias; the
/// channel scale is one multiply per output. Batch 1 streams 1 byte per
/// weight instead of 4: the DRAM-bound GEMV case.
///
/// Lifecycle as the f32 operator's; `run` allocates nothing.
#[derive(Debug)]
pub struct FullyConnectedF32Qc8w {
    core: Core,
}

impl FullyConnectedF32Qc8w {
    /// Allocations one `create` makes from the table (the packed weights, scales and bias).
    pub const CREATE_ALLOCATIONS: usize = 1;

    /// Creates the operator through the table captured by [`initialize`](crate::initialize).
    pub fn create(desc: &FullyConnectedF32Qc8wDesc<'_>) -> Result<Self, KernelError> {
        Self::create_with_table(init::captured()?, desc)
    }

    /// Creates the operator through `table` (same contract as
    /// [`FullyConnected::create_with_table`](crate::FullyConnected::create_with_table)).
    pub fn create_with_table(
        table: &'static AllocatorTable,
        desc: &FullyConnectedF32Qc8wDesc<'_>,
    ) -> Result<Self, KernelError> {
        let common = desc.common(Some(desc.weight_scales));
        let core = Core::create(table, Kind::F32Qc8w, &common, |dst, nr| {
            lowp::pack_f32_qc8w(
                dst,
                nr,
                desc.input_channels,
                desc.output_channels,
                desc.weights,
                desc.weight_scales,
                desc.transposed_weights,
                desc.bias,
            )
        })?;
        Ok(FullyConnectedF32Qc8w { core })
    }

    core_accessors!("Bytes of packed weights, scales and bias held from the table.");

    /// Computes `batch` rows (f32 input rows `input_stride` apart, output rows
    /// `output_stride` apart; only the first `output_channels` of each are written). A batch
    /// of 0 does nothing. Never allocates.
    pub fn run(&self, batch: usize, input: &[f32], output: &mut [f32]) -> Result<(), KernelError> {
        self.core.run_plain(batch, input, output, None)
    }

    /// [`run`](Self::run) on `pool`, a [`ThreadPool`](crate::ThreadPool) or a runtime's own
    /// [`Parallel`] implementation, with as many threads as it has: the output panels (or,
    /// for a tall batch, its rows in units of 32) are shared out, and the result is
    /// bit-identical to a one-thread run. Never allocates. A pool that skips tasks gets
    /// [`KernelError::ParallelIncomplete`].
    pub fn run_in(
        &self,
        pool: &dyn Parallel,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
    ) -> Result<(), KernelError> {
        self.core.run_plain(batch, input, output, Some(pool))
    }
}
