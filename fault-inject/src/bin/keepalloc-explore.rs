//! `keepalloc-explore TARGET`: runs one fault-exploration target under the plan in
//! `KEEPALLOC_FAIL` (default `list`) and prints its outcome as one `KEEPALLOC_EXPLORE
//! {json}` line (see `keepalloc_fault_inject::explore`). `cargo xtask fault-explore` runs
//! it, once per site, each time in a fresh process.

use std::process::ExitCode;

use keepalloc_fault_inject::explore::{self, EXPLORER, SPEC_ENV};
use keepalloc_scribble::sites::FailSpec;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [target] = args.as_slice() else {
        eprintln!(
            "usage: keepalloc-explore TARGET (one of {}); the plan in {SPEC_ENV}",
            explore::targets().join(", ")
        );
        return ExitCode::from(2);
    };
    let spec = match std::env::var(SPEC_ENV) {
        Ok(s) => match FailSpec::parse(&s) {
            Ok(spec) => spec,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        Err(_) => FailSpec::List,
    };
    EXPLORER.arm(spec);
    explore::crash::install();
    match explore::run(target) {
        Ok(outcome) => {
            println!("{}", explore::report(target, spec, &outcome));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("keepalloc-explore: {e}");
            ExitCode::from(2)
        }
    }
}
