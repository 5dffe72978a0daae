//! Both XNNPACKs on keepalloc: Debian's 2022 `libXNNPACK.so.0` and the current one inside
//! ExecuTorch 1.5.1's wheel (`libexecutorch_backend_xnnpack.so`), each called with the
//! signatures of its own header, and the adoption check.
//!
//! Each scenario runs in a fresh child process (XNNPACK keeps its first allocator for the
//! life of the process), started by re-running this test executable with
//! `XNNPACK_ADOPTION_SCENARIO` set:
//!
//! * `debian-fresh`: 32 threads adopt a freshly loaded Debian XNNPACK at once; one owner, one
//!   init; its fully-connected operators compute the right values, allocate only through
//!   keepalloc's owner (Scribble underneath) and give every byte back.
//! * `debian-preinitialized` (negative control of the check): the same library, but
//!   `xnn_initialize(NULL)` was called first, as ExecuTorch does. The check must say
//!   "not adopted" — so the `debian-fresh` success is not a check that always passes — and
//!   the test's own backend (a static `Scribble` it reads directly, not the owner's counter
//!   that `adopt()` reads) must confirm that no XNNPACK allocation reached the owner.
//! * `executorch` and `executorch-dlmopen` (a private namespace): the real case. Loading
//!   ExecuTorch's backend initializes XNNPACK with its own allocator; 32 threads adopting it
//!   all get "not adopted", with one owner kept and nothing published, and a retry says the
//!   same with the same owner. The library itself works (2026 signatures: the FC operator
//!   computes the right values) — through its own allocator, never ours.
//!
//! Needs `libxnnpack-dev` (Debian) and `cargo xtask runtimes` (ExecuTorch). Without them a
//! scenario prints NOT RUN and passes, except under `CI=true`, where it fails.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Barrier};

use keepalloc_allocators::System;
use keepalloc_fault_inject::Scribble;
use keepalloc_fault_inject::ledger::{self, Witnessed};
use keepalloc_provider::{GlobalProvider, ProviderError};
use keepalloc_xnnpack::{Generation, LIBRARY, Namespace, Xnnpack, XnnpackError, adopt};

const SCENARIO_ENV: &str = "XNNPACK_ADOPTION_SCENARIO";
const THREADS: usize = 32;

/// The test's own backend, a static it reads directly: whether XNNPACK's allocations
/// reached the owner is Scribble's own count of the blocks it handed out, not the owner's
/// allocation counter (which `adopt()` itself reads for its verdict). Nothing but the owner
/// allocates from it.
static BACKEND: Witnessed = Witnessed::new();

static OWNER: GlobalProvider<&'static Scribble<System>> =
    GlobalProvider::new(|| BACKEND.construct(), None);

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn debian_path() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/libXNNPACK.so.0");
    p.is_file().then_some(p)
}

/// Checks XNNPACK's FC operator against a plain reference (values from `seed`).
fn check_fc(xnn: &Xnnpack, input: usize, output: usize, batch: usize) {
    let value = |i: usize, seed: usize| ((i * 7 + seed * 13) % 17) as f32 / 8.0 - 1.0;
    let x: Vec<f32> = (0..batch * input).map(|i| value(i, 1)).collect();
    let w: Vec<f32> = (0..output * input).map(|i| value(i, 2)).collect();
    let b: Vec<f32> = (0..output).map(|i| value(i, 3)).collect();
    let (lo, hi) = (-3.0f32, 3.0f32);
    let y = xnn
        .fully_connected(input, output, batch, &x, &w, &b, lo, hi)
        .unwrap_or_else(|s| panic!("FC {input}x{output}x{batch}: status {s}"));
    for n in 0..batch {
        for o in 0..output {
            let dot: f64 = (0..input)
                .map(|k| f64::from(x[n * input + k]) * f64::from(w[o * input + k]))
                .sum();
            let want = ((dot + f64::from(b[o])) as f32).clamp(lo, hi);
            let got = y[n * output + o];
            assert!(
                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "y[{n},{o}] = {got}, want {want}"
            );
        }
    }
}

/// 32 threads adopt at once; returns each thread's result.
fn adopt_from_threads(xnn: &'static Xnnpack) -> Vec<Result<usize, String>> {
    let gate = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.wait();
                adopt(&OWNER, xnn)
                    .map(|h| h.context() as usize)
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    workers.into_iter().map(|w| w.join().unwrap()).collect()
}

fn scenario_adopted(xnn: &'static Xnnpack) {
    let results = adopt_from_threads(xnn);
    let first = results[0]
        .clone()
        .expect("a fresh XNNPACK adopts our table");
    assert!(
        results.iter().all(|r| r.as_ref() == Ok(&first)),
        "one allocator for every thread"
    );
    // The test's own witnesses first: its constructor counter, its backend's counts.
    assert_eq!(
        BACKEND.constructed(),
        1,
        "one owner (the test's constructor counter)"
    );
    let probe = BACKEND.stats();
    assert!(
        probe.allocations > 0,
        "adopt() said adopted and XNNPACK's probe did allocate from our backend: {probe:?}"
    );
    assert_eq!(
        (probe.frees, probe.live_blocks),
        (probe.allocations, 0),
        "and the probe gave its blocks back: {probe:?}"
    );
    let stats = OWNER.stats();
    let library = OWNER.library_stats(LIBRARY).unwrap();
    assert_eq!(
        (
            stats.owners_constructed,
            library.init_attempts,
            library.init_successes
        ),
        (1, 1, 1)
    );
    let base = stats.allocator;
    let backend_base = BACKEND.stats();
    for (input, output, batch) in [(64, 32, 4), (256, 128, 1), (7, 5, 3)] {
        check_fc(xnn, input, output, batch);
    }
    let what = "XNNPACK's operators";
    let blocks = ledger::blocks_returned(what, &backend_base, &BACKEND.stats());
    ledger::owner_agrees(what, &base, &OWNER.stats().allocator, blocks);
    assert_eq!(BACKEND.verify_quarantine(), 0);
    assert!(
        BACKEND.violations().is_empty(),
        "{:?}",
        BACKEND.violations()
    );
    println!("adopted: {blocks} allocations through the owner for three FC operators");
}

fn scenario_not_adopted(xnn: &'static Xnnpack) {
    let not_adopted = XnnpackError::NotAdopted.to_string();
    let results = adopt_from_threads(xnn);
    for r in &results {
        let e = r
            .as_ref()
            .expect_err("a library initialized earlier must not report success");
        assert!(e.contains(&not_adopted), "the distinct error, got: {e}");
    }
    // The verdict, checked by a witness adopt() does not read: the probe operators XNNPACK
    // created and deleted (one per attempt) took nothing from our backend.
    let probe = BACKEND.stats();
    assert_eq!(
        probe.allocations, 0,
        "adopt() said not adopted, but XNNPACK's allocations reached our owner \
         (the backend's own count): {probe:?}"
    );
    assert_eq!(
        BACKEND.constructed(),
        1,
        "one owner, kept (the test's constructor counter)"
    );
    let stats = OWNER.stats();
    assert_eq!(stats.owners_constructed, 1, "one owner, kept");
    assert!(
        !OWNER.is_initialized(LIBRARY),
        "XNNPACK's once is not complete"
    );
    let owner = OWNER.constructed_owner().unwrap() as *const _;
    // A retry says the same, with the same owner.
    let again = adopt(&OWNER, xnn);
    assert!(
        matches!(&again, Err(ProviderError::InitFailed(e)) if e.to_string() == not_adopted),
        "{again:?}"
    );
    assert!(core::ptr::eq(OWNER.constructed_owner().unwrap(), owner));
    assert_eq!(BACKEND.constructed(), 1, "still one owner");
    assert_eq!(OWNER.stats().owners_constructed, 1);
    // The library works, through its own allocator: our backend never sees a block.
    let base = OWNER.stats().allocator;
    for (input, output, batch) in [(64, 32, 4), (256, 128, 1), (7, 5, 3)] {
        check_fc(xnn, input, output, batch);
    }
    let backend = BACKEND.stats();
    assert_eq!(
        backend.allocations, 0,
        "a library that was not adopted never allocates from our backend: {backend:?}"
    );
    assert_eq!(OWNER.stats().allocator.allocations, base.allocations);
    println!(
        "not adopted, as it must be: {} of {THREADS} threads got the error; {} attempts, 1 owner",
        results.len(),
        OWNER.library_stats(LIBRARY).unwrap().init_attempts
    );
}

fn run_scenario(name: &str) {
    match name {
        "debian-fresh" | "debian-preinitialized" => {
            let path = debian_path().expect("checked by the parent");
            // SAFETY: Debian's libxnnpack-dev library at its packaged path, built from the 2022-02-16 xnnpack.h that Generation::Debian2022 describes.
            let xnn = unsafe { Xnnpack::load(&path, Generation::Debian2022, Namespace::Default) }
                .unwrap();
            if name == "debian-fresh" {
                scenario_adopted(xnn);
            } else {
                // SAFETY: NULL selects XNNPACK's own allocator; nothing of ours is kept.
                assert_eq!(unsafe { xnn.initialize(None) }, 0);
                scenario_not_adopted(xnn);
            }
        }
        "executorch" | "executorch-dlmopen" => {
            let rt = keepalloc_testkit::runtimes::ensure().expect("checked by the parent");
            let ns = if name == "executorch" {
                Namespace::Default
            } else {
                Namespace::New
            };
            let xnn =
                // SAFETY: the library named by the manifest `cargo xtask runtimes` wrote: ExecuTorch 1.5.1's XNNPACK backend from its pinned, sha256-checked wheel, which exports the current xnnpack.h API (Generation::Current).
                unsafe { Xnnpack::load(&rt.executorch_xnnpack, Generation::Current, ns) }.unwrap();
            scenario_not_adopted(xnn);
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Runs `scenario` in a fresh process (this test binary, filtered to `child_entry`, which is
/// `#[ignore]`d so that a plain `cargo test` does not run it without a scenario).
fn in_fresh_process(scenario: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_entry",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_ENV, scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stdout.lines() {
        if let Some(at) = line.find("adopted") {
            let start = line[..at]
                .rfind("not ")
                .filter(|&i| i + 4 == at)
                .unwrap_or(at);
            eprintln!("{scenario}: {}", &line[start..]);
        }
    }
    assert!(
        out.status.success(),
        "{scenario} failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{scenario}: the child did not run the scenario\n{stdout}"
    );
}

#[test]
#[ignore = "child process of the scenario tests below (in_fresh_process runs it)"]
fn child_entry() {
    let name = std::env::var(SCENARIO_ENV)
        .unwrap_or_else(|_| panic!("run as a child, with {SCENARIO_ENV} set"));
    run_scenario(&name);
}

fn not_run(test: &str, why: &str) {
    assert!(!ci(), "{test}: CI=true and {why}");
    eprintln!("{test}: NOT RUN (passes only because CI is not true): {why}");
}

#[test]
fn debian_xnnpack_adopts_a_fresh_table() {
    if debian_path().is_none() {
        return not_run(
            "debian_xnnpack_adopts_a_fresh_table",
            "libxnnpack-dev is not installed",
        );
    }
    in_fresh_process("debian-fresh");
}

#[test]
fn control_debian_xnnpack_initialized_earlier_is_not_adopted() {
    if debian_path().is_none() {
        return not_run(
            "control_debian_xnnpack_initialized_earlier",
            "libxnnpack-dev is not installed",
        );
    }
    in_fresh_process("debian-preinitialized");
}

#[test]
fn executorch_xnnpack_is_reported_not_adopted() {
    if let Err(e) = keepalloc_testkit::runtimes::ensure() {
        return not_run("executorch_xnnpack_is_reported_not_adopted", &e.to_string());
    }
    in_fresh_process("executorch");
    in_fresh_process("executorch-dlmopen");
}

#[test]
fn a_2022_library_is_refused_as_current_and_vice_versa() {
    if let Some(debian) = debian_path() {
        // SAFETY: Debian's XNNPACK (constructors safe to run); the wrong generation is refused before any of its functions is called.
        let e = unsafe { Xnnpack::load(&debian, Generation::Current, Namespace::New) }.unwrap_err();
        assert!(matches!(e, XnnpackError::Generation { .. }), "{e}");
    } else if ci() {
        panic!("CI=true and libxnnpack-dev is not installed");
    }
    if let Ok(rt) = keepalloc_testkit::runtimes::ensure() {
        // SAFETY: the manifest's ExecuTorch XNNPACK backend (pinned, sha256-checked wheel); the wrong generation is refused before any of its functions is called.
        let e = unsafe {
            Xnnpack::load(
                &rt.executorch_xnnpack,
                Generation::Debian2022,
                Namespace::New,
            )
        }
        .unwrap_err();
        assert!(matches!(e, XnnpackError::Generation { .. }), "{e}");
    } else if ci() {
        panic!("CI=true and no runtimes manifest: run `cargo xtask runtimes`");
    }
}
