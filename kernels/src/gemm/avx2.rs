//! AVX2 + FMA microkernels: up to 6×16 tiles (12 ymm accumulators), edge tiles through a
//! small stack tile (AMD's `vmaskmovps` stores are slow), and a 16-wide GEMV with eight
//! independent accumulator chains.

use core::arch::x86_64::*;

use super::Tile;
use super::edge::EdgeTile;
use super::kernel::{self, Kernel};

const NR: usize = <kernel::Avx2 as Kernel>::NR;
const MAX_MR: usize = <kernel::Avx2 as Kernel>::MR;

/// # Safety
/// `t` describes valid buffers (see `gemm::run`), `1 <= mr <= 6`, and the CPU has AVX2 and
/// FMA.
pub(super) unsafe fn tile(mr: usize, t: &Tile) {
    // SAFETY: forwarded; the CPU has AVX2 + FMA (caller).
    unsafe {
        match mr {
            1 => tile_n::<1>(t),
            2 => tile_n::<2>(t),
            3 => tile_n::<3>(t),
            4 => tile_n::<4>(t),
            5 => tile_n::<5>(t),
            _ => tile_n::<6>(t),
        }
    }
}

/// # Safety
/// As [`tile`], with `MR` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_n<const MR: usize>(t: &Tile) {
    // Full tiles read and write C in place, edge tiles a local copy (`EdgeTile`).
    let mut edge = EdgeTile::<NR, MAX_MR>::new();
    // Whole body: B rows are 64-byte aligned NR-float rows, kc of them; packed A
    // has kc * MR floats; `c` is either the caller's C tile (MR rows of NR valid columns) or
    // the local edge tile; C rows hold nvalid valid columns.
    // SAFETY: every access stays inside the tiles described above.
    unsafe {
        let (c, ldc) = edge.begin(t, MR);
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        if t.bias.is_null() {
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = _mm256_loadu_ps(c.add(r * ldc));
                acc[1] = _mm256_loadu_ps(c.add(r * ldc + 8));
            }
        } else {
            let b0 = _mm256_load_ps(t.bias);
            let b1 = _mm256_load_ps(t.bias.add(8));
            for acc in acc.iter_mut() {
                *acc = [b0, b1];
            }
        }
        let mut a = t.a;
        let mut b = t.b;
        for _ in 0..t.kc {
            let b0 = _mm256_load_ps(b);
            let b1 = _mm256_load_ps(b.add(8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r));
                acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
            }
            a = a.add(MR);
            b = b.add(NR);
        }
        if t.clamp {
            let lo = _mm256_set1_ps(t.min);
            let hi = _mm256_set1_ps(t.max);
            for acc in acc.iter_mut() {
                for v in acc.iter_mut() {
                    // max(lo, v) / min(hi, v) return v when v is NaN: NaN propagates.
                    *v = _mm256_min_ps(hi, _mm256_max_ps(lo, *v));
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(c.add(r * ldc), acc[0]);
            _mm256_storeu_ps(c.add(r * ldc + 8), acc[1]);
        }
        edge.finish(t, MR);
    }
}

/// One panel of `y = clamp(x · B + bias)` with eight accumulator chains (four k-phases of
/// two registers).
///
/// # Safety
/// `panel` is a 64-byte aligned packed panel (NR biases then k × NR weights); `x` has `k`
/// floats; `y` has `g.nvalid` writable floats; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemv(k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // All loads are within the panel (NR * (k + 1) floats) and x (k floats); the
    // result goes to a local tile, then nvalid floats of it to y.
    // SAFETY: every access stays inside the panel, x and the local tile.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        acc[0] = [_mm256_load_ps(panel), _mm256_load_ps(panel.add(8))];
        let mut b = panel.add(NR);
        let mut kk = 0;
        while kk + 4 <= k {
            for (u, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_broadcast_ss(&*x.add(kk + u));
                acc[0] = _mm256_fmadd_ps(xv, _mm256_load_ps(b.add(u * NR)), acc[0]);
                acc[1] = _mm256_fmadd_ps(xv, _mm256_load_ps(b.add(u * NR + 8)), acc[1]);
            }
            b = b.add(4 * NR);
            kk += 4;
        }
        while kk < k {
            let xv = _mm256_broadcast_ss(&*x.add(kk));
            acc[0][0] = _mm256_fmadd_ps(xv, _mm256_load_ps(b), acc[0][0]);
            acc[0][1] = _mm256_fmadd_ps(xv, _mm256_load_ps(b.add(8)), acc[0][1]);
            b = b.add(NR);
            kk += 1;
        }
        let lo = _mm256_set1_ps(g.min);
        let hi = _mm256_set1_ps(g.max);
        let mut out = [0.0f32; NR];
        for (h, acc) in [
            (0, [acc[0][0], acc[1][0], acc[2][0], acc[3][0]]),
            (1, [acc[0][1], acc[1][1], acc[2][1], acc[3][1]]),
        ] {
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let s = _mm256_min_ps(hi, _mm256_max_ps(lo, s));
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), s);
        }
        core::ptr::copy_nonoverlapping(out.as_ptr(), y, g.nvalid);
    }
}
