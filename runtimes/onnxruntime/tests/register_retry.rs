//! A refused `RegisterAllocator` is retried with the same owner and the same face, never a
//! second one: the Rust API, against the real ONNX Runtime with `RegisterAllocator`
//! interposed (`keepalloc_onnxruntime::interpose`; ONNX Runtime 1.32 itself never refuses a
//! CPU allocator). Witnesses outside keepalloc: the backend's constructor counts owners, the
//! interposer records the `OrtAllocator*` of every registration, and ONNX Runtime's sessions
//! must then allocate through that face. Own process: the registration is process-wide.
//!
//! Needs `cargo xtask runtimes`; NOT RUN without it, a failure under `CI=true`.

use core::sync::atomic::{AtomicU32, Ordering};

use keepalloc_allocators::System;
use keepalloc_onnxruntime::interpose::{REFUSAL, refusing_registrations, register_calls};
use keepalloc_onnxruntime::{
    Env, EnvAllocator, OnnxRuntime, Session, SessionConfig, register_env_allocator_ex,
    sample_inputs,
};
use keepalloc_provider::{GlobalProvider, HookRan, ProviderError};
use keepalloc_testkit::{calls_until, together};

static CONSTRUCTED: AtomicU32 = AtomicU32::new(0);

static OWNER: GlobalProvider<System> = GlobalProvider::new(
    || {
        CONSTRUCTED.fetch_add(1, Ordering::SeqCst);
        Ok(System)
    },
    None,
);

#[test]
fn a_refused_registration_is_retried_with_the_same_owner() {
    let Some(rt) = keepalloc_testkit::runtimes::for_test(
        "a_refused_registration_is_retried_with_the_same_owner",
    ) else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: libonnxruntime.so from the pinned onnxruntime wheel pip checked against its sha256, a supported version.
    let real = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.expect("load ONNX Runtime");
    const THREADS: usize = 8;
    const REFUSED: u32 = 3;
    let (_, ort) = refusing_registrations(real, REFUSED);
    let env = Env::create(ort, c"keepalloc-register-retry").expect("CreateEnv");
    let refusal = REFUSAL.to_str().unwrap();

    let outcomes: Vec<Vec<Result<(usize, HookRan), String>>> = together(THREADS, |_| {
        let register = || {
            register_env_allocator_ex(&OWNER, env)
                .map(|(h, ran)| (h.context() as usize, ran))
                .map_err(|e| match e {
                    ProviderError::InitFailed(e) => e.to_string(),
                    other => panic!("only InitFailed is retryable: {other}"),
                })
        };
        calls_until(100, register, Result::is_ok)
    });
    let all: Vec<_> = outcomes.iter().flatten().cloned().collect();
    let errors: Vec<&String> = all.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), REFUSED as usize, "{all:?}");
    assert!(
        errors.iter().all(|e| e.contains(refusal)),
        "ONNX Runtime's message reaches the caller: {errors:?}"
    );
    let successes: Vec<(usize, HookRan)> = all.iter().filter_map(|r| r.clone().ok()).collect();
    assert_eq!(successes.len(), THREADS, "every thread ends registered");
    assert_eq!(
        successes.iter().filter(|s| s.1 == HookRan::Ran).count(),
        1,
        "one registration ran and succeeded"
    );
    assert!(
        successes.iter().all(|s| s.0 == successes[0].0),
        "one allocator for every caller"
    );
    assert_eq!(CONSTRUCTED.load(Ordering::SeqCst), 1, "one owner, ever");

    let seen = register_calls();
    assert_eq!(seen.len(), REFUSED as usize + 1, "{seen:?}");
    let face = EnvAllocator::get().expect("the face exists");
    assert!(
        seen.iter().all(|c| c.allocator == face.as_ort() as usize),
        "every attempt registered the same face: {seen:?}"
    );

    // The registration that finally went through is the one ONNX Runtime uses.
    let (_, model) = rt
        .wheel_models
        .iter()
        .find(|(name, _)| name.starts_with("mul_1"))
        .expect("the wheel ships mul_1.onnx");
    let before = face.stats();
    {
        let session = Session::new(env, model, SessionConfig::default()).unwrap();
        let mut inputs = sample_inputs(&session, 5);
        session.run(&mut inputs).unwrap();
    }
    let after = face.stats();
    assert!(
        after.allocs > before.allocs,
        "sessions allocate through the face"
    );
    assert_eq!(
        after.live_blocks, before.live_blocks,
        "and give every block back"
    );
}
