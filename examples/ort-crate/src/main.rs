//! keepalloc on the `ort` crate's ONNX Runtime: registers keepalloc's owner as the env
//! allocator of `ort`'s environment, runs 8 concurrent sessions with
//! `session.use_env_allocators=1` on a real model, checks their outputs against a session on
//! ONNX Runtime's own allocator, and checks that the owner saw allocations and that its live
//! bytes are back to zero once the sessions are dropped. Exits non-zero on any failure.
//!
//! The library is the pinned wheel's (`target/runtimes/runtimes.json`, written by
//! `cargo xtask runtimes`), or `$ORT_DYLIB_PATH`; the model is given as the first argument or
//! is keepalloc's generated `fc_matmul_add_8x256x128.onnx`.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Barrier;

use keepalloc::onnxruntime::{EnvAllocator, register_with};
use keepalloc::{GlobalProvider, System};
use keepalloc_testkit::runtimes;
use ort::AsPointer;
use ort::session::Session;
use ort::value::{Tensor, ValueType};

/// The process-wide owner ONNX Runtime allocates through.
static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);

const SESSIONS: usize = 8;
const RUNS_PER_SESSION: usize = 20;

type Outputs = Vec<(String, Vec<i64>, Vec<f32>)>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ort example: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn library() -> Result<PathBuf, Box<dyn Error>> {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        return Ok(PathBuf::from(p));
    }
    let rt = runtimes::load()
        .map_err(|e| format!("{e}; run `cargo xtask runtimes` or set ORT_DYLIB_PATH"))?;
    Ok(rt.onnxruntime)
}

fn model() -> Result<PathBuf, Box<dyn Error>> {
    if let Some(p) = std::env::args_os().nth(1) {
        return Ok(PathBuf::from(p));
    }
    runtimes::generated_models()
        .remove("fc_matmul_add_8x256x128")
        .ok_or_else(|| "keepalloc's generated model fc_matmul_add_8x256x128.onnx is missing".into())
}

/// The model's inputs, filled with deterministic values in [-1, 1].
fn inputs(session: &Session) -> Result<Vec<Tensor<f32>>, Box<dyn Error>> {
    let mut out = Vec::new();
    for (k, input) in session.inputs().iter().enumerate() {
        let ValueType::Tensor { shape, .. } = input.dtype() else {
            return Err(format!("input {} is not a tensor", input.name()).into());
        };
        let shape: Vec<i64> = shape.iter().map(|&d| d.max(1)).collect();
        let count: i64 = shape.iter().product();
        let data: Vec<f32> = (0..count as u32)
            .map(|i| {
                ((i.wrapping_mul(2_654_435_761) ^ (k as u32 * 97)) % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        out.push(Tensor::from_array((shape, data))?);
    }
    Ok(out)
}

fn run_once(session: &mut Session) -> Result<Outputs, Box<dyn Error>> {
    let values = inputs(session)?;
    let names: Vec<String> = session
        .inputs()
        .iter()
        .map(|i| i.name().to_owned())
        .collect();
    let feed: Vec<(String, Tensor<f32>)> = names.into_iter().zip(values).collect();
    let outputs = session.run(feed)?;
    let mut out = Vec::new();
    for (name, value) in outputs.iter() {
        let (shape, data) = value.try_extract_tensor::<f32>()?;
        out.push((name.to_owned(), shape.to_vec(), data.to_vec()));
    }
    Ok(out)
}

fn run() -> Result<(), Box<dyn Error>> {
    let library = library()?;
    let model = model()?;
    let env = ort::init_from(&library)?
        .with_name("keepalloc-ort-example")
        .build()?;
    // ONNX Runtime keeps a registered allocator for as long as the env lives, and keepalloc
    // registers once per process: the env is never released.
    std::mem::forget(env.clone());

    // The reference: a session on ONNX Runtime's own allocator, before keepalloc is registered.
    let expected = {
        let mut session = Session::builder(&env)?
            .with_config_entry("session.use_env_allocators", "0")?
            .with_intra_threads(1)?
            .commit_from_file(&model)?;
        run_once(&mut session)?
    };
    if expected.is_empty() {
        return Err("the model has no float output".into());
    }

    // SAFETY: `ort::api()` is the OrtApi of the ONNX Runtime `ort` loaded, which stays loaded; `env` is that runtime's live env, never released (forgotten above).
    let handle = unsafe {
        register_with(
            &ALLOCATOR,
            core::ptr::from_ref(ort::api()).cast(),
            env.ptr().cast_mut().cast(),
        )
    }?;
    let before = handle.stats();

    let barrier = Barrier::new(SESSIONS);
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..SESSIONS)
            .map(|_| {
                s.spawn(|| -> Result<usize, String> {
                    let mut session = Session::builder(&env)
                        .and_then(|b| Ok(b.with_config_entry("session.use_env_allocators", "1")?))
                        .and_then(|b| Ok(b.with_intra_threads(1)?))
                        .map_err(|e| e.to_string())?;
                    barrier.wait();
                    let mut session = session
                        .commit_from_file(&model)
                        .map_err(|e| e.to_string())?;
                    let mut mismatches = 0;
                    for _ in 0..RUNS_PER_SESSION {
                        let got = run_once(&mut session).map_err(|e| e.to_string())?;
                        mismatches += usize::from(got != expected);
                    }
                    Ok(mismatches)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a session thread panicked".into()))
            })
            .collect()
    });
    // Every session is dropped (with its thread) by now.
    let after = handle.stats();
    let face = EnvAllocator::get()
        .ok_or("no OrtAllocator face was registered")?
        .stats();

    let mut mismatches = 0;
    for r in results {
        mismatches += r?;
    }
    println!(
        "ort example: ONNX Runtime from {}, model {}",
        library.display(),
        model.display()
    );
    println!(
        "ort example: {SESSIONS} sessions x {RUNS_PER_SESSION} runs, {mismatches} outputs differ from ONNX Runtime's own allocator's"
    );
    println!(
        "ort example: owner allocations {} (before the sessions {}), peak {} bytes, live bytes {} after the sessions were dropped (before {}); OrtAllocator face: {} allocs, {} frees, {} live blocks",
        after.allocations,
        before.allocations,
        after.peak_bytes,
        after.live_bytes,
        before.live_bytes,
        face.allocs,
        face.frees,
        face.live_blocks
    );
    if mismatches != 0 {
        return Err(format!("{mismatches} runs differ from the reference outputs").into());
    }
    if after.allocations <= before.allocations || face.allocs == 0 {
        return Err("the sessions did not allocate through keepalloc's owner".into());
    }
    if after.live_bytes != 0 || face.live_blocks != 0 {
        return Err(format!(
            "{} bytes ({} blocks) still live in the owner after every session was dropped",
            after.live_bytes, face.live_blocks
        )
        .into());
    }
    println!("ort example: ok");
    Ok(())
}
