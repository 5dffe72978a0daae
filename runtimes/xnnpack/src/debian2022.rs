//! Debian's 2022 XNNPACK as raw entry points: what tests need to call it directly (an
//! operator created before `xnn_initialize`, a deleted one set up again, inputs of their own
//! allocation), where [`crate::Xnnpack`] offers only checked, allocating calls.

use core::ffi::c_void;
use std::path::Path;

use crate::XnnpackError;
use crate::ffi::{
    self, CpuinfoInitialize, DeleteOperator, Initialize, Namespace, RunOperator, XnnOperator,
    XnnStatus,
};
use crate::open::{Generation, open_library, xnn_entry_points};

/// The entry points of an XNNPACK built from Debian's 2022-02-16 `xnnpack.h`
/// ([`Generation::Debian2022`]), looked up by name; the library is never unloaded, so they
/// stay valid for the life of the process.
///
/// Calling one is `unsafe`: its arguments must satisfy XNNPACK's contract for that function
/// (the types are [`ffi`]'s and [`ffi::debian2022`]'s).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Debian2022Api {
    /// `xnn_initialize`.
    pub initialize: Initialize,
    /// `xnn_create_fully_connected_nc_f32`.
    pub create_fully_connected_nc_f32: ffi::debian2022::CreateFullyConnectedNcF32,
    /// `xnn_setup_fully_connected_nc_f32`.
    pub setup_fully_connected_nc_f32: ffi::debian2022::SetupFullyConnectedNcF32,
    /// `xnn_create_sigmoid_nc_f32`.
    pub create_sigmoid_nc_f32: ffi::debian2022::CreateSigmoidNcF32,
    /// `xnn_setup_sigmoid_nc_f32`.
    pub setup_sigmoid_nc_f32: ffi::debian2022::SetupSigmoidNcF32,
    /// `xnn_run_operator`.
    pub run_operator: RunOperator,
    /// `xnn_delete_operator`.
    pub delete_operator: DeleteOperator,
    /// `xnn_create_convolution2d_nhwc_f32`.
    pub create_convolution2d_nhwc_f32: ffi::debian2022::CreateConvolution2dNhwcF32,
    /// `xnn_setup_convolution2d_nhwc_f32`.
    pub setup_convolution2d_nhwc_f32: ffi::debian2022::SetupConvolution2dNhwcF32,
    /// `xnn_create_subgraph`.
    pub create_subgraph: ffi::CreateSubgraph,
    /// `xnn_delete_subgraph`.
    pub delete_subgraph: ffi::DeleteSubgraph,
    /// `xnn_define_tensor_value`.
    pub define_tensor_value: ffi::DefineTensorValue,
    /// `xnn_define_fully_connected`.
    pub define_fully_connected: ffi::DefineFullyConnected,
    /// `xnn_create_runtime_v2`.
    pub create_runtime_v2: ffi::debian2022::CreateRuntimeV2,
    /// `xnn_setup_runtime`.
    pub setup_runtime: ffi::debian2022::SetupRuntime,
    /// `xnn_invoke_runtime`.
    pub invoke_runtime: ffi::RuntimeFn,
    /// `xnn_delete_runtime`.
    pub delete_runtime: ffi::RuntimeFn,
    /// `pthreadpool_create` and `pthreadpool_destroy` of the pthreadpool the library links
    /// (found through its dependencies), if exported.
    pub pthreadpool: Option<(ffi::PthreadpoolCreate, ffi::debian2022::PthreadpoolDestroy)>,
    /// cpuinfo's `cpuinfo_initialize`, if the library or its dependencies export it: the
    /// slow part of the first `xnn_initialize` (it reads /proc and /sys), which a test that
    /// races initializations runs first.
    pub cpuinfo_initialize: Option<CpuinfoInitialize>,
}

impl Debian2022Api {
    /// The file names `libxnnpack-dev` installs, in the order [`Debian2022Api::load_installed`]
    /// tries them.
    pub const SONAMES: [&'static str; 2] = ["libXNNPACK.so.0", "libXNNPACK.so"];

    /// Loads the XNNPACK at `path` (a file name is searched the usual way) and looks its
    /// entry points up; a library that exports the current header's
    /// `xnn_reshape_fully_connected_nc_f32` is refused ([`XnnpackError::Generation`]).
    ///
    /// # Safety
    /// As for [`crate::Xnnpack::load`] with [`Generation::Debian2022`]: `path` is an XNNPACK
    /// built from Debian's 2022-02-16 header (or fails to load or lacks a symbol), its
    /// constructors are safe to run here, and the file is not changed while it is loaded.
    pub unsafe fn load(path: &Path, namespace: Namespace) -> Result<Debian2022Api, XnnpackError> {
        // SAFETY: the caller's promise.
        let handle = unsafe { open_library(path, Generation::Debian2022, namespace)? };
        // SAFETY: a live handle of a library with the 2022 header (the caller's promise).
        unsafe { Debian2022Api::from_handle(handle) }
    }

    /// [`Debian2022Api::load`] of the first of [`Debian2022Api::SONAMES`] that loads, in the
    /// default namespace (where a copy the process already linked is reused). When none
    /// loads, the error is the first name's.
    ///
    /// # Safety
    /// The system's `libXNNPACK.so.0` (or `libXNNPACK.so`) is Debian's 2022 XNNPACK, as
    /// [`Debian2022Api::load`] requires.
    pub unsafe fn load_installed() -> Result<Debian2022Api, XnnpackError> {
        let mut first = None;
        for name in Debian2022Api::SONAMES {
            // SAFETY: the caller's promise about the installed library.
            match unsafe { Debian2022Api::load(Path::new(name), Namespace::Default) } {
                Err(e @ XnnpackError::Load(..)) => {
                    first.get_or_insert(e);
                }
                other => return other,
            }
        }
        Err(first.expect("SONAMES is not empty"))
    }

    /// `xnn_create_fully_connected_nc_f32` over `w` (`output` × `input` floats,
    /// `[output][input]`) and `b` (`output` floats), clamped to `lo..=hi`: XNNPACK packs copies
    /// of them into memory from its allocator. The operator is the caller's to delete.
    ///
    /// # Safety
    /// The entry points are the library's, as [`Debian2022Api::load`] looked them up.
    pub unsafe fn create_fully_connected(
        &self,
        input: usize,
        output: usize,
        w: &[f32],
        b: &[f32],
        lo: f32,
        hi: f32,
    ) -> Result<XnnOperator, XnnStatus> {
        assert!(w.len() >= output * input && b.len() >= output);
        let mut op = core::ptr::null_mut();
        // SAFETY: the caller's promise about the entry point; `w` and `b` hold the sizes asserted; `op` is a valid out-pointer.
        let status = unsafe {
            (self.create_fully_connected_nc_f32)(
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
            )
        };
        ffi::status(status).map(|()| op)
    }

    /// `xnn_setup_fully_connected_nc_f32` for `batch` rows of `x` into `y`, then
    /// `xnn_run_operator` on the calling thread.
    ///
    /// # Safety
    /// The entry points are the library's; `op` is a live fully-connected operator of it;
    /// `x` holds `batch` × its input channels floats followed by `XNN_EXTRA_BYTES` readable
    /// bytes, and `y` `batch` × its output channels floats.
    pub unsafe fn run_fully_connected(
        &self,
        op: XnnOperator,
        batch: usize,
        x: *const f32,
        y: *mut f32,
    ) -> Result<(), XnnStatus> {
        let pool = core::ptr::null_mut();
        // SAFETY: the caller's promise; no thread pool (NULL).
        unsafe {
            ffi::status((self.setup_fully_connected_nc_f32)(op, batch, x, y, pool))?;
            ffi::status((self.run_operator)(op, pool))
        }
    }

    /// Looks the entry points up in an open library.
    ///
    /// # Safety
    /// `handle` is a live handle of an XNNPACK built from Debian's 2022-02-16 header.
    pub(crate) unsafe fn from_handle(handle: *mut c_void) -> Result<Debian2022Api, XnnpackError> {
        // SAFETY: (every symbol) each is the XNNPACK function of that name, whose C signature in Debian's 2022-02-16 xnnpack.h (quoted in `ffi::debian2022`; the shared ones in `ffi`) is the type of the field it is stored in; cpuinfo_initialize is cpuinfo.h's, the pthreadpool functions pthreadpool.h's.
        unsafe {
            Ok(xnn_entry_points!(
                handle,
                Debian2022Api {
                    initialize, create_fully_connected_nc_f32, setup_fully_connected_nc_f32,
                    create_sigmoid_nc_f32, setup_sigmoid_nc_f32, run_operator, delete_operator,
                    create_convolution2d_nhwc_f32, setup_convolution2d_nhwc_f32, create_subgraph,
                    delete_subgraph, define_tensor_value, define_fully_connected, create_runtime_v2,
                    setup_runtime, invoke_runtime, delete_runtime,
                },
                pthreadpool: ffi::symbol(handle, c"pthreadpool_create")
                    .ok()
                    .zip(ffi::symbol(handle, c"pthreadpool_destroy").ok()),
                cpuinfo_initialize: ffi::symbol(handle, c"cpuinfo_initialize").ok(),
            ))
        }
    }
}
