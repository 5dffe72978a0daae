//! Packing: weights and bias into NR-wide column panels.
//!
//! Panel `p` covers output columns `p*NR .. p*NR + NR` and is `NR * (K + 1)` floats:
//! first the NR biases (zero when there is no bias), then for each `k` in order the NR
//! weights `W[p*NR + j][k]`, `j = 0..NR`. Columns past `N` are zero. Every panel starts on a
//! 64-byte boundary when the block does (NR is a multiple of 16 floats on x86), so the
//! microkernels use aligned loads and never need an edge case on the weight side.

use crate::error::KernelError;

/// Floats in one packed panel.
pub(crate) fn panel_len(nr: usize, k: usize) -> Option<usize> {
    k.checked_add(1)?.checked_mul(nr)
}

/// Floats in the whole packed block for `n` output columns.
pub(crate) fn packed_len(nr: usize, k: usize, n: usize) -> Option<usize> {
    n.div_ceil(nr).checked_mul(panel_len(nr, k)?)
}

/// Which way round the caller's weights are.
#[derive(Clone, Copy)]
pub(crate) enum Layout {
    /// `W[n][k]` at `n * K + k` (XNNPACK's default).
    OutputMajor,
    /// `W[k][n]` at `k * N + n` (`XNN_FLAG_TRANSPOSE_WEIGHTS`).
    InputMajor,
}

/// Packs into `dst` (zeroed, `packed_len` floats).
pub(crate) fn pack(
    dst: &mut [f32],
    nr: usize,
    k: usize,
    n: usize,
    weights: &[f32],
    layout: Layout,
    bias: Option<&[f32]>,
) -> Result<(), KernelError> {
    let panel = panel_len(nr, k).ok_or(KernelError::InvalidChannels {
        input_channels: k,
        output_channels: n,
    })?;
    for (p, dst) in dst.chunks_exact_mut(panel).enumerate() {
        let n0 = p * nr;
        let cols = nr.min(n - n0);
        if let Some(bias) = bias {
            dst[..cols].copy_from_slice(&bias[n0..n0 + cols]);
        }
        let body = &mut dst[nr..];
        match layout {
            Layout::OutputMajor => {
                for j in 0..cols {
                    let row = &weights[(n0 + j) * k..(n0 + j + 1) * k];
                    for (kk, &w) in row.iter().enumerate() {
                        body[kk * nr + j] = w;
                    }
                }
            }
            Layout::InputMajor => {
                for (kk, out) in body.chunks_exact_mut(nr).enumerate() {
                    out[..cols].copy_from_slice(&weights[kk * n + n0..kk * n + n0 + cols]);
                }
            }
        }
    }
    Ok(())
}
