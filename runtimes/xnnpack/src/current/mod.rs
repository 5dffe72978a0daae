//! The current XNNPACK (the one inside ExecuTorch 1.5.1's wheel) with its f32 and
//! low-precision fully-connected operators and its subgraph path: what keepalloc's kernels
//! are compared with, in the benchmark and in their tests.
//!
//! [`Library::load`] needs a library of the 2026-03 header or later (the signatures are in
//! [`crate::ffi::current`]) and loads it with `dlmopen(LM_ID_NEWLM)`, so its calls to its own
//! `xnn_*` functions cannot bind to another XNNPACK in the process (Debian's, say). Loading it
//! runs its constructors, which call `xnn_initialize(NULL)`: it allocates with its own
//! allocator, which is fine for measuring and comparing (adoption is [`crate::adopt`]'s job).
//!
//! Each operator is created, packed and reshaped once; `run` sets it up again only when the
//! caller's buffers move, as a runtime does, and runs it. Errors ([`CallFailed`]) name the call
//! that failed and keep its status, so a caller can tell a CPU the library has no kernel for
//! (`xnn_status_unsupported_hardware`) from a real failure.

mod operators;
mod subgraph;

use core::ffi::c_void;
use std::path::{Path, PathBuf};

pub(crate) use operators::create_fully_connected;
pub use operators::{Bf16Fc, F32Fc, F32Qc8wFc, Qd8Fc};
pub use subgraph::Qd8Subgraph;

use crate::XnnpackError;
use crate::ffi::current as c;
use crate::ffi::{self, DeleteOperator, Namespace, RunOperator, XnnOperator, XnnStatus};
use crate::open::{Generation, open_library, required, xnn_entry_points};

/// A current XNNPACK's entry points, each field named after its symbol without `xnn_` (the
/// library is never unloaded).
pub struct Library {
    path: PathBuf,
    create_fully_connected_nc_f32: c::CreateFullyConnectedNcF32,
    reshape_fully_connected_nc_f32: c::ReshapeFullyConnected,
    setup_fully_connected_nc_f32: c::SetupFullyConnectedNcF32,
    create_fully_connected_nc_bf16_f32: c::CreateFullyConnectedNcBf16F32,
    reshape_fully_connected_nc_bf16_f32: c::ReshapeFullyConnected,
    setup_fully_connected_nc_bf16_f32: c::SetupFullyConnectedNcBf16F32,
    create_fully_connected_nc_f32_qc8w: c::CreateFullyConnectedNcQc8w,
    reshape_fully_connected_nc_f32_qc8w: c::ReshapeFullyConnected,
    setup_fully_connected_nc_f32_qc8w: c::SetupFullyConnectedNcF32,
    create_fully_connected_nc_qd8_f32_qc8w: c::CreateFullyConnectedNcQc8w,
    reshape_fully_connected_nc_qd8_f32_qc8w: c::ReshapeFullyConnectedNcQd8F32Qc8w,
    setup_fully_connected_nc_qd8_f32_qc8w: c::SetupFullyConnectedNcQd8F32Qc8w,
    create_convert_nc_f32_qd8: c::CreateConvertNcF32Qd8,
    reshape_convert_nc_f32_qd8: c::ReshapeConvertNcF32Qd8,
    setup_convert_nc_f32_qd8: c::SetupConvertNcF32Qd8,
    run_operator: RunOperator,
    delete_operator: DeleteOperator,
    create_subgraph: ffi::CreateSubgraph,
    define_tensor_value: ffi::DefineTensorValue,
    define_dynamically_quantized_tensor_value: c::DefineDynamicallyQuantizedTensorValue,
    define_channelwise_quantized_tensor_value: c::DefineChannelwiseQuantizedTensorValue,
    define_convert: c::DefineConvert,
    define_fully_connected: ffi::DefineFullyConnected,
    create_runtime_v3: c::CreateRuntimeV3,
    reshape_runtime: ffi::RuntimeFn,
    setup_runtime_v2: c::SetupRuntimeV2,
    invoke_runtime: ffi::RuntimeFn,
    delete_runtime: ffi::RuntimeFn,
    delete_subgraph: ffi::DeleteSubgraph,
    /// The pthreadpool linked into the same library (its operators take its pools).
    pthreadpool_create: ffi::PthreadpoolCreate,
}

impl core::fmt::Debug for Library {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Library {
    /// Loads the library at `path` into a new link-map namespace, once per path (a later
    /// call returns the same entry points: every `dlmopen(LM_ID_NEWLM)` takes one of the
    /// few namespaces glibc has). A library without the 2026-03 operators is refused
    /// ([`XnnpackError::Generation`]) rather than called with a wrong signature.
    ///
    /// # Safety
    /// `path` is a current XNNPACK (or a library that embeds and exports its C API, such as
    /// ExecuTorch's XNNPACK backend) whose `xnn_*` functions have the signatures of
    /// [`crate::ffi::current`], or a file that fails to load or lacks a symbol; its
    /// constructors are safe to run in this process, and the file is not changed while it
    /// is loaded.
    pub unsafe fn load(path: &Path) -> Result<&'static Library, XnnpackError> {
        static LOADED: std::sync::Mutex<Vec<&'static Library>> = std::sync::Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = loaded.iter().find(|x| x.path == path) {
            return Ok(x);
        }
        // SAFETY: the caller's promise.
        let library = Box::leak(Box::new(unsafe { Library::load_new(path)? }));
        loaded.push(library);
        Ok(library)
    }

    /// # Safety
    /// As [`Library::load`].
    unsafe fn load_new(path: &Path) -> Result<Library, XnnpackError> {
        // SAFETY: the caller's promise about the constructors.
        let handle = unsafe { open_library(path, Generation::Current, Namespace::New)? };
        // SAFETY: a live handle. A library without the 2026-03 qc2w operators is older than the header these signatures were checked against.
        if !unsafe { ffi::exports(handle, c"xnn_create_fully_connected_nc_qd8_f16_qc2w") } {
            return Err(XnnpackError::Generation {
                path: path.to_path_buf(),
                expected: Generation::Current,
            });
        }
        // SAFETY: each symbol is the function of that name (the caller's promise), with the signature quoted in `ffi::current` (the shared ones in `ffi`), which is the type it is stored as.
        unsafe {
            Ok(xnn_entry_points!(
                handle,
                Library {
                    create_fully_connected_nc_f32, reshape_fully_connected_nc_f32,
                    setup_fully_connected_nc_f32, create_fully_connected_nc_bf16_f32,
                    reshape_fully_connected_nc_bf16_f32, setup_fully_connected_nc_bf16_f32,
                    create_fully_connected_nc_f32_qc8w, reshape_fully_connected_nc_f32_qc8w,
                    setup_fully_connected_nc_f32_qc8w, create_fully_connected_nc_qd8_f32_qc8w,
                    reshape_fully_connected_nc_qd8_f32_qc8w, setup_fully_connected_nc_qd8_f32_qc8w,
                    create_convert_nc_f32_qd8, reshape_convert_nc_f32_qd8, setup_convert_nc_f32_qd8,
                    run_operator, delete_operator, create_subgraph, define_tensor_value,
                    define_dynamically_quantized_tensor_value,
                    define_channelwise_quantized_tensor_value, define_convert,
                    define_fully_connected, create_runtime_v3, reshape_runtime, setup_runtime_v2,
                    invoke_runtime, delete_runtime, delete_subgraph,
                },
                path: path.to_path_buf(),
                pthreadpool_create: required(handle, c"pthreadpool_create")?,
            ))
        }
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A `threads`-thread pthreadpool of this library (`pthreadpool_create`), never
    /// destroyed (the process ends first).
    pub fn threadpool(&'static self, threads: usize) -> Result<Threadpool, String> {
        // SAFETY: pthreadpool_create takes any count and returns NULL on failure.
        let pool = unsafe { (self.pthreadpool_create)(threads) };
        if pool.is_null() {
            Err("pthreadpool_create failed".into())
        } else {
            Ok(Threadpool {
                library: self,
                pool,
            })
        }
    }
}

/// A pthreadpool of one [`Library`], never destroyed: operators of that library reshaped
/// with it run on its threads.
#[derive(Clone, Copy, Debug)]
pub struct Threadpool {
    library: &'static Library,
    pool: *mut c_void,
}

/// An XNNPACK operator, deleted on drop.
struct Operator {
    xnn: &'static Library,
    op: XnnOperator,
}

impl Drop for Operator {
    fn drop(&mut self) {
        // SAFETY: a live operator of this library, deleted once.
        unsafe { (self.xnn.delete_operator)(self.op) };
    }
}

impl Operator {
    /// Runs on `pool` (NULL: the calling thread), the pool the operator was reshaped with.
    ///
    /// # Safety
    /// The operator was reshaped with `pool` and set up on buffers that are still alive.
    unsafe fn run_on(&self, pool: *mut c_void) -> Result<(), CallFailed> {
        // SAFETY: the caller's promise; `pool` is NULL or a live pthreadpool of this library.
        check("xnn_run_operator", unsafe {
            (self.xnn.run_operator)(self.op, pool)
        })
    }
}

/// Problem geometry: K, N and the batch the operator is reshaped for (dense rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Input channels (the reduction).
    pub k: usize,
    /// Output channels.
    pub n: usize,
    /// Rows of a batch.
    pub m: usize,
}

fn check(what: &str, status: XnnStatus) -> Result<(), CallFailed> {
    ffi::status(status).map_err(|status| failed(what, status))
}

/// The error of `what`, which returned `status`.
fn failed(what: &str, status: XnnStatus) -> CallFailed {
    CallFailed {
        what: what.to_owned(),
        status,
    }
}

/// An XNNPACK call that returned an error status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} failed: xnn_status {status}")]
pub struct CallFailed {
    /// The call (`create bf16_f32`, `xnn_run_operator`, ...).
    pub what: String,
    /// What it returned.
    pub status: XnnStatus,
}

impl CallFailed {
    /// XNNPACK has no kernel for this operator on this CPU (bf16_f32 without AVX512-BF16,
    /// say): a fact about the machine, not a failure of the call.
    pub fn is_unsupported_hardware(&self) -> bool {
        self.status == ffi::XNN_STATUS_UNSUPPORTED_HARDWARE
    }
}

impl From<CallFailed> for String {
    fn from(e: CallFailed) -> String {
        e.to_string()
    }
}

/// The (input, output) an operator was last set up on: each runner calls `setup` only when
/// they change, as [`F32Fc`] and the Debian XNNPACK runner do (keepalloc has no setup step,
/// so a setup per timed call would be work only the peer pays).
type Bound = (*const c_void, *mut c_void);

/// Nothing bound yet.
const UNBOUND: Bound = (core::ptr::null(), core::ptr::null_mut());
