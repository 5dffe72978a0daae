//! What a campaign prints and writes: the table, the replay commands, the JSON report.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::verdict::Row;

/// How many replay commands a row gets for each kind of bad run.
const REPLAYS: usize = 3;

/// The command that replays one run of `row` (with the campaign's extra environment).
pub fn replay_command(
    harness: &Path,
    env: &[(String, String)],
    row: &Row,
    seed: u64,
    threads: usize,
) -> String {
    let mut words: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={}", shell_word(v)))
        .collect();
    words.push(shell_word(&harness.display().to_string()));
    for (flag, value) in [
        ("--scenario", row.scenario.clone()),
        ("--variant", row.variant.clone()),
        ("--seed", seed.to_string()),
        ("--threads", threads.to_string()),
        ("--window", row.window.clone()),
    ] {
        words.push(flag.to_string());
        words.push(shell_word(&value));
    }
    words.join(" ")
}

/// `s` quoted for a POSIX shell when it needs to be.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Seeds worth replaying: keepalloc's first failures; a control's first misses (when the
/// row is judged: an unjudged row is expected to miss) and first inconclusive runs.
pub fn replay_seeds(row: &Row, judged_only: bool) -> Vec<u64> {
    if !row.judge.is_control() {
        return row.failing_seeds.iter().take(REPLAYS).copied().collect();
    }
    let mut seeds: Vec<u64> = Vec::new();
    if row.judged() || !judged_only {
        seeds.extend(row.missed_seeds.iter().take(REPLAYS));
    }
    seeds.extend(row.inconclusive_seeds.iter().take(REPLAYS));
    seeds
}

fn counts(map: &BTreeMap<String, usize>) -> String {
    map.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints the table on stdout, under `title` when there is one.
pub fn print_table(title: Option<&str>, rows: &[Row], elapsed: Duration, total: usize) {
    let header = [
        "scenario",
        "variant",
        "window",
        "runs",
        "caught",
        "missed",
        "inconclusive",
        "failures",
        "rate [95% CI]",
        "detections (runs)",
        "verdict",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let control = r.judge.is_control();
            let or_dash = |show: bool, n: usize| if show { n.to_string() } else { "-".into() };
            let inconclusive = if r.inconclusive == 0 {
                "0".to_string()
            } else {
                format!("{} ({})", r.inconclusive, counts(&r.inconclusive_reasons))
            };
            let detections = if r.detections.is_empty() {
                "-".to_string()
            } else {
                counts(&r.detections)
            };
            vec![
                r.scenario.clone(),
                r.variant.clone(),
                r.window.clone(),
                r.runs.to_string(),
                or_dash(control, r.caught),
                or_dash(control, r.missed),
                inconclusive,
                or_dash(!control, r.failures),
                r.detection_rate().to_string(),
                detections,
                r.verdict().to_string(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::from("|");
        for (cell, w) in cells.iter().zip(&widths) {
            s.push_str(&format!(" {cell:<w$} |"));
        }
        s
    };
    println!();
    if let Some(title) = title {
        println!("{title}");
    }
    println!("{}", line(&header));
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &body {
        println!(
            "{}",
            line(&row.iter().map(String::as_str).collect::<Vec<_>>())
        );
    }
    println!(
        "\nrate: caught/runs for a control, failures/runs for keepalloc; 95% Wilson interval. \
         Judged: keepalloc in every window (0 failures); a control with the window held, a \
         cell mutant in every window (>= 95% caught; inconclusive counts as missed)."
    );
    println!(
        "{total} runs in {:.1}s ({:.1} ms per run wall clock)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / total.max(1) as f64
    );
}

/// Prints the notes and replay commands of the rows that have any, on stderr.
pub fn print_replays(rows: &[Row], harness: &Path, env: &[(String, String)], threads: usize) {
    for r in rows {
        let seeds = replay_seeds(r, true);
        let noteworthy = !r.notes.is_empty() && (r.judged() || r.inconclusive > 0);
        if seeds.is_empty() && !noteworthy {
            continue;
        }
        eprintln!("{} / {} / {}:", r.scenario, r.variant, r.window);
        for note in &r.notes {
            eprintln!("  {note}");
        }
        for seed in seeds {
            eprintln!(
                "  replay: {}",
                replay_command(harness, env, r, seed, threads)
            );
        }
    }
}

/// One row of the JSON report.
#[derive(Debug, Serialize)]
pub struct RowReport {
    scenario: String,
    variant: String,
    window: String,
    /// Judged as a control (caught by `signature`) rather than as keepalloc.
    control: bool,
    signature: Vec<String>,
    runs: usize,
    caught: usize,
    missed: usize,
    inconclusive: usize,
    failures: usize,
    detection_rate: f64,
    ci95_low: f64,
    ci95_high: f64,
    detections: BTreeMap<String, usize>,
    inconclusive_reasons: BTreeMap<String, usize>,
    judged: bool,
    passed: bool,
    failing_seeds: Vec<u64>,
    replay: Vec<String>,
}

/// The JSON report of one campaign.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The campaign's verdict.
    pub passed: bool,
    /// The label (e.g. "AddressSanitizer").
    pub label: Option<String>,
    /// The cell mutant the harness was built with.
    pub cell_mutant: Option<String>,
    /// The harness that ran.
    pub harness: String,
    /// Base seed (run i of a row uses seed + i).
    pub seed: u64,
    /// Runs per row.
    pub runs: usize,
    /// Threads of the racing scenarios.
    pub threads: usize,
    /// Windows run.
    pub windows: Vec<String>,
    /// Runs in parallel.
    pub jobs: usize,
    /// Per-run timeout.
    pub timeout_seconds: u64,
    /// Wall clock of the runs.
    pub elapsed_seconds: f64,
    /// Every row.
    pub rows: Vec<RowReport>,
}

/// The report of one row.
pub fn row_report(r: &Row, harness: &Path, env: &[(String, String)], threads: usize) -> RowReport {
    let rate = r.detection_rate();
    RowReport {
        scenario: r.scenario.clone(),
        variant: r.variant.clone(),
        window: r.window.clone(),
        control: r.judge.is_control(),
        signature: r.judge.signature().to_vec(),
        runs: r.runs,
        caught: r.caught,
        missed: r.missed,
        inconclusive: r.inconclusive,
        failures: r.failures,
        detection_rate: rate.value,
        ci95_low: rate.low,
        ci95_high: rate.high,
        detections: r.detections.clone(),
        inconclusive_reasons: r.inconclusive_reasons.clone(),
        judged: r.judged(),
        passed: r.passed(),
        failing_seeds: r.failing_seeds.clone(),
        replay: replay_seeds(r, false)
            .into_iter()
            .map(|seed| replay_command(harness, env, r, seed, threads))
            .collect(),
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text + "\n")
        .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    println!("results written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::classify::Outcome;
    use super::super::verdict::Judge;
    use super::*;

    fn racy(window: &str) -> Row {
        let mut r = Row::new(
            "cold-start",
            "racy",
            window,
            Judge::Catch {
                signature: vec!["use-after-free".into()],
                every_window: false,
            },
        );
        for seed in 10..20 {
            r.record(seed, &Outcome::Pass, "");
        }
        r.record(20, &Outcome::Inconclusive("timeout".into()), "");
        r
    }

    #[test]
    fn replay_commands_name_the_run_and_quote_the_environment() {
        let row = racy("held");
        let env = [("ASAN_OPTIONS".to_string(), "exitcode=30 x".to_string())];
        assert_eq!(
            replay_command(Path::new("/t/keepalloc-harness"), &env, &row, 12, 32),
            "ASAN_OPTIONS='exitcode=30 x' /t/keepalloc-harness --scenario cold-start \
             --variant racy --seed 12 --threads 32 --window held"
        );
    }

    #[test]
    fn replays_misses_only_where_they_count() {
        assert_eq!(replay_seeds(&racy("held"), true), [10, 11, 12, 20]);
        assert_eq!(replay_seeds(&racy("bare"), true), [20]);
        assert_eq!(replay_seeds(&racy("bare"), false), [10, 11, 12, 20]);
        let mut keep = Row::new("cold-start", "keepalloc", "held", Judge::Clean);
        for seed in 0..5 {
            keep.record(seed, &Outcome::Found(vec!["leak".into()]), "");
        }
        assert_eq!(replay_seeds(&keep, true), [0, 1, 2]);
    }

    #[test]
    fn the_row_report_has_the_rate_and_its_interval() {
        let r = row_report(&racy("held"), Path::new("h"), &[], 32);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["runs"], 11);
        assert_eq!(v["missed"], 10);
        assert_eq!(v["inconclusive"], 1);
        assert_eq!(v["failures"], 11);
        assert_eq!(v["detection_rate"], 0.0);
        assert!(v["ci95_high"].as_f64().unwrap() > 0.2);
        assert_eq!(v["inconclusive_reasons"]["timeout"], 1);
        assert_eq!(v["judged"], true);
        assert_eq!(v["passed"], false);
        assert_eq!(v["replay"].as_array().unwrap().len(), 4);
    }
}
