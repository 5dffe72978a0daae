//! A thin, safe layer over the few OrtApi calls a test or an embedder needs: an env, a
//! session on a model file (optionally on the env's allocators), and a run on f32 inputs.

use core::ffi::{CStr, c_char, c_void};
use std::ffi::CString;
use std::path::Path;

use crate::ffi::{
    ONNXTensorElementDataType, OrtAllocator, OrtAllocatorType, OrtEnv, OrtLoggingLevel, OrtMemType,
    OrtMemoryInfo, OrtSession, OrtSessionOptions, OrtTensorTypeAndShapeInfo, OrtTypeInfo, OrtValue,
};

use crate::OrtError;
use crate::intern::Interned;
use crate::runtime::OnnxRuntime;

/// The session config entry that makes a session use the allocators registered on its env.
pub const USE_ENV_ALLOCATORS: &CStr = c"session.use_env_allocators";

/// ONNX's element type code for `float` (TensorProto.FLOAT).
pub const ELEMENT_FLOAT: i32 = 1;

/// An `OrtEnv` that lives for the rest of the process ([`Env::create`] leaks it): allocators
/// registered on it are kept by ONNX Runtime for as long as the env lives, and keepalloc's
/// registration happens once per process.
#[derive(Debug)]
pub struct Env {
    runtime: &'static OnnxRuntime,
    env: *mut OrtEnv,
}

// SAFETY: an OrtEnv is thread-safe (ONNX Runtime documents the env as shareable by all
// threads, and creating sessions on it concurrently is its intended use).
unsafe impl Send for Env {}
// SAFETY: as above.
unsafe impl Sync for Env {}

impl Env {
    /// Creates the env (log level: errors only) and keeps it for the life of the process.
    pub fn create(runtime: &'static OnnxRuntime, log_id: &CStr) -> Result<&'static Env, OrtError> {
        let mut env: *mut OrtEnv = core::ptr::null_mut();
        // SAFETY: `log_id` is NUL-terminated; `env` is a valid out-pointer.
        let status = unsafe {
            (runtime.api().CreateEnv)(
                OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
                log_id.as_ptr(),
                &mut env,
            )
        };
        runtime.check(status, "CreateEnv")?;
        Ok(Box::leak(Box::new(Env { runtime, env })))
    }

    /// An env the application created itself (`CreateEnv` on `runtime`), kept for the life of
    /// the process like one [`Env::create`] made. Returns `None` for NULL. The first call for a
    /// given `runtime` and `env` keeps one small struct for the life of the process; every
    /// later call with the same pair returns that same `&'static Env` and allocates nothing.
    ///
    /// # Safety
    /// `env` is NULL or a live `OrtEnv` of `runtime` that is never released (ONNX Runtime
    /// keeps a registered allocator for as long as its env lives, and keepalloc's registration
    /// runs once per process, so the env must outlive every session that uses it).
    pub unsafe fn from_raw(
        runtime: &'static OnnxRuntime,
        env: *mut OrtEnv,
    ) -> Option<&'static Env> {
        static APPLICATION_ENVS: Interned<Env> = Interned::new();
        if env.is_null() {
            return None;
        }
        let key = (runtime as *const OnnxRuntime as usize, env as usize);
        Some(APPLICATION_ENVS.get_or_insert(key, || Env { runtime, env }))
    }

    /// The raw env pointer.
    pub fn as_ptr(&self) -> *mut OrtEnv {
        self.env
    }

    /// The runtime this env belongs to.
    pub fn runtime(&self) -> &'static OnnxRuntime {
        self.runtime
    }
}

/// How a [`Session`] is created.
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// Set `session.use_env_allocators` to 1 (the env's registered allocators serve the
    /// session) or 0 (ONNX Runtime's own).
    pub use_env_allocators: bool,
    /// Intra-op threads (0: ONNX Runtime's default).
    pub intra_op_threads: i32,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            use_env_allocators: true,
            intra_op_threads: 1,
        }
    }
}

/// One input the model declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// Its name.
    pub name: CString,
    /// ONNX element type code.
    pub element_type: i32,
    /// Its shape, symbolic dimensions (`-1`) replaced by 1.
    pub shape: Vec<i64>,
}

/// An output tensor, copied out of ONNX Runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Output name.
    pub name: String,
    /// ONNX element type code.
    pub element_type: i32,
    /// Shape.
    pub shape: Vec<i64>,
    /// The raw little-endian bytes.
    pub bytes: Vec<u8>,
}

impl Tensor {
    /// The elements as f32, if the tensor is a float tensor.
    pub fn as_f32(&self) -> Option<Vec<f32>> {
        (self.element_type == ELEMENT_FLOAT).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// A session on one model file.
#[derive(Debug)]
pub struct Session {
    runtime: &'static OnnxRuntime,
    session: *mut OrtSession,
    inputs: Vec<InputSpec>,
    /// Names of the outputs that are tensors (maps and sequences are not fetched).
    outputs: Vec<CString>,
}

// SAFETY: an OrtSession may be used from any thread, and `Run` may be called concurrently
// (ONNX Runtime documents `Run` as thread-safe); the rest is owned data.
unsafe impl Send for Session {}
// SAFETY: as above.
unsafe impl Sync for Session {}

struct Options<'a>(&'static OnnxRuntime, &'a mut OrtSessionOptions);
impl Drop for Options<'_> {
    fn drop(&mut self) {
        // SAFETY: created by CreateSessionOptions, released once.
        unsafe { (self.0.api().ReleaseSessionOptions)(self.1) }
    }
}

impl Session {
    /// Creates a session on the model at `model` with `config`.
    pub fn new(env: &Env, model: &Path, config: SessionConfig) -> Result<Session, OrtError> {
        let runtime = env.runtime;
        let api = runtime.api();
        let path = CString::new(model.as_os_str().as_encoded_bytes())
            .map_err(|_| OrtError::BadPath(model.to_path_buf()))?;
        let mut raw: *mut OrtSessionOptions = core::ptr::null_mut();
        runtime.check(
            // SAFETY: valid out-pointer.
            unsafe { (api.CreateSessionOptions)(&mut raw) },
            "CreateSessionOptions",
        )?;
        // SAFETY: CreateSessionOptions succeeded, so `raw` is a live options object, owned here.
        let options = Options(runtime, unsafe { &mut *raw });
        let value = if config.use_env_allocators {
            c"1"
        } else {
            c"0"
        };
        runtime.check(
            // SAFETY: live options; NUL-terminated key and value.
            unsafe {
                (api.AddSessionConfigEntry)(options.1, USE_ENV_ALLOCATORS.as_ptr(), value.as_ptr())
            },
            "AddSessionConfigEntry",
        )?;
        runtime.check(
            // SAFETY: live options.
            unsafe { (api.SetIntraOpNumThreads)(options.1, config.intra_op_threads) },
            "SetIntraOpNumThreads",
        )?;
        let mut session: *mut OrtSession = core::ptr::null_mut();
        runtime.check(
            // SAFETY: live env and options, NUL-terminated path, valid out-pointer.
            unsafe { (api.CreateSession)(env.env, path.as_ptr(), options.1, &mut session) },
            "CreateSession",
        )?;
        let mut this = Session {
            runtime,
            session,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        this.describe()?;
        Ok(this)
    }

    /// The model's inputs.
    pub fn inputs(&self) -> &[InputSpec] {
        &self.inputs
    }

    fn describe(&mut self) -> Result<(), OrtError> {
        let api = self.runtime.api();
        let mut names_allocator: *mut OrtAllocator = core::ptr::null_mut();
        self.runtime.check(
            // SAFETY: valid out-pointer; the default allocator is a static inside ONNX Runtime.
            unsafe { (api.GetAllocatorWithDefaultOptions)(&mut names_allocator) },
            "GetAllocatorWithDefaultOptions",
        )?;
        let (mut n_in, mut n_out) = (0usize, 0usize);
        // SAFETY: live session, valid out-pointers.
        unsafe {
            self.runtime.check(
                (api.SessionGetInputCount)(self.session, &mut n_in),
                "SessionGetInputCount",
            )?;
            self.runtime.check(
                (api.SessionGetOutputCount)(self.session, &mut n_out),
                "SessionGetOutputCount",
            )?;
        }
        for i in 0..n_in {
            let mut name: *mut c_char = core::ptr::null_mut();
            self.runtime.check(
                // SAFETY: live session, index in range, valid out-pointer.
                unsafe { (api.SessionGetInputName)(self.session, i, names_allocator, &mut name) },
                "SessionGetInputName",
            )?;
            let name = self.take_name(names_allocator, name)?;
            let mut type_info: *mut OrtTypeInfo = core::ptr::null_mut();
            self.runtime.check(
                // SAFETY: live session, index in range, valid out-pointer.
                unsafe { (api.SessionGetInputTypeInfo)(self.session, i, &mut type_info) },
                "SessionGetInputTypeInfo",
            )?;
            let spec = self.tensor_spec(type_info);
            // SAFETY: created just above, released once.
            unsafe { (api.ReleaseTypeInfo)(type_info) };
            let (element_type, shape) = spec?.ok_or(OrtError::Unsupported("a non-tensor input"))?;
            self.inputs.push(InputSpec {
                name,
                element_type,
                shape: shape.into_iter().map(|d| d.max(1)).collect(),
            });
        }
        for i in 0..n_out {
            let mut name: *mut c_char = core::ptr::null_mut();
            self.runtime.check(
                // SAFETY: live session, index in range, valid out-pointer.
                unsafe { (api.SessionGetOutputName)(self.session, i, names_allocator, &mut name) },
                "SessionGetOutputName",
            )?;
            let name = self.take_name(names_allocator, name)?;
            let mut type_info: *mut OrtTypeInfo = core::ptr::null_mut();
            self.runtime.check(
                // SAFETY: live session, index in range, valid out-pointer.
                unsafe { (api.SessionGetOutputTypeInfo)(self.session, i, &mut type_info) },
                "SessionGetOutputTypeInfo",
            )?;
            let spec = self.tensor_spec(type_info);
            // SAFETY: created just above, released once.
            unsafe { (api.ReleaseTypeInfo)(type_info) };
            if spec?.is_some() {
                self.outputs.push(name);
            }
        }
        Ok(())
    }

    /// Copies a name ONNX Runtime allocated with `allocator`, and frees it.
    fn take_name(
        &self,
        allocator: *mut OrtAllocator,
        name: *mut c_char,
    ) -> Result<CString, OrtError> {
        // SAFETY: `name` is a NUL-terminated string ONNX Runtime just allocated.
        let copy = unsafe { CStr::from_ptr(name) }.to_owned();
        self.runtime.check(
            // SAFETY: `name` came from `allocator` and is freed once.
            unsafe { (self.runtime.api().AllocatorFree)(allocator, name as *mut c_void) },
            "AllocatorFree",
        )?;
        Ok(copy)
    }

    /// The element type and shape of a tensor type, or `None` for a map or a sequence.
    fn tensor_spec(
        &self,
        type_info: *const OrtTypeInfo,
    ) -> Result<Option<(i32, Vec<i64>)>, OrtError> {
        let api = self.runtime.api();
        let mut info: *const OrtTensorTypeAndShapeInfo = core::ptr::null();
        self.runtime.check(
            // SAFETY: live type info, valid out-pointer; `info` borrows from `type_info`.
            unsafe { (api.CastTypeInfoToTensorInfo)(type_info, &mut info) },
            "CastTypeInfoToTensorInfo",
        )?;
        if info.is_null() {
            return Ok(None);
        }
        self.shape_of(info).map(Some)
    }

    fn shape_of(
        &self,
        info: *const OrtTensorTypeAndShapeInfo,
    ) -> Result<(i32, Vec<i64>), OrtError> {
        let api = self.runtime.api();
        let mut element_type: i32 = 0;
        let mut rank = 0usize;
        // SAFETY: live info; the element type is written as a C int into an i32 (never read as the Rust enum, whose set of values may be smaller than this ORT's).
        unsafe {
            self.runtime.check(
                (api.GetTensorElementType)(
                    info,
                    &mut element_type as *mut i32 as *mut ONNXTensorElementDataType,
                ),
                "GetTensorElementType",
            )?;
            self.runtime.check(
                (api.GetDimensionsCount)(info, &mut rank),
                "GetDimensionsCount",
            )?;
        }
        let mut shape = vec![0i64; rank];
        self.runtime.check(
            // SAFETY: `shape` has `rank` elements.
            unsafe { (api.GetDimensions)(info, shape.as_mut_ptr(), rank) },
            "GetDimensions",
        )?;
        Ok((element_type, shape))
    }

    /// Runs the model on `inputs` (one f32 buffer per declared input, in order, each with
    /// the element count of its shape) and returns every tensor output.
    pub fn run(&self, inputs: &mut [Vec<f32>]) -> Result<Vec<Tensor>, OrtError> {
        let api = self.runtime.api();
        if inputs.len() != self.inputs.len() {
            return Err(OrtError::Input(format!(
                "the model has {} inputs, {} given",
                self.inputs.len(),
                inputs.len()
            )));
        }
        let mut info: *mut OrtMemoryInfo = core::ptr::null_mut();
        self.runtime.check(
            // SAFETY: valid out-pointer.
            unsafe {
                (api.CreateCpuMemoryInfo)(
                    OrtAllocatorType::OrtArenaAllocator,
                    OrtMemType::OrtMemTypeDefault,
                    &mut info,
                )
            },
            "CreateCpuMemoryInfo",
        )?;
        let mut values: Vec<*mut OrtValue> = Vec::with_capacity(inputs.len());
        let result = (|| {
            for (spec, data) in self.inputs.iter().zip(inputs.iter_mut()) {
                let count: i64 = spec.shape.iter().product();
                if spec.element_type != ELEMENT_FLOAT || count as usize != data.len() {
                    return Err(OrtError::Input(format!(
                        "input {:?} wants {count} elements of type {}, got {} f32",
                        spec.name,
                        spec.element_type,
                        data.len()
                    )));
                }
                let mut value: *mut OrtValue = core::ptr::null_mut();
                self.runtime.check(
                    // SAFETY: `data` outlives the value (released before this function returns); the shape and byte length match.
                    unsafe {
                        (api.CreateTensorWithDataAsOrtValue)(
                            info,
                            data.as_mut_ptr() as *mut c_void,
                            data.len() * 4,
                            spec.shape.as_ptr(),
                            spec.shape.len(),
                            ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                            &mut value,
                        )
                    },
                    "CreateTensorWithDataAsOrtValue",
                )?;
                values.push(value);
            }
            let input_names: Vec<*const c_char> =
                self.inputs.iter().map(|s| s.name.as_ptr()).collect();
            let output_names: Vec<*const c_char> =
                self.outputs.iter().map(|n| n.as_ptr()).collect();
            let mut outputs: Vec<*mut OrtValue> = vec![core::ptr::null_mut(); self.outputs.len()];
            // SAFETY: live session; the name and value arrays have the lengths passed.
            let status = unsafe {
                (api.Run)(
                    self.session,
                    core::ptr::null(),
                    input_names.as_ptr(),
                    values.as_ptr() as *const *const OrtValue,
                    values.len(),
                    output_names.as_ptr(),
                    output_names.len(),
                    outputs.as_mut_ptr(),
                )
            };
            let ran = self.runtime.check(status, "Run");
            let copied = ran.and_then(|()| {
                outputs
                    .iter()
                    .zip(&self.outputs)
                    .map(|(&v, name)| self.copy_out(v, name))
                    .collect::<Result<Vec<_>, _>>()
            });
            for v in outputs {
                if !v.is_null() {
                    // SAFETY: produced by Run, released once.
                    unsafe { (api.ReleaseValue)(v) };
                }
            }
            copied
        })();
        for v in values {
            // SAFETY: created above, released once.
            unsafe { (api.ReleaseValue)(v) };
        }
        // SAFETY: created above, released once, after the values that used it.
        unsafe { (api.ReleaseMemoryInfo)(info) };
        result
    }

    fn copy_out(&self, value: *mut OrtValue, name: &CStr) -> Result<Tensor, OrtError> {
        let api = self.runtime.api();
        let mut info: *mut OrtTensorTypeAndShapeInfo = core::ptr::null_mut();
        self.runtime.check(
            // SAFETY: live value, valid out-pointer.
            unsafe { (api.GetTensorTypeAndShape)(value, &mut info) },
            "GetTensorTypeAndShape",
        )?;
        let described = self.shape_of(info);
        // SAFETY: created above, released once.
        unsafe { (api.ReleaseTensorTypeAndShapeInfo)(info) };
        let (element_type, shape) = described?;
        let element_size = match element_type {
            1 | 6 | 12 => 4,  // float, int32, uint32
            7 | 11 | 13 => 8, // int64, double, uint64
            2 | 3 | 9 => 1,   // uint8, int8, bool
            4 | 5 | 10 | 16 => 2,
            _ => return Err(OrtError::Unsupported("an output element type")),
        };
        let count: i64 = shape.iter().product();
        let len = count as usize * element_size;
        let mut data: *mut c_void = core::ptr::null_mut();
        self.runtime.check(
            // SAFETY: live value, valid out-pointer.
            unsafe { (api.GetTensorMutableData)(value, &mut data) },
            "GetTensorMutableData",
        )?;
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the tensor's buffer holds `count` elements of `element_size` bytes.
            unsafe { core::slice::from_raw_parts(data as *const u8, len) }.to_vec()
        };
        Ok(Tensor {
            name: name.to_string_lossy().into_owned(),
            element_type,
            shape,
            bytes,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: created by CreateSession, released once.
        unsafe { (self.runtime.api().ReleaseSession)(self.session) }
    }
}

/// Deterministic f32 inputs for `session`: element `i` of input `k` is a small value in
/// [-1, 1] that depends on `seed`.
pub fn sample_inputs(session: &Session, seed: u32) -> Vec<Vec<f32>> {
    session
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, spec)| {
            let count: i64 = spec.shape.iter().product();
            (0..count as u32)
                .map(|i| {
                    let h =
                        (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_add(k as u32 * 97)) % 2001;
                    h as f32 / 1000.0 - 1.0
                })
                .collect()
        })
        .collect()
}
