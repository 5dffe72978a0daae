//! The function types of Debian's `libxnnpack-dev` header (`xnnpack.h`, upstream snapshot of
//! 2022-02-16) that differ from the current header or exist only here: one call sets an
//! operator up for a batch, with no separate reshape, and `create` takes no weights cache.
//!
//! ```c
//! xnn_create_fully_connected_nc_f32(size_t input_channels, size_t output_channels,
//!     size_t input_stride, size_t output_stride, const float* kernel, const float* bias,
//!     float output_min, float output_max, uint32_t flags, xnn_operator_t* op_out);
//! xnn_setup_fully_connected_nc_f32(xnn_operator_t, size_t batch_size, const float* input,
//!     float* output, pthreadpool_t);
//! xnn_create_sigmoid_nc_f32(size_t channels, size_t input_stride, size_t output_stride,
//!     uint32_t flags, xnn_operator_t* op_out);
//! xnn_setup_sigmoid_nc_f32(xnn_operator_t, size_t batch_size, const float* input,
//!     float* output, pthreadpool_t);
//! ```

use super::{Pthreadpool, XnnOperator, XnnStatus};

/// `xnn_create_fully_connected_nc_f32` (2022): no weights cache.
pub type CreateFullyConnectedNcF32 = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const f32,
    *const f32,
    f32,
    f32,
    u32,
    *mut XnnOperator,
) -> XnnStatus;
/// `xnn_setup_fully_connected_nc_f32` (2022): batch size, buffers and pool in one call.
pub type SetupFullyConnectedNcF32 =
    unsafe extern "C" fn(XnnOperator, usize, *const f32, *mut f32, Pthreadpool) -> XnnStatus;
/// `xnn_create_sigmoid_nc_f32` (2022).
pub type CreateSigmoidNcF32 =
    unsafe extern "C" fn(usize, usize, usize, u32, *mut XnnOperator) -> XnnStatus;
/// `xnn_setup_sigmoid_nc_f32` (2022).
pub type SetupSigmoidNcF32 =
    unsafe extern "C" fn(XnnOperator, usize, *const f32, *mut f32, Pthreadpool) -> XnnStatus;
