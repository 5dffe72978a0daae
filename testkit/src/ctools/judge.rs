//! Judging a control's run: only the signature of its bug is a catch, and a bug-free baseline
//! must pass. Shared by the controls on stand-in libraries and those on the real one.

use std::path::Path;
use std::time::Duration;

use super::run::run_with_timeout;
use super::signature::{Catch, Control};
use super::toolchain::{Dirs, Program, Toolchain, compile};

/// How long one control's test may run. The C tests finish in milliseconds; this only turns a
/// hang into an error (a control "caught" by a timeout is inconclusive, never a catch).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(120);

/// Compiles `program`: the test `test` on `source` with `-D<define>`.
pub(super) fn build_against(
    tc: &Toolchain,
    dirs: &Dirs,
    program: &Program,
    test: &str,
    source: &str,
    define: &str,
) -> Result<(), String> {
    compile(tc, dirs, program).map_err(|e| {
        format!("cannot build {test} on {source} -D{define} (a build error is never a catch)\n{e}")
    })
}

/// Runs `bin`, the test `catch.test` built against `control`. `Ok` holds the failure it
/// reported when that failure is the signature of the control's bug (`catch.by`); `Err` when
/// the test passed, or failed some other way: another check, another signal or a timeout is
/// inconclusive, never a catch.
pub(super) fn judge_control(
    bin: &Path,
    control: &Control,
    catch: &Catch,
) -> Result<String, String> {
    let test = catch.test;
    let outcome = run_with_timeout(bin, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Err(format!(
            "{test} PASSED against the broken `{}` control ({}): it cannot catch the bug it \
             is for\n{}",
            control.name,
            control.breaks,
            outcome.describe(test)
        ))
    } else if catch.by.matches(&outcome) {
        Ok(outcome.reason())
    } else {
        Err(format!(
            "{test} failed against the `{}` control ({}), but not by the signature of its bug: \
             expected {}, got {}. Inconclusive: that is no catch.\n{}",
            control.name,
            control.breaks,
            catch.by,
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// Runs `bin`, the test `test` built on `build` (a bug-free build of a control file): `Ok`
/// with its `ok:` line when it passed, `Err` when it did not (then the controls of that file
/// fail for more than their one bug, and their catches prove nothing).
pub(super) fn judge_baseline(bin: &Path, test: &str, build: &str) -> Result<String, String> {
    let outcome = run_with_timeout(bin, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Ok(outcome
            .stdout
            .lines()
            .find(|line| line.starts_with("ok:"))
            .unwrap_or("ok")
            .to_owned())
    } else {
        Err(format!(
            "{test} FAILED on {build}: {}. Its controls would fail for more than their one \
             bug.\n{}",
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// Runs every catch of every control in `controls` through `run`: each catch is said through
/// `say` as it comes, each miss is returned (all are run; none stops the others).
pub(super) fn catch_all(
    controls: &[Control],
    mut run: impl FnMut(&Control, &Catch) -> Result<String, String>,
    mut say: impl FnMut(&str),
) -> Vec<String> {
    let mut misses = Vec::new();
    for control in controls {
        for catch in control.caught_by {
            match run(control, catch) {
                Ok(reason) => say(&format!(
                    "control {} ({}): {} failed as it must: {reason}",
                    control.name, control.breaks, catch.test
                )),
                Err(e) => misses.push(e),
            }
        }
    }
    misses
}
