//! The command line of `cargo xtask fault-test` (clap), and the options the campaign runs
//! with.
//!
//! Names of scenarios, variants and windows are only checked for shape here: which ones
//! exist is the harness's to say (`keepalloc-harness --list`), and [`super::plan`] checks
//! them against its answer.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// The windows run when `--window` is not given.
pub const DEFAULT_WINDOWS: &str = "held,bare";

/// `cargo xtask fault-test --help`.
pub const LONG_ABOUT: &str = "\
Builds keepalloc-harness (release, feature `controls`), asks it which scenarios, variants,
windows and signatures exist (`keepalloc-harness --list`), and runs every applicable
(scenario, variant, window) row, each run in a fresh process.

A control run is caught only when its findings intersect the control's signature; a run
that passed is missed; anything else (timeout, harness error, a signal or an exit without a
result line, only findings outside the signature) is inconclusive and counts as a miss.
Exit 0 only when keepalloc failed none of its runs in any window AND every control with the
window `held` was caught in >= 95% of its runs (controls in other windows are reported, not
judged). Every row shows its rate with a 95% Wilson interval.

With --cell-mutant NAME the harness is built with the provider's cell deliberately broken
(`--cfg keepalloc_cell_mutant=\"NAME\"`, target/cell-mutant/NAME), and keepalloc's rows become
controls judged by the mutant's own signature in every window: the command succeeds only
when the broken cell is caught.

With --runtime onnxruntime: every model of the pinned ONNX Runtime wheel and
runtimes/onnxruntime/models/, each run a fresh keepalloc-ort-child: the count run, nth:K for
every allocation site, probability:P@SEED (P 0.05 and 0.25, --runs seeds, --threads
threads), refuse-registrations:3 and the foreign-allocator control; fails on a broken
keepalloc invariant, a run with no injected fault that did not end ok, or a control not
caught by its signature (see xtask/src/fault_test/ort/mod.rs). Options marked (harness)
are refused there, and --model only applies there.";

/// The runtime a campaign runs against.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    /// keepalloc-harness: the provider and each negative control, per scenario.
    #[default]
    Harness,
    /// The real ONNX Runtime (the pinned wheel) with keepalloc's owner as its env
    /// allocator, one `keepalloc-ort-child` process per run.
    Onnxruntime,
}

/// `cargo xtask fault-test`'s command line: one parser for both runtimes.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The runtime under test.
    #[arg(long, value_enum, default_value_t = Runtime::Harness)]
    pub runtime: Runtime,
    /// Runs per (scenario, variant, window) row; with onnxruntime, seeds per probability
    /// plan [default: 100; onnxruntime: 5; under `cargo xtask asan`: 20].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub runs: Option<usize>,
    /// Threads of the racing scenarios; with onnxruntime, sessions at once in the
    /// probability and registration runs [default: 32; onnxruntime: 4].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub threads: Option<usize>,
    /// A run that takes longer is killed: inconclusive (a failure for keepalloc), with
    /// onnxruntime a hang.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = positive)]
    pub timeout: usize,
    /// Also write the results as JSON to PATH [default: none; onnxruntime:
    /// target/fault-test/onnxruntime.json].
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// (harness) Base seed; run i of a row uses seed N+i [default: from the clock, printed].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// (harness) Only these scenarios (repeatable or comma-separated; `keepalloc-harness
    /// --list`).
    #[arg(long = "scenario", value_name = "NAME", value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// (harness) Only these variants (repeatable or comma-separated; `keepalloc-harness
    /// --list`).
    #[arg(long = "variant", value_name = "NAME", value_delimiter = ',')]
    pub variants: Vec<String>,
    /// (harness) Windows to run, each its own row: a comma list of held, yield, bare, or
    /// `all` [default: held,bare].
    #[arg(long = "window", value_name = "LIST", value_delimiter = ',')]
    pub windows: Vec<String>,
    /// (harness) Runs in parallel [default: available cores].
    #[arg(long, value_name = "N", value_parser = positive)]
    pub jobs: Option<usize>,
    /// (harness) Use this harness binary instead of building one.
    #[arg(long, value_name = "PATH")]
    pub harness: Option<PathBuf>,
    /// (harness) Build the harness with this cell mutant (or each listed one, `all`) and
    /// require that keepalloc's rows catch it by its signature.
    #[arg(long, value_name = "NAME|all", value_parser = mutant_name)]
    pub cell_mutant: Option<String>,
    /// (onnxruntime) Only this model (repeatable) [default: every model].
    #[arg(long = "model", value_name = "NAME")]
    pub models: Vec<String>,
}

impl Args {
    /// The harness-only options that were given (refused with `--runtime onnxruntime`).
    pub fn harness_only(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        let mut check = |set: bool, name: &'static str| {
            if set {
                given.push(name);
            }
        };
        check(self.seed.is_some(), "--seed");
        check(!self.scenarios.is_empty(), "--scenario");
        check(!self.variants.is_empty(), "--variant");
        check(!self.windows.is_empty(), "--window");
        check(self.jobs.is_some(), "--jobs");
        check(self.harness.is_some(), "--harness");
        check(self.cell_mutant.is_some(), "--cell-mutant");
        given
    }
}

/// `Args` as a command of its own, to parse argument lists in tests.
#[cfg(test)]
#[derive(clap::Parser, Debug)]
#[command(name = "cargo xtask fault-test")]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn positive(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive integer, not `{v}`")),
    }
}

/// A mutant name becomes a `--cfg` value and a directory name: keep it to `[a-z0-9_]`.
fn mutant_name(v: &str) -> Result<String, String> {
    if !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Ok(v.to_string())
    } else {
        Err(format!(
            "`{v}` is not a cell mutant name ([a-z0-9_]+ or `all`)"
        ))
    }
}

/// Which cell mutant to build and judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CellMutantChoice {
    /// This one.
    Named(String),
    /// Every one the harness lists, in turn.
    All,
}

/// Which windows to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowChoice {
    /// These, in this order.
    Named(Vec<String>),
    /// Every window the harness lists.
    All,
}

/// Campaign options.
#[derive(Clone, Debug)]
pub struct Options {
    pub(super) runs: usize,
    pub(super) threads: usize,
    pub(super) seed: u64,
    pub(super) scenarios: Vec<String>,
    pub(super) variants: Vec<String>,
    pub(super) windows: WindowChoice,
    pub(super) jobs: usize,
    pub(super) timeout: Duration,
    pub(super) json: Option<PathBuf>,
    pub(super) harness: Option<PathBuf>,
    pub(super) cell_mutant: Option<CellMutantChoice>,
    /// Extra environment for every run (the ASan options).
    pub env: Vec<(String, String)>,
    /// A label printed in the header (e.g. "AddressSanitizer").
    pub label: Option<String>,
}

/// Parses `fault-test` arguments (after the command name) for the harness campaign.
#[cfg(test)]
pub fn parse_options(args: &[String]) -> Result<Options, String> {
    let argv = std::iter::once("cargo xtask fault-test").chain(args.iter().map(String::as_str));
    let cli = match <Cli as clap::Parser>::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => return Err(e.render().to_string().trim_end().to_string()),
    };
    harness_options(cli.args, 100)
}

/// The harness campaign's options from `cli`, with `runs` runs a row unless `--runs` says
/// otherwise; an error for options of the other runtime.
pub fn harness_options(cli: Args, runs: usize) -> Result<Options, String> {
    if cli.runtime != Runtime::Harness {
        return Err("these options are for --runtime harness".into());
    }
    if !cli.models.is_empty() {
        return Err("--model is an option of --runtime onnxruntime".into());
    }
    let windows = if cli.windows.is_empty() {
        WindowChoice::Named(DEFAULT_WINDOWS.split(',').map(String::from).collect())
    } else if cli.windows.iter().any(|w| w == "all") {
        WindowChoice::All
    } else {
        let mut named: Vec<String> = Vec::new();
        for w in cli.windows {
            if !named.contains(&w) {
                named.push(w);
            }
        }
        WindowChoice::Named(named)
    };
    Ok(Options {
        runs: cli.runs.unwrap_or(runs),
        threads: cli.threads.unwrap_or(32),
        seed: cli.seed.unwrap_or_else(clock_seed),
        scenarios: dedup(cli.scenarios),
        variants: dedup(cli.variants),
        windows,
        jobs: cli
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        timeout: Duration::from_secs(cli.timeout as u64),
        json: cli.json,
        harness: cli.harness,
        cell_mutant: cli.cell_mutant.map(|m| {
            if m == "all" {
                CellMutantChoice::All
            } else {
                CellMutantChoice::Named(m)
            }
        }),
        env: Vec::new(),
        label: None,
    })
}

fn dedup(names: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// A seed from the clock (printed with the campaign, so any run can be replayed).
fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        parse_options(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.runs, o.threads), (100, 32));
        assert_eq!(o.timeout, Duration::from_secs(60));
        assert_eq!(
            o.windows,
            WindowChoice::Named(vec!["held".into(), "bare".into()])
        );
        assert!(o.scenarios.is_empty() && o.variants.is_empty());
        assert!(o.jobs >= 1 && o.cell_mutant.is_none());
    }

    #[test]
    fn lists_repeat_and_split_on_commas() {
        let o = parse(&[
            "--scenario",
            "a,b",
            "--scenario=c",
            "--variant",
            "x",
            "--variant",
            "x",
            "--window",
            "yield",
            "--seed",
            "7",
            "--runs=3",
        ])
        .unwrap();
        assert_eq!(o.scenarios, ["a", "b", "c"]);
        assert_eq!(o.variants, ["x"]);
        assert_eq!(o.windows, WindowChoice::Named(vec!["yield".into()]));
        assert_eq!((o.seed, o.runs), (7, 3));
        assert_eq!(
            parse(&["--window", "held,all"]).unwrap().windows,
            WindowChoice::All
        );
    }

    #[test]
    fn one_parser_for_both_runtimes() {
        let o = parse(&["--runtime", "harness", "--runs", "7"]).unwrap();
        assert_eq!((o.runs, o.threads), (7, 32));
        assert!(parse(&["--model", "mul_1"]).is_err());
        assert!(parse(&["--runtime", "onnxruntime"]).is_err());
        assert!(parse(&["--runtime", "tensorflow"]).is_err());
        let argv = [
            "x",
            "--runtime",
            "onnxruntime",
            "--model",
            "a",
            "--model",
            "b",
        ];
        let args = <Cli as clap::Parser>::try_parse_from(argv).unwrap().args;
        assert_eq!(args.runtime, Runtime::Onnxruntime);
        assert_eq!(args.models, ["a", "b"]);
        assert!(args.harness_only().is_empty());
        let argv = [
            "x",
            "--runtime",
            "onnxruntime",
            "--scenario",
            "s",
            "--jobs",
            "2",
        ];
        let args = <Cli as clap::Parser>::try_parse_from(argv).unwrap().args;
        assert_eq!(args.harness_only(), ["--scenario", "--jobs"]);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["--runs", "0"]).is_err());
        assert!(parse(&["--timeout", "x"]).is_err());
        assert!(parse(&["--cell-mutant", "../x"]).is_err());
        assert!(parse(&["--hold", "gather:5us"]).is_err());
        assert_eq!(
            parse(&["--cell-mutant", "all"]).unwrap().cell_mutant,
            Some(CellMutantChoice::All)
        );
    }
}
