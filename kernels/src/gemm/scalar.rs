//! Portable microkernels (4×8 tiles): the fallback on every target, and the reference
//! shape of what the SIMD kernels do.
// Index loops over the tile read like the SIMD kernels they mirror.
#![allow(clippy::needless_range_loop)]

use super::Tile;
use super::kernel::{self, Kernel, Rows};

const NR: usize = <kernel::Scalar as Kernel>::NR;

/// `clamp` as the SIMD kernels do it (`max(min, v)` then `min(max, v)`): a NaN passes.
#[inline(always)]
pub(super) fn clamp(v: f32, min: f32, max: f32) -> f32 {
    let v = if v < min { min } else { v };
    if v > max { max } else { v }
}

impl Rows for kernel::Scalar {
    #[inline(always)]
    unsafe fn rows<const MR: usize>(t: &Tile) {
        // SAFETY: forwarded.
        unsafe { tile_n::<MR>(t) }
    }
}

/// # Safety
/// `t` describes valid buffers (see `gemm::run`) with `MR` rows.
unsafe fn tile_n<const MR: usize>(t: &Tile) {
    let mut acc = [[0.0f32; NR]; MR];
    for (r, row) in acc.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate().take(t.nvalid) {
            // SAFETY: the bias panel has NR floats; C row r has nvalid valid columns.
            *v = unsafe {
                if t.bias.is_null() {
                    *t.c.add(r * t.ldc + j)
                } else {
                    *t.bias.add(j)
                }
            };
        }
    }
    for k in 0..t.kc {
        // SAFETY: B has kc rows of NR floats; packed A has kc * MR floats.
        let (b, a) = unsafe {
            (
                &*t.b.add(k * NR).cast::<[f32; NR]>(),
                &*t.a.add(k * MR).cast::<[f32; MR]>(),
            )
        };
        for r in 0..MR {
            for j in 0..NR {
                acc[r][j] += a[r] * b[j];
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (j, &v) in row.iter().enumerate().take(t.nvalid) {
            let v = if t.clamp { clamp(v, t.min, t.max) } else { v };
            // SAFETY: C row r has nvalid valid columns.
            unsafe { *t.c.add(r * t.ldc + j) = v };
        }
    }
}

/// One panel of `y = clamp(x · B + bias)`, four k-phases of accumulators.
///
/// # Safety
/// `panel` is a packed panel (NR biases then k × NR weights); `x` has `k` floats; `y` has
/// `g.nvalid` writable floats.
pub(super) unsafe fn gemv(k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // SAFETY: the panel is NR * (k + 1) floats; x holds k floats (caller).
    let (bias, body, x) = unsafe {
        (
            core::slice::from_raw_parts(panel, NR),
            core::slice::from_raw_parts(panel.add(NR), k * NR),
            core::slice::from_raw_parts(x, k),
        )
    };
    let mut acc = [[0.0f32; NR]; 4];
    acc[0].copy_from_slice(bias);
    let mut rows = body.chunks_exact(4 * NR);
    let mut xs = x.chunks_exact(4);
    for (b4, x4) in (&mut rows).zip(&mut xs) {
        for u in 0..4 {
            for j in 0..NR {
                acc[u][j] += x4[u] * b4[u * NR + j];
            }
        }
    }
    for (b, &xv) in rows.remainder().chunks_exact(NR).zip(xs.remainder()) {
        for j in 0..NR {
            acc[0][j] += xv * b[j];
        }
    }
    for j in 0..g.nvalid {
        let v = (acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j]);
        // SAFETY: y has nvalid writable floats.
        unsafe { *y.add(j) = clamp(v, g.min, g.max) };
    }
}
