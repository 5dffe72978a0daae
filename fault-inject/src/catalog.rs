//! The campaign's one source of truth, as data: every scenario, variant, window, the pairs
//! that apply with their signatures, the cell mutants and the exit codes.
//! `keepalloc-harness --list` prints it as JSON and `cargo xtask fault-test` reads it, so
//! none of it is written twice.

use serde::Serialize;

use crate::delay::Window;
use crate::report::exit;
use crate::scenario::{CELL_MUTANT, CELL_MUTANTS, Scenario, Variant};

/// A named thing with a one-line summary.
#[derive(Clone, Debug, Serialize)]
pub struct Named {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it is.
    pub summary: &'static str,
}

/// A variant.
#[derive(Clone, Debug, Serialize)]
pub struct VariantEntry {
    /// Its name on the command line.
    pub name: &'static str,
    /// True for a negative control.
    pub control: bool,
    /// True when this build contains it.
    pub built: bool,
    /// What it is.
    pub summary: &'static str,
}

/// A (scenario, variant) pair that applies, and what catches the variant there.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: &'static str,
    /// The variant.
    pub variant: &'static str,
    /// The finding kinds that catch a control here (empty for keepalloc: it must pass).
    pub signature: &'static [&'static str],
}

/// A deliberately broken `KeepCell` and what must catch it.
#[derive(Clone, Debug, Serialize)]
pub struct Mutant {
    /// The value of `--cfg keepalloc_cell_mutant`.
    pub name: &'static str,
    /// The finding kinds that catch it in the keepalloc variant.
    pub signature: &'static [&'static str],
    /// The scenarios where its bug can show (where the keepalloc rows are judged as a
    /// control's when the harness was built with it).
    pub scenarios: &'static [&'static str],
}

/// The version of the `--list` format and of the result line it describes.
pub const CONTRACT: u32 = 1;

/// Everything `--list` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Catalog {
    /// [`CONTRACT`]: a campaign refuses a harness of another version.
    pub contract: u32,
    /// The cell mutant this build was compiled with, if any.
    pub cell_mutant: Option<Mutant>,
    /// Every scenario.
    pub scenarios: Vec<Named>,
    /// Every variant.
    pub variants: Vec<VariantEntry>,
    /// Every window.
    pub windows: Vec<Named>,
    /// The pairs that apply.
    pub rows: Vec<Row>,
    /// Every cell mutant.
    pub cell_mutants: Vec<Mutant>,
    /// Exit code names and values.
    pub exit_codes: std::collections::BTreeMap<&'static str, i32>,
}

/// The catalog of this build.
pub fn catalog() -> Catalog {
    let mutants: Vec<Mutant> = CELL_MUTANTS
        .iter()
        .map(|&(name, signature, scenarios)| Mutant {
            name,
            signature,
            scenarios,
        })
        .collect();
    Catalog {
        contract: CONTRACT,
        cell_mutant: CELL_MUTANT.and_then(|m| mutants.iter().find(|x| x.name == m).cloned()),
        scenarios: Scenario::ALL
            .iter()
            .map(|s| Named {
                name: s.name(),
                summary: s.summary(),
            })
            .collect(),
        variants: Variant::ALL
            .iter()
            .map(|v| VariantEntry {
                name: v.name(),
                control: v.is_control(),
                built: v.is_built(),
                summary: v.summary(),
            })
            .collect(),
        windows: Window::ALL
            .iter()
            .map(|w| Named {
                name: w.name(),
                summary: w.summary(),
            })
            .collect(),
        rows: Scenario::ALL
            .iter()
            .flat_map(|&s| {
                Variant::ALL
                    .iter()
                    .filter(move |v| v.applies_to(s))
                    .map(move |&v| Row {
                        scenario: s.name(),
                        variant: v.name(),
                        signature: v.signature(s),
                    })
            })
            .collect(),
        cell_mutants: mutants,
        exit_codes: exit::ALL.into_iter().collect(),
    }
}

/// The catalog as one line of JSON.
pub fn to_json() -> String {
    serde_json::to_string(&catalog()).expect("the catalog serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_has_a_control_and_keepalloc() {
        let c = catalog();
        for s in &c.scenarios {
            let rows: Vec<_> = c.rows.iter().filter(|r| r.scenario == s.name).collect();
            assert!(rows.iter().any(|r| r.variant == "keepalloc"), "{}", s.name);
            assert!(
                rows.iter()
                    .any(|r| r.variant != "keepalloc" && !r.signature.is_empty()),
                "scenario {} has no control",
                s.name
            );
        }
        let json: serde_json::Value = serde_json::from_str(&to_json()).unwrap();
        assert_eq!(json["exit_codes"]["use-after-free"], 10);
        assert!(json["cell_mutant"].is_null());
    }
}
