//! What the harness says it can run: the answer to `keepalloc-harness --list`.
//!
//! This is the one source of truth for scenario, variant and window names, for which
//! (scenario, variant) pairs apply, for each control's signature (the finding kinds that
//! are the symptom of its bug), for the cell mutants and for the exit codes. xtask keeps no
//! copy of any of it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

/// A named thing with a one-line summary (a scenario, a window).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Named {
    /// Its name on the command line.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub summary: String,
}

/// A variant: keepalloc's provider or a negative control.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Variant {
    /// Its name on the command line.
    pub name: String,
    /// A deliberately broken provider that must be caught.
    pub control: bool,
    /// Compiled into this harness (the controls need feature `controls`).
    pub built: bool,
    /// What it is.
    #[serde(default)]
    pub summary: String,
}

/// A (scenario, variant) pair that applies, with the control's signature.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Variant name.
    pub variant: String,
    /// Finding kinds that catch this control here (empty for keepalloc).
    #[serde(default)]
    pub signature: Vec<String>,
}

/// A way of breaking the provider's cell on purpose (`--cfg keepalloc_cell_mutant=NAME`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct CellMutant {
    /// Its cfg value.
    pub name: String,
    /// Finding kinds that catch it.
    pub signature: Vec<String>,
    /// The scenarios that exercise it (a mutant that breaks only retries is invisible in
    /// a scenario without a failed attempt).
    pub scenarios: Vec<String>,
}

/// The version of the `--list` format (and of the result line) this xtask understands.
pub const CONTRACT: u32 = 1;

/// The harness's answer to `--list`.
#[derive(Clone, Debug, Deserialize)]
pub struct Catalog {
    /// The format's version: a harness of another version is refused.
    pub contract: u32,
    /// The mutant this harness was built with, if any.
    pub cell_mutant: Option<CellMutant>,
    /// Every scenario.
    pub scenarios: Vec<Named>,
    /// Every variant.
    pub variants: Vec<Variant>,
    /// Every window mode.
    pub windows: Vec<Named>,
    /// Exactly the (scenario, variant) pairs that apply.
    pub rows: Vec<Row>,
    /// The mutants a harness can be built with.
    #[serde(default)]
    pub cell_mutants: Vec<CellMutant>,
    /// Exit code of each outcome (`pass`, `harness-error`, `use-after-free`, ...).
    pub exit_codes: BTreeMap<String, i32>,
}

impl Catalog {
    /// Parses and checks the JSON object printed by `--list`.
    pub fn parse(text: &str) -> Result<Catalog, String> {
        let catalog: Catalog = serde_json::from_str(text.trim())
            .map_err(|e| format!("`keepalloc-harness --list` printed unusable JSON: {e}"))?;
        catalog.check()?;
        Ok(catalog)
    }

    fn check(&self) -> Result<(), String> {
        if self.contract != CONTRACT {
            return Err(format!(
                "the harness speaks `--list` contract {}, this xtask {CONTRACT}: rebuild both \
                 from one checkout",
                self.contract
            ));
        }
        for row in &self.rows {
            if self.scenario(&row.scenario).is_none() {
                return Err(format!(
                    "`--list` has a row for unknown scenario `{}`",
                    row.scenario
                ));
            }
            let Some(variant) = self.variant(&row.variant) else {
                return Err(format!(
                    "`--list` has a row for unknown variant `{}`",
                    row.variant
                ));
            };
            if variant.control && row.signature.is_empty() {
                return Err(format!(
                    "`--list` gives control `{}` no signature in `{}`: it could never be caught",
                    row.variant, row.scenario
                ));
            }
        }
        let mutants = self.cell_mutants.iter().chain(&self.cell_mutant);
        for m in mutants {
            if m.signature.is_empty() {
                return Err(format!(
                    "`--list` gives cell mutant `{}` no signature",
                    m.name
                ));
            }
        }
        Ok(())
    }

    /// The scenario named `name`.
    pub fn scenario(&self, name: &str) -> Option<&Named> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// The variant named `name`.
    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The name of exit code `code`, if the harness gave it one.
    pub fn exit_name(&self, code: i32) -> Option<&str> {
        self.exit_codes
            .iter()
            .find(|&(_, &c)| c == code)
            .map(|(name, _)| name.as_str())
    }

    /// Names of a list, for messages.
    pub fn names<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
        items.into_iter().collect::<Vec<_>>().join(", ")
    }
}

/// Runs `harness --list` (with the campaign's environment) and parses its answer.
pub fn read(
    harness: &Path,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Catalog, String> {
    let mut cmd = Command::new(harness);
    cmd.arg("--list")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let end = crate::process::run_process(cmd, timeout)?;
    if end.timed_out || end.code != Some(0) {
        let why = if end.timed_out {
            "timed out".to_string()
        } else {
            crate::process::describe_exit(&end)
        };
        return Err(format!(
            "`{} --list` failed ({why}): {}\n(the harness must answer `--list`; is it older \
             than this xtask?)",
            harness.display(),
            end.stderr
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output")
        ));
    }
    Catalog::parse(&end.stdout)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A `--list` answer shaped like the real harness's.
    pub const LIST: &str = r#"{
      "contract": 1,
      "cell_mutant": null,
      "scenarios": [{"name": "cold-start", "summary": "32 threads"},
                    {"name": "retry-after-capture", "summary": "retry"}],
      "variants": [{"name": "keepalloc", "control": false, "built": true, "summary": "ours"},
                   {"name": "racy", "control": true, "built": true, "summary": "ORT"},
                   {"name": "naive-retry", "control": true, "built": true, "summary": "once_cell"}],
      "windows": [{"name": "held", "summary": ""}, {"name": "yield", "summary": ""},
                  {"name": "bare", "summary": ""}],
      "rows": [{"scenario": "cold-start", "variant": "keepalloc", "signature": []},
               {"scenario": "cold-start", "variant": "racy",
                "signature": ["second-owner", "identity-mismatch", "use-after-free"]},
               {"scenario": "retry-after-capture", "variant": "keepalloc", "signature": []},
               {"scenario": "retry-after-capture", "variant": "naive-retry",
                "signature": ["second-owner", "use-after-free"]}],
      "cell_mutants": [{"name": "rebuild_in_place", "signature": ["owner-rebuilt"],
                        "scenarios": ["retry-after-capture"]}],
      "exit_codes": {"pass": 0, "harness-error": 1, "usage": 2, "not-built": 3,
                     "not-applicable": 4, "use-after-free": 10, "future-field": 99},
      "something_new": true
    }"#;

    #[test]
    fn parses_the_list_and_ignores_unknown_fields() {
        let c = Catalog::parse(LIST).unwrap();
        assert_eq!(c.rows.len(), 4);
        assert!(c.variant("racy").unwrap().control);
        assert_eq!(c.exit_name(1), Some("harness-error"));
        assert_eq!(c.exit_name(5), None);
        assert_eq!(c.cell_mutants[0].scenarios, ["retry-after-capture"]);
        let old = LIST.replace(r#""contract": 1,"#, r#""contract": 0,"#);
        assert!(Catalog::parse(&old).unwrap_err().contains("contract 0"));
    }

    #[test]
    fn refuses_a_control_without_signature_or_an_unknown_name() {
        let no_sig = LIST.replace(
            r#""signature": ["second-owner", "use-after-free"]"#,
            r#""signature": []"#,
        );
        assert!(
            Catalog::parse(&no_sig)
                .unwrap_err()
                .contains("no signature")
        );
        let unknown = LIST.replace(
            r#"{"scenario": "retry-after-capture", "variant": "keepalloc""#,
            r#"{"scenario": "warm-start", "variant": "keepalloc""#,
        );
        assert!(Catalog::parse(&unknown).unwrap_err().contains("warm-start"));
        assert!(Catalog::parse("usage: ...").is_err());
    }
}
