//! Loading an XNNPACK shared library and calling the few functions keepalloc needs, with the
//! signatures of the XNNPACK version the library actually is.

use core::ffi::{CStr, c_char, c_int, c_long, c_void};
use std::ffi::CString;
use std::path::{Path, PathBuf};

use keepalloc_allocators::AllocatorTable;

use crate::XnnpackError;

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlmopen(lmid: c_long, filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;
/// glibc's `LM_ID_NEWLM`: a new link-map namespace.
const LM_ID_NEWLM: c_long = -1;

/// `enum xnn_status` (unchanged from 2022 to 2026): 0 is success.
pub type XnnStatus = c_int;
/// `xnn_status_success`.
pub const XNN_STATUS_SUCCESS: XnnStatus = 0;
/// `xnn_status_uninitialized`.
pub const XNN_STATUS_UNINITIALIZED: XnnStatus = 1;
/// `XNN_EXTRA_BYTES`, in floats: XNNPACK may read this far past the end of an input.
pub const XNN_EXTRA_FLOATS: usize = 16 / size_of::<f32>();

/// Which `xnnpack.h` the library was built from; the function signatures differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Debian's `libxnnpack0` (upstream snapshot of 2022-02-16): `create_fc` takes no cache
    /// argument, `setup_fc(op, batch, input, output, threadpool)`.
    Debian2022,
    /// XNNPACK of 2025-05 and later (ExecuTorch 1.5.1 carries a 2026 one): `create_fc` takes a
    /// `weights_cache` before the out-pointer (the `code_cache` argument is gone),
    /// `reshape_fc(op, batch, threadpool)` then `setup_fc(op, input, output)`.
    Current,
}

/// How to load the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    /// `dlopen(RTLD_NOW | RTLD_LOCAL)`: shares the process's namespace (an already loaded copy
    /// of the same file is reused).
    Default,
    /// `dlmopen(LM_ID_NEWLM)`: a private copy with its own globals, even if another copy is
    /// loaded.
    New,
}

type Initialize = unsafe extern "C" fn(*const AllocatorTable) -> XnnStatus;
type CreateFc2022 = unsafe extern "C" fn(
    usize,
    usize,
    usize,
    usize,
    *const f32,
    *const f32,
    f32,
    f32,
    u32,
    *mut *mut c_void,
) -> XnnStatus;
type SetupFc2022 =
    unsafe extern "C" fn(*mut c_void, usize, *const f32, *mut f32, *mut c_void) -> XnnStatus;
type CreateFcCurrent = unsafe extern "C" fn(
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
    *mut *mut c_void,
) -> XnnStatus;
type ReshapeFcCurrent = unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> XnnStatus;
type SetupFcCurrent = unsafe extern "C" fn(*mut c_void, *const f32, *mut f32) -> XnnStatus;
type RunOperator = unsafe extern "C" fn(*mut c_void, *mut c_void) -> XnnStatus;
type DeleteOperator = unsafe extern "C" fn(*mut c_void) -> XnnStatus;

enum FcApi {
    Debian2022 {
        create: CreateFc2022,
        setup: SetupFc2022,
    },
    Current {
        create: CreateFcCurrent,
        reshape: ReshapeFcCurrent,
        setup: SetupFcCurrent,
    },
}

/// A loaded XNNPACK (never unloaded: it may keep our table for the life of the process).
pub struct Xnnpack {
    path: PathBuf,
    generation: Generation,
    initialize: Initialize,
    fc: FcApi,
    run: RunOperator,
    delete: DeleteOperator,
}

impl core::fmt::Debug for Xnnpack {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Xnnpack")
            .field("path", &self.path)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// Looks `name` up as a function pointer of type `F`.
///
/// # Safety
/// `handle` is a live dlopen handle and the C function `name` has exactly the signature `F`.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Result<F, XnnpackError> {
    assert_eq!(
        size_of::<F>(),
        size_of::<*mut c_void>(),
        "F is a function pointer"
    );
    // SAFETY: the caller's promise about `handle`; `name` is NUL-terminated.
    let p = unsafe { dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(XnnpackError::Missing(name.to_string_lossy().into_owned()));
    }
    // SAFETY: a non-NULL address of the function `name`, whose signature is `F` (the caller's promise); `F` is pointer-sized.
    Ok(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Xnnpack {
    /// Loads the XNNPACK at `path` (a file name such as `libXNNPACK.so.0` is searched the
    /// usual way), built from the `xnnpack.h` of `generation`, and never unloads it.
    ///
    /// Loading runs the library's constructors, and its exported functions are then called
    /// with the signatures of `generation`'s header: nothing here can check that the file is
    /// XNNPACK (a missing symbol, or `xnn_reshape_fully_connected_nc_f32` present or absent
    /// against `generation`, is caught; a lookalike is not).
    ///
    /// # Safety
    /// `path` is an XNNPACK shared library (or a library that embeds and exports XNNPACK's C
    /// API, such as ExecuTorch's XNNPACK backend), or a file that fails to load or lacks one
    /// of the symbols: its constructors are safe to run in this process, its `xnn_*` functions
    /// are XNNPACK's with the signatures of the `xnnpack.h` of `generation` (Debian's
    /// 2022-02-16 header for [`Generation::Debian2022`], google/XNNPACK's 2025-06 to 2026-08
    /// header for [`Generation::Current`]), and the file is not changed while it is loaded.
    pub unsafe fn load(
        path: &Path,
        generation: Generation,
        namespace: Namespace,
    ) -> Result<&'static Xnnpack, XnnpackError> {
        let name = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| XnnpackError::Load(path.to_path_buf(), "NUL in path".into()))?;
        // SAFETY: NUL-terminated name; loading runs the library's constructors, which the caller promises are XNNPACK's (or its embedder's) and safe to run here (ExecuTorch's calls `xnn_initialize(NULL)`: the case this crate exists to detect).
        let handle = unsafe {
            match namespace {
                Namespace::Default => dlopen(name.as_ptr(), RTLD_NOW | RTLD_LOCAL),
                Namespace::New => dlmopen(LM_ID_NEWLM, name.as_ptr(), RTLD_NOW | RTLD_LOCAL),
            }
        };
        if handle.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated message.
            let why = unsafe {
                let e = dlerror();
                if e.is_null() {
                    "unknown error".to_string()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(XnnpackError::Load(path.to_path_buf(), why));
        }
        // A Current library must export `reshape`, a 2022 one must not: a wrong generation is
        // an error here, never a call with the wrong signature.
        let has_reshape =
            // SAFETY: dlsym only looks the name up.
            !unsafe { dlsym(handle, c"xnn_reshape_fully_connected_nc_f32".as_ptr()) }.is_null();
        if has_reshape != (generation == Generation::Current) {
            return Err(XnnpackError::Generation {
                path: path.to_path_buf(),
                expected: generation,
            });
        }
        // SAFETY: (every symbol below) each is the XNNPACK function of that name (the caller's promise), whose C signature in the `xnnpack.h` of `generation` is the type it is stored as: `xnn_initialize(const struct xnn_allocator*)`, `xnn_run_operator(op, threadpool)` and `xnn_delete_operator(op)` are the same in both; the fully-connected functions are checked against Debian's 2022-02-16 header and google/XNNPACK's header from 2025-06 to 2026-08 (unchanged over that span; ExecuTorch 1.5.1's library exports functions added in 2026-03, so it is inside it).
        let fc = unsafe {
            match generation {
                Generation::Debian2022 => FcApi::Debian2022 {
                    create: symbol(handle, c"xnn_create_fully_connected_nc_f32")?,
                    setup: symbol(handle, c"xnn_setup_fully_connected_nc_f32")?,
                },
                Generation::Current => FcApi::Current {
                    create: symbol(handle, c"xnn_create_fully_connected_nc_f32")?,
                    reshape: symbol(handle, c"xnn_reshape_fully_connected_nc_f32")?,
                    setup: symbol(handle, c"xnn_setup_fully_connected_nc_f32")?,
                },
            }
        };
        // SAFETY: as above.
        let (initialize, run, delete) = unsafe {
            (
                symbol(handle, c"xnn_initialize")?,
                symbol(handle, c"xnn_run_operator")?,
                symbol(handle, c"xnn_delete_operator")?,
            )
        };
        Ok(Box::leak(Box::new(Xnnpack {
            path: path.to_path_buf(),
            generation,
            initialize,
            fc,
            run,
            delete,
        })))
    }

    /// Which header's signatures this library is called with.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// `xnn_initialize(table)`. XNNPACK keeps the first allocator it is given (NULL means
    /// its own) and returns success to every later call, whatever allocator that call
    /// passes: see [`crate::initialize_checked`].
    ///
    /// # Safety
    /// `table` must stay valid, and its `context` alive, for the life of the process.
    pub unsafe fn initialize(&self, table: Option<&AllocatorTable>) -> XnnStatus {
        let p = table.map_or(core::ptr::null(), |t| t as *const AllocatorTable);
        // SAFETY: `AllocatorTable` is `struct xnn_allocator` field for field (same in the 2022 and 2026 headers); the caller promises it lives for the process.
        unsafe { (self.initialize)(p) }
    }

    /// `y = clamp(x·Wᵀ + b, lo, hi)` through an XNNPACK fully-connected operator: create
    /// (XNNPACK packs the weights into memory from its allocator), run, delete. `x` holds
    /// `batch * input` floats, `w` `output * input`, `b` `output`.
    #[allow(clippy::too_many_arguments)]
    pub fn fully_connected(
        &self,
        input: usize,
        output: usize,
        batch: usize,
        x: &[f32],
        w: &[f32],
        b: &[f32],
        lo: f32,
        hi: f32,
    ) -> Result<Vec<f32>, XnnStatus> {
        assert!(x.len() >= batch * input && w.len() >= output * input && b.len() >= output);
        let mut padded = x[..batch * input].to_vec();
        padded.resize(batch * input + XNN_EXTRA_FLOATS, 0.0);
        let mut y = vec![f32::NAN; batch * output];
        let mut op: *mut c_void = core::ptr::null_mut();
        let null = core::ptr::null_mut();
        let check = |s: XnnStatus| {
            if s == XNN_STATUS_SUCCESS {
                Ok(())
            } else {
                Err(s)
            }
        };
        // SAFETY: `w` and `b` hold the sizes asserted above; `op` is a valid out-pointer; the signature matches the library's generation (checked at load).
        check(unsafe {
            match self.fc {
                FcApi::Debian2022 { create, .. } => create(
                    input,
                    output,
                    input,
                    output,
                    w.as_ptr(),
                    b.as_ptr(),
                    lo,
                    hi,
                    0,
                    &mut op,
                ),
                FcApi::Current { create, .. } => create(
                    input,
                    output,
                    input,
                    output,
                    w.as_ptr(),
                    b.as_ptr(),
                    lo,
                    hi,
                    0,
                    null,
                    &mut op,
                ),
            }
        })?;
        // SAFETY: `op` is live; `padded` holds batch*input floats plus XNN_EXTRA_BYTES and `y` batch*output; both outlive the run; no thread pool (NULL).
        let ran = unsafe {
            match self.fc {
                FcApi::Debian2022 { setup, .. } => {
                    check(setup(op, batch, padded.as_ptr(), y.as_mut_ptr(), null))
                }
                FcApi::Current { reshape, setup, .. } => check(reshape(op, batch, null))
                    .and_then(|()| check(setup(op, padded.as_ptr(), y.as_mut_ptr()))),
            }
            .and_then(|()| check((self.run)(op, null)))
        };
        // SAFETY: `op` is live and not used again.
        let deleted = check(unsafe { (self.delete)(op) });
        ran.and(deleted).map(|()| y)
    }
}
