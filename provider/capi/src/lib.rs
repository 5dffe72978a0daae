//! The C ABI of keepalloc (`provider/include/keepalloc.h`), for runtimes written in C or C++.
//!
//! `keepalloc_acquire` runs [`DEFAULT_PROVIDER`](keepalloc_provider::DEFAULT_PROVIDER)'s
//! once with the caller's init hook; `keepalloc_get_stats` reads its counters. No panic
//! crosses the boundary: a panic inside the once is caught and reported as
//! `KEEPALLOC_INIT_FAILED` (the once stays retryable).

use core::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use keepalloc_allocators::AllocatorTable;
use keepalloc_provider::{DEFAULT_PROVIDER, InitError, ProviderError};

/// `keepalloc_table`: the same type as [`AllocatorTable`].
pub type KeepallocTable = AllocatorTable;

/// `keepalloc_status`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepallocStatus {
    /// Success.
    Ok = 0,
    /// The init hook failed (or panicked); retry later.
    InitFailed = 1,
    /// The owner could not be constructed.
    OutOfMemory = 2,
    /// A required pointer argument was NULL.
    InvalidArgument = 3,
}

/// `keepalloc_init_fn`.
pub type KeepallocInitFn =
    Option<unsafe extern "C" fn(table: *const AllocatorTable, user_data: *mut c_void) -> c_int>;

/// `keepalloc_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepallocStats {
    /// Owners constructed (0 or 1).
    pub owners_constructed: u64,
    /// Init attempts run.
    pub init_attempts: u64,
    /// Init attempts that published (0 or 1).
    pub init_successes: u64,
    /// Allocations through the owner.
    pub allocations: u64,
    /// Frees through the owner.
    pub deallocations: u64,
    /// Bytes live in the owner.
    pub live_bytes: u64,
    /// Most bytes ever live in the owner.
    pub peak_bytes: u64,
}

/// See `keepalloc.h`.
///
/// # Safety
/// `out_table` is NULL or valid for a pointer write; `init`, if not NULL, is safe to call
/// with the table and `user_data` and does not unwind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_acquire(
    init: KeepallocInitFn,
    user_data: *mut c_void,
    out_table: *mut *const AllocatorTable,
) -> KeepallocStatus {
    if out_table.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    let user_data = user_data as usize;
    let acquired = catch_unwind(AssertUnwindSafe(|| {
        DEFAULT_PROVIDER.acquire_with(|table: &'static AllocatorTable| match init {
            None => Ok(()),
            Some(init) => {
                // SAFETY: the caller vouches for `init`; the table lives forever.
                let rc = unsafe { init(table, user_data as *mut c_void) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(InitError::code(rc))
                }
            }
        })
    }));
    match acquired {
        Ok(Ok(handle)) => {
            // SAFETY: checked non-NULL above; the caller promises it is writable.
            unsafe { out_table.write(handle.table()) };
            KeepallocStatus::Ok
        }
        Ok(Err(ProviderError::OutOfMemory)) => KeepallocStatus::OutOfMemory,
        Ok(Err(ProviderError::InitFailed(_))) | Err(_) => KeepallocStatus::InitFailed,
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `out` is NULL or valid for a write of `keepalloc_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_get_stats(out: *mut KeepallocStats) {
    if out.is_null() {
        return;
    }
    let s = DEFAULT_PROVIDER.stats();
    let stats = KeepallocStats {
        owners_constructed: s.owners_constructed,
        init_attempts: s.init_attempts,
        init_successes: s.init_successes,
        allocations: s.allocator.allocations,
        deallocations: s.allocator.deallocations,
        live_bytes: s.allocator.live_bytes as u64,
        peak_bytes: s.allocator.peak_bytes as u64,
    };
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { out.write(stats) };
}

/// See `keepalloc.h`.
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_backend_name() -> *const c_char {
    match keepalloc_allocators::DEFAULT_BACKEND_NAME {
        "mimalloc" => c"mimalloc".as_ptr(),
        "bumpalo" => c"bumpalo".as_ptr(),
        _ => c"system".as_ptr(),
    }
}
