//! What oneDNN chose, shape by shape, and the f32 runner of the bench's tables.

use super::{Matmul, OneDnn, Weights};

/// The implementations oneDNN chose in this run, `(operator, shape, name)`, in order.
static CHOSEN: std::sync::Mutex<Vec<Chosen>> = std::sync::Mutex::new(Vec::new());

/// `(operator, shape, implementation)`: the shape as printed, `MxKxN` (`MxK` for a pass
/// over an input alone).
type Chosen = (String, String, String);

pub fn record(op: &str, shape: String, implementation: &str) {
    let mut chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    if !chosen.iter().any(|c| c.0 == op && c.1 == shape) {
        chosen.push((op.into(), shape, implementation.into()));
    }
}

/// The operators whose line [`unreported_lines`] has returned.
static REPORTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// What oneDNN chose for each operator not reported yet, shapes grouped by implementation:
/// `f32 1t: brg:avx512_core on 1x96x64, 4x512x512; gemm:jit on …`. Each table prints the
/// lines after it, so `--op all` names every operator once, after the table that ran it.
pub fn unreported_lines() -> Vec<String> {
    let chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    let mut ops: Vec<&str> = Vec::new();
    for c in chosen.iter() {
        if !ops.contains(&c.0.as_str()) && !reported.contains(&c.0) {
            ops.push(&c.0);
        }
    }
    reported.extend(ops.iter().map(|op| op.to_string()));
    ops.into_iter()
        .map(|op| {
            let mut by_impl: Vec<(&str, Vec<String>)> = Vec::new();
            for (_, shape, name) in chosen.iter().filter(|c| c.0 == op) {
                let shape = shape.clone();
                match by_impl.iter_mut().find(|b| b.0 == name) {
                    Some(b) => b.1.push(shape),
                    None => by_impl.push((name, vec![shape])),
                }
            }
            let parts: Vec<String> = by_impl
                .into_iter()
                .map(|(name, shapes)| format!("{name} on {}", shapes.join(", ")))
                .collect();
            format!("{op}: {}", parts.join("; "))
        })
        .collect()
}

/// The implementations as JSON: `{"f32": {"1x96x64": "brg:avx512_core", …}, …}`.
pub fn chosen_json() -> serde_json::Value {
    let chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = serde_json::Map::new();
    for (op, shape, name) in chosen.iter() {
        let entry = out
            .entry(op.clone())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        entry[shape.as_str()] = name.clone().into();
    }
    out.into()
}

/// The f32 matmul of `d` on `threads` OpenMP threads, as a bench runner.
pub fn f32_runner(
    d: &crate::peers::Data,
    threads: usize,
) -> Result<crate::peers::Runner<'_>, String> {
    let dnnl = OneDnn::get()?;
    let mut mm = Matmul::new(dnnl, (d.m, d.k, d.n), Weights::F32(&d.w), &d.bias, threads)?;
    record(
        &format!("f32 {threads}t"),
        format!("{}x{}x{}", d.m, d.k, d.n),
        &mm.implementation,
    );
    Ok(Box::new(move |out| {
        assert!(out.len() >= d.m * d.n);
        // SAFETY: x holds m × k floats, out m × n (asserted), borrowed for the call.
        unsafe { mm.run(d.x.as_ptr().cast(), out.as_mut_ptr(), 1.0, 0) }.expect("oneDNN run")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test that records: the statics are the process's, as in a bench run.
    #[test]
    fn each_operator_is_named_once_after_the_table_that_ran_it() {
        record("f32 1t", "4x512x512".into(), "brg:avx512_core");
        record("f32 1t", "1x96x64".into(), "brg:avx512_core");
        assert_eq!(
            unreported_lines(),
            ["f32 1t: brg:avx512_core on 4x512x512, 1x96x64"]
        );
        record("quantize f32→u8", "1x96".into(), "AVX-512 pass");
        // The next table names only what it ran; the JSON still holds everything.
        assert_eq!(
            unreported_lines(),
            ["quantize f32→u8: AVX-512 pass on 1x96"]
        );
        assert!(unreported_lines().is_empty());
        let json = chosen_json();
        assert_eq!(json["f32 1t"]["1x96x64"], "brg:avx512_core");
        assert_eq!(json["quantize f32→u8"]["1x96"], "AVX-512 pass");
    }
}
