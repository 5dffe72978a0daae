//! aarch64 NEON microkernels: up to 8×8 tiles (16 q-register accumulators), edge tiles
//! through a stack tile, and an 8-wide GEMV with eight independent accumulator chains.

use core::arch::aarch64::*;

use super::Tile;
use super::edge::EdgeTile;
use super::kernel::{self, Kernel};

const NR: usize = <kernel::Neon as Kernel>::NR;
const MAX_MR: usize = <kernel::Neon as Kernel>::MR;

/// # Safety
/// `t` describes valid buffers (see `gemm::run`), `1 <= mr <= 8`, and the CPU has NEON.
pub(super) unsafe fn tile(mr: usize, t: &Tile) {
    // SAFETY: forwarded; the CPU has NEON (caller).
    unsafe {
        match mr {
            1 => tile_n::<1>(t),
            2 => tile_n::<2>(t),
            3 => tile_n::<3>(t),
            4 => tile_n::<4>(t),
            5 => tile_n::<5>(t),
            6 => tile_n::<6>(t),
            7 => tile_n::<7>(t),
            _ => tile_n::<8>(t),
        }
    }
}

/// # Safety
/// As [`tile`], with `MR` rows.
#[target_feature(enable = "neon")]
unsafe fn tile_n<const MR: usize>(t: &Tile) {
    // Full tiles read and write C in place, edge tiles a local copy (`EdgeTile`).
    let mut edge = EdgeTile::<NR, MAX_MR>::new();
    // Whole body: B has kc rows of NR floats; packed A has kc * MR floats; `c` is
    // either the caller's full C tile or the local edge tile.
    // SAFETY: every access stays inside the tiles described above.
    unsafe {
        let (c, ldc) = edge.begin(t, MR);
        let mut acc = [[vdupq_n_f32(0.0); 2]; MR];
        if t.bias.is_null() {
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = vld1q_f32(c.add(r * ldc));
                acc[1] = vld1q_f32(c.add(r * ldc + 4));
            }
        } else {
            let b0 = vld1q_f32(t.bias);
            let b1 = vld1q_f32(t.bias.add(4));
            for acc in acc.iter_mut() {
                *acc = [b0, b1];
            }
        }
        let mut a = t.a;
        let mut b = t.b;
        for _ in 0..t.kc {
            let b0 = vld1q_f32(b);
            let b1 = vld1q_f32(b.add(4));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = *a.add(r);
                acc[0] = vfmaq_n_f32(acc[0], b0, av);
                acc[1] = vfmaq_n_f32(acc[1], b1, av);
            }
            a = a.add(MR);
            b = b.add(NR);
        }
        if t.clamp {
            let lo = vdupq_n_f32(t.min);
            let hi = vdupq_n_f32(t.max);
            for acc in acc.iter_mut() {
                for v in acc.iter_mut() {
                    // FMAX/FMIN return NaN when either input is NaN: NaN propagates.
                    *v = vminq_f32(hi, vmaxq_f32(lo, *v));
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            vst1q_f32(c.add(r * ldc), acc[0]);
            vst1q_f32(c.add(r * ldc + 4), acc[1]);
        }
        edge.finish(t, MR);
    }
}

/// One panel of `y = clamp(x · B + bias)` with eight accumulator chains.
///
/// # Safety
/// `panel` is a packed panel (NR biases then k × NR weights); `x` has `k` floats; `y` has
/// `g.nvalid` writable floats; the CPU has NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // All loads are within the panel and x; the result goes to a local tile, then
    // nvalid floats of it to y.
    // SAFETY: every access stays inside the panel, x and the local tile.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
        acc[0] = [vld1q_f32(panel), vld1q_f32(panel.add(4))];
        let mut b = panel.add(NR);
        let mut kk = 0;
        while kk + 4 <= k {
            for (u, acc) in acc.iter_mut().enumerate() {
                let xv = *x.add(kk + u);
                acc[0] = vfmaq_n_f32(acc[0], vld1q_f32(b.add(u * NR)), xv);
                acc[1] = vfmaq_n_f32(acc[1], vld1q_f32(b.add(u * NR + 4)), xv);
            }
            b = b.add(4 * NR);
            kk += 4;
        }
        while kk < k {
            let xv = *x.add(kk);
            acc[0][0] = vfmaq_n_f32(acc[0][0], vld1q_f32(b), xv);
            acc[0][1] = vfmaq_n_f32(acc[0][1], vld1q_f32(b.add(4)), xv);
            b = b.add(NR);
            kk += 1;
        }
        let lo = vdupq_n_f32(g.min);
        let hi = vdupq_n_f32(g.max);
        let mut out = [0.0f32; NR];
        for (h, acc) in [
            (0, [acc[0][0], acc[1][0], acc[2][0], acc[3][0]]),
            (1, [acc[0][1], acc[1][1], acc[2][1], acc[3][1]]),
        ] {
            let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
            vst1q_f32(out.as_mut_ptr().add(4 * h), vminq_f32(hi, vmaxq_f32(lo, s)));
        }
        core::ptr::copy_nonoverlapping(out.as_ptr(), y, g.nvalid);
    }
}
