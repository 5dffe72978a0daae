//! The child side of `cargo xtask fault-explore`: one target (a library driven through
//! keepalloc's table) run once in this fresh process under one `KEEPALLOC_FAIL` plan, its
//! outcome printed as one `KEEPALLOC_EXPLORE {json}` line on stdout.
//!
//! The table's backend is a [`SiteFailing`] over `System`: it records each allocation
//! call's site, fails the ones the plan names, and tracks the live blocks by site. After
//! the target tore everything down, the blocks still live are reported with their sites; a
//! crash prints its faulting stack (`crash`) before the signal ends the process.

pub mod crash;
mod kernels;
pub mod onnxruntime;
mod xnnpack;

#[cfg(feature = "explore-controls")]
mod controls;

use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_scribble::sites::{FailSpec, SiteFailing, SiteRecord, caller_frames};

/// The allocator every target allocates through.
pub static EXPLORER: SiteFailing<System> = SiteFailing::new(System);

/// The table over [`EXPLORER`], the one the targets hand to their libraries.
pub static TABLE: AllocatorTable = AllocatorTable::for_allocator(&EXPLORER);

/// The environment variable that carries the plan (`KEEPALLOC_FAIL`'s grammar).
pub const SPEC_ENV: &str = "KEEPALLOC_FAIL";

/// The targets this build has.
pub fn targets() -> Vec<&'static str> {
    let mut t = vec![
        "xnnpack-fc",
        "xnnpack-conv",
        "xnnpack-subgraph",
        "kernels",
        "onnxruntime",
    ];
    if cfg!(feature = "explore-controls") {
        t.extend(["control-leak", "control-null"]);
    }
    t
}

/// How a target's run went, as the target saw it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The first error a library call returned (the target stops there and tears down).
    pub error: Option<String>,
    /// Whether the outputs computed matched the reference (None: nothing was computed).
    pub output_ok: Option<bool>,
}

impl From<Result<bool, String>> for Outcome {
    /// A run that computed outputs, right (`Ok(true)`) or wrong, or that stopped at an error
    /// before computing anything.
    fn from(result: Result<bool, String>) -> Outcome {
        match result {
            Ok(ok) => Outcome {
                error: None,
                output_ok: Some(ok),
            },
            Err(e) => Outcome {
                error: Some(e),
                output_ok: None,
            },
        }
    }
}

/// Runs `target`; `Err` for an unknown one.
pub fn run(target: &str) -> Result<Outcome, String> {
    match target {
        "kernels" => Ok(kernels::run(&TABLE)),
        "onnxruntime" => onnxruntime::run(),
        "xnnpack-fc" => xnnpack::fc(&TABLE),
        "xnnpack-conv" => xnnpack::conv(&TABLE),
        "xnnpack-subgraph" => xnnpack::subgraph(&TABLE),
        #[cfg(feature = "explore-controls")]
        "control-leak" => Ok(controls::leak(&TABLE)),
        #[cfg(feature = "explore-controls")]
        "control-null" => Ok(controls::null(&TABLE)),
        _ => Err(format!(
            "unknown target {target:?}; this build has {}",
            targets().join(", ")
        )),
    }
}

fn site_json(r: &SiteRecord, with_stack: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "site": r.site.to_string(),
        "hits": r.hits,
        "failed": r.failed,
    });
    if with_stack {
        v["stack"] = caller_frames(&r.stack).into();
    }
    v
}

/// The line the parent reads: the plan, the outcome, every site (with its symbolized stack
/// in `list` mode, and for the failed ones), the live blocks by site.
pub fn report(target: &str, spec: FailSpec, outcome: &Outcome) -> String {
    let sites = EXPLORER.sites();
    let list = spec == FailSpec::List;
    let live: Vec<serde_json::Value> = EXPLORER
        .live()
        .into_iter()
        .map(|l| {
            let stack = sites
                .iter()
                .find(|r| r.site == l.site)
                .map(|r| caller_frames(&r.stack))
                .unwrap_or_default();
            serde_json::json!({
                "site": l.site.to_string(),
                "blocks": l.blocks,
                "bytes": l.bytes,
                "stack": stack,
            })
        })
        .collect();
    let json = serde_json::json!({
        "target": target,
        "spec": format!("{spec:?}"),
        "error": outcome.error,
        "output_ok": outcome.output_ok,
        "failed": EXPLORER.failed(),
        "sites": sites.iter().map(|r| site_json(r, list || r.failed > 0)).collect::<Vec<_>>(),
        "live": live,
    });
    format!("KEEPALLOC_EXPLORE {json}")
}
