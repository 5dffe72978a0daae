//! Opening an XNNPACK shared library of a known [`Generation`] and looking its entry points
//! up by name, a missing one being an error rather than a crash.

use core::ffi::{CStr, c_void};
use std::ffi::CString;
use std::path::Path;

use crate::XnnpackError;
use crate::ffi::{self, Namespace};

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

/// Loads `path` into `namespace` and checks that its exports are `generation`'s: a Current
/// library must export `xnn_reshape_fully_connected_nc_f32`, a 2022 one must not, so a wrong
/// generation is an error here, never a call with the wrong signature.
///
/// # Safety
/// As [`Xnnpack::load`](crate::Xnnpack::load): the library's constructors are safe to run in this process.
pub(crate) unsafe fn open_library(
    path: &Path,
    generation: Generation,
    namespace: Namespace,
) -> Result<*mut c_void, XnnpackError> {
    let name = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| XnnpackError::Load(path.to_path_buf(), "NUL in path".into()))?;
    // SAFETY: the caller's promise about the constructors (ExecuTorch's calls `xnn_initialize(NULL)`: the case this crate exists to detect).
    let handle = unsafe { ffi::open(&name, namespace) }
        .map_err(|why| XnnpackError::Load(path.to_path_buf(), why))?;
    // SAFETY: a live handle.
    let has_reshape = unsafe { ffi::exports(handle, c"xnn_reshape_fully_connected_nc_f32") };
    if has_reshape != (generation == Generation::Current) {
        return Err(XnnpackError::Generation {
            path: path.to_path_buf(),
            expected: generation,
        });
    }
    Ok(handle)
}

/// [`ffi::symbol`], a missing symbol being [`XnnpackError::Missing`].
///
/// # Safety
/// As [`ffi::symbol`].
pub(crate) unsafe fn required<F: Copy>(
    handle: *mut c_void,
    name: &CStr,
) -> Result<F, XnnpackError> {
    // SAFETY: the caller's promise.
    unsafe { ffi::symbol(handle, name) }
        .map_err(|_| XnnpackError::Missing(name.to_string_lossy().into_owned()))
}

/// [`required`] of `xnn_<field>`: the entry points of [`Debian2022Api`](crate::Debian2022Api) and
/// [`crate::current::Library`] are fields named after their symbols.
///
/// # Safety
/// As [`ffi::symbol`], for the symbol `xnn_<field>`.
pub(crate) unsafe fn required_xnn<F: Copy>(
    handle: *mut c_void,
    field: &str,
) -> Result<F, XnnpackError> {
    let name = CString::new(format!("xnn_{field}")).expect("a field name has no NUL");
    // SAFETY: the caller's promise.
    unsafe { required(handle, &name) }
}

/// `$api { $field: required_xnn(handle, "$field")?, ..., $other: $value, ... }`: each entry
/// point is looked up under its field's name, so a field cannot drift from its symbol. It
/// calls an `unsafe fn`: the caller vouches that each field's type is its symbol's signature.
macro_rules! xnn_entry_points {
    ($handle:expr, $api:ident { $($field:ident),* $(,)? } $(, $other:ident: $value:expr)* $(,)?) => {
        $api {
            $($field: $crate::open::required_xnn($handle, stringify!($field))?,)*
            $($other: $value,)*
        }
    };
}
pub(crate) use xnn_entry_points;
