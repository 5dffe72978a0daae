//! The function types and structs of google/XNNPACK's current `include/xnnpack.h`: checked
//! against the header of 2026-03-04 (the first with `qd8_f16_qc2w`) to 2026-08, unchanged in
//! between for every function here; the f32 fully-connected ones are unchanged since 2025-06.
//!
//! ```c
//! xnn_create_fully_connected_nc_f32(size_t input_channels, size_t output_channels,
//!     size_t input_stride, size_t output_stride, const float* kernel, const float* bias,
//!     float output_min, float output_max, uint32_t flags, xnn_weights_cache_t, xnn_operator_t*);
//! xnn_reshape_fully_connected_nc_f32(xnn_operator_t, size_t batch_size, pthreadpool_t);
//! xnn_setup_fully_connected_nc_f32(xnn_operator_t, const float* input, float* output);
//! xnn_create_fully_connected_nc_bf16_f32(size_t input_channels, size_t output_channels,
//!     size_t input_stride, size_t output_stride, const void* kernel, const float* bias,
//!     float output_min, float output_max, uint32_t flags, xnn_weights_cache_t, xnn_operator_t*);
//! xnn_reshape_fully_connected_nc_bf16_f32(xnn_operator_t, size_t batch_size, pthreadpool_t);
//! xnn_setup_fully_connected_nc_bf16_f32(xnn_operator_t, const void* input, float* output);
//! xnn_create_fully_connected_nc_f32_qc8w(size_t, size_t, size_t, size_t,
//!     const float* kernel_scale, const int8_t* kernel, const float* bias, float, float,
//!     uint32_t, xnn_weights_cache_t, xnn_operator_t*);
//! xnn_reshape_fully_connected_nc_f32_qc8w(xnn_operator_t, size_t batch_size, pthreadpool_t);
//! xnn_setup_fully_connected_nc_f32_qc8w(xnn_operator_t, const float* input, float* output);
//! xnn_create_fully_connected_nc_qd8_f32_qc8w(same as f32_qc8w);
//! xnn_reshape_fully_connected_nc_qd8_f32_qc8w(xnn_operator_t, size_t batch_size,
//!     size_t* workspace_size, pthreadpool_t);
//! xnn_setup_fully_connected_nc_qd8_f32_qc8w(xnn_operator_t, const int8_t* input,
//!     float* output, void* workspace, const struct xnn_quantization_params*);
//! xnn_create_convert_nc_f32_qd8(uint32_t flags, xnn_operator_t*);
//! xnn_reshape_convert_nc_f32_qd8(xnn_operator_t, size_t batch_size, size_t channels,
//!     size_t input_stride, size_t output_stride, pthreadpool_t);
//! xnn_setup_convert_nc_f32_qd8(xnn_operator_t, const float* input, int8_t* output,
//!     float* row_sum, struct xnn_quantization_params* quantization_params);
//! // The subgraph API:
//! xnn_create_subgraph(uint32_t external_value_ids, uint32_t flags, xnn_subgraph_t*);
//! xnn_define_tensor_value(xnn_subgraph_t, enum xnn_datatype, size_t num_dims,
//!     const size_t* dims, const void* data, uint32_t external_id, uint32_t flags, uint32_t* id_out);
//! xnn_define_dynamically_quantized_tensor_value(xnn_subgraph_t, enum xnn_datatype,
//!     size_t num_dims, size_t num_nonbatch_dims, const size_t* dims, uint32_t external_id,
//!     uint32_t flags, uint32_t* id_out);
//! xnn_define_channelwise_quantized_tensor_value(xnn_subgraph_t, enum xnn_datatype,
//!     const float* scale, size_t num_dims, size_t channel_dim, const size_t* dims,
//!     const void* data, uint32_t external_id, uint32_t flags, uint32_t* id_out);
//! xnn_define_convert(xnn_subgraph_t, uint32_t input_id, uint32_t output_id, uint32_t flags);
//! xnn_define_fully_connected(xnn_subgraph_t, float output_min, float output_max,
//!     uint32_t input_id, uint32_t filter_id, uint32_t bias_id, uint32_t output_id, uint32_t flags);
//! xnn_create_runtime_v3(xnn_subgraph_t, xnn_weights_cache_t, pthreadpool_t, uint32_t flags,
//!     xnn_runtime_t*);
//! xnn_reshape_runtime(xnn_runtime_t);
//! xnn_setup_runtime_v2(xnn_runtime_t, size_t, const struct xnn_external_value*);
//! xnn_invoke_runtime(xnn_runtime_t); xnn_delete_runtime(xnn_runtime_t);
//! xnn_delete_subgraph(xnn_subgraph_t);
//! // pthreadpool.h, linked into the same library:
//! pthreadpool_t pthreadpool_create(size_t threads_count);
//! ```

use core::ffi::{c_int, c_void};

use super::{ExternalValue, Pthreadpool, XnnOperator, XnnRuntime, XnnStatus, XnnSubgraph};

/// `XNN_EXTRA_QUANTIZATION_PARAMS`: XNNPACK may read this many parameters past the last row.
pub const XNN_EXTRA_QUANTIZATION_PARAMS: usize = 15;

/// `xnn_weights_cache_t` (NULL: no cache).
pub type XnnWeightsCache = *mut c_void;

/// `struct xnn_quantization_params`: one row's zero point and scale.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct QuantizationParams {
    /// The int8 value that stands for 0.0.
    pub zero_point: i32,
    /// The real value of one int8 step.
    pub scale: f32,
}

/// `xnn_datatype_qcint8`: int8 with a scale per channel.
pub const XNN_DATATYPE_QCINT8: c_int = 6;
/// `xnn_datatype_qdint8`: int8 quantized per row at run time.
pub const XNN_DATATYPE_QDINT8: c_int = 9;

/// `xnn_create_fully_connected_nc_{f32,bf16_f32}`, whose weights are `W`s (`f32`, or bf16
/// as `c_void`): a weights cache before the out-pointer.
pub type CreateFullyConnected<W> = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const W,
    *const f32,
    f32,
    f32,
    u32,
    XnnWeightsCache,
    *mut XnnOperator,
) -> XnnStatus;
/// `xnn_create_fully_connected_nc_f32`.
pub type CreateFullyConnectedNcF32 = CreateFullyConnected<f32>;
/// `xnn_create_fully_connected_nc_bf16_f32`.
pub type CreateFullyConnectedNcBf16F32 = CreateFullyConnected<c_void>;
/// `xnn_create_fully_connected_nc_f32_qc8w` and `xnn_create_fully_connected_nc_qd8_f32_qc8w`.
pub type CreateFullyConnectedNcQc8w = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const f32,
    *const i8,
    *const f32,
    f32,
    f32,
    u32,
    XnnWeightsCache,
    *mut XnnOperator,
) -> XnnStatus;
/// `xnn_reshape_fully_connected_nc_{f32,bf16_f32,f32_qc8w}(op, batch_size, threadpool)`.
pub type ReshapeFullyConnected = unsafe extern "C" fn(XnnOperator, usize, Pthreadpool) -> XnnStatus;
/// `xnn_reshape_fully_connected_nc_qd8_f32_qc8w(op, batch_size, &workspace_size, threadpool)`.
pub type ReshapeFullyConnectedNcQd8F32Qc8w =
    unsafe extern "C" fn(XnnOperator, usize, *mut usize, Pthreadpool) -> XnnStatus;
/// `xnn_setup_fully_connected_nc_{f32,f32_qc8w,bf16_f32}(op, input, output)`, whose input is
/// `X`s (`f32`, or bf16 as `c_void`).
pub type SetupFullyConnected<X> =
    unsafe extern "C" fn(XnnOperator, *const X, *mut f32) -> XnnStatus;
/// `xnn_setup_fully_connected_nc_{f32,f32_qc8w}(op, input, output)`.
pub type SetupFullyConnectedNcF32 = SetupFullyConnected<f32>;
/// `xnn_setup_fully_connected_nc_bf16_f32(op, input, output)`.
pub type SetupFullyConnectedNcBf16F32 = SetupFullyConnected<c_void>;
/// `xnn_setup_fully_connected_nc_qd8_f32_qc8w(op, input, output, workspace, params)`.
pub type SetupFullyConnectedNcQd8F32Qc8w = unsafe extern "C" fn(
    XnnOperator,
    *const i8,
    *mut f32,
    *mut c_void,
    *const QuantizationParams,
) -> XnnStatus;
/// `xnn_create_convert_nc_f32_qd8(flags, &op)`.
pub type CreateConvertNcF32Qd8 = unsafe extern "C" fn(u32, *mut XnnOperator) -> XnnStatus;
/// `xnn_reshape_convert_nc_f32_qd8(op, batch, channels, input_stride, output_stride, pool)`.
pub type ReshapeConvertNcF32Qd8 =
    unsafe extern "C" fn(XnnOperator, usize, usize, usize, usize, Pthreadpool) -> XnnStatus;
/// `xnn_setup_convert_nc_f32_qd8(op, input, output, row_sum, params)`.
pub type SetupConvertNcF32Qd8 = unsafe extern "C" fn(
    XnnOperator,
    *const f32,
    *mut i8,
    *mut f32,
    *mut QuantizationParams,
) -> XnnStatus;
/// `xnn_define_dynamically_quantized_tensor_value`.
pub type DefineDynamicallyQuantizedTensorValue = unsafe extern "C" fn(
    XnnSubgraph,
    c_int,
    usize,
    usize,
    *const usize,
    u32,
    u32,
    *mut u32,
) -> XnnStatus;
/// `xnn_define_channelwise_quantized_tensor_value`.
pub type DefineChannelwiseQuantizedTensorValue = unsafe extern "C" fn(
    XnnSubgraph,
    c_int,
    *const f32,
    usize,
    usize,
    *const usize,
    *const c_void,
    u32,
    u32,
    *mut u32,
) -> XnnStatus;
/// `xnn_define_convert(subgraph, input_id, output_id, flags)`.
pub type DefineConvert = unsafe extern "C" fn(XnnSubgraph, u32, u32, u32) -> XnnStatus;
/// `xnn_create_runtime_v3(subgraph, weights_cache, threadpool, flags, &runtime)`.
pub type CreateRuntimeV3 = unsafe extern "C" fn(
    XnnSubgraph,
    XnnWeightsCache,
    Pthreadpool,
    u32,
    *mut XnnRuntime,
) -> XnnStatus;
/// `xnn_setup_runtime_v2(runtime, count, values)`.
pub type SetupRuntimeV2 =
    unsafe extern "C" fn(XnnRuntime, usize, *const ExternalValue) -> XnnStatus;
