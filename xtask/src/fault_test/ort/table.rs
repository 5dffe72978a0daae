//! The ONNX Runtime campaign's table: outcomes by model and kind of plan.

use std::collections::BTreeMap;

use super::child::Run;

pub(super) const OUTCOMES: [&str; 7] = [
    "ok",
    "clean-error",
    "crash",
    "hang",
    "wrong-output",
    "leak",
    "keepalloc-violation",
];

pub(super) fn print_table(runs: &[Run]) {
    let kind = |r: &Run| -> String {
        if r.control {
            "control".into()
        } else if r.plan.starts_with("nth:") {
            "nth:each".into()
        } else if let Some(rest) = r.plan.strip_prefix("probability:") {
            format!("p={}", rest.split('@').next().unwrap_or(""))
        } else if let Some(k) = r.plan.strip_prefix("refuse-registrations:") {
            format!("refuse:{k}")
        } else {
            r.plan.clone()
        }
    };
    let mut rows: BTreeMap<(String, String), [usize; 8]> = BTreeMap::new();
    for r in runs {
        let row = rows.entry((r.model.clone(), kind(r))).or_default();
        let i = OUTCOMES.iter().position(|o| *o == r.outcome).unwrap_or(7);
        row[i] += 1;
    }
    println!();
    print_row(COLUMNS.map(|(heading, _)| heading.to_owned()));
    for ((model, plan), c) in &rows {
        print_row(std::array::from_fn(|i| match i {
            0 => model.clone(),
            1 => plan.clone(),
            2 => c.iter().sum::<usize>().to_string(),
            i => c[i - 3].to_string(),
        }));
    }
}

/// The table's columns, heading and width: model and plan, the runs, then a column per
/// entry of [`OUTCOMES`] and one for any other outcome.
const COLUMNS: [(&str, usize); 11] = [
    ("model", 24),
    ("plan", 9),
    ("runs", 4),
    ("ok", 4),
    ("clean-error", 11),
    ("crash", 5),
    ("hang", 4),
    ("wrong-output", 12),
    ("leak", 4),
    ("keepalloc", 9),
    ("other", 5),
];

/// One line of the table: model and plan left-aligned, the counts right-aligned.
fn print_row(cells: [String; 11]) {
    let line: Vec<String> = cells
        .iter()
        .zip(COLUMNS)
        .enumerate()
        .map(|(i, (cell, (_, width)))| {
            if i < 2 {
                format!("{cell:<width$}")
            } else {
                format!("{cell:>width$}")
            }
        })
        .collect();
    println!("{}", line.join(" "));
}
