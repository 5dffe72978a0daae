//! Every output checked against its f64 reference: a wrong fast kernel is worthless.

use crate::peers::Data;

pub(crate) fn check(d: &Data, reference: &[(f64, f64)], out: &[f32], bias: bool) -> bool {
    reference.iter().enumerate().all(|(i, &(want, tol))| {
        let want = if bias {
            want + d.bias[i % d.n] as f64
        } else {
            want
        };
        (out[i] as f64 - want).abs() <= tol + 1e-6
    })
}
