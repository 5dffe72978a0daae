//! The real ONNX Runtime (from the pinned PyPI wheel) on keepalloc's owner.
//!
//! One test, in its own process (the registration is process-wide): a failed
//! `RegisterAllocator` is retried with the same owner; then N threads create sessions at once
//! on every model the wheel ships and on the generated FC models, run them, compare with a
//! reference. The witness that every env allocation went through the owner is the test's own
//! backend (a static `Scribble` the test reads directly, and a constructor counter it keeps),
//! checked first; the owner's counters and the face's own ledger must then agree with it, and
//! live blocks return to the baseline.
//! Negative control: sessions with `session.use_env_allocators=0` must not move the
//! backend's count (if they did, the counts would not be telling us where allocations went).
//!
//! Needs `cargo xtask runtimes`. Without it the test prints NOT RUN and passes, except under
//! `CI=true`, where it fails.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use keepalloc_allocators::System;
use keepalloc_fault_inject::Scribble;
use keepalloc_fault_inject::ledger::{self, Witnessed};
use keepalloc_onnxruntime::{
    Env, EnvAllocator, OnnxRuntime, Session, SessionConfig, register_env_allocator, sample_inputs,
};
use keepalloc_provider::GlobalProvider;

/// The test's own backend, a static it reads directly: the blocks it hands out are the
/// witness that ONNX Runtime's sessions allocated through the owner (nothing but the owner
/// allocates from it).
static BACKEND: Witnessed = Witnessed::new();

static OWNER: GlobalProvider<&'static Scribble<System>> =
    GlobalProvider::new(|| BACKEND.construct(), None);

const THREADS: usize = 8;

fn fc_weight(n: usize, k: usize) -> f32 {
    ((n * 7 + k * 3) % 11) as f32 / 8.0 - 5.0 / 8.0
}
fn fc_bias(n: usize) -> f32 {
    ((n * 5) % 7) as f32 / 4.0 - 3.0 / 4.0
}

/// The generated FC models' independent reference (the generator's formulas).
fn fc_reference(x: &[f32], b: usize, k: usize, n: usize, relu: bool) -> Vec<f32> {
    let mut y = vec![0f32; b * n];
    for r in 0..b {
        for c in 0..n {
            let mut acc = fc_bias(c) as f64;
            for i in 0..k {
                acc += x[r * k + i] as f64 * fc_weight(c, i) as f64;
            }
            y[r * n + c] = if relu {
                acc.max(0.0) as f32
            } else {
                acc as f32
            };
        }
    }
    y
}

fn models(rt: &keepalloc_testkit::runtimes::Runtimes) -> Vec<(String, PathBuf)> {
    let mut all: Vec<(String, PathBuf)> = rt.wheel_models.clone().into_iter().collect();
    all.extend(keepalloc_testkit::runtimes::generated_models());
    all
}

/// Another component's CPU OrtAllocator (plain malloc), registered on the env before
/// keepalloc's; it counts its calls, which must stay at zero once keepalloc's is registered.
mod foreign {
    use core::ffi::c_void;
    use keepalloc_onnxruntime::ffi::{OrtAllocator, OrtMemoryInfo};

    #[repr(C)]
    pub struct Foreign {
        pub ort: OrtAllocator,
        pub info: *const OrtMemoryInfo,
    }
    pub static CALLS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    pub unsafe extern "system" fn alloc(_: *mut OrtAllocator, size: usize) -> *mut c_void {
        CALLS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        // SAFETY: plain malloc.
        unsafe { libc_malloc(size) }
    }
    pub unsafe extern "system" fn free(_: *mut OrtAllocator, p: *mut c_void) {
        // SAFETY: `p` came from `alloc`.
        unsafe { libc_free(p) }
    }
    pub unsafe extern "system" fn info(this: *const OrtAllocator) -> *const OrtMemoryInfo {
        // SAFETY: `this` is the first field of a live `Foreign`.
        unsafe { (*(this as *const Foreign)).info }
    }
    unsafe extern "C" {
        #[link_name = "malloc"]
        fn libc_malloc(size: usize) -> *mut c_void;
        #[link_name = "free"]
        fn libc_free(p: *mut c_void);
    }
}

#[test]
fn concurrent_sessions_allocate_only_through_the_owner() {
    let Some(rt) = keepalloc_testkit::runtimes::for_test(
        "concurrent_sessions_allocate_only_through_the_owner",
    ) else {
        return;
    };
    // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: libonnxruntime.so from the pinned onnxruntime wheel pip checked against its sha256, a supported version.
    let ort = unsafe { OnnxRuntime::load(Some(&rt.onnxruntime)) }.expect("load ONNX Runtime");
    assert_eq!(ort.version(), rt.onnxruntime_version);
    let env = Env::create(ort, c"keepalloc-test").expect("CreateEnv");
    let api = ort.api();

    // 1. Another component registered its CPU allocator on the env first.
    let mut info = core::ptr::null_mut();
    ort.check(
        // SAFETY: valid out-pointer.
        unsafe {
            (api.CreateCpuMemoryInfo)(
                keepalloc_onnxruntime::ffi::OrtAllocatorType::OrtDeviceAllocator,
                keepalloc_onnxruntime::ffi::OrtMemType::OrtMemTypeDefault,
                &mut info,
            )
        },
        "CreateCpuMemoryInfo",
    )
    .unwrap();
    let other: &'static mut foreign::Foreign = Box::leak(Box::new(foreign::Foreign {
        ort: keepalloc_onnxruntime::ffi::OrtAllocator {
            version: keepalloc_onnxruntime::ORT_API_VERSION,
            Alloc: Some(foreign::alloc),
            Free: Some(foreign::free),
            Info: Some(foreign::info),
            Reserve: None,
        },
        info,
    }));
    ort.check(
        // SAFETY: live env; `other` is a complete allocator that is never dropped.
        unsafe { (api.RegisterAllocator)(env.as_ptr(), &mut other.ort) },
        "RegisterAllocator",
    )
    .expect("register the foreign allocator");
    // ONNX Runtime 1.32 accepts a second CPU allocator on the same env (no error to retry):
    // the later registration replaces the earlier one, which step 3 checks (the foreign
    // allocator must never be called once keepalloc's is registered).
    // 2. Registration from many threads at once: one owner, one registration.
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                register_env_allocator(&OWNER, env).map(|h| h.context() as usize)
            })
        })
        .collect();
    let contexts: Vec<usize> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("retry registers"))
        .collect();
    assert!(
        contexts.windows(2).all(|w| w[0] == w[1]),
        "one allocator for every caller"
    );
    assert_eq!(
        BACKEND.constructed(),
        1,
        "one owner, ever (the test's constructor counter)"
    );
    let stats = OWNER.stats();
    assert_eq!(stats.owners_constructed, 1, "one owner, ever");
    let registration = OWNER
        .library_stats(keepalloc_onnxruntime::LIBRARY)
        .expect("registered");
    assert_eq!(
        registration.init_attempts, 1,
        "one registration for all the threads"
    );
    assert_eq!(registration.init_successes, 1);
    let face = EnvAllocator::get().expect("the face exists");

    // 3. Sessions on every model, THREADS at once, compared with a reference.
    let models = models(&rt);
    assert!(
        models.len() >= 5,
        "three wheel models and two generated ones: {models:?}"
    );
    for (name, path) in &models {
        let base_backend = BACKEND.stats();
        let base_owner = OWNER.stats().allocator;
        let base_face = face.stats();

        // Reference: the same model on ONNX Runtime's own allocator (and, for the FC
        // models, the generator's formulas). The owner must not see any of it: the control.
        let reference_session = Session::new(
            env,
            path,
            SessionConfig {
                use_env_allocators: false,
                intra_op_threads: 1,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let inputs = sample_inputs(&reference_session, 7);
        let reference = reference_session.run(&mut inputs.clone()).unwrap();
        drop(reference_session);
        assert_eq!(
            BACKEND.stats().allocations,
            base_backend.allocations,
            "{name}: use_env_allocators=0 must not reach the owner (negative control; the \
             backend's own count)"
        );
        assert_eq!(
            OWNER.stats().allocator.allocations,
            base_owner.allocations,
            "{name}: use_env_allocators=0 must not reach the owner (negative control)"
        );
        if let Some(rest) = name.strip_prefix("fc_") {
            let dims: Vec<usize> = rest
                .rsplit('_')
                .next()
                .unwrap()
                .split('x')
                .map(|d| d.parse().unwrap())
                .collect();
            let expected = fc_reference(
                &inputs[0],
                dims[0],
                dims[1],
                dims[2],
                rest.starts_with("gemm_relu"),
            );
            let got = reference[0].as_f32().unwrap();
            for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{name}[{i}]: {a} vs {b}"
                );
            }
        }

        let barrier = Arc::new(Barrier::new(THREADS));
        let results: Vec<_> = (0..THREADS)
            .map(|_| {
                let barrier = barrier.clone();
                let path = path.clone();
                let mut inputs = inputs.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let session = Session::new(env, &path, SessionConfig::default())?;
                    let a = session.run(&mut inputs)?;
                    let b = session.run(&mut inputs)?;
                    Ok::<_, keepalloc_onnxruntime::OrtError>((a, b))
                })
            })
            .collect();
        for r in results {
            let (a, b) = r.join().unwrap().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                a, reference,
                "{name}: output on keepalloc's owner differs from the reference"
            );
            assert_eq!(b, reference, "{name}: second run differs");
        }

        // The test's own witness first: the blocks its backend handed out and got back.
        let blocks = ledger::blocks_returned(name, &base_backend, &BACKEND.stats());
        // Then the face's ledger and the owner's counters, which must agree with it.
        let owner = OWNER.stats().allocator;
        let seen = face.stats();
        let allocs = seen.allocs - base_face.allocs;
        eprintln!(
            "{name}: {THREADS} sessions x 2 runs: {blocks} allocations through the owner, peak {} bytes",
            owner.peak_bytes
        );
        assert!(
            allocs > 0,
            "{name}: the sessions never used the env allocator"
        );
        assert_eq!(
            allocs, blocks,
            "{name}: every face allocation is one block of the test's backend"
        );
        assert_eq!(
            owner.allocations - base_owner.allocations,
            allocs,
            "{name}: every face allocation is one owner allocation"
        );
        assert_eq!(
            owner.deallocations - base_owner.deallocations,
            seen.frees - base_face.frees,
            "{name}: frees"
        );
        assert_eq!(
            seen.live_blocks, base_face.live_blocks,
            "{name}: ORT freed every block it got"
        );
        assert_eq!(
            owner.live_bytes, base_owner.live_bytes,
            "{name}: live bytes back to the baseline"
        );
        assert_eq!(seen.nulls, 0);
    }
    let backend = BACKEND.stats();
    assert_eq!(
        backend.live_blocks, 0,
        "nothing of ORT's is left in the owner (the backend's own count): {backend:?}"
    );
    assert_eq!(BACKEND.verify_quarantine(), 0);
    assert!(
        BACKEND.violations().is_empty(),
        "Scribble: {:?}",
        BACKEND.violations()
    );
    assert_eq!(
        BACKEND.constructed(),
        1,
        "still one owner (the test's constructor counter)"
    );
    assert_eq!(face.stats().live_blocks, 0);
    assert_eq!(
        OWNER.stats().allocator.live_bytes,
        0,
        "nothing of ORT's is left in the owner"
    );
    assert_eq!(OWNER.stats().owners_constructed, 1);
    assert_eq!(
        foreign::CALLS.load(core::sync::atomic::Ordering::Relaxed),
        0,
        "the earlier registration was replaced by keepalloc's"
    );
}
