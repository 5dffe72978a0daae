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
    println!(
        "\n{:<24} {:<9} {:>4} {:>4} {:>11} {:>5} {:>4} {:>12} {:>4} {:>9} {:>5}",
        "model",
        "plan",
        "runs",
        "ok",
        "clean-error",
        "crash",
        "hang",
        "wrong-output",
        "leak",
        "keepalloc",
        "other"
    );
    for ((model, plan), c) in &rows {
        println!(
            "{:<24} {:<9} {:>4} {:>4} {:>11} {:>5} {:>4} {:>12} {:>4} {:>9} {:>5}",
            model,
            plan,
            c.iter().sum::<usize>(),
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            c[7]
        );
    }
}
