//! Which rows a campaign runs: the harness's rows (`--list`), narrowed by the command
//! line, one per window, each with what it must show.

use super::catalog::{Catalog, Named};
use super::options::{Options, WindowChoice};
use super::verdict::{Judge, Row};

/// Checks `names` against `known` (what `--list` said) for the option `flag`.
fn check_names<'a>(
    flag: &str,
    names: &[String],
    known: impl Iterator<Item = &'a str> + Clone,
) -> Result<(), String> {
    for n in names {
        if !known.clone().any(|k| k == n) {
            return Err(format!(
                "{flag}: the harness has no `{n}` (it has: {})",
                Catalog::names(known)
            ));
        }
    }
    Ok(())
}

/// The windows to run, checked against the harness's.
fn windows(catalog: &Catalog, choice: &WindowChoice) -> Result<Vec<String>, String> {
    let known = catalog.windows.iter().map(|w: &Named| w.name.as_str());
    match choice {
        WindowChoice::All => Ok(known.map(str::to_string).collect()),
        WindowChoice::Named(names) => {
            check_names("--window", names, known)?;
            Ok(names.clone())
        }
    }
}

/// The rows of the campaign, in the harness's order, windows innermost.
///
/// With a harness built with a cell mutant, keepalloc's rows are controls judged by the
/// mutant's signature in every window, and by default only keepalloc runs (in the
/// scenarios that exercise the mutant, when the harness says which).
pub fn plan(catalog: &Catalog, o: &Options) -> Result<Vec<Row>, String> {
    check_names(
        "--scenario",
        &o.scenarios,
        catalog.scenarios.iter().map(|s| s.name.as_str()),
    )?;
    check_names(
        "--variant",
        &o.variants,
        catalog.variants.iter().map(|v| v.name.as_str()),
    )?;
    let windows = windows(catalog, &o.windows)?;
    let mutant = catalog.cell_mutant.as_ref();
    let scenario_wanted = |name: &str| {
        if o.scenarios.is_empty() {
            mutant.is_none_or(|m| m.scenarios.iter().any(|s| s == name))
        } else {
            o.scenarios.iter().any(|s| s == name)
        }
    };
    let variant_wanted = |name: &str, control: bool| {
        if o.variants.is_empty() {
            mutant.is_none() || !control
        } else {
            o.variants.iter().any(|v| v == name)
        }
    };
    let mut rows = Vec::new();
    for listed in &catalog.rows {
        let variant = catalog
            .variant(&listed.variant)
            .ok_or_else(|| format!("no variant `{}` in `--list`", listed.variant))?;
        if !scenario_wanted(&listed.scenario) || !variant_wanted(&variant.name, variant.control) {
            continue;
        }
        if !variant.built {
            return Err(format!(
                "variant `{}` is not built into this harness (the controls need feature \
                 `controls`); leave it out with --variant",
                variant.name
            ));
        }
        let judge = match (variant.control, mutant) {
            (true, _) => Judge::Catch {
                signature: listed.signature.clone(),
                every_window: false,
            },
            (false, Some(m)) => Judge::Catch {
                signature: m.signature.clone(),
                every_window: true,
            },
            (false, None) => Judge::Clean,
        };
        for window in &windows {
            rows.push(Row::new(
                &listed.scenario,
                &listed.variant,
                window,
                judge.clone(),
            ));
        }
    }
    if rows.is_empty() {
        return Err(
            "no selected (scenario, variant) pair applies (see `keepalloc-harness \
                    --list`)"
                .into(),
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::super::catalog::tests::LIST;
    use super::super::options::parse_options;
    use super::*;

    fn options(args: &[&str]) -> Options {
        parse_options(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn keys(rows: &[Row]) -> Vec<String> {
        rows.iter()
            .map(|r| format!("{}/{}/{}", r.scenario, r.variant, r.window))
            .collect()
    }

    #[test]
    fn every_listed_row_in_each_window() {
        let c = Catalog::parse(LIST).unwrap();
        let rows = plan(&c, &options(&[])).unwrap();
        assert_eq!(
            keys(&rows),
            [
                "cold-start/keepalloc/held",
                "cold-start/keepalloc/bare",
                "cold-start/racy/held",
                "cold-start/racy/bare",
                "retry-after-capture/keepalloc/held",
                "retry-after-capture/keepalloc/bare",
                "retry-after-capture/naive-retry/held",
                "retry-after-capture/naive-retry/bare",
            ]
        );
        assert_eq!(rows[0].judge, Judge::Clean);
        assert_eq!(rows[2].judge.signature()[0], "second-owner");
        let all = plan(&c, &options(&["--window", "all", "--variant", "racy"])).unwrap();
        assert_eq!(
            keys(&all),
            [
                "cold-start/racy/held",
                "cold-start/racy/yield",
                "cold-start/racy/bare"
            ]
        );
    }

    #[test]
    fn names_are_checked_against_the_list() {
        let c = Catalog::parse(LIST).unwrap();
        let err = plan(&c, &options(&["--variant", "poisoning-once"])).unwrap_err();
        assert!(err.contains("keepalloc, racy, naive-retry"), "{err}");
        assert!(plan(&c, &options(&["--window", "spin"])).is_err());
        assert!(plan(&c, &options(&["--scenario", "panic-in-init"])).is_err());
        let none = plan(
            &c,
            &options(&["--scenario", "cold-start", "--variant", "naive-retry"]),
        );
        assert!(none.unwrap_err().contains("applies"));
    }

    #[test]
    fn an_unbuilt_control_is_refused() {
        let c = Catalog::parse(&LIST.replace(
            r#""control": true, "built": true, "summary": "ORT""#,
            r#""control": true, "built": false, "summary": "ORT""#,
        ))
        .unwrap();
        assert!(plan(&c, &options(&[])).unwrap_err().contains("not built"));
        assert!(plan(&c, &options(&["--variant", "keepalloc"])).is_ok());
    }

    #[test]
    fn a_cell_mutant_turns_keepalloc_into_a_control() {
        let c = Catalog::parse(&LIST.replace(
            r#""cell_mutant": null"#,
            r#""cell_mutant": {"name": "rebuild_in_place", "signature": ["owner-rebuilt"],
                               "scenarios": ["retry-after-capture"]}"#,
        ))
        .unwrap();
        let rows = plan(&c, &options(&[])).unwrap();
        assert_eq!(
            keys(&rows),
            [
                "retry-after-capture/keepalloc/held",
                "retry-after-capture/keepalloc/bare"
            ]
        );
        assert!(rows.iter().all(|r| r.judged()
            && r.judge
                == Judge::Catch {
                    signature: vec!["owner-rebuilt".into()],
                    every_window: true
                }));
    }
}
