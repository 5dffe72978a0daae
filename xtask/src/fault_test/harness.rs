//! Building `keepalloc-harness`: the plain build (release, feature `controls`) and the
//! cell-mutant builds, each mutant in its own target directory so that switching between
//! them never rebuilds the others.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::util;

/// `cargo` arguments that build the harness in release with the controls (shared with the
/// AddressSanitizer build, which adds its target).
pub const HARNESS_BUILD_ARGS: [&str; 9] = [
    "build",
    "--release",
    "-p",
    "keepalloc-fault-inject",
    "--features",
    "controls",
    "--bin",
    "keepalloc-harness",
    "--message-format=json-render-diagnostics",
];

/// The harness's executable name.
pub const HARNESS: &str = "keepalloc-harness";

/// Builds the harness, with the cell mutant `mutant` when given, and returns its path.
pub fn build(mutant: Option<&str>) -> Result<PathBuf, String> {
    let mut cmd = util::cargo();
    cmd.args(HARNESS_BUILD_ARGS);
    match mutant {
        None => eprintln!("fault-test: building {HARNESS} (release, feature `controls`)"),
        Some(name) => {
            let dir = util::root().join("target").join("cell-mutant").join(name);
            eprintln!(
                "fault-test: building {HARNESS} with cell mutant `{name}` into {}",
                dir.display()
            );
            // RUSTFLAGS replaces the config's rustflags; keep the caller's own.
            let cfg = format!("--cfg keepalloc_cell_mutant=\"{name}\"");
            let flags = match std::env::var("RUSTFLAGS") {
                Ok(f) if !f.trim().is_empty() => format!("{f} {cfg}"),
                _ => cfg,
            };
            cmd.env("RUSTFLAGS", flags)
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .env("CARGO_TARGET_DIR", dir);
        }
    }
    executable_from(cmd, HARNESS)
}

/// The fields of a cargo JSON message this needs.
#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    executable: Option<PathBuf>,
}

/// Runs a `cargo build --message-format=json...` command and finds the executable named
/// `name` among its artifacts (so any target directory works).
pub fn executable_from(mut cmd: Command, name: &str) -> Result<PathBuf, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("building {name} failed: {}", out.status));
    }
    find_executable(&String::from_utf8_lossy(&out.stdout), name)
        .ok_or_else(|| format!("cargo built no executable named {name}"))
}

/// The executable named `name` in cargo's JSON messages (one per line).
fn find_executable(messages: &str, name: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<Message>(l).ok())
        .filter(|m| m.reason == "compiler-artifact")
        .filter_map(|m| m.executable)
        .find(|p| p.file_stem().is_some_and(|s| s == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_executable_in_cargo_messages() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","package_id":"x","executable":null}"#,
            "\n",
            "not json\n",
            r#"{"reason":"compiler-artifact","executable":"/t/release/other","fresh":true}"#,
            "\n",
            r#"{"reason":"compiler-artifact","executable":"/t/q\"d\\release\u0041/keepalloc-harness"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\n",
        );
        assert_eq!(
            find_executable(messages, "keepalloc-harness"),
            Some(PathBuf::from("/t/q\"d\\releaseA/keepalloc-harness"))
        );
        assert_eq!(find_executable(messages, "absent"), None);
    }
}
