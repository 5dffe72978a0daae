//! `keepalloc-harness`: runs ONE fault scenario against one variant in this fresh process
//! and prints one result line.
//!
//! ```text
//! keepalloc-harness --scenario NAME --variant keepalloc|racy|naive-retry
//!                   [--seed N] [--threads N] [--hold-window[=DELAY]] [--delay POINT=DELAY]
//! ```
//!
//! Exit codes are those of `keepalloc_fault_inject::report::exit` (0 pass, 10–17 memory
//! violations, 20 identity mismatch, 21 other broken promise, 3 variant not built, 4 not
//! applicable, 1 harness error, 2 usage); a death by signal is classified by the parent.

use keepalloc_fault_inject::delay::{self, Delay, Point};
use keepalloc_fault_inject::report::{self, RunInfo, exit};
use keepalloc_fault_inject::scenario::{Scenario, Variant};
use keepalloc_fault_inject::{NotRun, init_plan, run_scenario};

const USAGE: &str = "\
usage: keepalloc-harness --scenario NAME --variant VARIANT [options]

  --scenario NAME         cold-start | retry-after-capture | retry-under-race |
                          panic-in-init | out-of-memory
  --variant VARIANT       keepalloc | racy | naive-retry (controls need feature `controls`)
  --seed N                seed of the failure plans (default 0)
  --threads N             threads of the racing scenarios (default 32)
  --hold-window[=DELAY]   hold the race windows open: check-to-store (default
                          gather:500us) and after-capture (default sleep:500us); not
                          before-capture, which would let every racy writer finish before
                          the library copies the table and so hide the race
  --delay POINT=DELAY     one point: check-to-store | before-capture | after-capture |
                          after-gate; DELAY: none | yield:N | spin:N | sleep:Nus |
                          gather:Nus
";

fn usage(message: &str) -> ! {
    eprintln!("keepalloc-harness: {message}\n{USAGE}");
    std::process::exit(exit::USAGE)
}

fn main() {
    let mut scenario = None;
    let mut variant = None;
    let mut seed = 0u64;
    let mut threads = 32usize;
    let mut window_held = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k != "--delay" => (k.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match key.as_str() {
            "--scenario" => {
                let v = value("--scenario");
                scenario = Some(
                    Scenario::parse(&v).unwrap_or_else(|| usage(&format!("no scenario `{v}`"))),
                );
            }
            "--variant" => {
                let v = value("--variant");
                variant =
                    Some(Variant::parse(&v).unwrap_or_else(|| usage(&format!("no variant `{v}`"))));
            }
            "--seed" => {
                seed = value("--seed")
                    .parse()
                    .unwrap_or_else(|_| usage("--seed takes an integer"))
            }
            "--threads" => {
                threads = value("--threads")
                    .parse()
                    .ok()
                    .filter(|&t| t > 0)
                    .unwrap_or_else(|| usage("--threads takes a positive integer"))
            }
            "--hold-window" => {
                // Bare: the race window gathers, the capture window sleeps. With a value:
                // that one delay at every hold point (to measure other delays).
                let (race, capture) = match inline {
                    Some(spec) => {
                        let d = Delay::parse(&spec)
                            .unwrap_or_else(|| usage(&format!("bad delay `{spec}`")));
                        (d, d)
                    }
                    None => (Delay::HOLD_RACE, Delay::HOLD),
                };
                window_held = race != Delay::None || capture != Delay::None;
                delay::set_delay(Point::CheckToStore, race);
                delay::set_delay(Point::AfterCapture, capture);
            }
            "--delay" => {
                let spec = value("--delay");
                let (point, d) = spec
                    .split_once('=')
                    .and_then(|(p, d)| Some((Point::parse(p)?, Delay::parse(d)?)))
                    .unwrap_or_else(|| usage(&format!("bad --delay `{spec}`")));
                delay::set_delay(point, d);
                window_held |= d != Delay::None;
            }
            "--help" | "-h" => {
                print!("{USAGE}");
                return;
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    let scenario = scenario.unwrap_or_else(|| usage("--scenario is required"));
    let variant = variant.unwrap_or_else(|| usage("--variant is required"));
    report::set_run(RunInfo {
        scenario: scenario.name().to_string(),
        variant: variant.name().to_string(),
        seed,
        threads,
        window_held,
    });
    init_plan::quiet_planned_panics();
    let ran = std::panic::catch_unwind(|| run_scenario(scenario, variant, threads, seed));
    match ran {
        Ok(Ok(())) => report::finish(),
        Ok(Err(NotRun::NotBuilt)) => {
            eprintln!(
                "keepalloc-harness: variant `{}` is not built (rebuild with --features controls)",
                variant.name()
            );
            report::end_with(exit::NOT_BUILT)
        }
        Ok(Err(NotRun::NotApplicable)) => report::end_with(exit::NOT_APPLICABLE),
        Err(_) => {
            eprintln!("keepalloc-harness: the scenario panicked outside the plan");
            report::end_with(exit::HARNESS_ERROR)
        }
    }
}
