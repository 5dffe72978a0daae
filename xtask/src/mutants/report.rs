//! The end of the command: survivors, the documented equivalents, the score, the last line.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use super::equivalent::EQUIVALENT;
use super::mutant::{Mutant, Verdict};

/// The share of viable mutants that must be caught.
const REQUIRED_SCORE: f64 = 0.95;

/// Prints survivors, the documented equivalents, the score and the final line; fails below
/// the bar unless every missed mutant is a documented equivalent.
pub(super) fn report(mutants: &[Mutant], elapsed: Duration) -> Result<(), String> {
    let mut counts: BTreeMap<Verdict, usize> = BTreeMap::new();
    for m in mutants {
        *counts.entry(m.verdict).or_default() += 1;
    }
    let count = |v| counts.get(&v).copied().unwrap_or(0);
    let (caught, missed, timeout, unviable) = (
        count(Verdict::Caught),
        count(Verdict::Missed),
        count(Verdict::Timeout),
        count(Verdict::Unviable),
    );
    let equivalent: BTreeMap<&str, &str> = EQUIVALENT.iter().copied().collect();

    let late: Vec<&Mutant> = mutants
        .iter()
        .filter(|m| matches!(m.caught_by, Some("loom" | "campaign")))
        .collect();
    if !late.is_empty() {
        println!("\ncaught only by stage 2:");
        for m in late {
            println!("  {} (by {})", m.name, m.caught_by.unwrap_or("?"));
        }
    }

    let mut undocumented = 0;
    let survivors: Vec<&Mutant> = mutants
        .iter()
        .filter(|m| matches!(m.verdict, Verdict::Missed | Verdict::Timeout))
        .collect();
    println!("\nsurvivors ({}):", survivors.len());
    for m in &survivors {
        let label = if m.verdict == Verdict::Missed {
            "MISSED "
        } else {
            "TIMEOUT"
        };
        match equivalent.get(m.key().as_str()) {
            Some(reason) => println!("  {label} {}\n          equivalent: {reason}", m.name),
            None => {
                if m.verdict == Verdict::Missed {
                    undocumented += 1;
                }
                println!("  {label} {}", m.name);
            }
        }
    }

    println!("\ndocumented equivalent mutants ({}):", EQUIVALENT.len());
    for (key, reason) in EQUIVALENT {
        let seen = mutants.iter().find(|m| m.key() == *key);
        let state = match seen.map(|m| m.verdict) {
            None => "not generated this run",
            Some(Verdict::Missed) => "survived, as expected",
            Some(Verdict::Caught) => "CAUGHT this run: remove it from the list",
            Some(Verdict::Timeout) => "timed out",
            Some(Verdict::Unviable) => "unviable",
        };
        println!("  {key}\n      {reason} [{state}]");
    }

    let viable = caught + missed + timeout;
    let score = if viable == 0 {
        1.0
    } else {
        caught as f64 / viable as f64
    };
    let ok = score >= REQUIRED_SCORE || undocumented == 0;
    println!(
        "\nscore: {caught} of {viable} viable mutants caught ({:.1}%; required {:.0}%{}); \
         {undocumented} missed mutant(s) not documented as equivalent; wall time {}m{:02}s; \
         reports in target/mutants/",
        score * 100.0,
        REQUIRED_SCORE * 100.0,
        if score < REQUIRED_SCORE && ok {
            ", met because every missed mutant is a documented equivalent"
        } else {
            ""
        },
        elapsed.as_secs() / 60,
        elapsed.as_secs() % 60
    );
    println!("mutants: caught {caught}, missed {missed}, timeout {timeout}, unviable {unviable}");
    let _ = std::io::stdout().flush();
    if ok {
        Ok(())
    } else {
        // The summary line above is the command's last word; fail without another line.
        std::process::exit(1);
    }
}
