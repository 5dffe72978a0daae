//! `cargo xtask fault-explore`: fails every allocation site of a library, one fresh process
//! per site, and says what the library did.
//!
//! The child (`keepalloc-explore`, feature `explore-controls`) runs one target through a
//! table whose backend records each allocation call's site (the hash of its caller frames,
//! `keepalloc_scribble::sites`). A discovery run under `KEEPALLOC_FAIL=list` lists the sites
//! and the blocks still live after an unfailed teardown (the baseline); then each site is
//! failed (`site:HEX`, its first hit or, with `--hits all`, every hit) in a process of its
//! own and classified ([`classify`](mod@classify)): `clean-error`, `leak`, `crash`, `hang`,
//! `wrong-output`, `ignored`. The negative controls run last and must be caught by their
//! own signatures.

mod classify;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use classify::{Live, Outcome, Report, classify, report_of};
use serde::{Deserialize, Serialize};

use crate::process::run_process;
use crate::util;

/// `cargo xtask fault-explore --help`.
pub const LONG_ABOUT: &str = "\
Fails every allocation site of a library driven through keepalloc's table, one fresh process
per site, and classifies what the library did: clean-error (an error, and every block back
after teardown), leak (blocks still live, with their sites), crash (the faulting stack),
hang, wrong-output, ignored (success although the allocation failed). A site is the hash of
the caller's return addresses above keepalloc's frames, module-relative. Every finding
prints the command that reproduces it (--site HASH). The negative controls (keepalloc's FC
operator with a leak on failure and with an unchecked NULL) must be caught by their own
signatures. Ends with `sites: discovered D, failed F, clean C, findings N` and fails when a
discovered site was never failed or a control was missed.";

/// `cargo xtask fault-explore` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Targets to explore (repeatable) [default: every target but the controls].
    #[arg(long = "target", value_name = "T")]
    pub targets: Vec<String>,
    /// Fail each site's first hit, or every hit.
    #[arg(long, default_value = "first", value_parser = ["first", "all"])]
    pub hits: String,
    /// Fail only this site (a hash from a previous run) and print the child's output.
    #[arg(long, value_name = "HASH")]
    pub site: Option<String>,
    /// Write everything as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Reuse the outcomes of this earlier run's JSON for the sites it already explored.
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// Seconds before a child is called hung.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Skip the negative controls.
    #[arg(long)]
    pub no_controls: bool,
    /// The model of the `onnxruntime` target: a generated one in runtimes/onnxruntime/models
    /// or one the ONNX Runtime wheel ships, by file stem.
    #[arg(long, default_value = "fc_matmul_add_8x256x128")]
    pub model: String,
}

/// The environment a target's child needs: for `onnxruntime`, the pinned library and the
/// model (fetching the wheels first).
fn target_env(target: &str, model: &str) -> Result<Vec<(String, String)>, String> {
    if target != "onnxruntime" {
        return Ok(Vec::new());
    }
    let manifest = crate::runtimes::manifest()?;
    let lib = crate::runtimes::onnxruntime_library(&manifest)?;
    let generated = util::root()
        .join("runtimes/onnxruntime/models")
        .join(format!("{model}.onnx"));
    let path = if generated.is_file() {
        generated.display().to_string()
    } else {
        manifest["onnxruntime"]["models"][model]
            .as_str()
            .ok_or_else(|| format!("no model named {model}"))?
            .to_owned()
    };
    Ok(vec![
        ("KEEPALLOC_EXPLORE_ORT".into(), lib.into()),
        ("KEEPALLOC_EXPLORE_MODEL".into(), path),
    ])
}

/// One site's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SiteResult {
    site: String,
    hits: u64,
    stack: Vec<String>,
    #[serde(flatten)]
    outcome: Outcome,
    command: String,
}

/// One target's exploration.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TargetResult {
    target: String,
    hits: String,
    baseline: Vec<Live>,
    results: Vec<SiteResult>,
    seconds: f64,
}

impl TargetResult {
    fn coverage(&self) -> (usize, usize, usize, usize) {
        let d = self.results.len();
        let f = self.results.iter().filter(|r| r.outcome.failed()).count();
        let c = self
            .results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::CleanError { .. }))
            .count();
        let n = self
            .results
            .iter()
            .filter(|r| r.outcome.is_finding())
            .count();
        (d, f, c, n)
    }
}

/// The JSON document.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Document {
    targets: Vec<TargetResult>,
    controls: Vec<ControlResult>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ControlResult {
    control: String,
    caught: bool,
    why: String,
}

/// The child's build: release, with the controls.
const CHILD: &str = "keepalloc-explore";

fn build_child() -> Result<PathBuf, String> {
    let mut cmd = util::cargo();
    cmd.args([
        "build",
        "--release",
        "-p",
        "keepalloc-fault-inject",
        "--features",
        "explore-controls",
        "--bin",
        CHILD,
        "--message-format=json-render-diagnostics",
    ]);
    eprintln!("fault-explore: building {CHILD} (release, feature `explore-controls`)");
    crate::fault_test::executable_from(cmd, CHILD)
}

fn targets_of(child: &Path) -> Result<Vec<String>, String> {
    // The usage line names the targets this build has.
    let out = Command::new(child)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", child.display()))?;
    let usage = String::from_utf8_lossy(&out.stderr);
    let list = usage
        .split("(one of ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| format!("unexpected usage line: {usage}"))?;
    Ok(list.split(", ").map(str::to_owned).collect())
}

/// How to run the child for one target: its path, the target's environment, the deadline.
struct Child<'a> {
    path: &'a Path,
    env: Vec<(String, String)>,
    timeout: Duration,
}

impl Child<'_> {
    fn run(&self, target: &str, spec: &str) -> Result<crate::process::RunEnd, String> {
        let mut cmd = Command::new(self.path);
        cmd.arg(target).env("KEEPALLOC_FAIL", spec);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        run_process(cmd, self.timeout)
    }
}

/// Runs `cargo xtask fault-explore`.
pub fn run(args: Args) -> Result<(), String> {
    let child = build_child()?;
    let available = targets_of(&child)?;
    let is_control = |t: &str| t.starts_with("control-");
    let targets: Vec<String> = if args.targets.is_empty() {
        available
            .iter()
            .filter(|t| !is_control(t))
            .cloned()
            .collect()
    } else {
        for t in &args.targets {
            if !available.contains(t) {
                return Err(format!(
                    "unknown target {t:?}; have {}",
                    available.join(", ")
                ));
            }
        }
        args.targets.clone()
    };
    let timeout = Duration::from_secs(args.timeout);
    let every = args.hits == "all";
    if let Some(site) = &args.site {
        let [target] = targets.as_slice() else {
            return Err("--site needs exactly one --target".into());
        };
        let c = Child {
            path: &child,
            env: target_env(target, &args.model)?,
            timeout,
        };
        return reproduce(&c, target, site, every);
    }
    let earlier: Document = match &args.resume {
        Some(p) => serde_json::from_str(
            &std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )
        .map_err(|e| format!("{}: {e}", p.display()))?,
        None => Document::default(),
    };
    let mut doc = Document::default();
    let mut ok = true;
    for target in &targets {
        let done = earlier
            .targets
            .iter()
            .find(|t| &t.target == target && t.hits == args.hits);
        let c = Child {
            path: &child,
            env: target_env(target, &args.model)?,
            timeout,
        };
        let result = explore(&c, target, every, done)?;
        print_target(&result);
        let (d, f, _, _) = result.coverage();
        ok &= d == f;
        doc.targets.push(result);
    }
    if !args.no_controls {
        for (control, check) in [
            (
                "control-leak",
                leak_signature as fn(&TargetResult) -> Result<String, String>,
            ),
            ("control-null", null_signature),
        ] {
            let c = Child {
                path: &child,
                env: Vec::new(),
                timeout,
            };
            let result = explore(&c, control, false, None)?;
            let (caught, why) = match check(&result) {
                Ok(why) => (true, why),
                Err(why) => (false, why),
            };
            println!(
                "control {control}: {} ({why})",
                if caught { "caught" } else { "MISSED" }
            );
            ok &= caught;
            doc.controls.push(ControlResult {
                control: control.into(),
                caught,
                why,
            });
        }
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("JSON: {}", path.display());
    }
    if ok {
        Ok(())
    } else {
        Err("a discovered site was never failed, or a control was missed".into())
    }
}

/// Discovery, then every site in a fresh process (reusing `done`'s outcomes).
fn explore(
    child: &Child<'_>,
    target: &str,
    every: bool,
    done: Option<&TargetResult>,
) -> Result<TargetResult, String> {
    let start = Instant::now();
    let discovery = child.run(target, "list")?;
    let report: Report = match (&discovery.code, report_of(&discovery.stdout)) {
        (Some(0), Ok(r)) => r,
        (_, r) => {
            return Err(format!(
                "{target}: the discovery run failed ({}): {}{}",
                crate::process::describe_exit(&discovery),
                r.err().unwrap_or_default(),
                discovery.stderr
            ));
        }
    };
    if report.error.is_some() || report.output_ok == Some(false) {
        return Err(format!(
            "{target}: the unfailed run did not succeed: {:?}, output ok {:?}",
            report.error, report.output_ok
        ));
    }
    let mut results = Vec::new();
    for site in &report.sites {
        if let Some(r) = done.and_then(|d| d.results.iter().find(|r| r.site == site.site)) {
            results.push(r.clone());
            continue;
        }
        let spec = spec_of(&site.site, every);
        let end = child.run(target, &spec)?;
        let outcome = classify(&end, &report.live);
        results.push(SiteResult {
            site: site.site.clone(),
            hits: site.hits,
            stack: site.stack.clone(),
            outcome,
            command: command_of(target, &site.site, every),
        });
    }
    Ok(TargetResult {
        target: target.into(),
        hits: if every { "all" } else { "first" }.into(),
        baseline: report.live,
        results,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn spec_of(site: &str, every: bool) -> String {
    if every {
        format!("site:{site},hits:all")
    } else {
        format!("site:{site}")
    }
}

fn command_of(target: &str, site: &str, every: bool) -> String {
    let hits = if every { " --hits all" } else { "" };
    format!("cargo xtask fault-explore --target {target} --site {site}{hits}")
}

/// `--site HASH`: one failing run, its outcome and everything the child printed.
fn reproduce(child: &Child<'_>, target: &str, site: &str, every: bool) -> Result<(), String> {
    let discovery = child.run(target, "list")?;
    let baseline = report_of(&discovery.stdout)
        .map(|r| r.live)
        .unwrap_or_default();
    let end = child.run(target, &spec_of(site, every))?;
    print!("{}", end.stdout);
    eprint!("{}", end.stderr);
    let outcome = classify(&end, &baseline);
    println!("{target} site {site}: {}", describe(&outcome));
    Ok(())
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::CleanError { error } => format!("clean-error ({error})"),
        Outcome::Leak { error, leaked } => {
            let sites: Vec<String> = leaked
                .iter()
                .map(|l| {
                    format!(
                        "{} blocks ({} bytes) from site {} [{}]",
                        l.blocks,
                        l.bytes,
                        l.site,
                        l.stack.first().map_or("?", String::as_str)
                    )
                })
                .collect();
            format!(
                "leak after {}: {}",
                error.as_deref().unwrap_or("success"),
                sites.join("; ")
            )
        }
        Outcome::Crash { signal, stack } => format!(
            "crash ({signal}) in {}",
            stack.first().map_or("??", String::as_str)
        ),
        Outcome::HarnessError { why } => format!("harness-error (inconclusive): {why}"),
        other => other.name().into(),
    }
}

fn print_target(t: &TargetResult) {
    println!("\n== {} ({} hits, {:.1} s)", t.target, t.hits, t.seconds);
    let mut crashes: BTreeMap<Vec<String>, Vec<&SiteResult>> = BTreeMap::new();
    for r in &t.results {
        let at = r.stack.first().map_or("??", String::as_str);
        println!("  {} x{:<3} {:<13} {at}", r.site, r.hits, r.outcome.name());
        if let Outcome::Crash { stack, .. } = &r.outcome {
            crashes
                .entry(stack.iter().take(3).cloned().collect())
                .or_default()
                .push(r);
        }
    }
    let findings: Vec<&SiteResult> = t
        .results
        .iter()
        .filter(|r| r.outcome.is_finding())
        .collect();
    if !findings.is_empty() {
        println!("  findings:");
        for r in findings
            .iter()
            .filter(|r| !matches!(r.outcome, Outcome::Crash { .. }))
        {
            println!("    {}: {}", r.site, describe(&r.outcome));
            println!("      reproduce: {}", r.command);
        }
        for (stack, sites) in &crashes {
            println!(
                "    crash at {} ({} site{})",
                stack.join(" <- "),
                sites.len(),
                if sites.len() == 1 { "" } else { "s" }
            );
            for r in sites {
                println!("      reproduce: {}", r.command);
            }
        }
    }
    for r in t.results.iter().filter(|r| !r.outcome.failed()) {
        println!("  NOT FAILED {}: {}", r.site, describe(&r.outcome));
    }
    let (d, f, c, n) = t.coverage();
    println!("sites: discovered {d}, failed {f}, clean {c}, findings {n}");
}

/// `control-leak` is caught when failing its workspace site leaks exactly the operator's
/// packed-weights site.
fn leak_signature(t: &TargetResult) -> Result<String, String> {
    t.results
        .iter()
        .find_map(|r| match &r.outcome {
            Outcome::Leak { leaked, .. }
                if first_is(&r.stack, "controls::leak")
                    && leaked.len() == 1
                    && leaked[0]
                        .stack
                        .iter()
                        .any(|f| f.contains("FullyConnected::create_with_table")) =>
            {
                Some(format!(
                    "failing site {} leaked site {} (the packed weights)",
                    r.site, leaked[0].site
                ))
            }
            _ => None,
        })
        .ok_or_else(|| {
            format!(
                "no leak of the packed weights when the workspace failed: {}",
                summary(t)
            )
        })
}

/// `control-null` is caught when failing its workspace site crashes with SIGSEGV in the
/// function that wrote through NULL.
fn null_signature(t: &TargetResult) -> Result<String, String> {
    t.results
        .iter()
        .find_map(|r| match &r.outcome {
            Outcome::Crash { signal, stack }
                if signal == "SIGSEGV"
                    && first_is(&r.stack, "control_null_workspace")
                    && first_is(stack, "control_null_workspace") =>
            {
                Some(format!(
                    "failing site {} crashed in control_null_workspace",
                    r.site
                ))
            }
            _ => None,
        })
        .ok_or_else(|| format!("no SIGSEGV in control_null_workspace: {}", summary(t)))
}

fn first_is(stack: &[String], function: &str) -> bool {
    stack.first().is_some_and(|f| f.contains(function))
}

fn summary(t: &TargetResult) -> String {
    t.results
        .iter()
        .map(|r| format!("{} {}", r.site, describe(&r.outcome)))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(stack: &[&str], outcome: Outcome) -> SiteResult {
        SiteResult {
            site: "01".into(),
            hits: 1,
            stack: stack.iter().map(|s| s.to_string()).collect(),
            outcome,
            command: String::new(),
        }
    }

    fn target(results: Vec<SiteResult>) -> TargetResult {
        TargetResult {
            results,
            ..TargetResult::default()
        }
    }

    #[test]
    fn controls_are_caught_only_by_their_own_signature() {
        let packed = Live {
            site: "02".into(),
            blocks: 1,
            bytes: 64,
            stack: vec!["keepalloc_kernels::FullyConnected::create_with_table".into()],
        };
        let leak = target(vec![result(
            &["keepalloc_fault_inject::explore::controls::leak"],
            Outcome::Leak {
                error: Some("oom".into()),
                leaked: vec![packed.clone()],
            },
        )]);
        assert!(leak_signature(&leak).is_ok());
        // A crash, a leak from elsewhere, or a clean error is not the leak control's bug.
        for wrong in [
            result(
                &["x::controls::leak"],
                Outcome::CleanError {
                    error: "oom".into(),
                },
            ),
            result(
                &["other"],
                Outcome::Leak {
                    error: None,
                    leaked: vec![packed.clone()],
                },
            ),
            result(
                &["x::controls::leak"],
                Outcome::Crash {
                    signal: "SIGSEGV".into(),
                    stack: vec!["x::controls::leak".into()],
                },
            ),
        ] {
            assert!(leak_signature(&target(vec![wrong])).is_err());
        }
        let crash = |signal: &str, top: &str| {
            target(vec![result(
                &["control_null_workspace"],
                Outcome::Crash {
                    signal: signal.into(),
                    stack: vec![top.into()],
                },
            )])
        };
        assert!(null_signature(&crash("SIGSEGV", "control_null_workspace at x.rs:1")).is_ok());
        assert!(null_signature(&crash("SIGABRT", "control_null_workspace")).is_err());
        assert!(null_signature(&crash("SIGSEGV", "somewhere_else")).is_err());
        assert!(
            null_signature(&target(vec![result(
                &["control_null_workspace"],
                Outcome::Hang
            )]))
            .is_err()
        );
    }

    #[test]
    fn coverage_counts_failed_clean_and_findings() {
        let t = target(vec![
            result(&[], Outcome::CleanError { error: "e".into() }),
            result(&[], Outcome::Ignored),
            result(&[], Outcome::NotHit),
        ]);
        assert_eq!(t.coverage(), (3, 2, 1, 1));
        assert_eq!(
            command_of("kernels", "ab", true),
            "cargo xtask fault-explore --target kernels --site ab --hits all"
        );
    }
}
