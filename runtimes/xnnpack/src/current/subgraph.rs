//! XNNPACK's subgraph path for a dynamically quantized fully-connected layer.

use super::{CallFailed, Geometry, Library, check};
use crate::ffi::current::{XNN_DATATYPE_QCINT8, XNN_DATATYPE_QDINT8};
use crate::ffi::{
    ExternalValue, XNN_DATATYPE_FP32, XNN_EXTRA_BYTES, XNN_INVALID_VALUE_ID,
    XNN_VALUE_FLAG_EXTERNAL_INPUT, XNN_VALUE_FLAG_EXTERNAL_OUTPUT, XnnRuntime, XnnSubgraph,
};

/// XNNPACK's subgraph path for a dynamically quantized FC: external f32 input → convert to
/// `qdint8` → fully connected with `qcint8` weights (per-channel scales) and an f32 bias →
/// external f32 output, as a runtime created once (XNNPACK picks its own kernels and
/// fusions, which is why this path is much faster than the operator pair on this CPU).
pub struct Qd8Subgraph<'a> {
    xnn: &'static Library,
    /// The weights, scales and bias the runtime may keep pointers to.
    _data: core::marker::PhantomData<&'a [f32]>,
    subgraph: XnnSubgraph,
    runtime: XnnRuntime,
    g: Geometry,
    bound: (*const f32, *mut f32),
}

impl Drop for Qd8Subgraph<'_> {
    fn drop(&mut self) {
        // SAFETY: live objects of this library, deleted once (the runtime first).
        unsafe {
            if !self.runtime.is_null() {
                (self.xnn.delete_runtime)(self.runtime);
            }
            (self.xnn.delete_subgraph)(self.subgraph);
        }
    }
}

impl<'a> Qd8Subgraph<'a> {
    /// Builds and reshapes the runtime over `w` (n × k), `scales` and `bias` (n), which stay
    /// borrowed while it lives.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &'a [i8],
        scales: &'a [f32],
        bias: &'a [f32],
    ) -> Result<Qd8Subgraph<'a>, CallFailed> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n && scales.len() >= g.n);
        let mut subgraph = core::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check("xnn_create_subgraph", unsafe {
            (xnn.create_subgraph)(2, 0, &mut subgraph)
        })?;
        let mut sg = Qd8Subgraph {
            xnn,
            _data: core::marker::PhantomData,
            subgraph,
            runtime: core::ptr::null_mut(),
            g,
            bound: (core::ptr::null(), core::ptr::null_mut()),
        };
        let null = core::ptr::null();
        let (input_dims, weight_dims, bias_dims, output_dims) =
            ([g.m, g.k], [g.n, g.k], [g.n], [g.m, g.n]);
        let (mut input, mut quantized, mut filter, mut b, mut output) =
            (0u32, 0u32, 0u32, 0u32, 0u32);
        // SAFETY: a live subgraph; the dims arrays outlive the calls; the weights, scales and bias stay borrowed for 'a, as long as the runtime; valid out-pointers.
        unsafe {
            check(
                "define input",
                (xnn.define_tensor_value)(
                    subgraph,
                    XNN_DATATYPE_FP32,
                    2,
                    input_dims.as_ptr(),
                    null,
                    0,
                    XNN_VALUE_FLAG_EXTERNAL_INPUT,
                    &mut input,
                ),
            )?;
            check(
                "define qdint8",
                (xnn.define_dynamically_quantized_tensor_value)(
                    subgraph,
                    XNN_DATATYPE_QDINT8,
                    2,
                    1,
                    input_dims.as_ptr(),
                    XNN_INVALID_VALUE_ID,
                    0,
                    &mut quantized,
                ),
            )?;
            check(
                "define convert",
                (xnn.define_convert)(subgraph, input, quantized, 0),
            )?;
            check(
                "define filter",
                (xnn.define_channelwise_quantized_tensor_value)(
                    subgraph,
                    XNN_DATATYPE_QCINT8,
                    scales.as_ptr(),
                    2,
                    0,
                    weight_dims.as_ptr(),
                    w.as_ptr().cast(),
                    XNN_INVALID_VALUE_ID,
                    0,
                    &mut filter,
                ),
            )?;
            check(
                "define bias",
                (xnn.define_tensor_value)(
                    subgraph,
                    XNN_DATATYPE_FP32,
                    1,
                    bias_dims.as_ptr(),
                    bias.as_ptr().cast(),
                    XNN_INVALID_VALUE_ID,
                    0,
                    &mut b,
                ),
            )?;
            check(
                "define output",
                (xnn.define_tensor_value)(
                    subgraph,
                    XNN_DATATYPE_FP32,
                    2,
                    output_dims.as_ptr(),
                    null,
                    1,
                    XNN_VALUE_FLAG_EXTERNAL_OUTPUT,
                    &mut output,
                ),
            )?;
            check(
                "define fully connected",
                (xnn.define_fully_connected)(
                    subgraph,
                    f32::NEG_INFINITY,
                    f32::INFINITY,
                    quantized,
                    filter,
                    b,
                    output,
                    0,
                ),
            )?;
            check(
                "xnn_create_runtime_v3",
                (xnn.create_runtime_v3)(
                    subgraph,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                    0,
                    &mut sg.runtime,
                ),
            )?;
            check("xnn_reshape_runtime", (xnn.reshape_runtime)(sg.runtime))?;
        }
        Ok(sg)
    }

    /// One inference: `x` holds m × k floats plus `XNN_EXTRA_BYTES`, `y` m × n.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), CallFailed> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound != (x.as_ptr(), y.as_mut_ptr()) {
            self.bound = (x.as_ptr(), y.as_mut_ptr());
            let values = [
                ExternalValue {
                    id: 0,
                    data: x.as_ptr().cast_mut().cast(),
                },
                ExternalValue {
                    id: 1,
                    data: y.as_mut_ptr().cast(),
                },
            ];
            // SAFETY: a reshaped runtime; buffers of the asserted sizes. They stay bound until the next setup: `run` re-binds whenever either pointer changes.
            check("xnn_setup_runtime_v2", unsafe {
                (self.xnn.setup_runtime_v2)(self.runtime, 2, values.as_ptr())
            })?;
        }
        // SAFETY: set up on buffers that are the ones passed to this call.
        check("xnn_invoke_runtime", unsafe {
            (self.xnn.invoke_runtime)(self.runtime)
        })
    }
}
