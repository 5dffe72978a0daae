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
//! xnn_create_convolution2d_nhwc_f32(uint32_t padding_top, uint32_t padding_right,
//!     uint32_t padding_bottom, uint32_t padding_left, uint32_t kernel_height,
//!     uint32_t kernel_width, uint32_t subsampling_height, uint32_t subsampling_width,
//!     uint32_t dilation_height, uint32_t dilation_width, uint32_t groups,
//!     size_t group_input_channels, size_t group_output_channels,
//!     size_t input_channel_stride, size_t output_channel_stride, const float* kernel,
//!     const float* bias, float output_min, float output_max, uint32_t flags,
//!     xnn_operator_t* op_out);
//! xnn_setup_convolution2d_nhwc_f32(xnn_operator_t, size_t batch_size, size_t input_height,
//!     size_t input_width, const float* input, float* output, pthreadpool_t);
//! xnn_create_subgraph(uint32_t external_value_ids, uint32_t flags, xnn_subgraph_t* out);
//! xnn_delete_subgraph(xnn_subgraph_t);
//! xnn_define_tensor_value(xnn_subgraph_t, enum xnn_datatype, size_t num_dims,
//!     const size_t* dims, const void* data, uint32_t external_id, uint32_t flags,
//!     uint32_t* id_out);
//! xnn_define_fully_connected(xnn_subgraph_t, float output_min, float output_max,
//!     uint32_t input_id, uint32_t filter_id, uint32_t bias_id, uint32_t output_id,
//!     uint32_t flags);
//! xnn_create_runtime_v2(xnn_subgraph_t, pthreadpool_t, uint32_t flags, xnn_runtime_t* out);
//! xnn_setup_runtime(xnn_runtime_t, size_t num_external_values,
//!     const struct xnn_external_value* external_values);
//! xnn_invoke_runtime(xnn_runtime_t); xnn_delete_runtime(xnn_runtime_t);
//! pthreadpool_t pthreadpool_create(size_t threads); void pthreadpool_destroy(pthreadpool_t);
//! ```

use super::{ExternalValue, Pthreadpool, XnnOperator, XnnRuntime, XnnStatus, XnnSubgraph};

/// `xnn_create_convolution2d_nhwc_f32` (2022): no caches argument.
pub type CreateConvolution2dNhwcF32 = unsafe extern "C" fn(
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
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
/// `xnn_setup_convolution2d_nhwc_f32` (2022).
pub type SetupConvolution2dNhwcF32 = unsafe extern "C" fn(
    XnnOperator,
    usize,
    usize,
    usize,
    *const f32,
    *mut f32,
    Pthreadpool,
) -> XnnStatus;
/// `xnn_create_runtime_v2`.
pub type CreateRuntimeV2 =
    unsafe extern "C" fn(XnnSubgraph, Pthreadpool, u32, *mut XnnRuntime) -> XnnStatus;
/// `xnn_setup_runtime` (2022: no reshape).
pub type SetupRuntime = unsafe extern "C" fn(XnnRuntime, usize, *const ExternalValue) -> XnnStatus;
/// `pthreadpool_destroy`.
pub type PthreadpoolDestroy = unsafe extern "C" fn(Pthreadpool);

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
