//! Stage 2: the loom models and the short campaign, on stage 1's survivors, each mutant
//! applied to the private copy of the tree.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::mutant::{Mutant, Verdict, check_against_diff, mutate};
use super::parts::LOOM_FILES;

/// Stage 2: the loom models and the short campaign, on a private copy of the tree.
pub(super) struct Extra<'a> {
    tree: &'a Path,
    work: PathBuf,
    logs: PathBuf,
    /// Each command's run timeout, from its baseline run.
    timeouts: BTreeMap<&'static str, Duration>,
}

/// What one command did.
enum Run {
    Passed,
    Failed,
    TimedOut,
}

/// A build that may take this long is still a build (a cold release build of the harness
/// with its kernels is the longest); only a hang gets here.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

impl<'a> Extra<'a> {
    pub(super) fn new(tree: &'a Path, work: &Path) -> Self {
        Extra {
            tree,
            work: work.to_path_buf(),
            logs: work.join("extra"),
            timeouts: BTreeMap::new(),
        }
    }

    /// The command `what` (`loom` or `campaign`) in the copy: `(build, run)`. The build step
    /// is there so that a mutant that does not compile here is not counted as caught.
    fn command(&self, what: &str) -> (Command, Command) {
        let cargo = |args: &[&str]| {
            let mut cmd = Command::new(env!("CARGO"));
            cmd.current_dir(self.tree).args(args);
            if what == "loom" {
                // As `cargo xtask loom` (xtask/src/loom.rs), with its own target directory.
                cmd.env("RUSTFLAGS", crate::loom::RUSTFLAGS)
                    .env("CARGO_TARGET_DIR", self.work.join("loom"));
            } else {
                cmd.env("CARGO_TARGET_DIR", self.work.join("campaign"));
            }
            cmd
        };
        if what == "loom" {
            let mut build = crate::loom::TEST_ARGS.to_vec();
            build.push("--no-run");
            (cargo(&build), cargo(&crate::loom::TEST_ARGS))
        } else {
            // The harness as `cargo xtask fault-test` builds it (release, feature `controls`),
            // so that the campaign's own build of it is then a no-op.
            let build = crate::fault_test::HARNESS_BUILD_ARGS;
            let json = self.campaign_json();
            let mut campaign = cargo(&[
                "xtask",
                "fault-test",
                "--variant",
                "keepalloc",
                "--runs",
                "3",
                "--json",
            ]);
            campaign.arg(json);
            (cargo(&build), campaign)
        }
    }

    /// Where the campaign writes its report (read by [`campaign_found`]).
    fn campaign_json(&self) -> PathBuf {
        self.work.join("campaign.json")
    }

    /// Both commands must pass on the unmutated copy, or a failure says nothing about a
    /// mutant. Their run times (without the builds) set the mutants' timeouts.
    pub(super) fn baseline(&mut self, needs_loom: bool) -> Result<(), String> {
        // This run's logs only.
        if self.logs.exists() {
            fs::remove_dir_all(&self.logs)
                .map_err(|e| format!("remove {}: {e}", self.logs.display()))?;
        }
        fs::create_dir_all(&self.logs)
            .map_err(|e| format!("create {}: {e}", self.logs.display()))?;
        let commands: &[&'static str] = if needs_loom {
            &["loom", "campaign"]
        } else {
            &["campaign"]
        };
        for &what in commands {
            println!("xtask mutants: stage 2 baseline: {what} on the unmutated tree");
            let (mut build, mut run) = self.command(what);
            let log = self.logs.join(format!("baseline.{what}.build.log"));
            if !matches!(run_logged(&mut build, &log, BUILD_TIMEOUT)?, Run::Passed) {
                return Err(format!(
                    "the {what} build fails on the unmutated tree: see {}",
                    log.display()
                ));
            }
            let log = self.logs.join(format!("baseline.{what}.log"));
            let t = Instant::now();
            if !matches!(run_logged(&mut run, &log, BUILD_TIMEOUT)?, Run::Passed) {
                return Err(format!(
                    "{what} fails on the unmutated tree: see {}",
                    log.display()
                ));
            }
            self.timeouts.insert(what, timeout_after(t.elapsed()));
        }
        Ok(())
    }

    /// Applies `m` to the copy, runs loom (when it sees the file) then the campaign, restores
    /// the file, and updates the verdict.
    pub(super) fn test(&self, m: &mut Mutant) -> Result<(), String> {
        let path = self.tree.join(&m.file);
        let original =
            fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let mutated = mutate(&original, m.span, &m.replacement);
        check_against_diff(m, &mutated)?;
        fs::write(&path, &mutated).map_err(|e| format!("write {}: {e}", path.display()))?;
        let result = self.test_applied(m);
        fs::write(&path, &original).map_err(|e| format!("restore {}: {e}", path.display()))?;
        result
    }

    fn test_applied(&self, m: &mut Mutant) -> Result<(), String> {
        let slug: String = m
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(120)
            .collect();
        let mut commands = Vec::new();
        if LOOM_FILES.contains(&m.file.as_str()) {
            commands.push("loom");
        }
        commands.push("campaign");
        let mut timed_out = false;
        for what in commands {
            let (mut build, mut run) = self.command(what);
            let log = self.logs.join(format!("{slug}.{what}.build.log"));
            match run_logged(&mut build, &log, BUILD_TIMEOUT)? {
                Run::Passed => {}
                Run::Failed => {
                    println!("unviable {} under {what}: it does not build", m.name);
                    continue;
                }
                Run::TimedOut => {
                    println!("TIMEOUT  {} building for {what}", m.name);
                    timed_out = true;
                    continue;
                }
            }
            let log = self.logs.join(format!("{slug}.{what}.log"));
            let t = Instant::now();
            let timeout = self.timeouts[what];
            if what == "campaign" {
                // A report left by an earlier mutant must not speak for this one.
                let _ = fs::remove_file(self.campaign_json());
            }
            let outcome = run_logged(&mut run, &log, timeout)?;
            let secs = t.elapsed().as_secs();
            match outcome {
                // The campaign also fails on runs that prove nothing (a hung run, a harness
                // error): only a finding in a keepalloc row catches a mutant.
                Run::Failed if what == "campaign" && !campaign_found(&self.campaign_json()) => {
                    println!(
                        "TIMEOUT  {} under the campaign after {secs}s: it failed on \
                         inconclusive runs only (no finding; see {})",
                        m.name,
                        log.display()
                    );
                    timed_out = true;
                }
                Run::Failed => {
                    println!("CAUGHT   {} by {what} in {secs}s", m.name);
                    m.verdict = Verdict::Caught;
                    m.caught_by = Some(what);
                    return Ok(());
                }
                Run::TimedOut => {
                    println!("TIMEOUT  {} under {what} after {secs}s", m.name);
                    timed_out = true;
                }
                Run::Passed => println!("passed   {} under {what} in {secs}s", m.name),
            }
        }
        if timed_out {
            m.verdict = Verdict::Timeout;
        }
        Ok(())
    }
}

/// Whether the campaign report at `path` holds a finding in a keepalloc (non-control) row:
/// a detection its witnesses named, not only inconclusive runs (timeouts, harness errors,
/// which the campaign also counts against keepalloc). No report, or one that cannot be read,
/// is no finding.
fn campaign_found(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    let Ok(report) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    report["rows"].as_array().is_some_and(|rows| {
        rows.iter().any(|r| {
            r["control"] == Value::Bool(false)
                && r["detections"]
                    .as_object()
                    .is_some_and(|d| d.values().any(|n| n.as_u64().is_some_and(|n| n > 0)))
        })
    })
}

/// A mutant's run timeout from the baseline's run time: generous, since it only stops a hang
/// (the campaign's harness kills a hung run itself after 60 s).
fn timeout_after(baseline: Duration) -> Duration {
    (baseline * 5).max(Duration::from_secs(120))
}

/// Runs `cmd` with its output in `log`, killing its whole process group after `timeout`.
fn run_logged(cmd: &mut Command, log: &Path, timeout: Duration) -> Result<Run, String> {
    let file = fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("clone {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            return Ok(if status.success() {
                Run::Passed
            } else {
                Run::Failed
            });
        }
        if Instant::now() >= deadline {
            // The process group we created for this child: cargo, the test binaries, harnesses.
            #[cfg(unix)]
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let _ = writeln!(
                fs::OpenOptions::new()
                    .append(true)
                    .open(log)
                    .map_err(|e| e.to_string())?,
                "xtask mutants: killed after {}s",
                timeout.as_secs()
            );
            return Ok(Run::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_finding_in_a_keepalloc_row_catches_a_mutant() {
        let dir = std::env::temp_dir().join(format!("keepalloc-mutants-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let report = |rows: Value| {
            let path = dir.join("campaign.json");
            fs::write(
                &path,
                serde_json::json!({ "passed": false, "rows": rows }).to_string(),
            )
            .unwrap();
            campaign_found(&path)
        };
        let row = |control: bool, detections: Value| {
            serde_json::json!({ "control": control, "detections": detections,
                                "inconclusive_reasons": { "timeout": 3 } })
        };
        // A keepalloc row that found something: caught.
        assert!(report(serde_json::json!([row(
            false,
            serde_json::json!({ "second-owner": 1 })
        )])));
        // Only hung runs (inconclusive) in keepalloc's rows: the campaign failed, no catch.
        assert!(!report(serde_json::json!([row(
            false,
            serde_json::json!({})
        )])));
        // A control's detections are the control's, not the mutant's.
        assert!(!report(serde_json::json!([row(
            true,
            serde_json::json!({ "use-after-free": 3 })
        )])));
        // No report at all (the campaign died before writing it): no catch.
        assert!(!campaign_found(&dir.join("missing.json")));
        fs::remove_dir_all(&dir).unwrap();
    }
}
