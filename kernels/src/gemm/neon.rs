//! aarch64 NEON microkernels: up to 8×8 tiles (16 q-register accumulators), edge tiles
//! through a stack tile, and an 8-wide GEMV with eight independent accumulator chains.

use core::arch::aarch64::*;

use super::Tile;
use super::kernel::{self, Kernel, Rows};
use super::simd::{self, TwoVectors};

const NR: usize = <kernel::Neon as Kernel>::NR;

// SAFETY: each operation is one NEON instruction; `tile_n` and `gemv` call them compiled
// with NEON.
unsafe impl TwoVectors for kernel::Neon {
    type V = float32x4_t;
    type A = f32;

    #[inline(always)]
    unsafe fn splat(x: f32) -> float32x4_t {
        // SAFETY: the caller has NEON (trait contract).
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> float32x4_t {
        // SAFETY: `p` is readable; the caller has NEON (trait contract).
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const f32) -> float32x4_t {
        // SAFETY: `p` is readable; the caller has NEON (trait contract).
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f32, v: float32x4_t) {
        // SAFETY: `p` is writable; the caller has NEON (trait contract).
        unsafe { vst1q_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn a(p: *const f32) -> f32 {
        // SAFETY: `p` is readable (trait contract).
        unsafe { *p }
    }
    #[inline(always)]
    unsafe fn fma(acc: float32x4_t, a: f32, b: float32x4_t) -> float32x4_t {
        // SAFETY: the caller has NEON (trait contract).
        unsafe { vfmaq_n_f32(acc, b, a) }
    }
    #[inline(always)]
    unsafe fn add(x: float32x4_t, y: float32x4_t) -> float32x4_t {
        // SAFETY: the caller has NEON (trait contract).
        unsafe { vaddq_f32(x, y) }
    }
    #[inline(always)]
    unsafe fn clamp(v: float32x4_t, lo: float32x4_t, hi: float32x4_t) -> float32x4_t {
        // FMAX/FMIN return NaN when either input is NaN: NaN propagates.
        // SAFETY: the caller has NEON (trait contract).
        unsafe { vminq_f32(hi, vmaxq_f32(lo, v)) }
    }
}

impl Rows for kernel::Neon {
    #[inline(always)]
    unsafe fn rows<const MR: usize>(t: &Tile) {
        // SAFETY: forwarded; the CPU has NEON (caller).
        unsafe { tile_n::<MR>(t) }
    }
}

/// # Safety
/// `t` describes valid buffers (see `gemm::run`) with `MR` rows, and the CPU has NEON.
#[target_feature(enable = "neon")]
unsafe fn tile_n<const MR: usize>(t: &Tile) {
    // SAFETY: forwarded; compiled with NEON.
    unsafe { simd::tile::<kernel::Neon, NR, MR>(t) }
}

/// One panel of `y = clamp(x · B + bias)` with eight accumulator chains.
///
/// # Safety
/// As `simd::gemv` (a panel 16-byte aligned is enough); the CPU has NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(k: usize, x: *const f32, panel: *const f32, y: *mut f32, g: &Tile) {
    // SAFETY: forwarded; compiled with NEON.
    unsafe { simd::gemv::<kernel::Neon, NR, 1, 4>(k, x, panel, NR * (k + 1), y, g) }
}
