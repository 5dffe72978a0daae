//! Target `onnxruntime`: ONNX Runtime's env allocator is keepalloc's owner over the
//! explorer's table backend; a reference output is computed first on ONNX Runtime's own
//! allocator (untouched: its blocks never reach the explorer), then one session on the env
//! allocator is created, run and released. `KEEPALLOC_EXPLORE_ORT` names the ONNX Runtime
//! library (the pinned wheel's, from `cargo xtask runtimes`), `KEEPALLOC_EXPLORE_MODEL` the
//! model.

use std::path::PathBuf;

use keepalloc_onnxruntime::{
    Env, OnnxRuntime, Session, SessionConfig, register_env_allocator, sample_inputs,
};
use keepalloc_provider::GlobalProvider;
use keepalloc_scribble::sites::SiteFailing;

use super::{EXPLORER, Outcome};
use keepalloc_allocators::System;

/// The env allocator's owner: a provider over the explorer's backend (by reference, so the
/// sites and live blocks are the explorer's).
static OWNER: GlobalProvider<&'static SiteFailing<System>> =
    GlobalProvider::new(|| Ok(&EXPLORER), None);

/// The library and model variables.
pub const ORT_ENV: &str = "KEEPALLOC_EXPLORE_ORT";
/// See [`ORT_ENV`].
pub const MODEL_ENV: &str = "KEEPALLOC_EXPLORE_MODEL";

fn path(var: &str) -> Result<PathBuf, String> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{var} is not set"))
}

/// Runs the target; `Err` is a setup failure (not an outcome of the plan).
pub fn run() -> Result<Outcome, String> {
    let (lib, model) = (path(ORT_ENV)?, path(MODEL_ENV)?);
    // SAFETY: the variable names an ONNX Runtime library of a supported version (this target's contract: `cargo xtask fault-explore` passes the pinned wheel's).
    let ort = unsafe { OnnxRuntime::load(Some(&lib)) }.map_err(|e| format!("load: {e}"))?;
    let env = Env::create(ort, c"keepalloc-explore").map_err(|e| format!("env: {e}"))?;
    let mut outcome = Outcome::default();
    if let Err(e) = register_env_allocator(&OWNER, env) {
        outcome.error = Some(format!("register: {e}"));
        return Ok(outcome);
    }
    let reference_session = Session::new(
        env,
        &model,
        SessionConfig {
            use_env_allocators: false,
            intra_op_threads: 1,
        },
    )
    .map_err(|e| format!("reference session: {e}"))?;
    let inputs = sample_inputs(&reference_session, 7);
    let reference = reference_session
        .run(&mut inputs.clone())
        .map_err(|e| format!("reference run: {e}"))?;
    drop(reference_session);
    let result = Session::new(env, &model, SessionConfig::default()).and_then(|session| {
        let out = session.run(&mut inputs.clone());
        drop(session);
        out
    });
    match result {
        Ok(out) => outcome.output_ok = Some(out == reference),
        Err(e) => outcome.error = Some(e.to_string()),
    }
    Ok(outcome)
}
