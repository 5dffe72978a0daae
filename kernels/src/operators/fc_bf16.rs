//! `fully_connected_nc_bf16_f32`: bf16 activations and weights, f32 accumulation, bias and
//! output.

use keepalloc_allocators::AllocatorTable;

use super::desc::desc_builders;
use super::lowp_common::{Core, core_accessors};
use crate::error::KernelError;
use crate::init;
use crate::lowp::{self, DotIsa, Kind};
use crate::pool::Parallel;

/// The bf16 value nearest to `x` (round to nearest, ties to even; NaN stays a quiet NaN),
/// as its raw 16 bits: the upper half of the f32.
pub fn bf16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The f32 equal to the bf16 `bits` (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// Everything `xnn_create_fully_connected_nc_bf16_f32` takes: bf16 weights (raw bits, as
/// [`bf16_from_f32`] makes them) and an f32 bias.
#[derive(Debug, Clone, Copy)]
pub struct FullyConnectedBf16F32Desc<'a> {
    /// K: values per input row.
    pub input_channels: usize,
    /// N: values per output row.
    pub output_channels: usize,
    /// Distance between input rows, in bf16 values (≥ `input_channels`).
    pub input_stride: usize,
    /// Distance between output rows, in floats (≥ `output_channels`).
    pub output_stride: usize,
    /// `N × K` bf16 values `[output][input]`, or `K × N` when `transposed_weights`.
    pub weights: &'a [u16],
    /// `N` floats, or none (zero bias).
    pub bias: Option<&'a [f32]>,
    /// Lower output bound (`-inf` for none).
    pub output_min: f32,
    /// Upper output bound (`+inf` for none).
    pub output_max: f32,
    /// Weights are `[input][output]`.
    pub transposed_weights: bool,
    /// The instruction set; `None` is the environment's or the best with a bf16 kernel.
    pub isa: Option<DotIsa>,
    /// Transparent huge pages under the packed weights (the default); see
    /// `with_huge_pages`.
    pub huge_pages: bool,
}

impl<'a> FullyConnectedBf16F32Desc<'a> {
    /// `input_channels` → `output_channels` with `[output][input]` weights, dense rows, no
    /// bias, no clamp.
    pub fn new(input_channels: usize, output_channels: usize, weights: &'a [u16]) -> Self {
        FullyConnectedBf16F32Desc {
            input_channels,
            output_channels,
            input_stride: input_channels,
            output_stride: output_channels,
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

/// A bf16 × bf16 → f32 fully-connected operator:
/// `y[M][N] = clamp(x[M][K] · W[N][K]ᵀ + b[N], min, max)` with x and W in bf16, the
/// products exact in f32 and the sums rounded as f32 additions.
///
/// Lifecycle as the f32 operator's: [`create`](Self::create) validates and packs (exactly
/// [`Self::CREATE_ALLOCATIONS`] call to the table), [`run`](Self::run) allocates nothing
/// and runs on the calling thread, drop frees the block through the table.
#[derive(Debug)]
pub struct FullyConnectedBf16F32 {
    core: Core,
}

impl FullyConnectedBf16F32 {
    /// Allocations one `create` makes from the table (the packed weights and bias).
    pub const CREATE_ALLOCATIONS: usize = 1;

    /// Creates the operator through the table captured by [`initialize`](crate::initialize).
    pub fn create(desc: &FullyConnectedBf16F32Desc<'_>) -> Result<Self, KernelError> {
        Self::create_with_table(init::captured()?, desc)
    }

    /// Creates the operator through `table` (same contract as
    /// [`FullyConnected::create_with_table`](crate::FullyConnected::create_with_table)).
    pub fn create_with_table(
        table: &'static AllocatorTable,
        desc: &FullyConnectedBf16F32Desc<'_>,
    ) -> Result<Self, KernelError> {
        let common = desc.common(None);
        let core = Core::create(table, Kind::Bf16F32, &common, |dst, nr| {
            lowp::pack_bf16(
                dst,
                nr,
                desc.input_channels,
                desc.output_channels,
                desc.weights,
                desc.transposed_weights,
                desc.bias,
            )
        })?;
        Ok(FullyConnectedBf16F32 { core })
    }

    core_accessors!("Bytes of packed weights and bias held from the table.");

    /// Computes `batch` rows (bf16 input rows `input_stride` apart, f32 output rows
    /// `output_stride` apart; only the first `output_channels` of each are written). A batch
    /// of 0 does nothing. Never allocates.
    pub fn run(&self, batch: usize, input: &[u16], output: &mut [f32]) -> Result<(), KernelError> {
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
        input: &[u16],
        output: &mut [f32],
    ) -> Result<(), KernelError> {
        self.core.run_plain(batch, input, output, Some(pool))
    }
}
