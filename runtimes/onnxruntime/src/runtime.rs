//! Loading ONNX Runtime at run time and calling its C API.

use core::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

use ort_sys::{OrtApi, OrtApiBase, OrtStatusPtr};

use crate::OrtError;

/// The OrtApi version this crate asks for: the version of the header `ort-sys` was generated
/// from. Every later ONNX Runtime serves it (the OrtApi struct only grows at its end), so the
/// function pointers this crate calls are at the indices it expects.
pub const ORT_API_VERSION: u32 = ort_sys::ORT_API_VERSION;

/// A loaded ONNX Runtime library and its C API table. Loaded once and kept for the life of
/// the process ([`OnnxRuntime::load`] leaks it): ONNX Runtime keeps pointers into itself
/// (and into our allocator) in process-wide state, so unloading it is never safe.
pub struct OnnxRuntime {
    path: PathBuf,
    version: String,
    base: &'static OrtApiBase,
    api: &'static OrtApi,
    /// `None` for a runtime the application linked or loaded itself
    /// ([`OnnxRuntime::from_api_base`]).
    _library: Option<libloading::Library>,
}

impl core::fmt::Debug for OnnxRuntime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OnnxRuntime")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl OnnxRuntime {
    /// Opens the ONNX Runtime shared library at `path`, or at `$ORT_DYLIB_PATH` when `path`
    /// is `None`, and gets its OrtApi for [`ORT_API_VERSION`].
    pub fn load(path: Option<&Path>) -> Result<&'static OnnxRuntime, OrtError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .ok_or(OrtError::NoLibrary)?,
        };
        // SAFETY: loading runs the library's initializers; ONNX Runtime's are ordinary C++ static constructors with no preconditions on the loading process.
        let library = unsafe { libloading::Library::new(&path) }.map_err(|e| OrtError::Load {
            path: path.clone(),
            message: e.to_string(),
        })?;
        type GetApiBase = unsafe extern "C" fn() -> *const OrtApiBase;
        let get_api_base =
            // SAFETY: `OrtGetApiBase` has this signature in every ONNX Runtime release (it is the one stable entry point of the C API).
            unsafe { library.get::<GetApiBase>(b"OrtGetApiBase\0") }.map_err(|e| {
                OrtError::Load {
                    path: path.clone(),
                    message: format!("not an ONNX Runtime library (no OrtGetApiBase): {e}"),
                }
            })?;
        // SAFETY: the function takes no argument and returns a pointer to a static struct.
        let base = unsafe { get_api_base() };
        // SAFETY: `base` is NULL or the library's static OrtApiBase, which lives as long as the library, kept (with the OnnxRuntime) for the life of the process.
        unsafe { Self::from_base(base, path, Some(library)) }
    }

    /// The ONNX Runtime an application already has (linked, or loaded itself): `base` is what
    /// its `OrtGetApiBase()` returned. This is how the C API (`keepalloc_ort_register`) meets
    /// the caller's runtime. Fails with [`OrtError::Load`] when `base` is NULL or the runtime
    /// does not serve [`ORT_API_VERSION`]. Each call leaks one small struct (the runtime is
    /// kept for the life of the process, as ONNX Runtime keeps our allocator).
    ///
    /// # Safety
    /// `base` is NULL or the `OrtApiBase` of an ONNX Runtime that stays loaded for the rest of
    /// the process.
    pub unsafe fn from_api_base(base: *const OrtApiBase) -> Result<&'static OnnxRuntime, OrtError> {
        // SAFETY: the caller's contract.
        unsafe {
            Self::from_base(
                base,
                PathBuf::from("(the application's ONNX Runtime)"),
                None,
            )
        }
    }

    /// # Safety
    /// `base` is NULL or an `OrtApiBase` that lives for the rest of the process.
    unsafe fn from_base(
        base: *const OrtApiBase,
        path: PathBuf,
        library: Option<libloading::Library>,
    ) -> Result<&'static OnnxRuntime, OrtError> {
        if base.is_null() {
            return Err(OrtError::Load {
                path,
                message: "OrtGetApiBase returned NULL".into(),
            });
        }
        // SAFETY: non-NULL, and the caller promises it lives for the rest of the process.
        let base: &'static OrtApiBase = unsafe { &*base };
        // SAFETY: GetVersionString returns a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr((base.GetVersionString)()) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: GetApi takes any version number and returns NULL for one it does not serve.
        let api = unsafe { (base.GetApi)(ORT_API_VERSION) };
        if api.is_null() {
            return Err(OrtError::Load {
                path,
                message: format!(
                    "ONNX Runtime {version} does not serve OrtApi version {ORT_API_VERSION}"
                ),
            });
        }
        // SAFETY: non-NULL; the OrtApi is a static table inside the library, which stays loaded (the caller's contract, or the library kept in the leaked OnnxRuntime).
        let api = unsafe { &*api };
        Ok(Box::leak(Box::new(OnnxRuntime {
            path,
            version,
            base,
            api,
            _library: library,
        })))
    }

    /// The `OrtApiBase` (what `OrtGetApiBase()` returns): what a C caller passes to
    /// `keepalloc_ort_register`.
    pub fn api_base(&self) -> *const OrtApiBase {
        self.base
    }

    /// The C API table.
    pub fn api(&self) -> &'static OrtApi {
        self.api
    }

    /// The library's version string (`"1.32.0"`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The path the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Turns an `OrtStatus*` into a `Result`, releasing the status. `what` names the call.
    pub fn check(&self, status: OrtStatusPtr, what: &'static str) -> Result<(), OrtError> {
        if status.0.is_null() {
            return Ok(());
        }
        // SAFETY: `status` is a non-NULL status just returned by ONNX Runtime; its message is a NUL-terminated string owned by the status, copied before the status is released.
        let message = unsafe {
            let text = (self.api.GetErrorMessage)(status.0);
            let message = if text.is_null() {
                String::from("(no message)")
            } else {
                CStr::from_ptr(text as *const c_char)
                    .to_string_lossy()
                    .into_owned()
            };
            (self.api.ReleaseStatus)(status.0);
            message
        };
        Err(OrtError::Api {
            call: what,
            message,
        })
    }
}
