//! Loading ONNX Runtime at run time and calling its C API.

use core::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

use crate::ffi::{OrtApi, OrtApiBase, OrtStatusPtr};

use crate::OrtError;
use crate::intern::Interned;

/// The OrtApi version this crate asks for (ONNX Runtime 1.22's). Every later ONNX Runtime
/// serves it (the OrtApi struct only grows at its end), so the slots declared in
/// [`ffi`](crate::ffi) are where this crate expects them.
pub const ORT_API_VERSION: u32 = 22;

/// A loaded ONNX Runtime library and its C API table. Loaded once and kept for the life of
/// the process ([`OnnxRuntime::load`] leaks it, [`OnnxRuntime::from_api_base`] keeps one per
/// `OrtApiBase`): ONNX Runtime keeps pointers into itself
/// (and into our allocator) in process-wide state, so unloading it is never safe.
pub struct OnnxRuntime {
    path: PathBuf,
    version: String,
    /// `None` when the application passed its OrtApi directly ([`OnnxRuntime::from_api`]).
    base: Option<&'static OrtApiBase>,
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
    ///
    /// Loading runs the library's initializers, and the functions it exports are then called
    /// with ONNX Runtime's signatures: nothing here can check that the file is ONNX Runtime
    /// (a missing `OrtGetApiBase` or a NULL OrtApi is caught, a lookalike is not). Each call
    /// keeps the loaded library and a small struct for the life of the process.
    ///
    /// # Safety
    /// `path` (or `$ORT_DYLIB_PATH` when `path` is `None`) is an ONNX Runtime shared library
    /// of a supported version (one that serves OrtApi version [`ORT_API_VERSION`]: ONNX Runtime
    /// 1.22 and later), or a file that fails to load or lacks `OrtGetApiBase`: its
    /// initializers are safe to run in this process, its `OrtGetApiBase` is ONNX Runtime's,
    /// and the file is not changed while it is loaded.
    pub unsafe fn load(path: Option<&Path>) -> Result<&'static OnnxRuntime, OrtError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .ok_or(OrtError::NoLibrary)?,
        };
        // SAFETY: loading runs the library's initializers; the caller promises `path` is ONNX Runtime (or does not load), whose initializers are ordinary C++ static constructors with no preconditions on the loading process.
        let library = unsafe { libloading::Library::new(&path) }.map_err(|e| OrtError::Load {
            path: path.clone(),
            message: e.to_string(),
        })?;
        type GetApiBase = unsafe extern "C" fn() -> *const OrtApiBase;
        let get_api_base =
            // SAFETY: the caller promises the library is ONNX Runtime, whose `OrtGetApiBase` has this signature in every release (it is the one stable entry point of the C API).
            unsafe { library.get::<GetApiBase>(b"OrtGetApiBase\0") }.map_err(|e| {
                OrtError::Load {
                    path: path.clone(),
                    message: format!("not an ONNX Runtime library (no OrtGetApiBase): {e}"),
                }
            })?;
        // SAFETY: the function takes no argument and returns a pointer to a static struct.
        let base = unsafe { get_api_base() };
        // SAFETY: `base` is NULL or the library's static OrtApiBase, which lives as long as the library, kept (with the leaked OnnxRuntime) for the life of the process.
        let runtime = unsafe { Self::from_base(base, path, Some(library)) }?;
        Ok(Box::leak(Box::new(runtime)))
    }

    /// The ONNX Runtime an application already has (linked, or loaded itself): `base` is what
    /// its `OrtGetApiBase()` returned. This is how the C API (`keepalloc_ort_register`) meets
    /// the caller's runtime. Fails with [`OrtError::Load`] when `base` is NULL or the runtime
    /// does not serve [`ORT_API_VERSION`]. The first successful call for a given `base` keeps
    /// one small struct for the life of the process (as ONNX Runtime keeps our allocator);
    /// every later call with the same `base` returns that same `&'static OnnxRuntime` and
    /// allocates nothing (`keepalloc_ort_register` may be called any number of times). A
    /// failed call keeps nothing.
    ///
    /// # Safety
    /// `base` is NULL or the `OrtApiBase` of an ONNX Runtime that stays loaded for the rest of
    /// the process.
    pub unsafe fn from_api_base(base: *const OrtApiBase) -> Result<&'static OnnxRuntime, OrtError> {
        static APPLICATION_RUNTIMES: Interned<OnnxRuntime> = Interned::new();
        APPLICATION_RUNTIMES.get_or_try_insert((base as usize, 0), || {
            // SAFETY: the caller's contract.
            unsafe {
                Self::from_base(
                    base,
                    PathBuf::from("(the application's ONNX Runtime)"),
                    None,
                )
            }
        })
    }

    /// The ONNX Runtime whose `OrtApi` the application already has (for example
    /// `ort::api()` from the `ort` crate): `api` is an `OrtApi` of version 11 or later (every
    /// slot [`ffi::OrtApi`](crate::ffi::OrtApi) declares exists there). Fails with
    /// [`OrtError::Load`] when `api` is NULL. Like [`OnnxRuntime::from_api_base`], the first
    /// call for a given `api` keeps one small struct for the life of the process and later
    /// calls return it.
    ///
    /// # Safety
    /// `api` is NULL or the `OrtApi` of an ONNX Runtime that stays loaded for the rest of the
    /// process.
    pub unsafe fn from_api(api: *const OrtApi) -> Result<&'static OnnxRuntime, OrtError> {
        static APPLICATION_APIS: Interned<OnnxRuntime> = Interned::new();
        let path = PathBuf::from("(the application's ONNX Runtime)");
        if api.is_null() {
            return Err(OrtError::Load {
                path,
                message: "the OrtApi pointer is NULL".into(),
            });
        }
        APPLICATION_APIS.get_or_try_insert((api as usize, 1), || {
            Ok(OnnxRuntime {
                path,
                version: String::from("(unknown: the OrtApi was passed directly)"),
                base: None,
                // SAFETY: non-NULL; the caller promises it is an OrtApi that stays loaded.
                api: unsafe { &*api },
                _library: None,
            })
        })
    }

    /// # Safety
    /// `base` is NULL or an `OrtApiBase` that lives for the rest of the process (the returned
    /// runtime refers to it and to its OrtApi, so it must be kept for the rest of the process
    /// too, and with it `library`).
    unsafe fn from_base(
        base: *const OrtApiBase,
        path: PathBuf,
        library: Option<libloading::Library>,
    ) -> Result<OnnxRuntime, OrtError> {
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
        Ok(OnnxRuntime {
            path,
            version,
            base: Some(base),
            api,
            _library: library,
        })
    }

    /// The `OrtApiBase` (what `OrtGetApiBase()` returns): what a C caller passes to
    /// `keepalloc_ort_register`. NULL for a runtime made by [`OnnxRuntime::from_api`].
    pub fn api_base(&self) -> *const OrtApiBase {
        self.base
            .map_or(core::ptr::null(), |b| b as *const OrtApiBase)
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
