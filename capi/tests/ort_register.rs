//! `keepalloc_ort_register` against the real ONNX Runtime (the pinned wheel), in its own
//! process (the registration is process-wide).
//!
//! ONNX Runtime 1.32 accepts every CPU `RegisterAllocator` it is given (a later one replaces
//! an earlier one), so the failure the retry rule exists for is injected where a runtime
//! would see it, at the C API boundary (`keepalloc_onnxruntime::interpose`): the real OrtApi
//! with `RegisterAllocator` interposed, recording the `OrtAllocator*` of every call (the
//! witness, outside keepalloc), refusing the first ones with a real `OrtStatus`, forwarding
//! the rest to the real function. Verdicts come from the interposer's record and from ONNX Runtime's
//! behaviour (sessions that use the env allocator), not from keepalloc's counters alone.
//!
//! Needs `cargo xtask runtimes`; NOT RUN without it, a failure under `CI=true`.

use core::ffi::c_char;
use core::mem::MaybeUninit;

use keepalloc_capi::ort::keepalloc_ort_register;
use keepalloc_capi::{KeepallocHookResult, KeepallocStats, KeepallocStatus, keepalloc_get_stats};
use keepalloc_onnxruntime::ffi::{OrtApi, OrtApiBase, OrtEnv};
use keepalloc_onnxruntime::interpose::{refusing_registrations, register_calls};
use keepalloc_onnxruntime::{
    Env, EnvAllocator, OnnxRuntime, Session, SessionConfig, sample_inputs,
};
use keepalloc_testkit::{calls_until, together};

unsafe extern "system" fn get_no_api(_version: u32) -> *const OrtApi {
    core::ptr::null()
}

unsafe extern "system" fn get_version() -> *const c_char {
    c"0.0.0".as_ptr()
}

/// A runtime too old for keepalloc's OrtApi version.
static TOO_OLD: OrtApiBase = OrtApiBase {
    GetApi: get_no_api,
    GetVersionString: get_version,
};

fn stats() -> KeepallocStats {
    let mut s = MaybeUninit::<KeepallocStats>::uninit();
    // SAFETY: a valid out-pointer; keepalloc writes the whole struct.
    unsafe {
        keepalloc_get_stats(s.as_mut_ptr());
        s.assume_init()
    }
}

fn register(ort: usize, env: usize) -> (KeepallocStatus, KeepallocHookResult) {
    let mut hook = KeepallocHookResult::Threw;
    let (ort, env) = (ort as *const OrtApiBase, env as *mut OrtEnv);
    // SAFETY: `ort` serves the real, loaded runtime's OrtApi (RegisterAllocator interposed); `env` is a live env that is never released.
    let status = unsafe { keepalloc_ort_register(ort, env, &mut hook) };
    (status, hook)
}

#[test]
fn register_from_c_retries_a_refused_registration_with_the_same_owner() {
    // Bad input first: nothing is built.
    let mut hook = KeepallocHookResult::Threw;
    let (no_ort, no_env) = (core::ptr::null(), core::ptr::null_mut());
    // SAFETY: NULL arguments are refused before anything is read.
    let status = unsafe { keepalloc_ort_register(no_ort, no_env, &mut hook) };
    assert_eq!(
        (status, hook),
        (
            KeepallocStatus::InvalidArgument,
            KeepallocHookResult::NotCalled
        )
    );
    // SAFETY: as above (env NULL).
    let status = unsafe { keepalloc_ort_register(&TOO_OLD, no_env, &mut hook) };
    assert_eq!(status, KeepallocStatus::InvalidArgument);
    let fake_env = 0x1000 as *mut OrtEnv; // never dereferenced: the runtime is refused first
    // SAFETY: TOO_OLD serves no OrtApi, so the env is never used.
    let status = unsafe { keepalloc_ort_register(&TOO_OLD, fake_env, &mut hook) };
    assert_eq!(
        (status, hook),
        (
            KeepallocStatus::RuntimeUnsupported,
            KeepallocHookResult::NotCalled
        )
    );
    assert_eq!(stats().owners_constructed, 0, "bad input builds no owner");

    let Some(rt) =
        keepalloc_testkit::runtimes::for_test("register_from_c_retries_a_refused_registration")
    else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: libonnxruntime.so from the pinned onnxruntime wheel pip checked against its sha256, a supported version.
    let ort = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.expect("load ONNX Runtime");
    let env = Env::create(ort, c"keepalloc-capi-ort").expect("CreateEnv");

    // Three refusals while 8 threads register at once, each retrying until it succeeds.
    const THREADS: usize = 8;
    const REFUSED: u32 = 3;
    let (base, _) = refusing_registrations(ort, REFUSED);
    let base = base as usize;
    let env_ptr = env.as_ptr() as usize;
    let per_thread: Vec<Vec<(KeepallocStatus, KeepallocHookResult)>> = together(THREADS, |_| {
        calls_until(
            100,
            || register(base, env_ptr),
            |r| r.0 == KeepallocStatus::Ok,
        )
    });
    let all: Vec<_> = per_thread.iter().flatten().copied().collect();
    for calls in &per_thread {
        assert_eq!(calls.last().unwrap().0, KeepallocStatus::Ok, "{calls:?}");
    }
    let count = |status, hook| all.iter().filter(|&&r| r == (status, hook)).count();
    assert_eq!(
        count(KeepallocStatus::InitFailed, KeepallocHookResult::Failed),
        REFUSED as usize,
        "each refusal reaches exactly the caller whose attempt it was: {all:?}"
    );
    assert_eq!(
        count(KeepallocStatus::Ok, KeepallocHookResult::Succeeded),
        1,
        "one caller registered: {all:?}"
    );
    assert_eq!(
        count(KeepallocStatus::Ok, KeepallocHookResult::AlreadyDone),
        THREADS - 1,
        "{all:?}"
    );
    assert_eq!(
        all.len(),
        REFUSED as usize + THREADS,
        "no other outcome: {all:?}"
    );

    // The witness: RegisterAllocator saw REFUSED + 1 calls, all with the same allocator.
    let seen = register_calls();
    assert_eq!(seen.len(), REFUSED as usize + 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| s.refused).count(), REFUSED as usize);
    assert!(
        seen.iter().all(|s| s.allocator == seen[0].allocator),
        "every attempt registered the same OrtAllocator (the same owner's face): {seen:?}"
    );
    let face = EnvAllocator::get().expect("the face exists");
    assert_eq!(
        face.as_ort() as usize,
        seen[0].allocator,
        "the face that was registered"
    );
    assert_eq!(stats().owners_constructed, 1, "one owner");

    // ONNX Runtime really allocates through it: a session with env allocators moves the
    // face's ledger and the owner's counters, and gives every byte back; the control
    // session (env allocators off) moves neither.
    let (_, model) = rt
        .wheel_models
        .iter()
        .find(|(name, _)| name.starts_with("mul_1"))
        .expect("the wheel ships mul_1.onnx");
    let before = (face.stats(), stats());
    {
        let config = SessionConfig {
            use_env_allocators: false,
            intra_op_threads: 1,
        };
        let control = Session::new(env, model, config).unwrap();
        let mut inputs = sample_inputs(&control, 3);
        control.run(&mut inputs).unwrap();
    }
    assert_eq!(
        face.stats().allocs,
        before.0.allocs,
        "control: ORT's own allocator"
    );
    assert_eq!(
        stats().allocations,
        before.1.allocations,
        "control: ORT's own allocator"
    );
    let (through_face, through_owner) = {
        let session = Session::new(env, model, SessionConfig::default()).unwrap();
        let mut inputs = sample_inputs(&session, 3);
        let out = session.run(&mut inputs).unwrap();
        assert!(!out.is_empty());
        (
            face.stats().allocs - before.0.allocs,
            stats().allocations - before.1.allocations,
        )
    };
    assert!(through_face > 0, "the session allocated through the face");
    assert!(
        through_owner >= through_face,
        "every face allocation is an owner allocation ({through_owner} < {through_face})"
    );
    let after = (face.stats(), stats());
    assert_eq!(
        after.0.live_blocks, before.0.live_blocks,
        "the face's ledger is back"
    );
    assert_eq!(
        after.1.live_bytes, before.1.live_bytes,
        "the owner's live bytes are back"
    );

    // After the success: the same env is already done; nothing runs again.
    assert_eq!(
        register(base, env.as_ptr() as usize),
        (KeepallocStatus::Ok, KeepallocHookResult::AlreadyDone)
    );
    assert_eq!(register_calls().len(), REFUSED as usize + 1);
}
