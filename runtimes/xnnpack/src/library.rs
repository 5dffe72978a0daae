//! Loading an XNNPACK shared library and calling the few functions keepalloc needs, with the
//! signatures of the XNNPACK version the library actually is.

use std::path::{Path, PathBuf};

use keepalloc_allocators::AllocatorTable;

use crate::XnnpackError;
use crate::current::create_fully_connected;
use crate::debian2022::Debian2022Api;
use crate::ffi::{
    self, DeleteOperator, Initialize, Namespace, RunOperator, XNN_EXTRA_FLOATS, XnnStatus,
};
use crate::open::{Generation, open_library, required};

enum FcApi {
    Debian2022(Debian2022Api),
    Current {
        create: ffi::current::CreateFullyConnectedNcF32,
        reshape: ffi::current::ReshapeFullyConnected,
        setup: ffi::current::SetupFullyConnectedNcF32,
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
        // SAFETY: the caller's promise about the constructors.
        let handle = unsafe { open_library(path, generation, namespace)? };
        // SAFETY: (every symbol below) each is the XNNPACK function of that name (the caller's promise), whose C signature in the `xnnpack.h` of `generation` is the type it is stored as: `xnn_initialize`, `xnn_run_operator` and `xnn_delete_operator` are the same in both; the fully-connected functions are checked against Debian's 2022-02-16 header and google/XNNPACK's header from 2025-06 to 2026-08 (unchanged over that span; ExecuTorch 1.5.1's library exports functions added in 2026-03, so it is inside it).
        let fc = unsafe {
            match generation {
                Generation::Debian2022 => FcApi::Debian2022(Debian2022Api::from_handle(handle)?),
                Generation::Current => FcApi::Current {
                    create: required(handle, c"xnn_create_fully_connected_nc_f32")?,
                    reshape: required(handle, c"xnn_reshape_fully_connected_nc_f32")?,
                    setup: required(handle, c"xnn_setup_fully_connected_nc_f32")?,
                },
            }
        };
        // SAFETY: as above.
        let (initialize, run, delete) = unsafe {
            (
                required(handle, c"xnn_initialize")?,
                required(handle, c"xnn_run_operator")?,
                required(handle, c"xnn_delete_operator")?,
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

    /// The raw entry points of a [`Generation::Debian2022`] library (`None` for a current
    /// one), for callers that drive XNNPACK's operators themselves.
    pub fn debian2022(&self) -> Option<&Debian2022Api> {
        match &self.fc {
            FcApi::Debian2022(api) => Some(api),
            FcApi::Current { .. } => None,
        }
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
        let (x, null) = (padded.as_ptr(), core::ptr::null_mut());
        // SAFETY: (create) `w` and `b` hold the sizes asserted above; the entry points match the library's generation (checked at load).
        let op = unsafe {
            match &self.fc {
                FcApi::Debian2022(api) => api.create_fully_connected(input, output, w, b, lo, hi),
                FcApi::Current { create, .. } => {
                    create_fully_connected(*create, input, output, w.as_ptr(), b.as_ptr(), lo, hi)
                }
            }
        }?;
        // SAFETY: (run) `op` is live; `padded` holds batch*input floats plus XNN_EXTRA_BYTES and `y` batch*output; both outlive the run; no thread pool (NULL).
        let ran = unsafe {
            match &self.fc {
                FcApi::Debian2022(api) => api.run_fully_connected(op, batch, x, y.as_mut_ptr()),
                FcApi::Current { reshape, setup, .. } => ffi::status(reshape(op, batch, null))
                    .and_then(|()| ffi::status(setup(op, x, y.as_mut_ptr())))
                    .and_then(|()| ffi::status((self.run)(op, null))),
            }
        };
        // SAFETY: `op` is live and not used again.
        let deleted = ffi::status(unsafe { (self.delete)(op) });
        ran.and(deleted).map(|()| y)
    }
}
