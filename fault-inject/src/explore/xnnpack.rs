//! Targets `xnnpack-fc`, `xnnpack-conv` and `xnnpack-subgraph`: Debian's XNNPACK (2022)
//! initialized with the explorer's table, so that every operator object, packed weights,
//! workspace and runtime it allocates comes from it; each target creates, sets up and runs
//! on a pthreadpool of two threads, checks the output against an f64 reference, and deletes.
//! The subgraph one defines a fully-connected model with the subgraph API and runs it as a
//! runtime. The first failing status stops the target, which then deletes what it built.

use core::ffi::c_void;
use core::ptr;

use keepalloc_allocators::AllocatorTable;
use keepalloc_xnnpack::Debian2022Api;
use keepalloc_xnnpack::ffi::{
    ExternalValue, XNN_DATATYPE_FP32, XNN_INVALID_VALUE_ID, XNN_VALUE_FLAG_EXTERNAL_INPUT,
    XNN_VALUE_FLAG_EXTERNAL_OUTPUT,
};

use super::Outcome;
use crate::consumer::values;

const BATCH: usize = 5;
const K: usize = 64;
const N: usize = 48;

/// `y = x·Wᵀ + b` checked against f64 with the f32 dot-product bound.
fn fc_ok(x: &[f32], w: &[f32], b: &[f32], y: &[f32]) -> bool {
    (0..BATCH).all(|i| {
        (0..N).all(|j| {
            let (mut s, mut t) = (b[j] as f64, b[j].abs() as f64);
            for k in 0..K {
                let v = x[i * K + k] as f64 * w[j * K + k] as f64;
                s += v;
                t += v.abs();
            }
            (y[i * N + j] as f64 - s).abs() <= (K as f64 + 2.0) * f32::EPSILON as f64 * t
        })
    })
}

/// The library with the explorer's table and a two-thread pool; `Err` is a setup failure.
struct Xnn {
    api: Debian2022Api,
    pool: *mut c_void,
}

impl Drop for Xnn {
    fn drop(&mut self) {
        if let Some((_, destroy)) = self.api.pthreadpool
            && !self.pool.is_null()
        {
            // SAFETY: created by pthreadpool_create, destroyed once, no operator runs.
            unsafe { destroy(self.pool) };
        }
    }
}

fn setup(table: &'static AllocatorTable) -> Result<Result<Xnn, String>, String> {
    // SAFETY: the installed libXNNPACK is Debian's 2022 build (libxnnpack-dev), this target's contract.
    let api = unsafe { Debian2022Api::load_installed() }.map_err(|e| format!("XNNPACK: {e}"))?;
    // SAFETY: a complete table that lives for the process (XNNPACK keeps it).
    let status = unsafe { (api.initialize)(table) };
    if status != 0 {
        return Ok(Err(format!("xnn_initialize: status {status}")));
    }
    let (create, _) = api
        .pthreadpool
        .ok_or("libXNNPACK's pthreadpool is not reachable")?;
    // SAFETY: plain call.
    let pool = unsafe { create(2) };
    if pool.is_null() {
        return Err("pthreadpool_create(2) failed".into());
    }
    Ok(Ok(Xnn { api, pool }))
}

fn check(what: &str, status: i32) -> Result<(), String> {
    if status == 0 {
        Ok(())
    } else {
        Err(format!("{what}: xnn_status {status}"))
    }
}

/// Runs `body` on the library set up over `table`; a setup failure is the outcome's error.
fn with_library(
    table: &'static AllocatorTable,
    body: impl FnOnce(&Xnn) -> Result<bool, String>,
) -> Result<Outcome, String> {
    Ok(Outcome::from(setup(table)?.and_then(|xnn| body(&xnn))))
}

/// Runs `run`, which creates one operator into its argument, sets it up and runs it; then
/// deletes the operator if one was created. A failed delete after a good run is the error.
fn with_operator(
    api: &Debian2022Api,
    run: impl FnOnce(&mut *mut c_void) -> Result<bool, String>,
) -> Result<bool, String> {
    let mut op = ptr::null_mut();
    let result = run(&mut op);
    if !op.is_null() {
        // SAFETY: created by `run`, deleted once.
        let status = unsafe { (api.delete_operator)(op) };
        if status != 0 && result.is_ok() {
            return Err(format!("delete: xnn_status {status}"));
        }
    }
    result
}

/// `xnnpack-fc`.
pub fn fc(table: &'static AllocatorTable) -> Result<Outcome, String> {
    with_library(table, |xnn| {
        let (x, w, b) = (values(1, BATCH * K + 16), values(2, N * K), values(3, N));
        let mut y = vec![f32::NAN; BATCH * N];
        let api = &xnn.api;
        with_operator(api, |op| {
            let inf = f32::INFINITY;
            // SAFETY: every buffer lives through the calls; XNNPACK copies the weights at create; the input carries XNN_EXTRA_BYTES of slack; `with_operator` deletes `op` once.
            unsafe {
                check(
                    "create",
                    (api.create_fully_connected_nc_f32)(
                        K,
                        N,
                        K,
                        N,
                        w.as_ptr(),
                        b.as_ptr(),
                        -inf,
                        inf,
                        0,
                        op,
                    ),
                )?;
                check(
                    "setup",
                    (api.setup_fully_connected_nc_f32)(
                        *op,
                        BATCH,
                        x.as_ptr(),
                        y.as_mut_ptr(),
                        xnn.pool,
                    ),
                )?;
                check("run", (api.run_operator)(*op, xnn.pool))?;
            }
            Ok(fc_ok(&x, &w, &b, &y))
        })
    })
}

/// `xnnpack-conv`: a 3×3 convolution, padding 1, 8×8×4 in, 8 channels out.
pub fn conv(table: &'static AllocatorTable) -> Result<Outcome, String> {
    const H: usize = 8;
    const W: usize = 8;
    const CI: usize = 4;
    const CO: usize = 8;
    with_library(table, |xnn| {
        let x = values(4, H * W * CI + 16);
        let kernel = values(5, CO * 3 * 3 * CI);
        let bias = values(6, CO);
        let mut y = vec![f32::NAN; H * W * CO];
        let api = &xnn.api;
        with_operator(api, |op| {
            let inf = f32::INFINITY;
            // SAFETY: as in `fc`.
            unsafe {
                check(
                    "create",
                    (api.create_convolution2d_nhwc_f32)(
                        1,
                        1,
                        1,
                        1,
                        3,
                        3,
                        1,
                        1,
                        1,
                        1,
                        1,
                        CI,
                        CO,
                        CI,
                        CO,
                        kernel.as_ptr(),
                        bias.as_ptr(),
                        -inf,
                        inf,
                        0,
                        op,
                    ),
                )?;
                check(
                    "setup",
                    (api.setup_convolution2d_nhwc_f32)(
                        *op,
                        1,
                        H,
                        W,
                        x.as_ptr(),
                        y.as_mut_ptr(),
                        xnn.pool,
                    ),
                )?;
                check("run", (api.run_operator)(*op, xnn.pool))?;
            }
            // The f64 reference: kernel [CO][3][3][CI], zero padding.
            let ok = (0..H * W * CO).all(|o| {
                let (oy, ox, co) = (o / (W * CO), o / CO % W, o % CO);
                let (mut s, mut t) = (bias[co] as f64, bias[co].abs() as f64);
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (iy, ix) = (oy + ky, ox + kx);
                        if iy == 0 || ix == 0 || iy > H || ix > W {
                            continue;
                        }
                        for ci in 0..CI {
                            let v = x[((iy - 1) * W + ix - 1) * CI + ci] as f64
                                * kernel[((co * 3 + ky) * 3 + kx) * CI + ci] as f64;
                            s += v;
                            t += v.abs();
                        }
                    }
                }
                (y[o] as f64 - s).abs() <= 40.0 * f32::EPSILON as f64 * t
            });
            Ok(ok)
        })
    })
}

/// `xnnpack-subgraph`: input [5, 64] → fully connected (static weights and bias) → [5, 48].
pub fn subgraph(table: &'static AllocatorTable) -> Result<Outcome, String> {
    with_library(table, |xnn| {
        let (x, w, b) = (values(7, BATCH * K + 16), values(8, N * K), values(9, N));
        let mut y = vec![f32::NAN; BATCH * N];
        let api = &xnn.api;
        let (mut sg, mut rt) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: every buffer (the static weights and bias included: XNNPACK reads them at runtime creation and at each invoke) outlives the subgraph and the runtime, which are deleted once below.
        let result = unsafe {
            (|| {
                check("create_subgraph", (api.create_subgraph)(2, 0, &mut sg))?;
                let tensor = |dims: &[usize], data: *const c_void, external: u32, flags: u32| {
                    let mut id = 0;
                    check(
                        "define_tensor_value",
                        (api.define_tensor_value)(
                            sg,
                            XNN_DATATYPE_FP32,
                            dims.len(),
                            dims.as_ptr(),
                            data,
                            external,
                            flags,
                            &mut id,
                        ),
                    )
                    .map(|()| id)
                };
                let input = tensor(&[BATCH, K], ptr::null(), 0, XNN_VALUE_FLAG_EXTERNAL_INPUT)?;
                let output = tensor(&[BATCH, N], ptr::null(), 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT)?;
                let filter = tensor(&[N, K], w.as_ptr().cast(), XNN_INVALID_VALUE_ID, 0)?;
                let bias = tensor(&[N], b.as_ptr().cast(), XNN_INVALID_VALUE_ID, 0)?;
                let inf = f32::INFINITY;
                check(
                    "define_fully_connected",
                    (api.define_fully_connected)(sg, -inf, inf, input, filter, bias, output, 0),
                )?;
                check(
                    "create_runtime_v2",
                    (api.create_runtime_v2)(sg, xnn.pool, 0, &mut rt),
                )?;
                let external = [
                    ExternalValue {
                        id: input,
                        data: x.as_ptr().cast_mut().cast(),
                    },
                    ExternalValue {
                        id: output,
                        data: y.as_mut_ptr().cast(),
                    },
                ];
                check(
                    "setup_runtime",
                    (api.setup_runtime)(rt, 2, external.as_ptr()),
                )?;
                check("invoke_runtime", (api.invoke_runtime)(rt))?;
                Ok(fc_ok(&x, &w, &b, &y))
            })()
        };
        // SAFETY: created above (or NULL), deleted once each.
        unsafe {
            if !rt.is_null() {
                (api.delete_runtime)(rt);
            }
            if !sg.is_null() {
                (api.delete_subgraph)(sg);
            }
        }
        result
    })
}
