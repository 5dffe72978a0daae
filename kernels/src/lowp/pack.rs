//! Packing of the low-precision weights into NR-column panels (layouts in the module
//! docs of `lowp`).

use super::Kind;

/// Bytes of one packed panel of `nr` columns (a multiple of 64), or `None` on overflow.
pub(crate) fn panel_bytes_checked(kind: Kind, nr: usize, k: usize) -> Option<usize> {
    let (header, body) = match kind {
        Kind::Bf16F32 => (1, k.div_ceil(2).checked_mul(4 * nr)?),
        Kind::Qd8F32Qc8w => (3, k.div_ceil(4).checked_mul(4 * nr)?),
        Kind::F32Qc8w => (2, k.checked_mul(nr)?),
    };
    (header * 4 * nr)
        .checked_add(body)?
        .checked_next_multiple_of(64)
}

/// [`panel_bytes_checked`] for sizes already validated at create.
pub(crate) fn panel_bytes(kind: Kind, nr: usize, k: usize) -> usize {
    panel_bytes_checked(kind, nr, k).unwrap_or(usize::MAX)
}

/// The weight `W[j][k]` of a `[N][K]` (or, transposed, `[K][N]`) matrix.
#[inline]
fn at<T: Copy>(w: &[T], transposed: bool, k: usize, n: usize, j: usize, kk: usize) -> T {
    if transposed {
        w[kk * n + j]
    } else {
        w[j * k + kk]
    }
}

fn put_f32(dst: &mut [u8], i: usize, v: f32) {
    dst[4 * i..4 * i + 4].copy_from_slice(&v.to_ne_bytes());
}

/// Fills the panels of `kind` in `dst` column by column: each column's bias and (for the
/// int8 kinds) weight scale into the panel's header, then `weights(panel, j, column)` writes
/// column `j` of the panel (`column` of the matrix).
#[allow(clippy::too_many_arguments)]
fn per_column(
    dst: &mut [u8],
    kind: Kind,
    nr: usize,
    k: usize,
    n: usize,
    bias: Option<&[f32]>,
    scales: Option<&[f32]>,
    mut weights: impl FnMut(&mut [u8], usize, usize),
) {
    let panel = panel_bytes(kind, nr, k);
    for (p, dst) in dst.chunks_exact_mut(panel).enumerate() {
        let n0 = p * nr;
        for j in 0..nr.min(n - n0) {
            if let Some(bias) = bias {
                put_f32(dst, j, bias[n0 + j]);
            }
            if let Some(scales) = scales {
                put_f32(dst, nr + j, scales[n0 + j]);
            }
            weights(dst, j, n0 + j);
        }
    }
}

/// Packs bf16 weights (raw bits) into `dst` (zeroed, panels of [`panel_bytes`]).
pub(crate) fn pack_bf16(
    dst: &mut [u8],
    nr: usize,
    k: usize,
    n: usize,
    w: &[u16],
    transposed: bool,
    bias: Option<&[f32]>,
) {
    per_column(dst, Kind::Bf16F32, nr, k, n, bias, None, |dst, j, col| {
        for kk in 0..k {
            let v = at(w, transposed, k, n, col, kk).to_ne_bytes();
            let o = 4 * nr + 4 * ((kk / 2) * nr + j) + 2 * (kk % 2);
            dst[o..o + 2].copy_from_slice(&v);
        }
    });
}

/// Packs int8 weights with per-channel scales for `qd8_f32_qc8w` into `dst` (zeroed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_qd8(
    dst: &mut [u8],
    nr: usize,
    k: usize,
    n: usize,
    w: &[i8],
    scales: &[f32],
    transposed: bool,
    bias: Option<&[f32]>,
) {
    let kind = Kind::Qd8F32Qc8w;
    per_column(dst, kind, nr, k, n, bias, Some(scales), |dst, j, col| {
        let mut sum = 0i32;
        for kk in 0..k {
            let v = at(w, transposed, k, n, col, kk);
            sum += i32::from(v);
            dst[4 * nr * 3 + 4 * ((kk / 4) * nr + j) + kk % 4] = v as u8;
        }
        dst[4 * (2 * nr + j)..4 * (2 * nr + j) + 4].copy_from_slice(&sum.to_ne_bytes());
    });
}

/// Packs int8 weights with per-channel scales for `f32_qc8w` into `dst` (zeroed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_f32_qc8w(
    dst: &mut [u8],
    nr: usize,
    k: usize,
    n: usize,
    w: &[i8],
    scales: &[f32],
    transposed: bool,
    bias: Option<&[f32]>,
) {
    let kind = Kind::F32Qc8w;
    per_column(dst, kind, nr, k, n, bias, Some(scales), |dst, j, col| {
        for kk in 0..k {
            dst[4 * nr * 2 + kk * nr + j] = at(w, transposed, k, n, col, kk) as u8;
        }
    });
}
