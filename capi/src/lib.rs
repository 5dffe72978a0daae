//! The C ABI of keepalloc (`capi/include/keepalloc.h`, ABI version 1), for runtimes
//! written in C or C++.
//!
//! One process-wide owner ([`backend::C_PLAIN`] over the compile-time default backend, or
//! [`backend::C_PROVIDER`] over one a C runtime plugs in with `keepalloc_set_backend` or
//! under Scribble) serves several consuming libraries:
//! `keepalloc_acquire_library(name, init, ...)` runs `init` inside that library's own
//! retry-safe once, on top of the owner's once; `keepalloc_acquire` is the library named
//! `"default"`. `keepalloc_acquire_ex` also says whether the caller's own hook ran.
//!
//! No unwinding crosses the boundary: a C++ exception escaping a hook is caught by a C++
//! trampoline (`src/catch_hook.cpp`, since Rust cannot catch foreign exceptions), a Rust panic
//! by `catch_unwind`; both reset the attempt and return `KEEPALLOC_INIT_FAILED`.

use core::cell::Cell;
use core::ffi::{CStr, c_char, c_int, c_void};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use keepalloc_allocators::AllocatorTable;
use keepalloc_provider::{
    DEFAULT_LIBRARY, HookRan, InitError, LibraryError, MAX_LIBRARY_NAME, ProviderError,
    check_name_bytes,
};

pub mod backend;
pub mod fail;
pub mod layer;
pub mod ort;
pub mod scribble;
mod stats;

pub use stats::{KeepallocStats, keepalloc_get_stats, keepalloc_get_stats_ex};

use backend::{choose, chosen, with_provider};

/// `keepalloc_table`: the same type as [`AllocatorTable`].
pub type KeepallocTable = AllocatorTable;

/// `keepalloc_backend`: a C runtime's allocator functions, with the same layout (and the
/// backend contract described in `keepalloc.h`).
pub type KeepallocBackend = AllocatorTable;

/// `keepalloc_status`. See `keepalloc.h` for what each one means.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepallocStatus {
    /// Success.
    Ok = 0,
    /// The init hook failed, threw or panicked; the owner is kept; retry later.
    InitFailed = 1,
    /// The owner could not be constructed.
    OutOfMemory = 2,
    /// A required pointer argument was NULL (or a backend function was missing).
    InvalidArgument = 3,
    /// The library name is empty, longer than `KEEPALLOC_MAX_LIBRARY_NAME` or not UTF-8.
    InvalidLibraryName = 4,
    /// `KEEPALLOC_MAX_LIBRARIES` libraries are registered already.
    TooManyLibraries = 5,
    /// Called from inside the attempt it would wait for (a hook re-entering its library).
    Reentered = 6,
    /// `keepalloc_get_table`: no table has been published yet.
    NotPublished = 7,
    /// `keepalloc_set_backend`: another backend was registered, or the owner already exists.
    BackendConflict = 8,
    /// A `fork()` child: the attempt this call would wait for was running in another thread
    /// of the parent at the fork, and can never finish in the child.
    ForkedDuringInit = 9,
    /// `keepalloc_ort_register`: the ONNX Runtime given does not serve the OrtApi version
    /// keepalloc was built against (or its `OrtGetApiBase` table is unusable).
    RuntimeUnsupported = 10,
    /// `keepalloc_ort_register`: the owner was registered on another `OrtEnv` earlier (the
    /// registration runs once per process).
    RegisteredElsewhere = 11,
}

impl KeepallocStatus {
    /// Every status, in code order (`keepalloc_status_string` covers each).
    pub const ALL: [KeepallocStatus; 12] = [
        Self::Ok,
        Self::InitFailed,
        Self::OutOfMemory,
        Self::InvalidArgument,
        Self::InvalidLibraryName,
        Self::TooManyLibraries,
        Self::Reentered,
        Self::NotPublished,
        Self::BackendConflict,
        Self::ForkedDuringInit,
        Self::RuntimeUnsupported,
        Self::RegisteredElsewhere,
    ];

    /// What `keepalloc_status_string` says for this status.
    pub fn description(self) -> &'static CStr {
        match self {
            Self::Ok => c"ok",
            Self::InitFailed => c"init failed: the hook failed or threw; the owner is kept, retry",
            Self::OutOfMemory => c"out of memory: the owner could not be built",
            Self::InvalidArgument => c"invalid argument: a required pointer was NULL",
            Self::InvalidLibraryName => c"invalid library name: empty, too long or not UTF-8",
            Self::TooManyLibraries => c"too many libraries: KEEPALLOC_MAX_LIBRARIES registered",
            Self::Reentered => c"reentered: a hook acquired its own library",
            Self::NotPublished => c"not published: no owner has been built yet",
            Self::BackendConflict => {
                c"backend conflict: another backend was set, or the owner exists already"
            }
            Self::ForkedDuringInit => {
                c"forked during init: the attempt was running in another thread at fork()"
            }
            Self::RuntimeUnsupported => {
                c"runtime unsupported: the ONNX Runtime does not serve keepalloc's OrtApi version"
            }
            Self::RegisteredElsewhere => {
                c"registered elsewhere: the owner is registered on another OrtEnv"
            }
        }
    }
}

/// See `keepalloc.h`. Takes the status as an `int`: a value outside the enum (from a newer
/// header, or garbage) must not become an invalid Rust enum.
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_status_string(status: c_int) -> *const c_char {
    KeepallocStatus::ALL
        .into_iter()
        .find(|s| *s as c_int == status)
        .map_or(c"unknown keepalloc_status", KeepallocStatus::description)
        .as_ptr()
}

/// `keepalloc_hook_result`: what happened to the caller's own hook.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepallocHookResult {
    /// No hook was given, or the call ended before the hook could run (bad input, the owner
    /// could not be built, re-entry, fork).
    NotCalled = 0,
    /// This call ran the hook and it returned 0: this call initialized the library.
    Succeeded = 1,
    /// The library was already initialized: the hook was not called.
    AlreadyDone = 2,
    /// This call ran the hook and it returned non-zero.
    Failed = 3,
    /// This call ran the hook and it threw a C++ exception (or a Rust panic escaped it).
    Threw = 4,
}

/// `keepalloc_init_fn`: `extern "C-unwind"`, so that a C++ exception or a Rust panic may
/// escape it (keepalloc catches either).
pub type KeepallocInitFn = Option<
    unsafe extern "C-unwind" fn(table: *const AllocatorTable, user_data: *mut c_void) -> c_int,
>;

unsafe extern "C-unwind" {
    /// `src/catch_hook.cpp`: calls `hook`; a C++ exception sets `*threw` and returns -1; a
    /// Rust panic is rethrown.
    fn keepalloc_internal_call_hook(
        hook: unsafe extern "C-unwind" fn(*const AllocatorTable, *mut c_void) -> c_int,
        table: *const AllocatorTable,
        user_data: *mut c_void,
        threw: *mut c_int,
    ) -> c_int;
}

/// `keepalloc_library_stats`: one library's once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepallocLibraryStats {
    /// Init hooks of this library called (each failed attempt counts, and the success).
    pub init_attempts: u64,
    /// Init hooks of this library that succeeded (0 or 1).
    pub init_successes: u64,
    /// 1 when the library is initialized, else 0.
    pub initialized: u32,
}

/// Parses one component of the crate version at compile time.
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut n = 0u32;
    let mut i = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// `KEEPALLOC_VERSION_MAJOR`: the crate's major version.
pub const VERSION_MAJOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MAJOR"));
/// `KEEPALLOC_VERSION_MINOR`.
pub const VERSION_MINOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MINOR"));
/// `KEEPALLOC_VERSION_PATCH`.
pub const VERSION_PATCH: u32 = parse_u32(env!("CARGO_PKG_VERSION_PATCH"));
/// `KEEPALLOC_VERSION`: `(major << 16) | (minor << 8) | patch`.
pub const VERSION: u32 = (VERSION_MAJOR << 16) | (VERSION_MINOR << 8) | VERSION_PATCH;

/// Registers the `fork()` child handler once per process (see `keepalloc.h`, "fork").
pub(crate) fn ensure_fork_handler() {
    static REGISTER: Once = Once::new();
    unsafe extern "C" {
        fn pthread_atfork(
            prepare: Option<unsafe extern "C" fn()>,
            parent: Option<unsafe extern "C" fn()>,
            child: Option<unsafe extern "C" fn()>,
        ) -> c_int;
    }
    unsafe extern "C" fn in_child() {
        backend::C_PLAIN.after_fork_in_child();
        backend::C_PROVIDER.after_fork_in_child();
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only reads atomics and this thread's marker; the function pointer lives for the process.
        let rc = unsafe { pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            // Not `eprintln!`: it panics when stderr cannot be written, and every caller is an
            // `extern "C"` function, outside its `catch_unwind`.
            let _ = writeln!(
                std::io::stderr(),
                "keepalloc: pthread_atfork failed ({rc}); fork() during an attempt is not handled"
            );
        }
    });
}

pub(crate) fn status_of(e: &ProviderError) -> KeepallocStatus {
    match e {
        ProviderError::OutOfMemory => KeepallocStatus::OutOfMemory,
        ProviderError::InitFailed(_) => KeepallocStatus::InitFailed,
        ProviderError::Library(LibraryError::Full { .. }) => KeepallocStatus::TooManyLibraries,
        ProviderError::Library(_) => KeepallocStatus::InvalidLibraryName,
        ProviderError::Reentered { .. } => KeepallocStatus::Reentered,
        ProviderError::OrphanedByFork { .. } => KeepallocStatus::ForkedDuringInit,
        // A kind added to the provider after this C ABI: the attempt failed and may be retried.
        _ => KeepallocStatus::InitFailed,
    }
}

/// Reads a library name from C: at most `MAX_LIBRARY_NAME + 1` bytes are looked at, so an
/// over-long (or unterminated past the limit) name is refused without reading further.
///
/// # Safety
/// `name` is a NUL-terminated string, or at least `MAX_LIBRARY_NAME + 1` readable bytes.
unsafe fn library_name<'a>(name: *const c_char) -> Result<&'a str, KeepallocStatus> {
    let mut len = 0;
    // SAFETY: the caller's promise covers every byte up to the NUL or the limit.
    while len <= MAX_LIBRARY_NAME && unsafe { *name.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: `len` bytes from `name` were just read.
    let bytes = unsafe { core::slice::from_raw_parts(name.cast::<u8>(), len) };
    check_name_bytes(bytes).map_err(|e| status_of(&ProviderError::Library(e)))
}

/// Writes `result` through `out` when it is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write.
pub(crate) unsafe fn report(out: *mut KeepallocHookResult, result: KeepallocHookResult) {
    if !out.is_null() {
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out.write(result) };
    }
}

/// The one implementation behind every acquire entry point.
///
/// # Safety
/// As `keepalloc_acquire_ex` in `keepalloc.h`; `library` is already validated.
unsafe fn acquire(
    library: &str,
    init: KeepallocInitFn,
    user_data: *mut c_void,
    out_table: *mut *const AllocatorTable,
    out_result: *mut KeepallocHookResult,
) -> KeepallocStatus {
    ensure_fork_handler();
    // A bad KEEPALLOC_SCRIBBLE (or keepalloc_scribble_configure) setting is refused here, at
    // first use, before any owner is built.
    if let Err(status) = scribble::check_settings() {
        return status;
    }
    if let Err(status) = fail::check_settings() {
        return status;
    }
    let hook_result = Cell::new(KeepallocHookResult::NotCalled);
    let user_data = user_data as usize;
    let acquired = catch_unwind(AssertUnwindSafe(
        || -> Result<&'static AllocatorTable, ProviderError> {
            let Some(init) = init else {
                return with_provider!(choose(), |p| p.publish().map(|h| h.table()));
            };
            let hook = |table: &'static AllocatorTable| {
                hook_result.set(KeepallocHookResult::Threw);
                let mut threw: c_int = 0;
                // SAFETY: the caller vouches for `init` and `user_data`; the table lives for the process; a C++ exception is caught by the trampoline, a Rust panic by the catch_unwind around this closure.
                let rc = unsafe {
                    keepalloc_internal_call_hook(init, table, user_data as *mut c_void, &mut threw)
                };
                if threw != 0 {
                    return Err(InitError::new("the init hook threw a C++ exception"));
                }
                if rc == 0 {
                    hook_result.set(KeepallocHookResult::Succeeded);
                    Ok(())
                } else {
                    hook_result.set(KeepallocHookResult::Failed);
                    Err(InitError::code(rc))
                }
            };
            let (table, ran) = with_provider!(choose(), |p| p
                .acquire_library(library, hook)
                .map(|(h, ran)| (h.table(), ran)))?;
            if ran == HookRan::AlreadyInitialized {
                hook_result.set(KeepallocHookResult::AlreadyDone);
            }
            Ok(table)
        },
    ));
    // SAFETY: the caller's promise for `out_result`.
    unsafe { report(out_result, hook_result.get()) };
    match acquired {
        Ok(Ok(table)) => {
            // SAFETY: checked non-NULL by every caller; the caller promises it is writable.
            unsafe { out_table.write(table) };
            KeepallocStatus::Ok
        }
        Ok(Err(e)) => status_of(&e),
        Err(_) => KeepallocStatus::InitFailed,
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `out_table` is NULL or valid for a pointer write; `init`, if not NULL, is safe to call
/// with the table and `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_acquire(
    init: KeepallocInitFn,
    user_data: *mut c_void,
    out_table: *mut *const AllocatorTable,
) -> KeepallocStatus {
    if out_table.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    // SAFETY: the caller's promises, forwarded; the library name is a valid constant.
    unsafe {
        acquire(
            DEFAULT_LIBRARY,
            init,
            user_data,
            out_table,
            core::ptr::null_mut(),
        )
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `library` is NULL or a NUL-terminated string; `out_table` is NULL or valid for a pointer
/// write; `init`, if not NULL, is safe to call with the table and `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_acquire_library(
    library: *const c_char,
    init: KeepallocInitFn,
    user_data: *mut c_void,
    out_table: *mut *const AllocatorTable,
) -> KeepallocStatus {
    // SAFETY: the caller's promises, forwarded.
    unsafe { keepalloc_acquire_ex(library, init, user_data, out_table, core::ptr::null_mut()) }
}

/// See `keepalloc.h`.
///
/// # Safety
/// As [`keepalloc_acquire_library`]; `out_result` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_acquire_ex(
    library: *const c_char,
    init: KeepallocInitFn,
    user_data: *mut c_void,
    out_table: *mut *const AllocatorTable,
    out_result: *mut KeepallocHookResult,
) -> KeepallocStatus {
    // SAFETY: the caller's promise for `out_result`.
    unsafe { report(out_result, KeepallocHookResult::NotCalled) };
    if out_table.is_null() || library.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    let name = match unsafe { library_name(library) } {
        Ok(name) => name,
        Err(status) => return status,
    };
    // SAFETY: the caller's promises, forwarded.
    unsafe { acquire(name, init, user_data, out_table, out_result) }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `out_table` is NULL or valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_get_table(
    out_table: *mut *const AllocatorTable,
) -> KeepallocStatus {
    if out_table.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    let table = chosen().and_then(|c| with_provider!(c, |p| p.published().map(|h| h.table())));
    match table {
        Some(table) => {
            // SAFETY: checked non-NULL; the caller promises it is writable.
            unsafe { out_table.write(table) };
            KeepallocStatus::Ok
        }
        None => KeepallocStatus::NotPublished,
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `library` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_library_initialized(library: *const c_char) -> c_int {
    if library.is_null() {
        return 0;
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    match unsafe { library_name(library) } {
        Ok(name) => c_int::from(is_initialized(name)),
        Err(_) => 0,
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `backend` is NULL or points to a readable `keepalloc_backend` whose functions follow the
/// backend contract for the rest of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_set_backend(
    backend: *const KeepallocBackend,
) -> KeepallocStatus {
    if backend.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    // SAFETY: non-NULL and readable (the caller's promise); the struct is plain data.
    let backend = unsafe { backend.read() };
    if !backend.is_complete() {
        return KeepallocStatus::InvalidArgument;
    }
    backend::register(backend)
}

/// See `keepalloc.h`.
///
/// # Safety
/// `library` is NULL or a NUL-terminated string; `out` is NULL or valid for a write of
/// `keepalloc_library_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_get_library_stats(
    library: *const c_char,
    out: *mut KeepallocLibraryStats,
) -> KeepallocStatus {
    if library.is_null() || out.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    let name = match unsafe { library_name(library) } {
        Ok(name) => name,
        Err(status) => return status,
    };
    // A library never acquired has run nothing: all zero.
    let s = chosen()
        .and_then(|c| with_provider!(c, |p| p.library_stats(name)))
        .unwrap_or_default();
    let stats = KeepallocLibraryStats {
        init_attempts: s.init_attempts,
        init_successes: s.init_successes,
        initialized: u32::from(is_initialized(name)),
    };
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { out.write(stats) };
    KeepallocStatus::Ok
}

/// Whether `name`'s hook has succeeded on the chosen provider (false before any acquire).
fn is_initialized(name: &str) -> bool {
    chosen().is_some_and(|c| with_provider!(c, |p| p.is_initialized(name)))
}

/// See `keepalloc.h`.
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_version() -> u32 {
    VERSION
}

/// See `keepalloc.h`.
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_backend_name() -> *const c_char {
    if backend::is_plugged() {
        return c"plugged".as_ptr();
    }
    match keepalloc_allocators::DEFAULT_BACKEND_NAME {
        "mimalloc" => c"mimalloc".as_ptr(),
        "bumpalo" => c"bumpalo".as_ptr(),
        _ => c"system".as_ptr(),
    }
}
