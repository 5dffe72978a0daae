//! XNNPACK's C API as this crate calls it, declared once: the dynamic loader (`dlopen`,
//! `dlmopen`, `dlsym`, `dlerror`), the constants, structs and function types both headers
//! share (here), and those of each header alone ([`debian2022`], [`current`]).
//!
//! Everything here is raw: a function type says what the symbol of that name is in that
//! header, nothing checks it. [`crate::Xnnpack`], [`crate::Debian2022Api`] and
//! [`crate::current::Library`] are the loaders that look the symbols up.

pub mod current;
pub mod debian2022;

use core::ffi::{CStr, c_char, c_int, c_long, c_void};

use keepalloc_allocators::AllocatorTable;

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
/// `xnn_status_unsupported_hardware`: no kernel for this operator on this CPU.
pub const XNN_STATUS_UNSUPPORTED_HARDWARE: XnnStatus = 5;
/// `Ok` for [`XNN_STATUS_SUCCESS`], else the status as the error.
pub fn status(status: XnnStatus) -> Result<(), XnnStatus> {
    if status == XNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(status)
    }
}
/// `XNN_EXTRA_BYTES`: XNNPACK may read this far past the end of an input.
pub const XNN_EXTRA_BYTES: usize = 16;
/// `XNN_EXTRA_BYTES`, in floats.
pub const XNN_EXTRA_FLOATS: usize = XNN_EXTRA_BYTES / size_of::<f32>();

/// `xnn_operator_t`.
pub type XnnOperator = *mut c_void;
/// `pthreadpool_t` (NULL: run on the calling thread).
pub type Pthreadpool = *mut c_void;

/// `xnn_initialize(const struct xnn_allocator*)`, the same in both headers; `AllocatorTable`
/// is `struct xnn_allocator` field for field.
pub type Initialize = unsafe extern "C" fn(*const AllocatorTable) -> XnnStatus;
/// `xnn_run_operator(op, threadpool)`, the same in both headers.
pub type RunOperator = unsafe extern "C" fn(XnnOperator, Pthreadpool) -> XnnStatus;
/// `xnn_delete_operator(op)`, the same in both headers.
pub type DeleteOperator = unsafe extern "C" fn(XnnOperator) -> XnnStatus;
/// cpuinfo.h's `bool cpuinfo_initialize(void)`, which XNNPACK's libraries carry or link.
pub type CpuinfoInitialize = unsafe extern "C" fn() -> bool;
/// pthreadpool.h's `pthreadpool_create(threads_count)` (NULL on failure).
pub type PthreadpoolCreate = unsafe extern "C" fn(usize) -> Pthreadpool;

/// `xnn_subgraph_t`.
pub type XnnSubgraph = *mut c_void;
/// `xnn_runtime_t`.
pub type XnnRuntime = *mut c_void;

/// `struct xnn_external_value`: a subgraph's external value bound to a buffer.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ExternalValue {
    /// The external value id given when the value was defined.
    pub id: u32,
    /// The buffer.
    pub data: *mut c_void,
}

/// `xnn_datatype_fp32` (`enum xnn_datatype`, the same value since 2022).
pub const XNN_DATATYPE_FP32: c_int = 1;
/// `XNN_VALUE_FLAG_EXTERNAL_INPUT`.
pub const XNN_VALUE_FLAG_EXTERNAL_INPUT: u32 = 1;
/// `XNN_VALUE_FLAG_EXTERNAL_OUTPUT`.
pub const XNN_VALUE_FLAG_EXTERNAL_OUTPUT: u32 = 2;
/// `XNN_INVALID_VALUE_ID`: let the subgraph number the value.
pub const XNN_INVALID_VALUE_ID: u32 = u32::MAX;

/// `xnn_create_subgraph(external_value_ids, flags, &subgraph)`, the same in both headers.
pub type CreateSubgraph = unsafe extern "C" fn(u32, u32, *mut XnnSubgraph) -> XnnStatus;
/// `xnn_delete_subgraph`, the same in both headers.
pub type DeleteSubgraph = unsafe extern "C" fn(XnnSubgraph) -> XnnStatus;
/// `xnn_define_tensor_value(subgraph, datatype, num_dims, dims, data, external_id, flags,
/// &id)`, the same in both headers.
pub type DefineTensorValue = unsafe extern "C" fn(
    XnnSubgraph,
    c_int,
    usize,
    *const usize,
    *const c_void,
    u32,
    u32,
    *mut u32,
) -> XnnStatus;
/// `xnn_define_fully_connected(subgraph, min, max, input, filter, bias, output, flags)`, the
/// same in both headers.
pub type DefineFullyConnected =
    unsafe extern "C" fn(XnnSubgraph, f32, f32, u32, u32, u32, u32, u32) -> XnnStatus;
/// `xnn_invoke_runtime` and `xnn_delete_runtime` (both headers), `xnn_reshape_runtime`
/// (current).
pub type RuntimeFn = unsafe extern "C" fn(XnnRuntime) -> XnnStatus;

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

/// Loads `name` (a path, or a file name searched the usual way) into `namespace` and returns
/// its handle, never closed; the error is the dynamic linker's message.
///
/// # Safety
/// Loading runs the library's constructors: they must be safe to run in this process, and
/// the file must not change while it is loaded.
pub unsafe fn open(name: &CStr, namespace: Namespace) -> Result<*mut c_void, String> {
    // SAFETY: a NUL-terminated name; the caller vouches for the constructors loading runs.
    let handle = unsafe {
        match namespace {
            Namespace::Default => dlopen(name.as_ptr(), RTLD_NOW | RTLD_LOCAL),
            Namespace::New => dlmopen(LM_ID_NEWLM, name.as_ptr(), RTLD_NOW | RTLD_LOCAL),
        }
    };
    if handle.is_null() {
        Err(dl_error())
    } else {
        Ok(handle)
    }
}

/// The dynamic linker's last error message (`dlerror`).
pub fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message, valid until the next dl call.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Whether the library of `handle` (or one of its dependencies) exports `name`.
///
/// # Safety
/// `handle` is a live handle from `dlopen` or `dlmopen`.
pub unsafe fn exports(handle: *mut c_void, name: &CStr) -> bool {
    // SAFETY: the caller's promise about `handle`; dlsym only looks the name up.
    !unsafe { dlsym(handle, name.as_ptr()) }.is_null()
}

/// Looks `name` up in the library of `handle` (or its dependencies) as a function pointer of
/// type `F`; the error says which symbol is missing.
///
/// # Safety
/// `handle` is a live handle from `dlopen` or `dlmopen`, `F` is an `unsafe extern "C" fn`
/// type, and the C function `name` has exactly the signature `F` describes.
pub unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Result<F, String> {
    assert_eq!(
        size_of::<F>(),
        size_of::<*mut c_void>(),
        "F is a function pointer"
    );
    // SAFETY: the caller's promise about `handle`; `name` is NUL-terminated.
    let p = unsafe { dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("{} not exported", name.to_string_lossy()));
    }
    // SAFETY: a non-NULL address of the function `name`, whose signature is `F` (the caller's promise); `F` is pointer-sized.
    Ok(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
}
