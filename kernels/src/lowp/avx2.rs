//! AVX2 (+ FMA) and AVX-VNNI low-precision microkernels: 16 columns (two ymm), up to four
//! rows (two for the `vpmaddwd` int8 kernel, which needs twice the accumulators).
//!
//! * `bf16`: AVX2 has no bf16 arithmetic; a packed pair word `lo | hi << 16` is split into
//!   two f32 vectors (`w << 16` and `w & 0xffff0000`, exact) and multiplied with FMA.
//! * `qd8` (AVX2): `vpmaddubsw` (u8 × i8 → i16 pair sums) would saturate — `2·255·128`
//!   exceeds `i16::MAX` — so, as XNNPACK's AVX2 qd8 kernels do, both operands are widened
//!   to i16 (`vpmovzxbw` for A's `q + 128`, `vpmovsxbw` for W) and multiplied with
//!   `vpmaddwd` (i16 × i16 → i32 pair sums, exact). Each column keeps two partial sums
//!   (k pairs 0–1 and 2–3 of each word) that `vphaddd` joins at the end. The zero-point
//!   correction is the one of the AVX-512 kernel (`Σ u·w - zpu·Σ w`).
//! * `qd8_vnni` (AVX-VNNI): `vpdpbusd` on ymm, the AVX-512 VNNI kernel at half width.
//! * `f32_qc8w`: 16 int8 weights per k widened with `vpmovsxbd` + `vcvtdq2ps`, then FMA onto
//!   the bias; the channel scale multiplies the sum at the end.

use core::arch::x86_64::*;

use super::Tile;

macro_rules! by_rows {
    ($kernel:ident, $mr:expr, $t:expr) => {
        match $mr {
            1 => $kernel::<1>($t),
            2 => $kernel::<2>($t),
            3 => $kernel::<3>($t),
            _ => $kernel::<4>($t),
        }
    };
}

/// Clamps `v` (NaN propagates) and stores row `r`'s valid columns.
///
/// # Safety
/// Row `r` of the tile's C has `t.nvalid` writable floats; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn finish(t: &Tile, r: usize, v: [__m256; 2]) {
    let lo = _mm256_set1_ps(t.min);
    let hi = _mm256_set1_ps(t.max);
    let v = v.map(|v| _mm256_min_ps(hi, _mm256_max_ps(lo, v)));
    // SAFETY: only the first nvalid (<= 16) columns of row r are written (caller).
    unsafe {
        let c = t.c.add(r * t.ldc);
        if t.nvalid == 16 {
            _mm256_storeu_ps(c, v[0]);
            _mm256_storeu_ps(c.add(8), v[1]);
        } else {
            let mut tmp = [0.0f32; 16];
            _mm256_storeu_ps(tmp.as_mut_ptr(), v[0]);
            _mm256_storeu_ps(tmp.as_mut_ptr().add(8), v[1]);
            core::ptr::copy_nonoverlapping(tmp.as_ptr(), c, t.nvalid);
        }
    }
}

/// # Safety
/// `t` describes valid buffers (see `lowp::run`), `1 <= mr <= 4`, and the CPU has AVX2
/// and FMA.
pub(super) unsafe fn bf16(mr: usize, t: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(bf16_n, mr, t) }
}

/// # Safety
/// As [`bf16()`], with `MR` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn bf16_n<const MR: usize>(t: &Tile) {
    // A rows hold k bf16 values; the panel holds 16 biases and ceil(k/2) words of 16
    // columns.
    // SAFETY: every load stays inside A's rows or the panel.
    unsafe {
        let p = t.panel.cast::<f32>();
        let mut acc = [[_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]; MR];
        let mut w = t.panel.add(64);
        let high = _mm256_set1_epi32(0xffff_0000u32 as i32);
        let kw = t.k.div_ceil(2);
        for s in 0..kw {
            let odd_tail = 2 * s + 1 == t.k;
            let mut ws = [_mm256_setzero_ps(); 4];
            for h in 0..2 {
                let v = _mm256_loadu_si256(w.add(32 * h).cast());
                ws[2 * h] = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
                ws[2 * h + 1] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let pair = t.a.add(r * t.lda + 4 * s);
                let word = if odd_tail {
                    u32::from(pair.cast::<u16>().read_unaligned())
                } else {
                    pair.cast::<u32>().read_unaligned()
                };
                let x0 = _mm256_set1_ps(f32::from_bits(word << 16));
                let x1 = _mm256_set1_ps(f32::from_bits(word & 0xffff_0000));
                for h in 0..2 {
                    acc[h] = _mm256_fmadd_ps(x0, ws[2 * h], acc[h]);
                    acc[h] = _mm256_fmadd_ps(x1, ws[2 * h + 1], acc[h]);
                }
            }
            w = w.add(64);
        }
        for (r, acc) in acc.into_iter().enumerate() {
            finish(t, r, acc);
        }
    }
}

/// The qd8 epilogue for one row: `f32(Σu·w - zpu·Σw) · (scale · wscale) + bias`.
///
/// # Safety
/// The panel has the qd8 header of 16 columns; `t.rows` has entry `r`; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn qd8_finish(t: &Tile, r: usize, v: [__m256i; 2]) {
    // SAFETY: header slots 0..48 of the panel and row parameter r are in bounds (caller).
    unsafe {
        let p = t.panel.cast::<f32>();
        let q = t.rows.add(r).read();
        let zpu = _mm256_set1_epi32(q.zpu);
        let sa = _mm256_set1_ps(q.scale);
        let mut out = [_mm256_setzero_ps(); 2];
        for h in 0..2 {
            let colsum = _mm256_loadu_si256(p.add(32 + 8 * h).cast());
            let exact = _mm256_sub_epi32(v[h], _mm256_mullo_epi32(zpu, colsum));
            out[h] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(exact),
                _mm256_mul_ps(sa, _mm256_loadu_ps(p.add(16 + 8 * h))),
                _mm256_loadu_ps(p.add(8 * h)),
            );
        }
        finish(t, r, out);
    }
}

/// # Safety
/// `t` describes valid buffers (see `lowp::run`) with `t.rows` holding `mr` entries,
/// `1 <= mr <= 2`, and the CPU has AVX2 and FMA.
pub(super) unsafe fn qd8(mr: usize, t: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe {
        if mr == 1 {
            qd8_n::<1>(t)
        } else {
            qd8_n::<2>(t)
        }
    }
}

/// # Safety
/// As [`qd8`], with `MR` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn qd8_n<const MR: usize>(t: &Tile) {
    // A rows hold k bytes padded to a multiple of 4 (aligned words); the panel holds the
    // 3 × 16 header slots and ceil(k/4) words of 16 columns.
    // SAFETY: every load stays inside A's rows or the panel.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 4]; MR];
        let mut w = t.panel.add(3 * 64);
        for s in 0..t.k.div_ceil(4) {
            let mut ws = [_mm256_setzero_si256(); 4];
            for h in 0..2 {
                let v = _mm256_loadu_si256(w.add(32 * h).cast());
                ws[2 * h] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
                ws[2 * h + 1] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let word = t.a.add(r * t.lda + 4 * s).cast::<i32>().read();
                let x = _mm256_cvtepu8_epi16(_mm_set1_epi32(word));
                for g in 0..4 {
                    acc[g] = _mm256_add_epi32(acc[g], _mm256_madd_epi16(x, ws[g]));
                }
            }
            w = w.add(64);
        }
        for (r, acc) in acc.into_iter().enumerate() {
            // hadd gives [c0 c1 c4 c5 | c2 c3 c6 c7]; the permute puts the columns in order.
            let lo = _mm256_permute4x64_epi64::<0xd8>(_mm256_hadd_epi32(acc[0], acc[1]));
            let hi = _mm256_permute4x64_epi64::<0xd8>(_mm256_hadd_epi32(acc[2], acc[3]));
            qd8_finish(t, r, [lo, hi]);
        }
    }
}

/// # Safety
/// As [`qd8`] with `1 <= mr <= 4`, and the CPU has AVX-VNNI.
pub(super) unsafe fn qd8_vnni(mr: usize, t: &Tile) {
    // SAFETY: forwarded (caller).
    unsafe { by_rows!(qd8_vnni_n, mr, t) }
}

/// # Safety
/// As [`qd8_vnni`], with `MR` rows.
#[target_feature(enable = "avx2,fma,avxvnni")]
unsafe fn qd8_vnni_n<const MR: usize>(t: &Tile) {
    // As for `qd8_n`.
    // SAFETY: every load stays inside A's rows or the panel.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        let mut w = t.panel.add(3 * 64);
        for s in 0..t.k.div_ceil(4) {
            let w0 = _mm256_loadu_si256(w.cast());
            let w1 = _mm256_loadu_si256(w.add(32).cast());
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_set1_epi32(t.a.add(r * t.lda + 4 * s).cast::<i32>().read());
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], x, w0);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], x, w1);
            }
            w = w.add(64);
        }
        for (r, acc) in acc.into_iter().enumerate() {
            qd8_finish(t, r, acc);
        }
    }
}

/// # Safety
/// `t` describes valid buffers (see `lowp::run`), `1 <= mr <= 4`, and the CPU has AVX2
/// and FMA.
pub(super) unsafe fn f32_qc8w(mr: usize, t: &Tile) {
    // One or two rows (batch 1 or 2) would wait on the FMA latency with one chain per
    // accumulator register: they split K over two independent chains.
    // SAFETY: forwarded (caller).
    unsafe {
        match mr {
            // `run` sends batch 1 to `f32_qc8w_batch1`; a lone row still sums as it does.
            1 => f32_qc8w_1::<1>(t, 0),
            2 => f32_qc8w_n::<2, 2>(t),
            3 => f32_qc8w_n::<3, 1>(t),
            _ => f32_qc8w_n::<4, 1>(t),
        }
    }
}

/// # Safety
/// As [`f32_qc8w`], with `MR` rows and `U` chains per accumulator (`U` >= 1).
#[target_feature(enable = "avx2,fma")]
unsafe fn f32_qc8w_n<const MR: usize, const U: usize>(t: &Tile) {
    // A rows hold k floats; the panel holds 2 × 16 header slots and k × 16 weight bytes.
    // SAFETY: every load stays inside A's rows or the panel.
    unsafe {
        let p = t.panel.cast::<f32>();
        let mut acc = [[[_mm256_setzero_ps(); 2]; MR]; U];
        acc[0] = [[_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]; MR];
        let mut w = t.panel.add(2 * 64);
        let a =
            |r: usize, kk: usize| _mm256_set1_ps(t.a.add(r * t.lda).cast::<f32>().add(kk).read());
        let widen =
            |w: *const u8| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(w.cast())));
        let mut kk = 0;
        while kk + U <= t.k {
            for (c, acc) in acc.iter_mut().enumerate() {
                let wc = w.add(16 * c);
                let (w0, w1) = (widen(wc), widen(wc.add(8)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = a(r, kk + c);
                    acc[0] = _mm256_fmadd_ps(x, w0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, w1, acc[1]);
                }
            }
            w = w.add(16 * U);
            kk += U;
        }
        while kk < t.k {
            let (w0, w1) = (widen(w), widen(w.add(8)));
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let x = a(r, kk);
                acc[0] = _mm256_fmadd_ps(x, w0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, w1, acc[1]);
            }
            w = w.add(16);
            kk += 1;
        }
        let scale = [_mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
        for r in 0..MR {
            let mut v = acc[0][r];
            for chain in &acc[1..] {
                v = [
                    _mm256_add_ps(v[0], chain[r][0]),
                    _mm256_add_ps(v[1], chain[r][1]),
                ];
            }
            finish(
                t,
                r,
                [_mm256_mul_ps(v[0], scale[0]), _mm256_mul_ps(v[1], scale[1])],
            );
        }
    }
}

/// Batch 1: every panel of `job`, two at a time, each over two chains: one weight stream
/// bounds a batch-1 run from DRAM, two keep twice the reads in flight, and a panel's sums
/// do not depend on its pair, so any cut of the panels gives the same bits.
///
/// # Safety
/// As `lowp::run` for a `f32_qc8w` job of one row on AVX2 (panels packed for NR = 16).
pub(super) unsafe fn f32_qc8w_batch1(job: &super::Job) {
    let panel = super::panel_bytes(job.kind, 16, job.k);
    let panels = job.n.div_ceil(16);
    let mut p = 0;
    while p < panels {
        let count = (panels - p).min(2);
        let last = p + count - 1;
        // SAFETY: panels p..=last and their output columns are in bounds (caller).
        unsafe {
            let t = Tile {
                k: job.k,
                a: job.a,
                lda: job.lda,
                panel: job.packed.add(p * panel),
                c: job.c.add(p * 16),
                ldc: job.ldc,
                nvalid: 16.min(job.n - last * 16),
                min: job.min,
                max: job.max,
                rows: core::ptr::null(),
                pf: 0,
            };
            if count == 2 {
                f32_qc8w_1::<2>(&t, panel);
            } else {
                f32_qc8w_1::<1>(&t, panel);
            }
        }
        p += count;
    }
}

/// One row against `P` consecutive panels `stride` bytes apart, each summed over two
/// chains (even and odd k) whatever `P`.
///
/// # Safety
/// `t` describes valid buffers for one row (see `lowp::run`) whose panel is the first of
/// `P`, all but the last full (`t.nvalid` is the last one's); the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn f32_qc8w_1<const P: usize>(t: &Tile, stride: usize) {
    // SAFETY: every load stays inside A's row or the P panels.
    unsafe {
        let x = t.a.cast::<f32>();
        let mut acc = [[[_mm256_setzero_ps(); 2]; P]; 2];
        for (j, acc) in acc[0].iter_mut().enumerate() {
            let b = t.panel.add(j * stride).cast::<f32>();
            *acc = [_mm256_loadu_ps(b), _mm256_loadu_ps(b.add(8))];
        }
        let w = t.panel.add(2 * 64);
        let widen =
            |w: *const u8| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(w.cast())));
        // A macro, not a closure: the FMAs must stay in registers.
        macro_rules! step {
            ($acc:expr, $kk:expr) => {{
                let xv = _mm256_set1_ps(x.add($kk).read());
                for (j, acc) in $acc.iter_mut().enumerate() {
                    let wj = w.add(j * stride + 16 * $kk);
                    acc[0] = _mm256_fmadd_ps(xv, widen(wj), acc[0]);
                    acc[1] = _mm256_fmadd_ps(xv, widen(wj.add(8)), acc[1]);
                }
            }};
        }
        let mut kk = 0;
        while kk + 2 <= t.k {
            step!(acc[0], kk);
            step!(acc[1], kk + 1);
            kk += 2;
        }
        if kk < t.k {
            step!(acc[0], kk);
        }
        let [even, odd] = acc;
        for (j, (even, odd)) in even.into_iter().zip(odd).enumerate() {
            let b = t.panel.add(j * stride).cast::<f32>();
            let scale = [_mm256_loadu_ps(b.add(16)), _mm256_loadu_ps(b.add(24))];
            let v = [0, 1].map(|h| _mm256_mul_ps(_mm256_add_ps(even[h], odd[h]), scale[h]));
            let tj = Tile {
                c: t.c.add(16 * j),
                nvalid: if j + 1 == P { t.nvalid } else { 16 },
                ..*t
            };
            finish(&tj, 0, v);
        }
    }
}
