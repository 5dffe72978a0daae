//! `keepalloc-ort-child`: one run of the ONNX Runtime fault campaign, in its own process.
//!
//! ```text
//! keepalloc-ort-child --ort LIB --model MODEL.onnx --plan PLAN [--threads N]
//!                     [--control foreign-allocator] [--refuse-registrations K]
//! PLAN: never | nth:N | from:N | probability:P@SEED | budget:BYTES
//! ```
//!
//! `LIB` must be an ONNX Runtime shared library of a supported version (it is loaded and its
//! functions called with ONNX Runtime's signatures; see `OnnxRuntime::load`'s safety
//! contract): `cargo xtask fault-test` passes the one `cargo xtask runtimes` unpacked from
//! the pinned, hash-checked wheel.
//!
//! keepalloc's owner (`Failing<Scribble<System>>` under a `GlobalProvider`) is registered on
//! the env as ONNX Runtime's CPU allocator; a reference output is computed first on ONNX
//! Runtime's own allocator (`session.use_env_allocators=0`, untouched by the plan); then the
//! plan is armed and N threads each create a session on the env allocator and run it once.
//! The sessions are released, the plan is disarmed, and the run is judged.
//!
//! What ONNX Runtime does with a NULL from its allocator is ONNX Runtime's business: a clean
//! error, a wrong output, a leak, a crash (the parent sees the signal) or a hang (the parent's
//! timeout) are findings about ONNX Runtime. keepalloc's own invariants decide exit code 20:
//! exactly one owner constructed (counted in the backend constructor, outside the cell), one
//! registration, exact accounting (every block the `OrtAllocator` face handed out or took
//! back is one allocation or free of the owner, and the face's own ledger of live blocks
//! matches the owner's count), Scribble finds no violation, and an env-allocator session that
//! ran did allocate through the owner.
//!
//! On stdout: `stage NAME` as each stage is reached, `injected` when the backend refuses its
//! first allocation (written before that refusal returns), and last one JSON object. Exit
//! codes: 0 ok, 10 clean-error, 11 wrong-output, 12 leak, 20 keepalloc invariant violated, 2
//! setup or usage error. With exit 20 the object's
//! `violations` names each broken check by its kind (`owners`, `registrations`,
//! `alloc-accounting`, `free-accounting`, `live-accounting`, `scribble`, `owner-bypassed`,
//! and in the registration stage `registration-failed`, `different-allocators`,
//! `refusal-count`, `register-calls`), so that a control is judged by its own signature.
//!
//! `--refuse-registrations K`: ONNX Runtime's `RegisterAllocator` refuses its first K calls
//! (interposed at the OrtApi boundary, `keepalloc_onnxruntime::interpose`; the refusals are
//! real `OrtStatus` objects), while N threads register at once and retry until they succeed.
//! Extra invariants: every thread ends registered, `RegisterAllocator` saw exactly K + 1
//! calls, all with the same `OrtAllocator*` (the face), and one owner was constructed.
//!
//! Negative control `--control foreign-allocator`: after keepalloc's registration, another
//! CPU `OrtAllocator` (64-byte-aligned `aligned_alloc`) is registered on the env, which in ONNX Runtime 1.32
//! replaces keepalloc's; the sessions' allocations then bypass the owner and the run must end
//! with exit code 20 and `violations: ["owner-bypassed"]` (the check "sessions ran but never
//! allocated through the owner"), nothing else. `foreign_allocator_calls` counts the calls
//! the other allocator received: the witness, independent of keepalloc's counters, that the
//! sessions really allocated elsewhere.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use allocator_api2::alloc::AllocError;
use keepalloc_allocators::System;
use keepalloc_fault_inject::{AllocPlan, Failing, Policy, Scribble, ScribbleConfig};
use keepalloc_onnxruntime::{
    Env, EnvAllocator, OnnxRuntime, Session, SessionConfig, Tensor, interpose,
    register_env_allocator, sample_inputs,
};
use keepalloc_provider::GlobalProvider;

type Backend = Failing<Scribble<System>>;

/// Owners constructed, counted in the constructor (not by the cell being judged).
static CONSTRUCTED: AtomicU64 = AtomicU64::new(0);

fn make_backend() -> Result<Backend, AllocError> {
    CONSTRUCTED.fetch_add(1, Relaxed);
    Ok(Failing::new(Scribble::new(
        System,
        ScribbleConfig::DEFAULT.with_policy(Policy::Record),
    )))
}

static OWNER: GlobalProvider<Backend> = GlobalProvider::new(make_backend, None);

const EXIT_OK: i32 = 0;
const EXIT_CLEAN_ERROR: i32 = 10;
const EXIT_WRONG_OUTPUT: i32 = 11;
const EXIT_LEAK: i32 = 12;
const EXIT_KEEPALLOC: i32 = 20;
const EXIT_SETUP: i32 = 2;

/// The kind of the check "sessions ran but never allocated through the owner": the signature
/// of the negative control (`xtask/src/ort_campaign.rs` names the same string).
const OWNER_BYPASSED: &str = "owner-bypassed";

struct Args {
    ort: PathBuf,
    model: PathBuf,
    plan: AllocPlan,
    plan_text: String,
    threads: usize,
    control: bool,
    refusals: u32,
}

fn parse_plan(text: &str) -> Option<AllocPlan> {
    let (kind, value) = text.split_once(':').unwrap_or((text, ""));
    Some(match kind {
        "never" => AllocPlan::Never,
        "nth" => AllocPlan::Nth(value.parse().ok()?),
        "from" => AllocPlan::From(value.parse().ok()?),
        "budget" => AllocPlan::Budget(value.parse().ok()?),
        "probability" => {
            let (p, seed) = value.split_once('@')?;
            AllocPlan::Probability {
                p: p.parse().ok()?,
                seed: seed.parse().ok()?,
            }
        }
        _ => return None,
    })
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut ort, mut model, mut plan, mut threads, mut control) = (None, None, None, 1, false);
    let mut refusals = 0;
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--ort" => ort = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--plan" => plan = Some(value()?),
            "--threads" => {
                threads = value()?
                    .parse()
                    .map_err(|_| "--threads takes a number".to_string())?
            }
            "--refuse-registrations" => {
                refusals = value()?
                    .parse()
                    .map_err(|_| "--refuse-registrations takes a number".to_string())?
            }
            "--control" => {
                let c = value()?;
                if c != "foreign-allocator" {
                    return Err(format!("unknown control `{c}`"));
                }
                control = true;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let plan_text = plan.ok_or("--plan is required")?;
    Ok(Args {
        ort: ort.ok_or("--ort is required")?,
        model: model.ok_or("--model is required")?,
        plan: parse_plan(&plan_text).ok_or(format!("bad plan `{plan_text}`"))?,
        plan_text,
        threads: threads.max(1),
        control,
        refusals,
    })
}

/// Prints the result line and exits.
fn finish(
    args: Option<&Args>,
    outcome: &str,
    code: i32,
    detail: &str,
    extra: serde_json::Value,
) -> ! {
    let mut line = serde_json::json!({
        "outcome": outcome,
        "exit": code,
        "detail": detail,
    });
    if let Some(a) = args {
        line["model"] = a.model.display().to_string().into();
        line["plan"] = a.plan_text.clone().into();
        line["threads"] = a.threads.into();
        line["control"] = a.control.into();
        line["refused_registrations"] = a.refusals.into();
    }
    if let (Some(obj), serde_json::Value::Object(more)) = (line.as_object_mut(), extra) {
        obj.extend(more);
    }
    println!("{line}");
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// Marks the stage reached, so that the parent can say where a crash or a hang happened.
fn stage(name: &str) {
    println!("stage {name}");
    let _ = std::io::stdout().flush();
}

/// The line [`mark_injected`] writes: the parent reads a run whose plan could fail
/// allocations as one that did only when it is there (a crash leaves no result line to say).
const INJECTED: &[u8] = b"injected\n";

/// Called by the backend on the first allocation it refuses, before the refusal returns, so
/// the line is on the pipe before anything ONNX Runtime does with the NULL. One `write(2)` of
/// a whole line to fd 1, without Rust's stdout lock or buffer: it runs inside an allocation
/// call, on whichever thread made it, and must not allocate or wait for a lock.
fn mark_injected() {
    use std::os::fd::FromRawFd;
    // SAFETY: fd 1 is this process's stdout for its whole life; `ManuallyDrop` never closes it.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let _ = out.write_all(INJECTED);
}

mod foreign {
    use super::*;
    use keepalloc_onnxruntime::ffi::{OrtAllocator, OrtMemoryInfo};

    #[repr(C)]
    pub struct Foreign {
        pub ort: OrtAllocator,
        pub info: *const OrtMemoryInfo,
    }
    pub static CALLS: AtomicU64 = AtomicU64::new(0);
    unsafe extern "C" {
        fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
        fn free(p: *mut c_void);
    }
    pub unsafe extern "system" fn alloc(_: *mut OrtAllocator, size: usize) -> *mut c_void {
        CALLS.fetch_add(1, Relaxed);
        // ONNX Runtime's kernels assume 64-byte-aligned buffers (MLAS uses aligned AVX-512
        // loads), so the control's allocator must give them too, or it would crash instead
        // of merely bypassing the owner.
        let size = size.max(1).div_ceil(64) * 64;
        // SAFETY: a power-of-two alignment and a size that is a multiple of it (C11).
        unsafe { aligned_alloc(64, size) }
    }
    pub unsafe extern "system" fn release(_: *mut OrtAllocator, p: *mut c_void) {
        // SAFETY: `p` came from `alloc` (aligned_alloc) or is NULL.
        unsafe { free(p) }
    }
    pub unsafe extern "system" fn info(this: *const OrtAllocator) -> *const OrtMemoryInfo {
        // SAFETY: `this` is the first field of a live (leaked) `Foreign`.
        unsafe { (*(this as *const Foreign)).info }
    }
}

/// Registers keepalloc's owner on `env` from `args.threads` threads at once, each retrying a
/// refused registration (at most 100 times); exits with 20 when keepalloc's rule is broken.
fn register(args: &Args, env: &'static Env) {
    let violation = |kind: &str, detail: String| -> ! {
        finish(
            Some(args),
            "keepalloc-violation",
            EXIT_KEEPALLOC,
            &detail,
            serde_json::json!({ "violations": [kind] }),
        )
    };
    let barrier = Barrier::new(args.threads);
    let outcomes: Vec<Result<(usize, u32), String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut refused = 0;
                    let refusal = interpose::REFUSAL.to_str().unwrap_or_default();
                    for _ in 0..100 {
                        match register_env_allocator(&OWNER, env) {
                            Ok(h) => return Ok((h.context() as usize, refused)),
                            Err(e) if args.refusals > 0 && e.to_string().contains(refusal) => {
                                refused += 1;
                            }
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                    Err("still refused after 100 attempts".to_owned())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut contexts = Vec::new();
    let mut refused = 0;
    for o in outcomes {
        match o {
            Ok((context, r)) => {
                contexts.push(context);
                refused += r;
            }
            Err(e) => violation("registration-failed", format!("registration failed: {e}")),
        }
    }
    if contexts.iter().any(|&c| c != contexts[0]) {
        violation(
            "different-allocators",
            format!("callers got different allocators: {contexts:x?}"),
        );
    }
    if refused != args.refusals {
        violation(
            "refusal-count",
            format!(
                "{refused} callers saw a refusal, {} were injected",
                args.refusals
            ),
        );
    }
    if args.refusals > 0 {
        let calls = interpose::register_calls();
        let face = EnvAllocator::get().map(|f| f.as_ort() as usize);
        if calls.len() != args.refusals as usize + 1
            || calls.iter().any(|c| Some(c.allocator) != face)
        {
            violation(
                "register-calls",
                format!(
                    "RegisterAllocator calls {calls:?}: expected {} with the face {face:x?}",
                    args.refusals + 1
                ),
            );
        }
    }
    let owners = CONSTRUCTED.load(Relaxed);
    if owners != 1 {
        violation("owners", format!("{owners} owners constructed"));
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => finish(None, "usage", EXIT_SETUP, &e, serde_json::json!({})),
    };
    let args = &args;
    let setup = |what: &str, e: String| -> ! {
        finish(
            Some(args),
            "setup-error",
            EXIT_SETUP,
            &format!("{what}: {e}"),
            serde_json::json!({}),
        )
    };
    stage("load");
    // SAFETY: `--ort` is an ONNX Runtime library by this binary's contract (module docs): `cargo xtask fault-test` passes the one its manifest names, libonnxruntime.so from the pinned wheel `cargo xtask runtimes` hash-checked.
    let real = unsafe { OnnxRuntime::load(Some(&args.ort)) }
        .unwrap_or_else(|e| setup("load", e.to_string()));
    let ort = if args.refusals > 0 {
        interpose::refusing_registrations(real, args.refusals).1
    } else {
        real
    };
    let env =
        Env::create(ort, c"keepalloc-ort-child").unwrap_or_else(|e| setup("env", e.to_string()));
    stage("register");
    register(args, env);
    if args.control {
        let api = ort.api();
        let mut info = core::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe {
            (api.CreateCpuMemoryInfo)(
                keepalloc_onnxruntime::ffi::OrtAllocatorType::OrtDeviceAllocator,
                keepalloc_onnxruntime::ffi::OrtMemType::OrtMemTypeDefault,
                &mut info,
            )
        };
        ort.check(st, "CreateCpuMemoryInfo")
            .unwrap_or_else(|e| setup("control", e.to_string()));
        let other: &'static mut foreign::Foreign = Box::leak(Box::new(foreign::Foreign {
            ort: keepalloc_onnxruntime::ffi::OrtAllocator {
                version: keepalloc_onnxruntime::ORT_API_VERSION,
                Alloc: Some(foreign::alloc),
                Free: Some(foreign::release),
                Info: Some(foreign::info),
                Reserve: None,
            },
            info,
        }));
        // SAFETY: live env; `other` is complete and never dropped.
        let st = unsafe { (api.RegisterAllocator)(env.as_ptr(), &mut other.ort) };
        ort.check(st, "RegisterAllocator")
            .unwrap_or_else(|e| setup("control", e.to_string()));
    }
    let owner = OWNER
        .constructed_owner()
        .expect("registered, so the owner exists");
    let failing = owner.allocator().inner();
    let scribble = failing.inner();
    let face = EnvAllocator::get().expect("registered, so the face exists");

    stage("reference");
    let reference_session = Session::new(
        env,
        &args.model,
        SessionConfig {
            use_env_allocators: false,
            intra_op_threads: 1,
        },
    )
    .unwrap_or_else(|e| setup("reference session", e.to_string()));
    let inputs = sample_inputs(&reference_session, 7);
    let reference = reference_session
        .run(&mut inputs.clone())
        .unwrap_or_else(|e| setup("reference run", e.to_string()));
    drop(reference_session);

    let base_owner = owner.allocator().stats();
    let base_face = face.stats();
    stage("armed");
    failing.on_first_failure(mark_injected);
    failing.arm(args.plan);
    let barrier = Arc::new(Barrier::new(args.threads));
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let barrier = barrier.clone();
            let model = args.model.clone();
            let mut inputs = inputs.clone();
            std::thread::spawn(move || -> Result<Vec<Tensor>, String> {
                barrier.wait();
                let session = Session::new(env, &model, SessionConfig::default())
                    .map_err(|e| e.to_string())?;
                stage("run");
                let out = session.run(&mut inputs).map_err(|e| e.to_string());
                stage("release");
                drop(session);
                out
            })
        })
        .collect();
    let results: Vec<Result<Vec<Tensor>, String>> = workers
        .into_iter()
        .map(|w| w.join().unwrap_or_else(|_| Err("worker panicked".into())))
        .collect();
    let refused = failing.failures();
    let calls = failing.calls();
    failing.disarm();
    stage("judge");

    let owner_now = owner.allocator().stats();
    let face_now = face.stats();
    let violations = scribble.violations().len() + scribble.verify_quarantine();
    let mut figures = serde_json::json!({
        "allocation_calls": calls,
        "refused": refused,
        "face_allocs": face_now.allocs - base_face.allocs,
        "face_nulls": face_now.nulls - base_face.nulls,
        "owner_allocations": owner_now.allocations - base_owner.allocations,
        "live_blocks_after": face_now.live_blocks - base_face.live_blocks,
        "live_bytes_after": face_now.live_bytes as i64 - base_face.live_bytes as i64,
        "foreign_allocator_calls": foreign::CALLS.load(Relaxed),
    });

    // keepalloc's invariants, each broken one as (kind, detail).
    let mut broken: Vec<(&str, String)> = Vec::new();
    if CONSTRUCTED.load(Relaxed) != 1 || OWNER.stats().owners_constructed != 1 {
        broken.push((
            "owners",
            format!("{} owners constructed", CONSTRUCTED.load(Relaxed)),
        ));
    }
    let registrations = OWNER
        .library_stats(keepalloc_onnxruntime::LIBRARY)
        .map_or(0, |s| s.init_successes);
    if registrations != 1 {
        broken.push(("registrations", "not exactly one registration".into()));
    }
    let face_allocs = face_now.allocs - base_face.allocs;
    let face_frees = face_now.frees - base_face.frees;
    if owner_now.allocations - base_owner.allocations != face_allocs {
        broken.push((
            "alloc-accounting",
            format!(
                "the face handed out {face_allocs} blocks, the owner made {}",
                owner_now.allocations - base_owner.allocations
            ),
        ));
    }
    if owner_now.deallocations - base_owner.deallocations != face_frees {
        broken.push((
            "free-accounting",
            format!(
                "the face took back {face_frees} blocks, the owner freed {}",
                owner_now.deallocations - base_owner.deallocations
            ),
        ));
    }
    let owner_live = owner_now.allocations as i64 - owner_now.deallocations as i64;
    if owner_live != face_now.live_blocks as i64 {
        broken.push((
            "live-accounting",
            format!(
                "the owner holds {owner_live} blocks, the face's ledger {}",
                face_now.live_blocks
            ),
        ));
    }
    if violations != 0 {
        broken.push((
            "scribble",
            format!(
                "Scribble found {violations} violations: {:?}",
                scribble.violations()
            ),
        ));
    }
    if results.iter().any(Result::is_ok) && face_allocs + (face_now.nulls - base_face.nulls) == 0 {
        broken.push((
            OWNER_BYPASSED,
            format!(
                "sessions ran but never allocated through the owner ({} calls went to another allocator)",
                foreign::CALLS.load(Relaxed)
            ),
        ));
    }
    if !broken.is_empty() {
        let kinds: Vec<&str> = broken.iter().map(|(kind, _)| *kind).collect();
        let details: Vec<&str> = broken.iter().map(|(_, detail)| detail.as_str()).collect();
        figures["violations"] = kinds.into();
        finish(
            Some(args),
            "keepalloc-violation",
            EXIT_KEEPALLOC,
            &details.join("; "),
            figures,
        );
    }

    // ONNX Runtime's behaviour.
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    if face_now.live_blocks != base_face.live_blocks {
        let detail = format!(
            "{} blocks ({} bytes) still held by ONNX Runtime after every session was released{}",
            face_now.live_blocks - base_face.live_blocks,
            face_now.live_bytes - base_face.live_bytes,
            errors
                .first()
                .map(|e| format!("; error: {e}"))
                .unwrap_or_default()
        );
        finish(Some(args), "leak", EXIT_LEAK, &detail, figures);
    }
    if results
        .iter()
        .any(|r| r.as_ref().is_ok_and(|out| *out != reference))
    {
        finish(
            Some(args),
            "wrong-output",
            EXIT_WRONG_OUTPUT,
            "output differs from the reference",
            figures,
        );
    }
    if let Some(e) = errors.first() {
        finish(Some(args), "clean-error", EXIT_CLEAN_ERROR, e, figures);
    }
    finish(Some(args), "ok", EXIT_OK, "", figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replay commands print plans with `AllocPlan`'s `Display`; each must parse back.
    #[test]
    fn every_printed_plan_parses_back() {
        for plan in [
            AllocPlan::Never,
            AllocPlan::Nth(3),
            AllocPlan::From(7),
            AllocPlan::Budget(4096),
            AllocPlan::Probability { p: 0.25, seed: 5 },
        ] {
            assert_eq!(parse_plan(&plan.to_string()), Some(plan), "{plan}");
        }
        assert_eq!(parse_plan("nth:x"), None);
        assert_eq!(parse_plan("probability:0.5"), None);
        assert_eq!(parse_plan("sometimes"), None);
    }
}
