//! The fully-connected operators of the current XNNPACK, each created, packed and reshaped
//! once, set up only when the caller's buffers move, and deleted on drop.

use core::ffi::c_void;

use super::{Bound, CallFailed, Geometry, Library, Operator, Threadpool, UNBOUND, check, failed};
use crate::ffi::current::{
    CreateFullyConnected, CreateFullyConnectedNcQc8w, QuantizationParams, ReshapeFullyConnected,
    SetupFullyConnected, XNN_EXTRA_QUANTIZATION_PARAMS,
};
use crate::ffi::{self, XNN_EXTRA_BYTES, XnnOperator, XnnStatus};

/// `create(input, output, input, output, w, b, lo, hi, 0, NULL, &op)`: a current XNNPACK's
/// f32 or bf16 fully-connected operator over dense `w` (`output` × `input` `W`s) and `b`
/// (`output` floats), clamped to `lo..=hi`, with no weights cache.
///
/// # Safety
/// `create` is the library's function of that type; `w` and `b` hold those sizes.
pub(crate) unsafe fn create_fully_connected<W>(
    create: CreateFullyConnected<W>,
    input: usize,
    output: usize,
    w: *const W,
    b: *const f32,
    lo: f32,
    hi: f32,
) -> Result<XnnOperator, XnnStatus> {
    let (mut op, cache) = (core::ptr::null_mut(), core::ptr::null_mut());
    // SAFETY: the caller's promise; `op` is a valid out-pointer.
    let status = unsafe {
        create(
            input, output, input, output, w, b, lo, hi, 0, cache, &mut op,
        )
    };
    ffi::status(status).map(|()| op)
}

/// [`create_fully_connected`] over `w` (n × k `W`s) and `bias` (n) with no clamp.
///
/// # Safety
/// `create` is `xnn`'s; `w` points to n × k weights of the type it reads, `bias` holds n
/// floats.
unsafe fn create_dense<W>(
    xnn: &'static Library,
    g: Geometry,
    name: &str,
    create: CreateFullyConnected<W>,
    w: *const W,
    bias: &[f32],
) -> Result<Operator, CallFailed> {
    let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
    // SAFETY: the caller's promise.
    unsafe { create_fully_connected(create, g.k, g.n, w, bias.as_ptr(), lo, hi) }
        .map(|op| Operator { xnn, op })
        .map_err(|status| failed(&format!("create {name}"), status))
}

/// Creates a fully-connected operator over int8 `w` (n × k) with per-channel `scales` and
/// `bias` (n) through `create` (`f32_qc8w` or `qd8_f32_qc8w`), with no clamp, flags or cache.
fn create_qc8w(
    xnn: &'static Library,
    g: Geometry,
    name: &str,
    create: CreateFullyConnectedNcQc8w,
    w: &[i8],
    scales: &[f32],
    bias: &[f32],
) -> Result<Operator, CallFailed> {
    assert!(w.len() >= g.k * g.n && bias.len() >= g.n && scales.len() >= g.n);
    let mut op = core::ptr::null_mut();
    // SAFETY: w is n × k, scales and bias n floats (copied into packed weights); no weights cache; a valid out-pointer.
    check(&format!("create {name}"), unsafe {
        create(
            g.k,
            g.n,
            g.k,
            g.n,
            scales.as_ptr(),
            w.as_ptr(),
            bias.as_ptr(),
            f32::NEG_INFINITY,
            f32::INFINITY,
            0,
            core::ptr::null_mut(),
            &mut op,
        )
    })?;
    Ok(Operator { xnn, op })
}

/// A fully-connected operator whose setup takes only (input of `X`s, output), reshaped once
/// for `g.m` rows and set up again only when the caller's buffers move.
struct Reshaped<X> {
    op: Operator,
    g: Geometry,
    /// The pthreadpool it was reshaped with and runs on (NULL: one thread).
    pool: *mut c_void,
    setup: SetupFullyConnected<X>,
    /// The operator's name in error messages (`f32`, `bf16_f32`, `f32_qc8w`).
    name: &'static str,
    bound: Bound,
}

impl<X> Reshaped<X> {
    /// Reshapes `op` for `g.m` rows on `pool` (NULL: the calling thread).
    ///
    /// # Safety
    /// `pool` is NULL or a live pthreadpool of `op`'s library that outlives the operator;
    /// `reshape` and `setup` are the functions of `op`'s kind.
    unsafe fn new(
        op: Operator,
        g: Geometry,
        pool: *mut c_void,
        reshape: ReshapeFullyConnected,
        setup: SetupFullyConnected<X>,
        name: &'static str,
    ) -> Result<Reshaped<X>, CallFailed> {
        // SAFETY: a live operator; the caller's promise about `pool`.
        check(&format!("reshape {name}"), unsafe {
            reshape(op.op, g.m, pool)
        })?;
        Ok(Reshaped {
            op,
            g,
            pool,
            setup,
            name,
            bound: UNBOUND,
        })
    }

    /// `x` holds m × k inputs (`T` has the size of the operator's input element) plus
    /// `XNN_EXTRA_BYTES`; `y` m × n floats.
    fn run<T>(&mut self, x: &[T], y: &mut [f32]) -> Result<(), CallFailed> {
        let g = self.g;
        assert!(
            size_of_val(x) >= g.m * g.k * size_of::<T>() + XNN_EXTRA_BYTES && y.len() >= g.m * g.n
        );
        let bound: Bound = (x.as_ptr().cast(), y.as_mut_ptr().cast());
        if self.bound != bound {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, and `run` sets up again whenever either pointer changes, so the operator never runs on a stale buffer.
            check(&format!("setup {}", self.name), unsafe {
                (self.setup)(self.op.op, x.as_ptr().cast(), y.as_mut_ptr())
            })?;
            self.bound = bound;
        }
        // SAFETY: reshaped with `self.pool`, set up on `x` and `y` (just above, or earlier on these same live buffers).
        unsafe { self.op.run_on(self.pool) }
    }
}

/// `fully_connected_nc_f32`, reshaped for `g.m` rows: the f32 operator the benchmark's
/// "XNNPACK current" column runs.
pub struct F32Fc(Reshaped<f32>);

impl F32Fc {
    /// Packs `w` (n × k, `[output][input]`) and `bias` (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[f32],
        bias: &[f32],
    ) -> Result<F32Fc, CallFailed> {
        F32Fc::with_pool(xnn, g, w, bias, None)
    }

    /// [`F32Fc::new`] running on `pool` (one of `xnn`'s, from [`Library::threadpool`]), or on
    /// the calling thread for `None`.
    ///
    /// # Panics
    /// If `pool` belongs to another library.
    pub fn with_pool(
        xnn: &'static Library,
        g: Geometry,
        w: &[f32],
        bias: &[f32],
        pool: Option<Threadpool>,
    ) -> Result<F32Fc, CallFailed> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n);
        let pool = match pool {
            Some(p) => {
                assert!(core::ptr::eq(p.library, xnn), "a pool of another library");
                p.pool
            }
            None => core::ptr::null_mut(),
        };
        let create = xnn.create_fully_connected_nc_f32;
        // SAFETY: w is n × k floats and bias n floats (asserted).
        let op = unsafe { create_dense(xnn, g, "f32", create, w.as_ptr(), bias) }?;
        let (reshape, setup) = (
            xnn.reshape_fully_connected_nc_f32,
            xnn.setup_fully_connected_nc_f32,
        );
        // SAFETY: `pool` is NULL or a live (never destroyed) pthreadpool of this library; the f32 operator's reshape and setup.
        unsafe { Reshaped::new(op, g, pool, reshape, setup, "f32") }.map(F32Fc)
    }

    /// `x` holds m × k floats plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), CallFailed> {
        self.0.run(x, y)
    }
}

/// `fully_connected_nc_bf16_f32`, reshaped for `g.m` rows.
pub struct Bf16Fc(Reshaped<c_void>);

impl Bf16Fc {
    /// Packs `w` (n × k bf16 values, `[output][input]`) and `bias` (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[u16],
        bias: &[f32],
    ) -> Result<Bf16Fc, CallFailed> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n);
        let create = xnn.create_fully_connected_nc_bf16_f32;
        // SAFETY: w is n × k bf16 values and bias n floats (asserted).
        let op = unsafe { create_dense(xnn, g, "bf16_f32", create, w.as_ptr().cast(), bias) }?;
        let (reshape, setup) = (
            xnn.reshape_fully_connected_nc_bf16_f32,
            xnn.setup_fully_connected_nc_bf16_f32,
        );
        // SAFETY: no thread pool; the bf16 operator's reshape and setup.
        unsafe { Reshaped::new(op, g, core::ptr::null_mut(), reshape, setup, "bf16_f32") }
            .map(Bf16Fc)
    }

    /// `x` holds m × k bf16 values plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[u16], y: &mut [f32]) -> Result<(), CallFailed> {
        self.0.run(x, y)
    }
}

/// `fully_connected_nc_f32_qc8w`, reshaped for `g.m` rows.
pub struct F32Qc8wFc(Reshaped<f32>);

impl F32Qc8wFc {
    /// Packs `w` (n × k int8, `[output][input]`), its per-channel `scales` (n) and `bias`
    /// (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[i8],
        scales: &[f32],
        bias: &[f32],
    ) -> Result<F32Qc8wFc, CallFailed> {
        let create = xnn.create_fully_connected_nc_f32_qc8w;
        let op = create_qc8w(xnn, g, "f32_qc8w", create, w, scales, bias)?;
        let (reshape, setup) = (
            xnn.reshape_fully_connected_nc_f32_qc8w,
            xnn.setup_fully_connected_nc_f32_qc8w,
        );
        // SAFETY: no thread pool; the f32_qc8w operator's reshape and setup.
        unsafe { Reshaped::new(op, g, core::ptr::null_mut(), reshape, setup, "f32_qc8w") }
            .map(F32Qc8wFc)
    }

    /// `x` holds m × k floats plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), CallFailed> {
        self.0.run(x, y)
    }
}

/// `fully_connected_nc_qd8_f32_qc8w` (reshaped for `g.m` rows, with its workspace), and the
/// `convert_nc_f32_qd8` operator that quantizes its input: XNNPACK's operator path.
///
/// Only the pair is used: fed rows quantized elsewhere (same bytes, same parameters) without
/// its convert having run, this FC returned 0 for the last row of a batch of 2 or 5 (not 8):
/// it depends on state the convert leaves behind (the `row_sum` output, most likely).
pub struct Qd8Fc {
    fc: Operator,
    convert: Operator,
    g: Geometry,
    workspace: Vec<u8>,
    quantized: Vec<i8>,
    row_sum: Vec<f32>,
    params: Vec<QuantizationParams>,
    /// The input the convert was last set up on, and the output the FC was (both set up
    /// only when theirs changes; the buffers between them are this object's own).
    bound: Bound,
}

impl Qd8Fc {
    /// Packs `w` (n × k int8, `[output][input]`), its per-channel `scales` (n) and `bias`
    /// (n) with no clamp, and creates the convert that quantizes each input row.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[i8],
        scales: &[f32],
        bias: &[f32],
    ) -> Result<Qd8Fc, CallFailed> {
        let create = xnn.create_fully_connected_nc_qd8_f32_qc8w;
        let fc = create_qc8w(xnn, g, "qd8_f32_qc8w", create, w, scales, bias)?;
        let null = core::ptr::null_mut();
        let mut workspace_size = 0usize;
        // SAFETY: a live operator; a valid out-pointer; no thread pool.
        check("reshape qd8_f32_qc8w", unsafe {
            (xnn.reshape_fully_connected_nc_qd8_f32_qc8w)(fc.op, g.m, &mut workspace_size, null)
        })?;
        let mut op = null;
        // SAFETY: a valid out-pointer.
        check("create convert f32_qd8", unsafe {
            (xnn.create_convert_nc_f32_qd8)(0, &mut op)
        })?;
        let convert = Operator { xnn, op };
        // SAFETY: a live operator; no thread pool.
        check("reshape convert f32_qd8", unsafe {
            (xnn.reshape_convert_nc_f32_qd8)(convert.op, g.m, g.k, g.k, g.k, null)
        })?;
        Ok(Qd8Fc {
            fc,
            convert,
            g,
            workspace: vec![0; workspace_size + 64],
            quantized: vec![0; g.m * g.k + XNN_EXTRA_BYTES],
            row_sum: vec![0.0; g.m + XNN_EXTRA_BYTES],
            params: vec![QuantizationParams::default(); g.m + XNN_EXTRA_QUANTIZATION_PARAMS],
            bound: UNBOUND,
        })
    }

    /// The whole operator path: quantize `x` (m × k floats plus `XNN_EXTRA_BYTES`) with
    /// XNNPACK's convert, then the FC into `y` (m × n).
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), CallFailed> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound.0 != x.as_ptr().cast() {
            // SAFETY: the buffers hold what the reshaped operator reads and writes (sizes asserted or allocated for `g`); they stay bound until the next setup, which runs whenever `x` changes (the other three are this object's, never moved).
            check("setup convert f32_qd8", unsafe {
                (self.convert.xnn.setup_convert_nc_f32_qd8)(
                    self.convert.op,
                    x.as_ptr(),
                    self.quantized.as_mut_ptr(),
                    self.row_sum.as_mut_ptr(),
                    self.params.as_mut_ptr(),
                )
            })?;
            self.bound.0 = x.as_ptr().cast();
        }
        // SAFETY: reshaped with no pool, set up on `x` and this object's buffers.
        unsafe { self.convert.run_on(core::ptr::null_mut()) }?;
        if self.bound.1 != y.as_mut_ptr().cast() {
            // SAFETY: the quantized rows and parameters are this object's padded buffers (never moved); `y` holds m × n floats; the workspace has the size reshape asked for; they stay bound until the next setup, which runs whenever `y` changes.
            check("setup qd8_f32_qc8w", unsafe {
                (self.fc.xnn.setup_fully_connected_nc_qd8_f32_qc8w)(
                    self.fc.op,
                    self.quantized.as_ptr(),
                    y.as_mut_ptr(),
                    self.workspace.as_mut_ptr().cast(),
                    self.params.as_ptr(),
                )
            })?;
            self.bound.1 = y.as_mut_ptr().cast();
        }
        // SAFETY: reshaped with no pool, set up on `y` and this object's buffers.
        unsafe { self.fc.run_on(core::ptr::null_mut()) }
    }

    /// The quantization parameters of the last `run`.
    pub fn last_params(&self) -> &[QuantizationParams] {
        &self.params[..self.g.m]
    }

    /// The quantized rows of the last `run` (m × k).
    pub fn last_quantized(&self) -> &[i8] {
        &self.quantized[..self.g.m * self.g.k]
    }
}
