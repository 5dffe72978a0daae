//! `keepalloc_ort_register`: the process-wide owner as ONNX Runtime's env allocator, from C.
//!
//! The C caller already has ONNX Runtime (linked, or loaded itself) and passes what its
//! `OrtGetApiBase()` returned plus its `OrtEnv*`; keepalloc asks that runtime for the OrtApi
//! version it was built against, gives the owner an `OrtAllocator` face and runs
//! `RegisterAllocator` as the init hook of the library named `"onnxruntime"`, inside that
//! library's once on top of the owner's once ([`keepalloc_onnxruntime::register_on`], the same
//! hook the Rust API runs). A failed registration keeps the owner and is retried by the next
//! call, with the same owner and the same face.

use core::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use keepalloc_onnxruntime::ffi::{OrtApiBase, OrtEnv};
use keepalloc_onnxruntime::{Env, LIBRARY, OnnxRuntime, is_registered_on, register_on};
use keepalloc_provider::{HookRan, ProviderError};

use crate::backend::{choose, with_provider};
use crate::{KeepallocHookResult, KeepallocStatus, report, status_of};

/// See `keepalloc.h`.
///
/// # Safety
/// `ort` is NULL or the `OrtApiBase` of an ONNX Runtime that stays loaded for the rest of the
/// process; `env` is NULL or a live `OrtEnv` of that runtime that is never released;
/// `out_result` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_ort_register(
    ort: *const OrtApiBase,
    env: *mut OrtEnv,
    out_result: *mut KeepallocHookResult,
) -> KeepallocStatus {
    // SAFETY: the caller's promise for `out_result`.
    unsafe { report(out_result, KeepallocHookResult::NotCalled) };
    if ort.is_null() || env.is_null() {
        return KeepallocStatus::InvalidArgument;
    }
    if let Err(status) = crate::scribble::check_settings() {
        return status;
    }
    if let Err(status) = crate::fail::check_settings() {
        return status;
    }
    crate::ensure_fork_handler();
    let hook_result = Cell::new(KeepallocHookResult::NotCalled);
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<(), KeepallocStatus> {
        // SAFETY: the caller promises `ort` is a runtime that stays loaded.
        let runtime = unsafe { OnnxRuntime::from_api_base(ort) }
            .map_err(|_| KeepallocStatus::RuntimeUnsupported)?;
        // SAFETY: non-NULL; the caller promises a live env of this runtime, never released.
        let env = unsafe { Env::from_raw(runtime, env) }.ok_or(KeepallocStatus::InvalidArgument)?;
        let hook = |table| {
            hook_result.set(KeepallocHookResult::Failed);
            register_on(env, table)?;
            hook_result.set(KeepallocHookResult::Succeeded);
            Ok(())
        };
        let (table, ran) = with_provider!(choose(), |p| p
            .acquire_library(LIBRARY, hook)
            .map(|(h, ran)| (h.table(), ran)))
        .map_err(|e: ProviderError| status_of(&e))?;
        if ran == HookRan::AlreadyInitialized {
            hook_result.set(KeepallocHookResult::AlreadyDone);
        }
        if is_registered_on(env, table) {
            Ok(())
        } else {
            Err(KeepallocStatus::RegisteredElsewhere)
        }
    }));
    // SAFETY: the caller's promise for `out_result`.
    unsafe { report(out_result, hook_result.get()) };
    match outcome {
        Ok(Ok(())) => KeepallocStatus::Ok,
        Ok(Err(status)) => status,
        Err(_) => KeepallocStatus::InitFailed,
    }
}
