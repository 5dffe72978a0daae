//! Bad input gets a typed error, and nothing is lost.

use std::path::Path;

use keepalloc_allocators::System;
use keepalloc_onnxruntime::{
    Env, OnnxRuntime, OrtError, Session, SessionConfig, register_env_allocator,
};
use keepalloc_provider::{GlobalProvider, ProviderError};

/// A provider someone published before ONNX Runtime's registration could run.
static PUBLISHED_EARLIER: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

#[test]
fn loading_something_that_is_not_onnx_runtime_is_a_typed_error() {
    // SAFETY: no such file: dlopen fails and nothing is run.
    let missing = unsafe { OnnxRuntime::load(Some(Path::new("/nonexistent/libonnxruntime.so"))) }
        .unwrap_err();
    assert!(matches!(missing, OrtError::Load { .. }), "{missing}");
    // A real shared library without OrtGetApiBase.
    // SAFETY: glibc's libm, already loaded into every Rust process (its initializers have run), exports no OrtGetApiBase: the lookup fails and nothing of it is called.
    let libm = unsafe { OnnxRuntime::load(Some(Path::new("libm.so.6"))) }.unwrap_err();
    assert!(
        matches!(&libm, OrtError::Load { message, .. } if message.contains("OrtGetApiBase")),
        "{libm}"
    );
}

#[test]
fn bad_models_and_inputs_are_typed_errors() {
    let Some(rt) = keepalloc_testkit::runtimes::for_test("bad_models_and_inputs_are_typed_errors")
    else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: libonnxruntime.so from the pinned onnxruntime wheel pip checked against its sha256, a supported version.
    let ort = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.unwrap();
    let env = Env::create(ort, c"keepalloc-errors").unwrap();
    let config = SessionConfig {
        use_env_allocators: false,
        intra_op_threads: 1,
    };
    let e = Session::new(env, Path::new("/nonexistent/model.onnx"), config).unwrap_err();
    assert!(
        matches!(
            e,
            OrtError::Api {
                call: "CreateSession",
                ..
            }
        ),
        "{e}"
    );
    // A file that is not a model (this test's own source).
    let e = Session::new(env, Path::new(file!()), config).unwrap_err();
    assert!(
        matches!(
            e,
            OrtError::Api {
                call: "CreateSession",
                ..
            }
        ),
        "{e}"
    );

    let session = Session::new(env, &rt.wheel_models["mul_1"], config).unwrap();
    let e = session.run(&mut []).unwrap_err();
    assert!(matches!(e, OrtError::Input(_)), "{e}");
    let e = session.run(&mut [vec![1.0; 5]]).unwrap_err();
    assert!(matches!(e, OrtError::Input(_)), "{e}");
    // The session still works after the bad calls.
    let count: i64 = session.inputs()[0].shape.iter().product();
    let out = session.run(&mut [vec![1.0; count as usize]]).unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn registration_runs_after_a_publish_only_acquire_and_a_second_env_is_an_error() {
    let Some(rt) =
        keepalloc_testkit::runtimes::for_test("registering_a_provider_published_without_the_hook")
    else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: libonnxruntime.so from the pinned onnxruntime wheel pip checked against its sha256, a supported version.
    let ort = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.unwrap();
    let env = Env::create(ort, c"keepalloc-errors-publish").unwrap();
    let published = PUBLISHED_EARLIER.acquire().unwrap(); // publish-only: no registration
    // ONNX Runtime's registration has its own once: it still runs, on the same owner.
    let registered = register_env_allocator(&PUBLISHED_EARLIER, env).unwrap();
    assert_eq!(registered, published);
    assert!(PUBLISHED_EARLIER.is_initialized(keepalloc_onnxruntime::LIBRARY));
    // A second env cannot get the registration (it ran once): a typed error, not a success.
    // (ONNX Runtime may hand out its one process-wide env again: then it is the same env.)
    let other = Env::create(ort, c"keepalloc-errors-other").unwrap();
    let again = register_env_allocator(&PUBLISHED_EARLIER, other);
    if other.as_ptr() == env.as_ptr() {
        assert!(again.is_ok(), "{again:?}");
    } else {
        let e = again.unwrap_err();
        assert!(
            matches!(&e, ProviderError::InitFailed(m) if m.to_string().contains("another OrtEnv")),
            "{e}"
        );
    }
    assert_eq!(PUBLISHED_EARLIER.stats().owners_constructed, 1);
}
