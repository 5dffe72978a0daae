//! One scenario run in this test process rather than in a spawned harness: the library
//! captures its table once per process, so this binary has its own `main` and runs exactly
//! one scenario (`retry-under-race`, the one with the most moving parts) against keepalloc,
//! then asserts on what the scenario recorded.

use keepalloc_fault_inject::delay::{self, Delay, Point};
use keepalloc_fault_inject::real_provider::PROVIDER;
use keepalloc_fault_inject::scenario::{Scenario, Variant};
use keepalloc_fault_inject::{init_plan, report, run_scenario, witness};

fn main() {
    init_plan::quiet_planned_panics();
    delay::set_delay(Point::AfterCapture, Delay::Yield(1));
    run_scenario(Scenario::RetryUnderRace, Variant::Keepalloc, 8, 12345)
        .expect("keepalloc applies to every scenario and is always built");
    let findings = report::findings();
    assert!(findings.is_empty(), "keepalloc failed: {findings:?}");

    let plan = init_plan::plan();
    assert!(plan.failures() >= 1, "the first attempt must have failed");
    assert_eq!(
        plan.attempts(),
        plan.failures() + 1,
        "one attempt published"
    );
    // The witnesses (counted outside the provider) and the provider's own counters agree.
    assert_eq!(witness::constructed(), 1);
    assert_eq!(init_plan::hook_successes(), 1);
    let stats = PROVIDER.stats();
    assert_eq!(stats.owners_constructed, 1, "{stats:?}");
    assert_eq!(stats.init_successes, 1, "{stats:?}");
    assert_eq!(stats.init_attempts, plan.attempts(), "{stats:?}");
    let captured = keepalloc_kernels::captured_table().expect("captured");
    assert_eq!(
        captured.context(),
        PROVIDER.acquired().expect("acquired").context()
    );
    println!(
        "in_process: retry-under-race passed ({} attempts, {} planned failures)",
        plan.attempts(),
        plan.failures()
    );
}
