//! The C tests of the C ABI, run by `cargo test -p keepalloc-capi`.
//!
//! Each test compiles one program from `tests/c/` with the system C compiler (`$CC`, else
//! `cc`) against `keepalloc.h` and the static library cargo built for THIS test run, runs it
//! in its own process (the provider is process-wide) and checks its exit status.
//!
//! Which static library: cargo compiles this package's library once, with all its crate
//! types (`staticlib`, `cdylib`, `rlib`), before it links this test, and writes
//! `libkeepalloc.a` next to the rlib in `target/<profile>/deps/` — the directory this test
//! executable runs from. So the archive is always the one built from the current sources with
//! the current features and profile, with no nested cargo (which would wait on cargo's
//! build-directory lock). `cargo xtask c-test` runs the same programs against the release
//! build, plus the XNNPACK and C++ examples; both use the C toolchain helpers of the test kit
//! (`keepalloc_testkit::ctools`).

use std::path::PathBuf;

use keepalloc_testkit::ctools::{
    self, BASELINES, CONTROLS, Dirs, Signature, Toolchain, WRAP_CONTROLS,
};

/// The foundation tests, by file stem; `every_c_test_is_listed` keeps this in step with
/// the directory.
const TESTS: &[&str] = &[
    "acquire_race",
    "bad_input",
    "fork_states",
    "header_cxx17",
    "hook_throws",
    "init_always_fails",
    "init_retry",
    "invalid_argument",
    "libraries_race",
    "plugged_backend",
    "status_and_stats",
    "table_contract",
];

/// The foundation tests no negative control is for, and why. Every other test must be able
/// to fail: some control in `CONTROLS` or `WRAP_CONTROLS` must be caught by it
/// (`every_c_test_can_fail`).
const UNCONTROLLED: &[(&str, &str)] = &[(
    "header_cxx17",
    "the header from C++17: its static_asserts are checked by the compiler, and its run is \
     the smoke test of acquire_race, whose control is the racy provider",
)];

fn dirs() -> Dirs {
    Dirs::from_capi(&PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `libkeepalloc.a` from this build (see the module docs).
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    let lib = deps.join("libkeepalloc_capi.a");
    assert!(
        lib.is_file(),
        "{} not found: cargo should have built the staticlib next to this test",
        lib.display()
    );
    lib
}

fn out_dir(what: &str) -> PathBuf {
    let profile = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let p = exe.parent()?.parent()?.file_name()?.to_owned();
            Some(p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("keepalloc-c-tests/{profile}/{what}"))
}

fn run_c_test(name: &str) {
    let dirs = dirs();
    let source = ctools::foundation_tests(&dirs)
        .unwrap()
        .into_iter()
        .find(|p| ctools::stem(p) == name)
        .unwrap_or_else(|| panic!("no C test named {name} in {}", dirs.tests().display()));
    let outcome = ctools::build_and_run(
        &Toolchain::from_env(),
        &dirs,
        &source,
        &staticlib(),
        &out_dir(name),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    print!("{}", outcome.stdout);
    assert!(outcome.passed, "{}", outcome.describe(name));
}

#[test]
fn acquire_race() {
    run_c_test("acquire_race");
}

#[test]
fn init_retry() {
    run_c_test("init_retry");
}

#[test]
fn invalid_argument() {
    run_c_test("invalid_argument");
}

#[test]
fn init_always_fails() {
    run_c_test("init_always_fails");
}

#[test]
fn table_contract() {
    run_c_test("table_contract");
}

#[test]
fn header_cxx17() {
    run_c_test("header_cxx17");
}

#[test]
fn libraries_race() {
    run_c_test("libraries_race");
}

#[test]
fn hook_throws() {
    run_c_test("hook_throws");
}

#[test]
fn bad_input() {
    run_c_test("bad_input");
}

#[test]
fn fork_states() {
    run_c_test("fork_states");
}

#[test]
fn plugged_backend() {
    run_c_test("plugged_backend");
}

/// Fails with every miss when `misses` is not empty.
fn assert_none_missed(misses: Vec<String>) {
    assert!(misses.is_empty(), "{}", misses.join("\n\n"));
}

/// Where the control runs say what they caught or passed.
fn say(line: &str) {
    println!("{line}");
}

/// The controls on the real library (`controls/wrapped_library.c`, linked with
/// `-Wl,--wrap`): each is caught by the tests that exist for its bug, by its signature.
#[test]
fn wrap_controls_are_caught() {
    let (tc, dirs, lib, out) = (Toolchain::from_env(), dirs(), staticlib(), out_dir("wrap"));
    assert_none_missed(ctools::catch_wrap_controls(&tc, &dirs, &lib, &out, say));
}

/// The same tests pass on the pass-through build of the wrapping shims.
#[test]
fn wrap_baseline_passes() {
    let (tc, dirs, lib, out) = (Toolchain::from_env(), dirs(), staticlib(), out_dir("wrap"));
    assert_none_missed(ctools::pass_wrap_baselines(&tc, &dirs, &lib, &out, say));
}

#[test]
fn header_compiles_alone_as_c_and_cxx() {
    let lines = ctools::check_header(&Toolchain::from_env(), &dirs(), &out_dir("header"))
        .unwrap_or_else(|e| panic!("{e}"));
    for line in lines {
        println!("{line}");
    }
}

/// The tests can fail: each negative control (a broken `keepalloc.h` implementation) is
/// caught by the tests that exist for its bug, each by the signature of that bug (the check it
/// breaks, or the signal in the step it is in). Every control is run; all misses are reported.
#[test]
fn negative_controls_are_caught() {
    let (tc, dirs, out) = (Toolchain::from_env(), dirs(), out_dir("controls"));
    assert_none_missed(ctools::catch_controls(&tc, &dirs, &out, say));
}

/// The bug-free build of each control file passes every test its controls must fail: a
/// control is caught for its one bug, not for the rest of its file.
#[test]
fn control_baselines_pass() {
    let (tc, dirs, out) = (Toolchain::from_env(), dirs(), out_dir("controls"));
    assert_none_missed(ctools::pass_baselines(&tc, &dirs, &out, say));
}

/// The judge of a control's run accepts only the signature of its bug: another check, a
/// signal in another step, a CHECK before the signal, a pass or a timeout is never a catch.
#[test]
fn only_the_signature_is_a_catch() {
    let outcome = |code: Option<i32>, signal: Option<i32>, stderr: &str| ctools::Outcome {
        passed: code == Some(0),
        status: format!("{code:?}/{signal:?}"),
        code,
        signal,
        timed_out: false,
        stdout: String::new(),
        stderr: stderr.to_owned(),
    };
    let check = Signature::Check("s.owners_constructed == 1");
    assert!(check.matches(&outcome(
        Some(1),
        None,
        "t.c:9: CHECK failed: s.owners_constructed == 1"
    )));
    assert!(check.matches(&outcome(
        Some(1),
        None,
        "step: x\nt.c:9: CHECK failed: s.owners_constructed == 1 (2 != 1)\nother"
    )));
    for miss in [
        outcome(Some(0), None, ""),
        outcome(
            Some(1),
            None,
            "t.c:9: CHECK failed: s.owners_constructed == 10",
        ),
        outcome(
            Some(1),
            None,
            "t.c:9: CHECK failed: s.init_attempts == 1 (2 != 1)",
        ),
        outcome(
            Some(1),
            None,
            "t.c:5: CHECK failed: x\nt.c:9: CHECK failed: s.owners_constructed == 1",
        ),
        outcome(
            Some(2),
            None,
            "t.c:9: CHECK failed: s.owners_constructed == 1",
        ),
        outcome(None, Some(ctools::SIGSEGV), ""),
        outcome(Some(101), None, "build error"),
    ] {
        assert!(!check.matches(&miss), "{check} accepted {miss:?}");
    }

    let segv = Signature::Signal {
        signal: ctools::SIGSEGV,
        step: "keepalloc_get_stats(NULL)",
    };
    assert!(segv.matches(&outcome(
        None,
        Some(ctools::SIGSEGV),
        "step: before\nstep: keepalloc_get_stats(NULL)\n"
    )));
    for miss in [
        outcome(
            None,
            Some(ctools::SIGSEGV),
            "step: keepalloc_get_stats(NULL)\nstep: after\n",
        ),
        outcome(None, Some(ctools::SIGSEGV), ""),
        outcome(None, Some(6), "step: keepalloc_get_stats(NULL)\n"),
        outcome(
            Some(1),
            None,
            "step: keepalloc_get_stats(NULL)\nt.c:1: CHECK failed: x\n",
        ),
        outcome(
            None,
            Some(ctools::SIGSEGV),
            "t.c:1: CHECK failed: x\nstep: keepalloc_get_stats(NULL)\n",
        ),
    ] {
        assert!(!segv.matches(&miss), "{segv} accepted {miss:?}");
    }

    // A hang (here a script whose forked child sleeps) is killed with its process group
    // and judged a timeout, which no signature accepts.
    let dir = out_dir("timeout");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("hang.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho 'step: keepalloc_get_stats(NULL)' >&2\nsleep 60\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let start = std::time::Instant::now();
    let hung =
        ctools::run_with_timeout(&script, &[], std::time::Duration::from_millis(300)).unwrap();
    assert!(hung.timed_out && !hung.passed, "{hung:?}");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(30),
        "the sleeping child was not killed"
    );
    assert_eq!(hung.last_step(), Some("keepalloc_get_stats(NULL)"));
    let as_if_segv = ctools::Outcome {
        signal: Some(ctools::SIGSEGV),
        ..hung
    };
    assert!(
        !segv.matches(&as_if_segv),
        "a timeout was taken for a catch"
    );
}

/// Every C test is caught by some control, except the few in `UNCONTROLLED` (with a reason).
#[test]
fn every_c_test_can_fail() {
    for test in TESTS {
        let caught = CONTROLS
            .iter()
            .chain(WRAP_CONTROLS)
            .any(|c| c.caught_by.iter().any(|catch| catch.test == *test));
        let exempt = UNCONTROLLED.iter().any(|(name, _)| name == test);
        assert!(
            caught != exempt,
            "{test}: {}",
            if caught {
                "has a control, so it should leave UNCONTROLLED"
            } else {
                "no control in CONTROLS is caught by it: nothing shows that it can fail"
            }
        );
    }
    for (name, _) in UNCONTROLLED {
        assert!(
            TESTS.contains(name),
            "UNCONTROLLED names {name}, not a test"
        );
    }
}

/// `text` with every run of whitespace made one space (as the preprocessor's `#` does).
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The control table agrees with the files, without compiling anything: each control's
/// source exists and documents exactly the listed modes, each test it names exists, and each
/// signature names a `CHECK` or `STEP` that occurs exactly once in that test (so a catch
/// pins one check, not any of several).
#[test]
fn control_table_matches_the_sources() {
    let dirs = dirs();
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut names: Vec<&str> = CONTROLS.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CONTROLS.len(), "two controls share a name");

    let mut sources: Vec<&str> = CONTROLS.iter().map(|c| c.source).collect();
    sources.sort_unstable();
    sources.dedup();
    for source in &sources {
        let text = read(dirs.controls().join(source));
        let mut documented: Vec<&str> = text
            .split("-D")
            .skip(1)
            .filter_map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                Some(&rest[..end]).filter(|name| name.starts_with("KEEPALLOC_CONTROL_"))
            })
            .collect();
        documented.sort_unstable();
        documented.dedup();
        let mut listed: Vec<&str> = CONTROLS
            .iter()
            .filter(|c| c.source == *source)
            .map(|c| c.define)
            .chain(
                BASELINES
                    .iter()
                    .filter(|b| b.source == *source)
                    .map(|b| b.define),
            )
            .collect();
        listed.sort_unstable();
        assert_eq!(
            documented, listed,
            "the modes {source} documents (-D...) and CONTROLS/BASELINES disagree"
        );
        for define in &listed {
            assert!(
                text.contains(&format!("#ifdef {define}"))
                    || text.contains(&format!("defined({define})")),
                "{source} never tests {define}"
            );
        }
    }
    for baseline in BASELINES {
        assert!(
            sources.contains(&baseline.source),
            "baseline {} has no controls",
            baseline.source
        );
    }

    let wrapped = read(dirs.controls().join("wrapped_library.c"));
    for control in WRAP_CONTROLS {
        assert!(
            wrapped.contains(&format!("-D{}", control.define))
                && (wrapped.contains(&format!("#ifdef {}", control.define))
                    || wrapped.contains(&format!("defined({})", control.define))),
            "wrapped_library.c does not document and test {}",
            control.define
        );
    }
    for control in CONTROLS.iter().chain(WRAP_CONTROLS) {
        assert!(
            !control.caught_by.is_empty(),
            "control {} is caught by nothing",
            control.name
        );
        for catch in control.caught_by {
            assert!(
                TESTS.contains(&catch.test),
                "control {} names {}, not a test",
                control.name,
                catch.test
            );
            let source = ctools::foundation_tests(&dirs)
                .unwrap()
                .into_iter()
                .find(|p| ctools::stem(p) == catch.test)
                .unwrap_or_else(|| panic!("no source for {}", catch.test));
            let test = squeeze(&read(source));
            let (needle, alternative) = match catch.by {
                Signature::Check(condition) => (
                    format!("CHECK({condition});"),
                    condition
                        .split_once(" == ")
                        .map(|(a, b)| format!("CHECK_EQ_U64({a}, {b});")),
                ),
                Signature::Signal { step, .. } => (format!("STEP(\"{step}\");"), None),
            };
            let count = test.matches(&needle).count()
                + alternative.map_or(0, |alt| test.matches(&alt).count());
            assert_eq!(
                count, 1,
                "control {}: {} must contain `{needle}` exactly once (found {count})",
                control.name, catch.test
            );
        }
    }
}

#[test]
fn every_c_test_is_listed() {
    let found: Vec<String> = ctools::foundation_tests(&dirs())
        .unwrap()
        .iter()
        .map(|p| ctools::stem(p))
        .collect();
    assert_eq!(found, TESTS, "tests/c and TESTS in c_tests.rs disagree");
}

/// Builds `tests/c/explore/fail_sites.c` (once per test binary) and runs it with
/// `KEEPALLOC_FAIL=spec`.
fn fail_sites(spec: &str) -> ctools::Outcome {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let out = BUILT.get_or_init(|| {
        let dirs = dirs();
        let out = out_dir("explore").join("fail_sites");
        ctools::compile(
            &Toolchain::from_env(),
            &dirs,
            &ctools::Program {
                sources: vec![dirs.tests().join("explore").join("fail_sites.c")],
                defines: vec![],
                includes: vec![],
                link: ctools::keepalloc_link(&staticlib()),
                out: out.clone(),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        out
    });
    ctools::run(out, &[("KEEPALLOC_FAIL", spec)]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn keepalloc_fail_list_names_each_site_and_site_fails_only_that_one() {
    let list = fail_sites("list");
    assert!(list.passed, "{}", list.describe("fail_sites list"));
    assert!(
        !list.stdout.contains("NULL"),
        "list fails nothing:\n{}",
        list.stdout
    );
    // make_weights from the loop and from the last line are two sites: their stacks differ.
    assert!(
        list.stderr
            .contains("3 sites, 7 allocation calls, 0 failed"),
        "{}",
        list.stderr
    );
    let site = |function: &str, hits: u64| {
        ctools::site_in(&list.stderr, function, hits)
            .unwrap_or_else(|| panic!("no site of {function} with {hits} hits:\n{}", list.stderr))
    };
    let (weights, kept, workspace) = (
        site("make_weights", 3),
        site("make_weights", 1),
        site("make_workspace", 3),
    );
    assert!(weights != workspace && weights != kept);
    // The block kept on purpose is reported live, by its site.
    assert!(
        list.stderr
            .contains(&format!("live at exit: site {kept} 1 blocks,")),
        "{}",
        list.stderr
    );

    let first = fail_sites(&format!("site:{weights}"));
    assert!(first.passed, "{}", first.describe("fail_sites site"));
    assert_eq!(
        first
            .stdout
            .lines()
            .filter(|l| l.contains("weights: NULL"))
            .count(),
        1,
        "only the first hit fails:\n{}",
        first.stdout
    );
    assert!(
        !first.stdout.contains("workspace: NULL"),
        "{}",
        first.stdout
    );
    let every = fail_sites(&format!("site:{workspace},hits:all"));
    assert_eq!(
        every
            .stdout
            .lines()
            .filter(|l| l.contains("workspace: NULL"))
            .count(),
        3,
        "{}",
        every.stdout
    );
    assert!(!every.stdout.contains("weights: NULL"), "{}", every.stdout);
    let nth = fail_sites("nth:2");
    assert!(
        nth.stdout.starts_with("weights: ok, workspace: NULL"),
        "{}",
        nth.stdout
    );
}

#[test]
fn a_bad_keepalloc_fail_refuses_the_first_acquire_and_builds_nothing() {
    let bad = fail_sites("site:zz");
    assert!(bad.stdout.contains("acquire: 3"), "{}", bad.stdout);
    assert!(
        bad.stderr.contains("KEEPALLOC_FAIL=\"site:zz\"") && bad.stderr.contains("not created"),
        "{}",
        bad.stderr
    );
}
