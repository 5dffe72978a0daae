//! Fault injection at the C API boundary: an ONNX Runtime whose `RegisterAllocator` refuses.
//!
//! ONNX Runtime 1.32 accepts every CPU allocator registration it is given (a later one
//! replaces an earlier one), so the failure keepalloc's retry rule exists for cannot be
//! provoked through the real runtime's inputs. [`refusing_registrations`] gives the next best
//! thing, and what a runtime would see: the real runtime's `OrtApi` with `RegisterAllocator`
//! interposed. The interposer records the `OrtAllocator*` of every call (a witness that
//! stands outside keepalloc), refuses the first `refusals` calls with a real `OrtStatus` made
//! by ONNX Runtime's own `CreateStatus`, and forwards the others unchanged. Every other
//! function is the real one. One interposed runtime per process.

use core::ffi::{CStr, c_char};
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::ffi::{OrtAllocator, OrtApi, OrtApiBase, OrtEnv, OrtErrorCode, OrtStatusPtr};

use crate::runtime::{ORT_API_VERSION, OnnxRuntime};

/// The message of an interposed refusal.
pub const REFUSAL: &CStr = c"injected: RegisterAllocator refused";

struct Interposed {
    real: &'static OnnxRuntime,
    api: OrtApi,
}
// SAFETY: a table of function pointers written once and then only read, and a reference to a runtime that is itself shared between threads.
unsafe impl Sync for Interposed {}
// SAFETY: as above.
unsafe impl Send for Interposed {}

static INTERPOSED: OnceLock<Interposed> = OnceLock::new();
static REFUSE: AtomicU32 = AtomicU32::new(0);
static SEEN: Mutex<Vec<RegisterCall>> = Mutex::new(Vec::new());

/// One call of the interposed `RegisterAllocator`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterCall {
    /// The `OrtAllocator*` it was given.
    pub allocator: usize,
    /// Whether it was refused.
    pub refused: bool,
}

unsafe extern "system" fn register_interposed(
    env: *mut OrtEnv,
    allocator: *mut OrtAllocator,
) -> OrtStatusPtr {
    let real = INTERPOSED
        .get()
        .expect("set before the table is handed out")
        .real
        .api();
    let refused = REFUSE
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    SEEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(RegisterCall {
            allocator: allocator as usize,
            refused,
        });
    if refused {
        // SAFETY: CreateStatus copies the NUL-terminated message; the caller releases the status.
        unsafe { (real.CreateStatus)(OrtErrorCode::ORT_FAIL, REFUSAL.as_ptr()) }
    } else {
        // SAFETY: the caller's arguments, forwarded unchanged to the real function.
        unsafe { (real.RegisterAllocator)(env, allocator) }
    }
}

unsafe extern "system" fn get_api(version: u32) -> *const OrtApi {
    match INTERPOSED.get() {
        Some(i) if version == ORT_API_VERSION => &i.api,
        _ => core::ptr::null(),
    }
}

unsafe extern "system" fn get_version() -> *const c_char {
    c"(RegisterAllocator interposed)".as_ptr()
}

static BASE: OrtApiBase = OrtApiBase {
    GetApi: get_api,
    GetVersionString: get_version,
};

/// `real` with `RegisterAllocator` refusing its next `refusals` calls, as an `OrtApiBase` (what
/// a C caller would pass to `keepalloc_ort_register`) and as an [`OnnxRuntime`]. The first
/// call interposes; a later one only sets a new number of refusals (for the same `real`).
pub fn refusing_registrations(
    real: &'static OnnxRuntime,
    refusals: u32,
) -> (*const OrtApiBase, &'static OnnxRuntime) {
    let interposed = INTERPOSED.get_or_init(|| {
        let mut api = *real.api();
        api.RegisterAllocator = register_interposed;
        Interposed { real, api }
    });
    assert!(
        core::ptr::eq(interposed.real, real),
        "one interposed runtime per process"
    );
    REFUSE.store(refusals, Ordering::SeqCst);
    // SAFETY: BASE is a static that serves the interposed copy of a runtime that is never unloaded.
    let runtime = unsafe { OnnxRuntime::from_api_base(&BASE) }
        .expect("the interposed table serves ORT_API_VERSION");
    (&BASE, runtime)
}

/// Every call of the interposed `RegisterAllocator` so far, in order.
pub fn register_calls() -> Vec<RegisterCall> {
    SEEN.lock().unwrap_or_else(PoisonError::into_inner).clone()
}
