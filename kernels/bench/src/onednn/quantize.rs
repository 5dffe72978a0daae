//! The per-tensor quantization before oneDNN's u8s8 matmul, by the faster of two ways.

use core::ffi::c_int;

use super::{F32, Memory, OneDnn, Primitive, S32, TAG_A, TAG_AB, U8, record};

/// The per-tensor quantization a runtime does before a u8s8 matmul: the input's range (a
/// min/max pass), then `q = sat_u8(round(x / scale) + zero_point)`, by whichever of two
/// ways is faster here (timed once, at construction): oneDNN's own reorder f32 → u8 with
/// that scale and zero point, or a hand-written AVX-512 pass. oneDNN's quantizing column
/// is then never slowed by a slow quantizer of ours or of its own.
pub struct Quantizer {
    prim: Primitive<'static>,
    src: Memory<'static>,
    dst: Memory<'static>,
    scale: Memory<'static>,
    zero: Memory<'static>,
    scale_buf: Box<f32>,
    zero_buf: Box<i32>,
    threads: c_int,
    dnnl: &'static OneDnn,
    /// The AVX-512 pass is the faster.
    own: bool,
}

impl Quantizer {
    /// For `m × k` inputs; `x` is a sample input the two ways are timed on.
    pub fn new(
        dnnl: &'static OneDnn,
        x: &[f32],
        (m, k): (usize, usize),
        threads: usize,
    ) -> Result<Quantizer, String> {
        let src_md = dnnl.md(m, k, F32, TAG_AB)?;
        let dst_md = dnnl.md(m, k, U8, TAG_AB)?;
        let one = dnnl.md(0, 1, F32, TAG_A)?;
        let one_i = dnnl.md(0, 1, S32, TAG_A)?;
        let mut scale_buf = Box::new(1.0f32);
        let mut zero_buf = Box::new(0i32);
        let (prim, name) = dnnl.reorder_primitive(src_md.md, dst_md.md, true)?;
        let mut quantizer = Quantizer {
            prim,
            src: dnnl.memory(src_md.md, core::ptr::null_mut())?,
            dst: dnnl.memory(dst_md.md, core::ptr::null_mut())?,
            scale: dnnl.memory(one.md, (&raw mut *scale_buf).cast())?,
            zero: dnnl.memory(one_i.md, (&raw mut *zero_buf).cast())?,
            scale_buf,
            zero_buf,
            threads: threads as c_int,
            dnnl,
            own: false,
        };
        let mut q = vec![0u8; m * k];
        let mut time = |own: bool| -> Result<std::time::Duration, String> {
            quantizer.own = own;
            let mut best = std::time::Duration::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                quantizer.run(x, &mut q)?;
                best = best.min(t.elapsed());
            }
            Ok(best)
        };
        let theirs = time(false)?;
        let ours = if has_avx512() {
            time(true)?
        } else {
            std::time::Duration::MAX
        };
        quantizer.own = ours < theirs;
        let chosen = if quantizer.own {
            format!("AVX-512 pass ({ours:.0?}; oneDNN's {name} reorder {theirs:.0?})")
        } else {
            format!("oneDNN's {name} reorder ({theirs:.0?})")
        };
        record("quantize f32→u8", format!("{m}x{k}"), &chosen);
        Ok(quantizer)
    }

    /// Quantizes `x` into `q` (both `m × k`); returns `(scale, zero_point)` of the u8 values.
    pub fn run(&mut self, x: &[f32], q: &mut [u8]) -> Result<(f32, i32), String> {
        assert_eq!(x.len(), q.len());
        let (scale, zero) = tensor_params(x);
        if self.own {
            // SAFETY: `own` is set only where AVX-512F is present.
            unsafe { quantize_avx512(x, q, 1.0 / scale, zero) };
            return Ok((scale, zero));
        }
        *self.scale_buf = scale;
        *self.zero_buf = zero;
        self.src.point_at(x.as_ptr().cast())?;
        self.dst.point_at(q.as_mut_ptr().cast())?;
        // SAFETY: plain call into libgomp.
        unsafe { (self.dnnl.api.omp_set_num_threads)(self.threads) };
        self.dnnl.run_reorder(
            &self.prim,
            &self.src,
            &self.dst,
            Some((&self.scale, &self.zero)),
        )?;
        Ok((scale, zero))
    }
}

fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `q = sat_u8(round_ne(x · inv) + zero)`, sixteen at a time.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_avx512(x: &[f32], q: &mut [u8], inv: f32, zero: i32) {
    use core::arch::x86_64::*;
    let (vinv, vzero, vnil) = (
        _mm512_set1_ps(inv),
        _mm512_set1_epi32(zero),
        _mm512_setzero_si512(),
    );
    let n16 = x.len() / 16 * 16;
    for i in (0..n16).step_by(16) {
        // SAFETY: i + 16 <= len for both slices (asserted equal by the caller).
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            // Rounds to nearest even (the default MXCSR mode).
            let r = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vinv)), vzero);
            let b = _mm512_cvtusepi32_epi8(_mm512_max_epi32(r, vnil));
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), b);
        }
    }
    for i in n16..x.len() {
        q[i] = ((x[i] * inv).round_ties_even() as i32 + zero).clamp(0, 255) as u8;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn quantize_avx512(_: &[f32], _: &mut [u8], _: f32, _: i32) {
    unreachable!("own is never set without AVX-512")
}

/// `(scale, zero point)` of a u8 quantization of `x` whose range includes 0 (the qd8 rule,
/// over the whole tensor).
pub fn tensor_params(x: &[f32]) -> (f32, i32) {
    let (lo, hi) = min_max(x);
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    let zero = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
    (scale, zero)
}

/// The smallest and largest of `x`, sixteen lanes at a time.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16]);
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            lo[i] = lo[i].min(c[i]);
            hi[i] = hi[i].max(c[i]);
        }
    }
    for &v in tail {
        lo[0] = lo[0].min(v);
        hi[0] = hi[0].max(v);
    }
    (
        lo.into_iter().fold(f32::INFINITY, f32::min),
        hi.into_iter().fold(f32::NEG_INFINITY, f32::max),
    )
}
