//! `KEEPALLOC_SCRIBBLE` applied to the harness's allocators: keepalloc still passes with every
//! block guarded; the naive-retry control's use after free is reported with the stack of the
//! free, which runs in the failed attempt's drop (and, as the control, says the stack was not
//! recorded when stacks are off); a bad setting is a usage error, not ignored.

use std::process::{Command, Output};

use keepalloc_fault_inject::report::exit;
use keepalloc_testkit::child::assert_exit;
use keepalloc_testkit::describe;

fn harness(scenario: &str, variant: &str, scribble: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_keepalloc-harness"));
    command
        .args(["--scenario", scenario, "--variant", variant, "--seed", "7"])
        .args(["--threads", "8"]);
    match scribble {
        Some(spec) => command.env("KEEPALLOC_SCRIBBLE", spec),
        None => command.env_remove("KEEPALLOC_SCRIBBLE"),
    };
    command.output().expect("spawn keepalloc-harness")
}

#[test]
fn keepalloc_passes_with_every_block_guarded() {
    for scenario in ["cold-start", "retry-after-capture", "out-of-memory"] {
        let out = harness(scenario, "keepalloc", Some("guard:1/1,stacks:both"));
        assert_exit(&out, exit::PASS);
    }
}

#[test]
fn a_bad_setting_is_a_usage_error() {
    let out = harness("cold-start", "keepalloc", Some("guard:1/64,stacks:all"));
    assert_exit(&out, exit::USAGE);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("bad value \"all\" for \"stacks\": expected none, free or both"),
        "{}",
        describe(&out)
    );
}

#[cfg(feature = "controls")]
#[test]
fn naive_retry_reports_the_free_in_the_failed_attempts_drop() {
    use keepalloc_testkit::child::report_section;

    let out = harness(
        "retry-after-capture",
        "naive-retry",
        Some("stacks:both,depth:32"),
    );
    assert_exit(&out, exit::USE_AFTER_FREE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let freed = report_section(&stderr, "freed by thread");
    // The owner was freed by the drop of the box the failed attempt built, inside the naive
    // once's fallible closure.
    assert!(
        freed.contains("drop_in_place<allocator_api2::stable::boxed::Box<keepalloc_fault_inject::controls::owner::CanaryOwner")
            && freed.contains("naive_retry::NaiveOnce::get_or_try_init")
            && freed.contains("scenario::retry_after_capture"),
        "{stderr}"
    );
    let allocated = report_section(&stderr, "previously allocated by thread");
    assert!(allocated.contains("CanaryOwner::try_boxed"), "{stderr}");

    // The control: without stacks the report says so instead of inventing one.
    let out = harness("retry-after-capture", "naive-retry", None);
    assert_eq!(out.status.code(), Some(exit::USE_AFTER_FREE));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("free stack not recorded"), "{stderr}");
    assert!(!stderr.contains("freed by thread"), "{stderr}");
}
