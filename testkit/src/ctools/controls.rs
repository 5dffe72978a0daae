//! The negative controls on stand-in libraries (`tests/c/controls/broken_*.c`), their
//! bug-free baselines, and running both.

use std::path::Path;

use super::judge::{build_against, catch_all, judge_baseline, judge_control};
use super::outcome::SIGSEGV;
use super::signature::{Catch, Control, Signature};
use super::toolchain::{Dirs, Program, Toolchain, stem};

/// `broken_provider.c`: the broken ONCE.
const BROKEN_PROVIDER: &str = "broken_provider.c";
/// `broken_contract.c`: a correct once with one clause of the table's or the arguments'
/// contract broken.
const BROKEN_CONTRACT: &str = "broken_contract.c";

/// Every negative control and the tests that must fail against it.
pub const CONTROLS: &[Control] = &[
    Control {
        name: "racy",
        source: BROKEN_PROVIDER,
        define: "KEEPALLOC_CONTROL_RACY",
        breaks: "owner creation is an unsynchronised check-then-store (ORT #32461)",
        caught_by: &[Catch {
            test: "acquire_race",
            by: Signature::Check("atomic_load(&hook_calls) == 1"),
        }],
    },
    Control {
        name: "naive-retry",
        source: BROKEN_PROVIDER,
        define: "KEEPALLOC_CONTROL_NAIVE_RETRY",
        breaks: "a failed init drops the owner and the retry builds another",
        caught_by: &[
            // The hooks' own records of the context they were handed, not the control's
            // `owners_constructed`: a check must not read its verdict from the counters of
            // the code it judges.
            Catch {
                test: "init_retry",
                by: Signature::Check("log.contexts[attempt] == log.contexts[0]"),
            },
            Catch {
                test: "init_always_fails",
                by: Signature::Check("atomic_load(&last_context) == atomic_load(&first_context)"),
            },
        ],
    },
    Control {
        name: "size-overflow",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_SIZE_OVERFLOW",
        breaks: "NULL on failure: size + header wraps, allocate(SIZE_MAX) returns a tiny block",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("t->allocate(ctx, SIZE_MAX) == NULL"),
        }],
    },
    Control {
        name: "realloc-no-copy",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_REALLOC_NO_COPY",
        breaks: "reallocate keeps contents: a block that moves loses them",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("filled(a, 100, 1)"),
        }],
    },
    Control {
        name: "realloc-frees-on-failure",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_REALLOC_FREES_ON_FAILURE",
        breaks: "a failed reallocate keeps the old block: it frees it",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("filled(kept, 40, 2)"),
        }],
    },
    Control {
        name: "free-null-crashes",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_FREE_NULL_CRASHES",
        breaks: "freeing NULL is a no-op: deallocate(NULL) reads the header at NULL - 16",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "deallocate(ctx, NULL)",
            },
        }],
    },
    Control {
        name: "ignores-alignment",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_IGNORES_ALIGNMENT",
        breaks: "aligned_allocate honours the alignment: it returns allocate's 16-aligned block",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("aligned(blocks[i], alignments[i])"),
        }],
    },
    Control {
        name: "bad-alignment-accepted",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_BAD_ALIGNMENT_ACCEPTED",
        breaks: "the alignment must be a power of two: 0 and 3 are raised to 16 before the check",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("t->aligned_allocate(ctx, bad[i], 64) == NULL"),
        }],
    },
    Control {
        name: "zero-size-null",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_ZERO_SIZE_NULL",
        breaks: "size 0 returns a unique block: allocate(0) returns NULL",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("z1 != NULL && z2 != NULL && z3 != NULL"),
        }],
    },
    Control {
        name: "null-out-written",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_WRITTEN",
        breaks: "a NULL out_table is refused: acquire stores the table through it",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_acquire(..., NULL) before publication",
            },
        }],
    },
    Control {
        name: "null-out-ok",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_OK",
        breaks: "a NULL out_table is refused: acquire does the work and returns KEEPALLOC_OK",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Check(
                "keepalloc_acquire(counting_hook, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT",
            ),
        }],
    },
    Control {
        name: "null-out-checked-late",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE",
        breaks: "a NULL out_table changes nothing: it is refused only after the hook ran",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Check("hook_calls == 0"),
        }],
    },
    Control {
        name: "fast-path-unchecked",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_FAST_PATH_UNCHECKED",
        breaks: "a NULL out_table is refused after publication: the fast path stores through it",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_acquire(..., NULL) after publication",
            },
        }],
    },
    Control {
        name: "stats-ex-overrun",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_STATS_EX_OVERRUN",
        breaks: "keepalloc_get_stats_ex fills at most `size` bytes: it writes its whole struct",
        caught_by: &[Catch {
            test: "status_and_stats",
            by: Signature::Check("older.canary[i] == 0xAB"),
        }],
    },
    Control {
        name: "stats-null-written",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_STATS_NULL_WRITTEN",
        breaks: "keepalloc_get_stats(NULL) is a no-op: it stores through NULL",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_get_stats(NULL)",
            },
        }],
    },
    Control {
        name: "out-written-on-failure",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_OUT_WRITTEN_ON_FAILURE",
        breaks: "on failure *out_table is untouched: it is stored before the hook ran",
        caught_by: &[
            Catch {
                test: "init_always_fails",
                by: Signature::Check("out == sentinel"),
            },
            Catch {
                test: "init_retry",
                by: Signature::Check("out == sentinel"),
            },
        ],
    },
];

/// The bug-free build of a control file. Every test that catches one of its controls must
/// PASS against it: the control then fails by its one bug, not by the rest of the file.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    /// The file in `tests/c/controls/`.
    pub source: &'static str,
    /// The `-D` that breaks nothing.
    pub define: &'static str,
}

/// The control files that have a bug-free build (`broken_provider.c` has none: its once IS
/// the bug).
pub const BASELINES: &[Baseline] = &[Baseline {
    source: BROKEN_CONTRACT,
    define: "KEEPALLOC_CONTROL_BASELINE",
}];

impl Baseline {
    /// The tests it must pass: those that catch a control of the same file, sorted.
    pub fn tests(&self) -> Vec<&'static str> {
        let mut tests: Vec<&'static str> = CONTROLS
            .iter()
            .filter(|c| c.source == self.source)
            .flat_map(|c| c.caught_by.iter().map(|catch| catch.test))
            .collect();
        tests.sort_unstable();
        tests.dedup();
        tests
    }
}

/// Builds the C test `test` on the control file `source` (in `tests/c/controls/`) with
/// `-D<define>`, instead of `libkeepalloc.a`, into `out`.
fn build_on_control(
    tc: &Toolchain,
    dirs: &Dirs,
    test: &str,
    source: &str,
    define: &str,
    out: &Path,
) -> Result<(), String> {
    let program = Program {
        sources: vec![
            dirs.tests().join(format!("{test}.c")),
            dirs.controls().join(source),
        ],
        defines: vec![define.to_owned()],
        includes: vec![],
        link: vec!["-lpthread".into()],
        out: out.to_path_buf(),
    };
    build_against(tc, dirs, &program, test, source, define)
}

/// Builds the C test `catch.test` against the negative control and runs it. `Ok` holds the
/// failure it reported when that failure is the signature of the control's bug
/// (`catch.by`); `Err` when the test passed, or failed some other way: another check,
/// another signal, a timeout or a build error is inconclusive, never a catch.
pub fn run_control(
    tc: &Toolchain,
    dirs: &Dirs,
    control: &Control,
    catch: &Catch,
    out_dir: &Path,
) -> Result<String, String> {
    let test = catch.test;
    let out = out_dir.join(format!("{test}-control-{}", control.name));
    build_on_control(tc, dirs, test, control.source, control.define, &out)?;
    judge_control(&out, control, catch)
}

/// Builds the C test `test` against the bug-free `baseline` and runs it: `Ok` with its
/// `ok:` line when it passed, `Err` when it did not (then the controls of that file fail
/// for more than their one bug, and their catches prove nothing).
pub fn run_baseline(
    tc: &Toolchain,
    dirs: &Dirs,
    baseline: &Baseline,
    test: &str,
    out_dir: &Path,
) -> Result<String, String> {
    let out = out_dir.join(format!(
        "{test}-baseline-{}",
        stem(Path::new(baseline.source))
    ));
    build_on_control(tc, dirs, test, baseline.source, baseline.define, &out)?;
    let build = format!(
        "the bug-free baseline of {} (-D{})",
        baseline.source, baseline.define
    );
    judge_baseline(&out, test, &build)
}

/// Every catch of [`CONTROLS`], each said through `say` as it comes; returns the misses.
pub fn catch_controls(
    tc: &Toolchain,
    dirs: &Dirs,
    out_dir: &Path,
    say: impl FnMut(&str),
) -> Vec<String> {
    catch_all(
        CONTROLS,
        |control, catch| run_control(tc, dirs, control, catch, out_dir),
        say,
    )
}

/// Every test of every [`BASELINES`] entry, each pass said through `say`; returns the
/// failures.
pub fn pass_baselines(
    tc: &Toolchain,
    dirs: &Dirs,
    out_dir: &Path,
    mut say: impl FnMut(&str),
) -> Vec<String> {
    let mut failures = Vec::new();
    for baseline in BASELINES {
        for test in baseline.tests() {
            match run_baseline(tc, dirs, baseline, test, out_dir) {
                Ok(line) => say(&format!("baseline {}: {line}", baseline.source)),
                Err(e) => failures.push(e),
            }
        }
    }
    failures
}
