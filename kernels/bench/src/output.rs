//! The JSON the runs write: figures, paired ratios and the method behind them.

use crate::stats::{MIN_STEADY, Measured, Paired};
use crate::timing::{ROUNDS, STEADY};

/// How every ratio, printed or in the JSON (`ratio_method`), is computed; `~` in print is
/// `"steady": false` in the JSON.
pub(crate) fn ratio_method() -> String {
    format!(
        "vs * = keepalloc / that library: the median of the rounds' own ratios over the rounds \
         in which every core's FMA probe read >= {:.0}% of the run's best just before and after \
         both batches; ~ = fewer than {MIN_STEADY} such rounds, all {ROUNDS} rounds used",
        100.0 * STEADY
    )
}

/// A paired ratio in the JSON: `{"ratio", "steady", "steady_rounds", "rounds_used"}`, or
/// null.
pub(crate) fn paired_json(p: Option<Paired>) -> serde_json::Value {
    p.map_or(serde_json::Value::Null, |p| {
        serde_json::json!({
            "ratio": p.ratio,
            "q1": p.q1,
            "q3": p.q3,
            "verdict": format!("{:?}", p.verdict()).to_lowercase(),
            "steady": p.steady(),
            "steady_rounds": p.steady_rounds,
            "rounds_used": p.used,
        })
    })
}

/// One library's cell in the JSON: `{"gflops", "round_gflops", "correct"}`, or
/// `{"skipped": why}`.
pub(crate) fn result_json(gflops: &Result<Measured, String>, correct: bool) -> serde_json::Value {
    match gflops {
        Ok(g) => serde_json::json!({
            "gflops": g.median,
            "round_gflops": g.rounds,
            "round_floor_gflops": g.floors,
            "round_idle": g.idle,
            "round_pause_ms": g.pause_ms,
            "round_steady": g.steady,
            "correct": correct,
        }),
        Err(why) => serde_json::json!({ "skipped": why }),
    }
}

/// A JSON document as the bench writes it: pretty, with a final newline.
pub(crate) fn to_pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("a JSON value always serializes");
    s.push('\n');
    s
}
