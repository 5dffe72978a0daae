//! The current XNNPACK (the one inside the executorch 1.5.1 wheel, `cargo xtask runtimes`)
//! loaded at run time, with its f32 and low-precision fully-connected operators.
//!
//! Shared by the benchmark and by the kernels' comparison test (`#[path]`), so it depends on
//! nothing but `core`/`std`. Signatures are those of google/XNNPACK's `include/xnnpack.h`
//! from 2026-03-04 (the first with `qd8_f16_qc2w`, which this library exports) to 2026-08
//! (unchanged in between for every function used here):
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
//! xnn_run_operator(xnn_operator_t, pthreadpool_t); xnn_delete_operator(xnn_operator_t);
//! // The subgraph path (f32 input → convert to qdint8 → fully connected):
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
//! // enum xnn_datatype: fp32 = 1, qcint8 = 6, qdint8 = 9 (same values in both headers).
//! ```
//!
//! The library is loaded with `dlmopen(LM_ID_NEWLM)`, so its calls to its own `xnn_*`
//! functions cannot bind to another XNNPACK loaded in the process (Debian's, linked by the
//! benchmark). Loading it runs its constructors, which call `xnn_initialize(NULL)`: it
//! allocates with its own allocator, which is fine for measuring and comparing.
#![allow(dead_code)]

use core::ffi::{CStr, c_char, c_int, c_long, c_void};
use std::ffi::CString;
use std::path::{Path, PathBuf};

unsafe extern "C" {
    fn dlmopen(lmid: c_long, filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const LM_ID_NEWLM: c_long = -1;

/// `xnn_status_success`.
const SUCCESS: c_int = 0;
/// `XNN_EXTRA_QUANTIZATION_PARAMS`.
pub const EXTRA_QUANTIZATION_PARAMS: usize = 15;
/// `XNN_EXTRA_BYTES`.
pub const EXTRA_BYTES: usize = 16;

/// `struct xnn_quantization_params`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct QuantParams {
    pub zero_point: i32,
    pub scale: f32,
}

type Op = *mut c_void;
type CreateF32 = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const f32,
    *const f32,
    f32,
    f32,
    u32,
    *mut c_void,
    *mut Op,
) -> c_int;
type CreateBf16 = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const c_void,
    *const f32,
    f32,
    f32,
    u32,
    *mut c_void,
    *mut Op,
) -> c_int;
type CreateQc8w = unsafe extern "C" fn(
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
    *mut c_void,
    *mut Op,
) -> c_int;
type Reshape = unsafe extern "C" fn(Op, usize, *mut c_void) -> c_int;
type ReshapeQd8 = unsafe extern "C" fn(Op, usize, *mut usize, *mut c_void) -> c_int;
type SetupBf16 = unsafe extern "C" fn(Op, *const c_void, *mut f32) -> c_int;
type SetupF32 = unsafe extern "C" fn(Op, *const f32, *mut f32) -> c_int;
type SetupQd8 =
    unsafe extern "C" fn(Op, *const i8, *mut f32, *mut c_void, *const QuantParams) -> c_int;
type CreateConvert = unsafe extern "C" fn(u32, *mut Op) -> c_int;
type ReshapeConvert = unsafe extern "C" fn(Op, usize, usize, usize, usize, *mut c_void) -> c_int;
type SetupConvert =
    unsafe extern "C" fn(Op, *const f32, *mut i8, *mut f32, *mut QuantParams) -> c_int;
type RunOp = unsafe extern "C" fn(Op, *mut c_void) -> c_int;
type CreateSubgraph = unsafe extern "C" fn(u32, u32, *mut *mut c_void) -> c_int;
type DefineTensor = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    usize,
    *const usize,
    *const c_void,
    u32,
    u32,
    *mut u32,
) -> c_int;
type DefineDynamic = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    usize,
    usize,
    *const usize,
    u32,
    u32,
    *mut u32,
) -> c_int;
type DefineChannelwise = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    *const f32,
    usize,
    usize,
    *const usize,
    *const c_void,
    u32,
    u32,
    *mut u32,
) -> c_int;
type DefineConvert = unsafe extern "C" fn(*mut c_void, u32, u32, u32) -> c_int;
type DefineFc = unsafe extern "C" fn(*mut c_void, f32, f32, u32, u32, u32, u32, u32) -> c_int;
type CreateRuntime =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, u32, *mut *mut c_void) -> c_int;
type RuntimeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type SetupRuntime = unsafe extern "C" fn(*mut c_void, usize, *const ExternalValue) -> c_int;

/// `struct xnn_external_value`.
#[repr(C)]
struct ExternalValue {
    id: u32,
    data: *mut c_void,
}

const DATATYPE_FP32: c_int = 1;
const DATATYPE_QCINT8: c_int = 6;
const DATATYPE_QDINT8: c_int = 9;
const VALUE_FLAG_EXTERNAL_INPUT: u32 = 1;
const VALUE_FLAG_EXTERNAL_OUTPUT: u32 = 2;
const INVALID_VALUE_ID: u32 = u32::MAX;
type DeleteOp = unsafe extern "C" fn(Op) -> c_int;
/// pthreadpool.h: `pthreadpool_t pthreadpool_create(size_t threads_count)`.
type PoolCreate = unsafe extern "C" fn(usize) -> *mut c_void;

/// The loaded library's entry points (never unloaded).
pub struct Xnn {
    pub path: PathBuf,
    create_f32: CreateF32,
    reshape_f32: Reshape,
    setup_f32: SetupF32,
    create_bf16: CreateBf16,
    reshape_bf16: Reshape,
    setup_bf16: SetupBf16,
    create_qc8w: CreateQc8w,
    reshape_qc8w: Reshape,
    setup_qc8w: SetupF32,
    create_qd8: CreateQc8w,
    reshape_qd8: ReshapeQd8,
    setup_qd8: SetupQd8,
    create_convert: CreateConvert,
    reshape_convert: ReshapeConvert,
    setup_convert: SetupConvert,
    run: RunOp,
    delete: DeleteOp,
    create_subgraph: CreateSubgraph,
    define_tensor: DefineTensor,
    define_dynamic: DefineDynamic,
    define_channelwise: DefineChannelwise,
    define_convert: DefineConvert,
    define_fc: DefineFc,
    create_runtime: CreateRuntime,
    reshape_runtime: RuntimeFn,
    setup_runtime: SetupRuntime,
    invoke_runtime: RuntimeFn,
    delete_runtime: RuntimeFn,
    delete_subgraph: RuntimeFn,
    /// The pthreadpool linked into the same library (its operators take its pools).
    pool_create: PoolCreate,
}

/// Where `cargo xtask runtimes` put the executorch XNNPACK backend, from
/// `<workspace>/target/runtimes/runtimes.json` (or `KEEPALLOC_XNNPACK_CURRENT`).
pub fn find_library(workspace: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KEEPALLOC_XNNPACK_CURRENT") {
        return Some(PathBuf::from(p));
    }
    let json = std::fs::read_to_string(workspace.join("target/runtimes/runtimes.json")).ok()?;
    let key = "\"xnnpack_backend\"";
    let rest = &json[json.find(key)? + key.len()..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    let path = PathBuf::from(&rest[start..end]);
    path.exists().then_some(path)
}

/// The current XNNPACK for a comparison: found (see [`find_library`]) and loaded once, or a
/// sentence saying why not.
pub fn current(workspace: &Path) -> Result<&'static Xnn, String> {
    let path = find_library(workspace).ok_or_else(|| {
        "not found: run `cargo xtask runtimes` (it fetches the executorch 1.5.1 wheel and \
         writes target/runtimes/runtimes.json; KEEPALLOC_XNNPACK_CURRENT overrides the path)"
            .to_string()
    })?;
    Xnn::load(&path)
}

/// The dynamic linker's last error message.
pub(crate) fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Looks `name` up as a function of type `F`.
///
/// # Safety
/// `handle` is a live dlopen handle and `name` has exactly the C signature `F`.
pub(crate) unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Result<F, String> {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: the caller's promise about `handle`; `name` is NUL-terminated.
    let p = unsafe { dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("{} not exported", name.to_string_lossy()));
    }
    // SAFETY: a non-NULL address of the function `name`, whose signature is `F` (caller).
    Ok(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn check(what: &str, status: c_int) -> Result<(), String> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: xnn_status {status}"))
    }
}

impl Xnn {
    /// Loads the library at `path` into a new link-map namespace, once per path (a later
    /// call returns the same entry points: every `dlmopen(LM_ID_NEWLM)` takes one of the
    /// few namespaces glibc has).
    pub fn load(path: &Path) -> Result<&'static Xnn, String> {
        static LOADED: std::sync::Mutex<Vec<&'static Xnn>> = std::sync::Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = loaded.iter().find(|x| x.path == path) {
            return Ok(x);
        }
        let xnn = Xnn::load_new(path)?;
        loaded.push(xnn);
        Ok(xnn)
    }

    fn load_new(path: &Path) -> Result<&'static Xnn, String> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path; loading runs the library's constructors (ExecuTorch's call xnn_initialize(NULL)).
        let handle = unsafe { dlmopen(LM_ID_NEWLM, name.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            return Err(format!("cannot load {}: {}", path.display(), dl_error()));
        }
        // A library without the 2026-03 qc2w operators is older than the header these
        // signatures were checked against: refuse it rather than call with a wrong signature.
        // SAFETY: dlsym only looks the name up.
        if unsafe {
            dlsym(
                handle,
                c"xnn_create_fully_connected_nc_qd8_f16_qc2w".as_ptr(),
            )
        }
        .is_null()
        {
            return Err(format!("{} predates the 2026-03 xnnpack.h", path.display()));
        }
        // SAFETY: each symbol has the signature quoted in the module docs (checked against the header of the library's generation), which is the type it is stored as.
        unsafe {
            Ok(Box::leak(Box::new(Xnn {
                path: path.to_path_buf(),
                create_f32: symbol(handle, c"xnn_create_fully_connected_nc_f32")?,
                reshape_f32: symbol(handle, c"xnn_reshape_fully_connected_nc_f32")?,
                setup_f32: symbol(handle, c"xnn_setup_fully_connected_nc_f32")?,
                create_bf16: symbol(handle, c"xnn_create_fully_connected_nc_bf16_f32")?,
                reshape_bf16: symbol(handle, c"xnn_reshape_fully_connected_nc_bf16_f32")?,
                setup_bf16: symbol(handle, c"xnn_setup_fully_connected_nc_bf16_f32")?,
                create_qc8w: symbol(handle, c"xnn_create_fully_connected_nc_f32_qc8w")?,
                reshape_qc8w: symbol(handle, c"xnn_reshape_fully_connected_nc_f32_qc8w")?,
                setup_qc8w: symbol(handle, c"xnn_setup_fully_connected_nc_f32_qc8w")?,
                create_qd8: symbol(handle, c"xnn_create_fully_connected_nc_qd8_f32_qc8w")?,
                reshape_qd8: symbol(handle, c"xnn_reshape_fully_connected_nc_qd8_f32_qc8w")?,
                setup_qd8: symbol(handle, c"xnn_setup_fully_connected_nc_qd8_f32_qc8w")?,
                create_convert: symbol(handle, c"xnn_create_convert_nc_f32_qd8")?,
                reshape_convert: symbol(handle, c"xnn_reshape_convert_nc_f32_qd8")?,
                setup_convert: symbol(handle, c"xnn_setup_convert_nc_f32_qd8")?,
                run: symbol(handle, c"xnn_run_operator")?,
                delete: symbol(handle, c"xnn_delete_operator")?,
                create_subgraph: symbol(handle, c"xnn_create_subgraph")?,
                define_tensor: symbol(handle, c"xnn_define_tensor_value")?,
                define_dynamic: symbol(handle, c"xnn_define_dynamically_quantized_tensor_value")?,
                define_channelwise: symbol(
                    handle,
                    c"xnn_define_channelwise_quantized_tensor_value",
                )?,
                define_convert: symbol(handle, c"xnn_define_convert")?,
                define_fc: symbol(handle, c"xnn_define_fully_connected")?,
                create_runtime: symbol(handle, c"xnn_create_runtime_v3")?,
                reshape_runtime: symbol(handle, c"xnn_reshape_runtime")?,
                setup_runtime: symbol(handle, c"xnn_setup_runtime_v2")?,
                invoke_runtime: symbol(handle, c"xnn_invoke_runtime")?,
                delete_runtime: symbol(handle, c"xnn_delete_runtime")?,
                delete_subgraph: symbol(handle, c"xnn_delete_subgraph")?,
                pool_create: symbol(handle, c"pthreadpool_create")?,
            })))
        }
    }
}

/// An XNNPACK operator, deleted on drop.
pub struct Operator {
    xnn: &'static Xnn,
    op: Op,
}

impl Drop for Operator {
    fn drop(&mut self) {
        // SAFETY: a live operator of this library, deleted once.
        unsafe { (self.xnn.delete)(self.op) };
    }
}

impl Operator {
    fn run(&self) -> Result<(), String> {
        self.run_on(core::ptr::null_mut())
    }

    /// Runs on `pool` (NULL: the calling thread), the pool the operator was reshaped with.
    fn run_on(&self, pool: *mut c_void) -> Result<(), String> {
        // SAFETY: the operator was reshaped (with `pool`) and set up on buffers that are still alive (every caller sets up right before running); `pool` is NULL or a live pthreadpool of this library.
        check("xnn_run_operator", unsafe { (self.xnn.run)(self.op, pool) })
    }
}

impl Xnn {
    /// A `threads`-thread pthreadpool of this library (`pthreadpool_create`), never
    /// destroyed (the process ends first).
    pub fn threadpool(&self, threads: usize) -> Result<*mut c_void, String> {
        // SAFETY: pthreadpool_create takes any count and returns NULL on failure.
        let pool = unsafe { (self.pool_create)(threads) };
        if pool.is_null() {
            Err("pthreadpool_create failed".into())
        } else {
            Ok(pool)
        }
    }
}

/// Problem geometry: K, N and the batch the operator is reshaped for (dense rows).
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub k: usize,
    pub n: usize,
    pub m: usize,
}

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
    pub fn new(xnn: &'static Xnn, g: Geometry, w: &[f32], bias: &[f32]) -> Result<F32Fc, String> {
        F32Fc::with_pool(xnn, g, w, bias, core::ptr::null_mut())
    }

    /// [`F32Fc::new`] on `pool` (from [`Xnn::threadpool`], or NULL for one thread).
    pub fn with_pool(
        xnn: &'static Xnn,
        g: Geometry,
        w: &[f32],
        bias: &[f32],
        pool: *mut c_void,
    ) -> Result<F32Fc, String> {
        assert!(w.len() >= g.k * g.n && bias.len() >= g.n);
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
        // SAFETY: a live operator; `pool` is NULL or a live pthreadpool of this library.
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
        assert!(x.len() * 4 >= g.m * g.k * 4 + EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound != (x.as_ptr(), y.as_mut_ptr()) {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, and `run` sets up again whenever either pointer changes, so the operator never runs on a stale buffer.
            check("setup f32", unsafe {
                (self.op.xnn.setup_f32)(self.op.op, x.as_ptr(), y.as_mut_ptr())
            })?;
            self.bound = (x.as_ptr(), y.as_mut_ptr());
        }
        self.op.run_on(self.pool)
    }
}

/// The (input, output) an operator was last set up on: each runner calls `setup` only when
/// they change, as [`F32Fc`] and the Debian XNNPACK runner do (keepalloc has no setup step,
/// so a setup per timed call would be work only the peer pays).
type Bound = (*const c_void, *mut c_void);

/// Nothing bound yet.
const UNBOUND: Bound = (core::ptr::null(), core::ptr::null_mut());

/// `fully_connected_nc_bf16_f32`, reshaped for `g.m` rows.
pub struct Bf16Fc(Operator, Geometry, Bound);

impl Bf16Fc {
    pub fn new(xnn: &'static Xnn, g: Geometry, w: &[u16], bias: &[f32]) -> Result<Bf16Fc, String> {
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
        assert!(x.len() * 2 >= g.m * g.k * 2 + EXTRA_BYTES && y.len() >= g.m * g.n);
        let bound: Bound = (x.as_ptr().cast(), y.as_mut_ptr().cast());
        if self.2 != bound {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, which runs whenever either pointer changes.
            check("setup bf16_f32", unsafe {
                (self.0.xnn.setup_bf16)(self.0.op, x.as_ptr().cast(), y.as_mut_ptr())
            })?;
            self.2 = bound;
        }
        self.0.run()
    }
}

/// `fully_connected_nc_f32_qc8w`, reshaped for `g.m` rows.
pub struct F32Qc8wFc(Operator, Geometry, Bound);

impl F32Qc8wFc {
    pub fn new(
        xnn: &'static Xnn,
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
        assert!(x.len() * 4 >= g.m * g.k * 4 + EXTRA_BYTES && y.len() >= g.m * g.n);
        let bound: Bound = (x.as_ptr().cast(), y.as_mut_ptr().cast());
        if self.2 != bound {
            // SAFETY: buffers of the sizes asserted; they stay bound until the next setup, which runs whenever either pointer changes.
            check("setup f32_qc8w", unsafe {
                (self.0.xnn.setup_qc8w)(self.0.op, x.as_ptr(), y.as_mut_ptr())
            })?;
            self.2 = bound;
        }
        self.0.run()
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
    params: Vec<QuantParams>,
    /// The input the convert was last set up on, and the output the FC was (both set up
    /// only when theirs changes; the buffers between them are this object's own).
    bound: Bound,
}

impl Qd8Fc {
    pub fn new(
        xnn: &'static Xnn,
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
            quantized: vec![0; g.m * g.k + EXTRA_BYTES],
            row_sum: vec![0.0; g.m + EXTRA_BYTES],
            params: vec![QuantParams::default(); g.m + EXTRA_QUANTIZATION_PARAMS],
            bound: UNBOUND,
        })
    }

    /// The whole operator path: quantize `x` (m × k floats plus `XNN_EXTRA_BYTES`) with
    /// XNNPACK's convert, then the FC into `y` (m × n).
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), String> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + EXTRA_BYTES && y.len() >= g.m * g.n);
        if self.bound.0 != x.as_ptr().cast() {
            // SAFETY: the buffers hold what the reshaped operator reads and writes (sizes asserted or allocated for `g`); they stay bound until the next setup, which runs whenever `x` changes (the other three are this object's, never moved).
            unsafe {
                check(
                    "setup convert f32_qd8",
                    (self.convert.xnn.setup_convert)(
                        self.convert.op,
                        x.as_ptr(),
                        self.quantized.as_mut_ptr(),
                        self.row_sum.as_mut_ptr(),
                        self.params.as_mut_ptr(),
                    ),
                )?;
            }
            self.bound.0 = x.as_ptr().cast();
        }
        self.convert.run()?;
        let params = self.params.as_ptr();
        let q = self.quantized.as_ptr();
        self.run_quantized_raw(q, params, y)
    }

    fn run_quantized_raw(
        &mut self,
        q: *const i8,
        params: *const QuantParams,
        y: &mut [f32],
    ) -> Result<(), String> {
        assert!(y.len() >= self.g.m * self.g.n);
        if self.bound.1 != y.as_mut_ptr().cast() {
            // SAFETY: `q` and `params` point into this object's padded buffers (never moved); `y` holds m × n floats; the workspace has the size reshape asked for; they stay bound until the next setup, which runs whenever `y` changes.
            unsafe {
                check(
                    "setup qd8_f32_qc8w",
                    (self.fc.xnn.setup_qd8)(
                        self.fc.op,
                        q,
                        y.as_mut_ptr(),
                        self.workspace.as_mut_ptr().cast(),
                        params,
                    ),
                )?;
            }
            self.bound.1 = y.as_mut_ptr().cast();
        }
        self.fc.run()
    }

    /// The quantization parameters of the last `run`.
    pub fn last_params(&self) -> &[QuantParams] {
        &self.params[..self.g.m]
    }

    /// The quantized rows of the last `run` (m × k).
    pub fn last_quantized(&self) -> &[i8] {
        &self.quantized[..self.g.m * self.g.k]
    }
}

/// XNNPACK's subgraph path for a dynamically quantized FC: external f32 input → convert to
/// `qdint8` → fully connected with `qcint8` weights (per-channel scales) and an f32 bias →
/// external f32 output, as a runtime created once (XNNPACK picks its own kernels and
/// fusions, which is why this path is much faster than the operator pair on this CPU).
pub struct Qd8Subgraph<'a> {
    xnn: &'static Xnn,
    /// The weights, scales and bias the runtime may keep pointers to.
    _data: core::marker::PhantomData<&'a [f32]>,
    subgraph: *mut c_void,
    runtime: *mut c_void,
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
        xnn: &'static Xnn,
        g: Geometry,
        w: &'a [i8],
        scales: &'a [f32],
        bias: &'a [f32],
    ) -> Result<Qd8Subgraph<'a>, String> {
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
                (xnn.define_tensor)(
                    subgraph,
                    DATATYPE_FP32,
                    2,
                    input_dims.as_ptr(),
                    null,
                    0,
                    VALUE_FLAG_EXTERNAL_INPUT,
                    &mut input,
                ),
            )?;
            check(
                "define qdint8",
                (xnn.define_dynamic)(
                    subgraph,
                    DATATYPE_QDINT8,
                    2,
                    1,
                    input_dims.as_ptr(),
                    INVALID_VALUE_ID,
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
                (xnn.define_channelwise)(
                    subgraph,
                    DATATYPE_QCINT8,
                    scales.as_ptr(),
                    2,
                    0,
                    weight_dims.as_ptr(),
                    w.as_ptr().cast(),
                    INVALID_VALUE_ID,
                    0,
                    &mut filter,
                ),
            )?;
            check(
                "define bias",
                (xnn.define_tensor)(
                    subgraph,
                    DATATYPE_FP32,
                    1,
                    bias_dims.as_ptr(),
                    bias.as_ptr().cast(),
                    INVALID_VALUE_ID,
                    0,
                    &mut b,
                ),
            )?;
            check(
                "define output",
                (xnn.define_tensor)(
                    subgraph,
                    DATATYPE_FP32,
                    2,
                    output_dims.as_ptr(),
                    null,
                    1,
                    VALUE_FLAG_EXTERNAL_OUTPUT,
                    &mut output,
                ),
            )?;
            check(
                "define fully connected",
                (xnn.define_fc)(
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
                (xnn.create_runtime)(
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
    pub fn run(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), String> {
        let g = self.g;
        assert!(x.len() * 4 >= g.m * g.k * 4 + EXTRA_BYTES && y.len() >= g.m * g.n);
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
                (self.xnn.setup_runtime)(self.runtime, 2, values.as_ptr())
            })?;
        }
        // SAFETY: set up on buffers that are the ones passed to this call.
        check("xnn_invoke_runtime", unsafe {
            (self.xnn.invoke_runtime)(self.runtime)
        })
    }
}
