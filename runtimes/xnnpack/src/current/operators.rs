//! The fully-connected operators of the current XNNPACK, each created, packed and reshaped
//! once, set up only when the caller's buffers move, and deleted on drop.

use core::ffi::c_void;

use super::{Bound, Geometry, Library, Operator, Threadpool, UNBOUND, check};
use crate::ffi::XNN_EXTRA_BYTES;
use crate::ffi::current::{QuantizationParams, XNN_EXTRA_QUANTIZATION_PARAMS};

/// `fully_connected_nc_f32`, reshaped for `g.m` rows: the f32 operator the benchmark's
/// "XNNPACK current" column runs.
pub struct F32Fc {
    op: Operator,
    g: Geometry,
    /// The pthreadpool it was reshaped with and runs on (NULL: one thread).
    pool: *mut c_void,
    /// The (input, output) the operator was last set up on: setup runs only when they
    /// change, as the Debian XNNPACK runner does.
    bound: (*const f32, *mut f32),
}

impl F32Fc {
    /// Packs `w` (n × k, `[output][input]`) and `bias` (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[f32],
        bias: &[f32],
    ) -> Result<F32Fc, String> {
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
    ) -> Result<F32Fc, String> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n);
        let pool = match pool {
            Some(p) => {
                assert!(core::ptr::eq(p.library, xnn), "a pool of another library");
                p.pool
            }
            None => core::ptr::null_mut(),
        };
        let mut op = core::ptr::null_mut();
        // SAFETY: w is n × k floats and bias n floats (copied into packed weights); no weights cache; a valid out-pointer.
        check("create f32", unsafe {
            (xnn.create_f32)(
                g.k,
                g.n,
                g.k,
                g.n,
                w.as_ptr(),
                bias.as_ptr(),
                f32::NEG_INFINITY,
                f32::INFINITY,
                0,
                core::ptr::null_mut(),
                &mut op,
            )
        })?;
        let op = Operator { xnn, op };
        // SAFETY: a live operator; `pool` is NULL or a live (never destroyed) pthreadpool of this library.
        check("reshape f32", unsafe {
            (xnn.reshape_f32)(op.op, g.m, pool)
        })?;
        Ok(F32Fc {
            op,
            g,
            pool,
            bound: (core::ptr::null(), core::ptr::null_mut()),
        })
    }

    /// `x` holds m × k floats plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), String> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound != (x.as_ptr(), y.as_mut_ptr()) {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, and `run` sets up again whenever either pointer changes, so the operator never runs on a stale buffer.
            check("setup f32", unsafe {
                (self.op.xnn.setup_f32)(self.op.op, x.as_ptr(), y.as_mut_ptr())
            })?;
            self.bound = (x.as_ptr(), y.as_mut_ptr());
        }
        // SAFETY: reshaped with `self.pool`, set up on `x` and `y` (just above, or earlier on these same live buffers).
        unsafe { self.op.run_on(self.pool) }
    }
}

/// `fully_connected_nc_bf16_f32`, reshaped for `g.m` rows.
pub struct Bf16Fc(Operator, Geometry, Bound);

impl Bf16Fc {
    /// Packs `w` (n × k bf16 values, `[output][input]`) and `bias` (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[u16],
        bias: &[f32],
    ) -> Result<Bf16Fc, String> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n);
        let mut op = core::ptr::null_mut();
        // SAFETY: w is n × k bf16 values and bias n floats (copied into packed weights).
        check("create bf16_f32", unsafe {
            (xnn.create_bf16)(
                g.k,
                g.n,
                g.k,
                g.n,
                w.as_ptr().cast(),
                bias.as_ptr(),
                f32::NEG_INFINITY,
                f32::INFINITY,
                0,
                core::ptr::null_mut(),
                &mut op,
            )
        })?;
        let op = Operator { xnn, op };
        // SAFETY: a live operator; no thread pool.
        check("reshape bf16_f32", unsafe {
            (xnn.reshape_bf16)(op.op, g.m, core::ptr::null_mut())
        })?;
        Ok(Bf16Fc(op, g, UNBOUND))
    }

    /// `x` holds m × k bf16 values plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[u16], y: &mut [f32]) -> Result<(), String> {
        let g = self.1;
        assert!(x.len() * 2 >= g.m * g.k * 2 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        let bound: Bound = (x.as_ptr().cast(), y.as_mut_ptr().cast());
        if self.2 != bound {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, which runs whenever either pointer changes.
            check("setup bf16_f32", unsafe {
                (self.0.xnn.setup_bf16)(self.0.op, x.as_ptr().cast(), y.as_mut_ptr())
            })?;
            self.2 = bound;
        }
        // SAFETY: reshaped with no pool, set up on `x` and `y` (just above, or earlier on these same live buffers).
        unsafe { self.0.run_on(core::ptr::null_mut()) }
    }
}

/// `fully_connected_nc_f32_qc8w`, reshaped for `g.m` rows.
pub struct F32Qc8wFc(Operator, Geometry, Bound);

impl F32Qc8wFc {
    /// Packs `w` (n × k int8, `[output][input]`), its per-channel `scales` (n) and `bias`
    /// (n) with no clamp.
    pub fn new(
        xnn: &'static Library,
        g: Geometry,
        w: &[i8],
        scales: &[f32],
        bias: &[f32],
    ) -> Result<F32Qc8wFc, String> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n && scales.len() >= g.n);
        let mut op = core::ptr::null_mut();
        // SAFETY: w is n × k, scales and bias n floats (copied into packed weights).
        check("create f32_qc8w", unsafe {
            (xnn.create_qc8w)(
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
        let op = Operator { xnn, op };
        // SAFETY: a live operator; no thread pool.
        check("reshape f32_qc8w", unsafe {
            (xnn.reshape_qc8w)(op.op, g.m, core::ptr::null_mut())
        })?;
        Ok(F32Qc8wFc(op, g, UNBOUND))
    }

    /// `x` holds m × k floats plus `XNN_EXTRA_BYTES`; `y` m × n floats.
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), String> {
        let g = self.1;
        assert!(x.len() * 4 >= g.m * g.k * 4 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        let bound: Bound = (x.as_ptr().cast(), y.as_mut_ptr().cast());
        if self.2 != bound {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, which runs whenever either pointer changes.
            check("setup f32_qc8w", unsafe {
                (self.0.xnn.setup_qc8w)(self.0.op, x.as_ptr(), y.as_mut_ptr())
            })?;
            self.2 = bound;
        }
        // SAFETY: reshaped with no pool, set up on `x` and `y` (just above, or earlier on these same live buffers).
        unsafe { self.0.run_on(core::ptr::null_mut()) }
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
    ) -> Result<Qd8Fc, String> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n && scales.len() >= g.n);
        let null = core::ptr::null_mut();
        let mut op = null;
        // SAFETY: w is n × k, scales and bias n floats (copied into packed weights).
        check("create qd8_f32_qc8w", unsafe {
            (xnn.create_qd8)(
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
                null,
                &mut op,
            )
        })?;
        let fc = Operator { xnn, op };
        let mut workspace_size = 0usize;
        // SAFETY: a live operator; a valid out-pointer; no thread pool.
        check("reshape qd8_f32_qc8w", unsafe {
            (xnn.reshape_qd8)(fc.op, g.m, &mut workspace_size, null)
        })?;
        let mut op = null;
        // SAFETY: a valid out-pointer.
        check("create convert f32_qd8", unsafe {
            (xnn.create_convert)(0, &mut op)
        })?;
        let convert = Operator { xnn, op };
        // SAFETY: a live operator; no thread pool.
        check("reshape convert f32_qd8", unsafe {
            (xnn.reshape_convert)(convert.op, g.m, g.k, g.k, g.k, null)
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
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), String> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + XNN_EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound.0 != x.as_ptr().cast() {
            // SAFETY: the buffers hold what the reshaped operator reads and writes (sizes asserted or allocated for `g`); they stay bound until the next setup, which runs whenever `x` changes (the other three are this object's, never moved).
            check("setup convert f32_qd8", unsafe {
                (self.convert.xnn.setup_convert)(
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
                (self.fc.xnn.setup_qd8)(
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
