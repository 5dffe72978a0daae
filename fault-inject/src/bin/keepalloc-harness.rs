//! `keepalloc-harness`: runs ONE fault scenario against one variant in this fresh process
//! and prints one result line.
//!
//! ```text
//! keepalloc-harness --list
//! keepalloc-harness --scenario NAME --variant NAME
//!                   [--seed N] [--threads N] [--window held|yield|bare] [--delay POINT=DELAY]
//! ```
//!
//! `--list` prints the catalog (scenarios, variants, windows, the pairs that apply with
//! their signatures, cell mutants, exit codes) as one JSON object: the campaign reads it
//! instead of keeping its own copy.
//!
//! Exit codes are those of `keepalloc_fault_inject::report::exit` (0 pass, 10–17 memory
//! violations, 20 identity mismatch, 21 other broken promise, 3 variant not built, 4 not
//! applicable, 1 harness error, 2 usage); a death by signal is classified by the parent.

use keepalloc_fault_inject::delay::{self, Delay, Point, Window};
use keepalloc_fault_inject::report::{self, RunInfo, exit};
use keepalloc_fault_inject::scenario::{Scenario, Variant};
use keepalloc_fault_inject::{NotRun, catalog, init_plan, run_scenario};

const USAGE: &str = "\
usage: keepalloc-harness --list
       keepalloc-harness --scenario NAME --variant VARIANT [options]

  --list                  print the catalog as JSON (scenarios, variants, windows, the
                          pairs that apply and their signatures, cell mutants, exit codes)
  --scenario NAME         cold-start | retry-after-capture | retry-under-race |
                          panic-in-init | owner-build-failure | out-of-memory
  --variant VARIANT       keepalloc | racy | naive-retry | poisoning-once | build-race |
                          drop-on-oom (controls need feature `controls`)
  --seed N                seed of the failure plans (default 0)
  --threads N             threads of the racing scenarios (default 32)
  --window MODE           held: race windows held open (gather:500us at check-to-store,
                          sleep:500us after capture); yield: one yield_now there; bare:
                          no delay (default)
  --delay POINT=DELAY     one point: check-to-store | before-capture | after-capture |
                          after-gate; DELAY: none | yield:N | spin:N | sleep:Nus |
                          gather:Nus (the window is then reported as `custom`)
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
    let mut window = Window::Bare;
    let mut custom = false;
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
            "--list" => {
                println!("{}", catalog::to_json());
                return;
            }
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
            "--window" => {
                let v = value("--window");
                window = Window::parse(&v)
                    .unwrap_or_else(|| usage(&format!("--window held|yield|bare, not `{v}`")));
            }
            "--delay" => {
                let spec = value("--delay");
                let (point, d) = spec
                    .split_once('=')
                    .and_then(|(p, d)| Some((Point::parse(p)?, Delay::parse(d)?)))
                    .unwrap_or_else(|| usage(&format!("bad --delay `{spec}`")));
                custom = true;
                delay::set_delay(point, d);
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
    // Explicit delays win over the window's.
    if !custom {
        window.install();
    }
    report::set_run(RunInfo {
        scenario: scenario.name().to_string(),
        variant: variant.name().to_string(),
        seed,
        threads,
        window: if custom { "custom" } else { window.name() }.to_string(),
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
