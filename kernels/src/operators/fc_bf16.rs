//! `fully_connected_nc_bf16_f32`: bf16 activations and weights, f32 accumulation, bias and
//! output.

use super::desc::FcDesc;
use super::kind::Bf16F32;
use super::lowp_common::FcLowp;

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
/// [`bf16_from_f32`] makes them), strides in bf16 values on the input side, and an f32
/// bias.
pub type FullyConnectedBf16F32Desc<'a> = FcDesc<'a, Bf16F32>;

/// A bf16 × bf16 → f32 fully-connected operator:
/// `y[M][N] = clamp(x[M][K] · W[N][K]ᵀ + b[N], min, max)` with x and W in bf16, the
/// products exact in f32 and the sums rounded as f32 additions.
///
/// Lifecycle as the f32 operator's: `create` validates and packs (exactly
/// `CREATE_ALLOCATIONS` call to the table), `run` allocates nothing and runs on the calling
/// thread, drop frees the block through the table.
pub type FullyConnectedBf16F32 = FcLowp<Bf16F32>;
