//! `fully_connected_nc_f32_qc8w`: f32 activations, int8 weights with one f32 scale per
//! output channel, dequantized in registers.

use super::desc::FcDesc;
use super::kind::F32Qc8w;
use super::lowp_common::FcLowp;

/// Everything `xnn_create_fully_connected_nc_f32_qc8w` takes: int8 weights with one
/// positive finite scale per output channel.
pub type FullyConnectedF32Qc8wDesc<'a> = FcDesc<'a, F32Qc8w>;

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
pub type FullyConnectedF32Qc8w = FcLowp<F32Qc8w>;
