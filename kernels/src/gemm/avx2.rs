//! AVX2 + FMA microkernels: up to 6×16 tiles (12 ymm accumulators, A broadcast from its rows
//! in place, no copy), edge tiles through a small stack tile (AMD's `vmaskmovps` stores are
//! slow), and a GEMV over up to four 16-wide panels at once.

use core::arch::x86_64::*;

use super::Tile;
use super::kernel::{self, Kernel, Rows};
use super::simd::{self, TwoVectors};

const NR: usize = <kernel::Avx2 as Kernel>::NR;

// SAFETY: each operation is one AVX or FMA instruction; `tile_n` and `gemv` call them
// compiled with both.
unsafe impl TwoVectors for kernel::Avx2 {
    type V = __m256;
    type A = __m256;

    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        // SAFETY: the caller has AVX (trait contract).
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: `p` is 32-byte aligned and readable; the caller has AVX (trait contract).
        unsafe { _mm256_load_ps(p) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const f32) -> __m256 {
        // SAFETY: `p` is readable; the caller has AVX (trait contract).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f32, v: __m256) {
        // SAFETY: `p` is writable; the caller has AVX (trait contract).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn a(p: *const f32) -> __m256 {
        // SAFETY: `p` is readable; the caller has AVX (trait contract).
        unsafe { _mm256_broadcast_ss(&*p) }
    }
    #[inline(always)]
    unsafe fn fma(acc: __m256, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the caller has FMA (trait contract).
        unsafe { _mm256_fmadd_ps(a, b, acc) }
    }
    #[inline(always)]
    unsafe fn add(x: __m256, y: __m256) -> __m256 {
        // SAFETY: the caller has AVX (trait contract).
        unsafe { _mm256_add_ps(x, y) }
    }
    #[inline(always)]
    unsafe fn clamp(v: __m256, lo: __m256, hi: __m256) -> __m256 {
        // max(lo, v) / min(hi, v) return v when v is NaN: NaN propagates.
        // SAFETY: the caller has AVX (trait contract).
        unsafe { _mm256_min_ps(hi, _mm256_max_ps(lo, v)) }
    }
}

impl Rows for kernel::Avx2 {
    #[inline(always)]
    unsafe fn rows<const MR: usize>(t: &Tile) {
        // SAFETY: forwarded; the CPU has AVX2 + FMA (caller).
        unsafe { tile_n::<MR>(t) }
    }
}

/// # Safety
/// `t` describes valid buffers (see `gemm::run`) with `MR` rows, and the CPU has AVX2 and
/// FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_n<const MR: usize>(t: &Tile) {
    // SAFETY: forwarded; compiled with AVX2 + FMA.
    unsafe { simd::tile::<kernel::Avx2, NR, MR>(t) }
}

/// `panels` (1–4) consecutive panels of `y = clamp(x · B + bias)`, one k-phase each: four
/// panels make eight accumulator chains, and four weight streams from DRAM.
///
/// # Safety
/// As `simd::gemv` with `P = panels`; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemv(
    k: usize,
    x: *const f32,
    panel: *const f32,
    panel_len: usize,
    panels: usize,
    y: *mut f32,
    g: &Tile,
) {
    // SAFETY: forwarded; compiled with AVX2 + FMA.
    unsafe {
        match panels {
            1 => simd::gemv::<kernel::Avx2, NR, 1, 1>(k, x, panel, panel_len, y, g),
            2 => simd::gemv::<kernel::Avx2, NR, 2, 1>(k, x, panel, panel_len, y, g),
            3 => simd::gemv::<kernel::Avx2, NR, 3, 1>(k, x, panel, panel_len, y, g),
            _ => simd::gemv::<kernel::Avx2, NR, 4, 1>(k, x, panel, panel_len, y, g),
        }
    }
}
