//! `keepalloc_ort_register` called many times with the same `OrtApiBase*` and env allocates
//! nothing new: after a refused registration (INIT_FAILED, retried), after the success
//! (ALREADY_DONE) and for another env (REGISTERED_ELSEWHERE). The witness is independent of
//! keepalloc: this test binary's own counting `#[global_allocator]` over `std::alloc::System`
//! (every Rust allocation of keepalloc and of `keepalloc-onnxruntime` goes through it), in a
//! process of its own (the registration is process-wide). One wrapper leaked per call, as
//! before the fix, is at least 10,000 live blocks here; the bounds are a few.
//!
//! Needs `cargo xtask runtimes`; NOT RUN without it, a failure under `CI=true`.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_char;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::alloc::System;
use std::sync::OnceLock;

use keepalloc_capi::ort::keepalloc_ort_register;
use keepalloc_capi::{KeepallocHookResult, KeepallocStatus};
use keepalloc_onnxruntime::ffi::{
    OrtAllocator, OrtApi, OrtApiBase, OrtEnv, OrtErrorCode, OrtStatusPtr,
};
use keepalloc_onnxruntime::{Env, ORT_API_VERSION, OnnxRuntime};

/// Counts calls to the global allocator and the blocks and bytes it has live.
struct CountingGlobal {
    calls: AtomicU64,
    live_blocks: AtomicI64,
    live_bytes: AtomicI64,
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and only
// adds relaxed counter updates, so `System`'s guarantees are this allocator's.
unsafe impl GlobalAlloc for CountingGlobal {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.live_blocks.fetch_add(1, Ordering::Relaxed);
            self.live_bytes
                .fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.live_blocks.fetch_sub(1, Ordering::Relaxed);
        self.live_bytes
            .fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout` (the caller's promise to us).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's arguments, forwarded; `ptr` came from `System`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live_bytes
                .fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingGlobal = CountingGlobal {
    calls: AtomicU64::new(0),
    live_blocks: AtomicI64::new(0),
    live_bytes: AtomicI64::new(0),
};

#[derive(Clone, Copy, Debug)]
struct Counts {
    calls: u64,
    live_blocks: i64,
    live_bytes: i64,
}

fn counts() -> Counts {
    Counts {
        calls: GLOBAL.calls.load(Ordering::SeqCst),
        live_blocks: GLOBAL.live_blocks.load(Ordering::SeqCst),
        live_bytes: GLOBAL.live_bytes.load(Ordering::SeqCst),
    }
}

/// The real runtime, and a copy of its OrtApi whose `RegisterAllocator` refuses while
/// `REFUSING` is set (with a real `OrtStatus` from ONNX Runtime's `CreateStatus`) and
/// forwards otherwise. Unlike `keepalloc_onnxruntime::interpose`, it records nothing, so the
/// counts below are keepalloc's alone.
static REAL: OnceLock<&'static OnnxRuntime> = OnceLock::new();
static API: OnceLock<OrtApi> = OnceLock::new();
static REFUSING: AtomicBool = AtomicBool::new(true);

unsafe extern "system" fn register_allocator(
    env: *mut OrtEnv,
    allocator: *mut OrtAllocator,
) -> OrtStatusPtr {
    let real = REAL
        .get()
        .expect("set before the table is handed out")
        .api();
    if REFUSING.load(Ordering::SeqCst) {
        // SAFETY: CreateStatus copies the NUL-terminated message; the caller releases the status.
        unsafe { (real.CreateStatus)(OrtErrorCode::ORT_FAIL, c"refused by the test".as_ptr()) }
    } else {
        // SAFETY: the caller's arguments, forwarded unchanged to the real function.
        unsafe { (real.RegisterAllocator)(env, allocator) }
    }
}

unsafe extern "system" fn get_api(version: u32) -> *const OrtApi {
    match API.get() {
        Some(api) if version == ORT_API_VERSION => api,
        _ => core::ptr::null(),
    }
}

unsafe extern "system" fn get_version() -> *const c_char {
    c"(RegisterAllocator refusing on demand)".as_ptr()
}

static BASE: OrtApiBase = OrtApiBase {
    GetApi: get_api,
    GetVersionString: get_version,
};

fn register(env: *mut OrtEnv) -> (KeepallocStatus, KeepallocHookResult) {
    let mut hook = KeepallocHookResult::Threw;
    // SAFETY: BASE serves a copy of the real, loaded runtime's OrtApi (never unloaded); `env` is the runtime's live env, never released, or (the other-env phase) an address that is only compared, since the registration's once is complete by then.
    let status = unsafe { keepalloc_ort_register(&BASE, env, &mut hook) };
    (status, hook)
}

const CALLS: u64 = 10_000;
/// Far below one block per call: allows for a lazily initialized static somewhere, not for
/// a wrapper per call.
const MAX_NEW_BLOCKS: i64 = 16;

/// Makes `CALLS` calls that must all return `expected` and returns the allocator's counts
/// before and after.
fn repeat(env: *mut OrtEnv, expected: (KeepallocStatus, KeepallocHookResult)) -> (Counts, Counts) {
    let before = counts();
    for i in 0..CALLS {
        let got = register(env);
        if got != expected {
            panic!("call {i}: {got:?}, expected {expected:?}");
        }
    }
    (before, counts())
}

fn check_no_growth(phase: &str, (before, after): (Counts, Counts), max_calls: u64) {
    let calls = after.calls - before.calls;
    let blocks = after.live_blocks - before.live_blocks;
    let bytes = after.live_bytes - before.live_bytes;
    println!(
        "{phase}: {CALLS} calls: {calls} allocator calls, {blocks} more live blocks, {bytes} more live bytes"
    );
    assert!(
        blocks <= MAX_NEW_BLOCKS,
        "{phase}: {blocks} more live blocks after {CALLS} calls ({bytes} bytes): a leak per call"
    );
    assert!(
        bytes <= 64 * MAX_NEW_BLOCKS,
        "{phase}: {bytes} more live bytes after {CALLS} calls: a leak per call"
    );
    assert!(
        calls <= max_calls,
        "{phase}: {calls} allocator calls in {CALLS} calls"
    );
}

#[test]
fn repeated_registration_allocates_nothing_new() {
    let Some(rt) =
        keepalloc_testkit::runtimes::for_test("repeated_registration_allocates_nothing_new")
    else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: the pinned, hash-checked onnxruntime wheel's libonnxruntime.so, a supported ONNX Runtime.
    let ort = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.expect("load ONNX Runtime");
    REAL.set(ort).unwrap();
    let mut api = *ort.api();
    api.RegisterAllocator = register_allocator;
    API.set(api).unwrap_or_else(|_| unreachable!());
    let env = Env::create(ort, c"keepalloc-ort-repeat").expect("CreateEnv");

    // Refused: the first call builds the owner and the face; the retries build nothing more.
    // (A refusal allocates ONNX Runtime's message and frees it: calls, but no live growth.)
    assert_eq!(
        register(env.as_ptr()),
        (KeepallocStatus::InitFailed, KeepallocHookResult::Failed)
    );
    let refused = repeat(
        env.as_ptr(),
        (KeepallocStatus::InitFailed, KeepallocHookResult::Failed),
    );
    check_no_growth("refused (INIT_FAILED)", refused, u64::MAX);

    // The success, then the fast path: no allocator call at all.
    REFUSING.store(false, Ordering::SeqCst);
    assert_eq!(
        register(env.as_ptr()),
        (KeepallocStatus::Ok, KeepallocHookResult::Succeeded)
    );
    let done = repeat(
        env.as_ptr(),
        (KeepallocStatus::Ok, KeepallocHookResult::AlreadyDone),
    );
    check_no_growth("registered (ALREADY_DONE)", done, MAX_NEW_BLOCKS as u64);

    // Another env: refused as the header says, and nothing kept per call either. ONNX
    // Runtime's CreateEnv hands out one process-wide OrtEnv, so "another env" is an address
    // that is not it; it is never dereferenced (the once is complete, the hook does not run).
    static OTHER_ENV: u8 = 0;
    let other = &OTHER_ENV as *const u8 as *mut OrtEnv;
    assert_eq!(
        register(other),
        (
            KeepallocStatus::RegisteredElsewhere,
            KeepallocHookResult::AlreadyDone
        )
    );
    let elsewhere = repeat(
        other,
        (
            KeepallocStatus::RegisteredElsewhere,
            KeepallocHookResult::AlreadyDone,
        ),
    );
    check_no_growth(
        "another env (REGISTERED_ELSEWHERE)",
        elsewhere,
        MAX_NEW_BLOCKS as u64,
    );
}
