//! Fresh processes: a test re-runs its own binary for one (usually `#[ignore]`d) child test.
//!
//! Process-wide state (a published table, a captured allocator, a signal handler, an exit
//! code) can only be tested once per process, so such tests run their body in a child.

use std::ffi::OsStr;
use std::process::{Command, Output};

/// Runs the test `name` of this test binary alone, in a fresh process, ignored or not, with
/// `env` added to its environment, and returns what it did.
pub fn rerun<K: AsRef<OsStr>, V: AsRef<OsStr>>(name: &str, env: &[(K, V)]) -> Output {
    let mut cmd = command(name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("spawn the test binary")
}

/// The command [`rerun`] runs (test `name` of this test binary alone, ignored or not), for a
/// caller that must change the child's environment in other ways, such as removing a
/// variable that the child must not inherit.
pub fn command(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--include-ignored"])
        .args(["--test-threads", "1"]);
    cmd
}

/// A child's exit status and both its streams, for an assertion message.
pub fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that the child exited with `code`, describing what it did otherwise.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", describe(out));
}

/// One stack of a child's report: the lines of `text` from the one containing `heading` to
/// the next line that is not a frame (`#N ...`). Panics when `heading` is missing.
pub fn report_section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no \"{heading}\" in:\n{text}"));
    let rest = &text[start..];
    let body_start = rest.find('\n').map_or(rest.len(), |i| i + 1);
    let end = rest[body_start..]
        .lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.len() + 1)
        .sum::<usize>();
    &rest[..body_start + end]
}
