//! Portable reference kernels: one row, 8 columns, the packed layouts read word by word.

use super::{DotIsa, Kind, Tile};

/// Columns per panel: the scalar kernels' shape in [`shape`](super::shape), for every kind.
const NR: usize = super::shape(Kind::Bf16F32, DotIsa::Scalar).nr;

/// An f32 from the panel's header (`i`-th 32-bit slot).
///
/// # Safety
/// The slot is inside the panel.
#[inline]
unsafe fn f32_at(panel: *const u8, i: usize) -> f32 {
    // SAFETY: in bounds (caller); the panel is 64-byte aligned, slots are 4-byte aligned.
    unsafe { panel.cast::<f32>().add(i).read() }
}

/// Clamps (NaN passes through) and writes the valid columns.
///
/// # Safety
/// `c` has `nvalid` writable floats.
#[inline]
unsafe fn store(t: &Tile, c: *mut f32, acc: &[f32; NR]) {
    for (j, &v) in acc.iter().enumerate().take(t.nvalid) {
        let v = if v.is_nan() {
            v
        } else {
            v.max(t.min).min(t.max)
        };
        // SAFETY: j < nvalid (caller).
        unsafe { c.add(j).write(v) };
    }
}

/// bf16 × bf16 → f32: each product is exact in f32, summed in k order.
///
/// # Safety
/// `t` describes valid buffers (see `lowp::run`) with `mr` rows.
pub(super) unsafe fn bf16(mr: usize, t: &Tile) {
    let bf = |bits: u16| f32::from_bits(u32::from(bits) << 16);
    for r in 0..mr {
        // SAFETY: row r of A (k bf16 values) and of C are in bounds; the panel holds the bias and ceil(k/2) words per column.
        unsafe {
            let a = t.a.add(r * t.lda).cast::<u16>();
            let mut acc = [0.0f32; NR];
            for (j, v) in acc.iter_mut().enumerate() {
                *v = f32_at(t.panel, j);
            }
            let w = t.panel.add(4 * NR).cast::<u16>();
            for kk in 0..t.k {
                let x = bf(a.add(kk).read_unaligned());
                for (j, v) in acc.iter_mut().enumerate() {
                    let wv = bf(w.add(2 * ((kk / 2) * NR + j) + kk % 2).read());
                    *v = x.mul_add(wv, *v);
                }
            }
            store(t, t.c.add(r * t.ldc), &acc);
        }
    }
}

/// qd8 activations × int8 weights, exact i32 sums, then
/// `f32(Σ(u - zpu)·w) · (scale · wscale) + bias`.
///
/// # Safety
/// As [`bf16`], with `t.rows` holding `mr` entries.
pub(super) unsafe fn qd8(mr: usize, t: &Tile) {
    let kp = t.k.next_multiple_of(4);
    for r in 0..mr {
        // SAFETY: row r of A (kp bytes), its RowQuant and row r of C are in bounds; the panel holds the three header slots and kp/4 words per column.
        unsafe {
            let a = t.a.add(r * t.lda);
            let q = t.rows.add(r).read();
            let w = t.panel.add(3 * 4 * NR);
            let mut acc = [0i32; NR];
            for kk in 0..kp {
                let x = i32::from(a.add(kk).read());
                for (j, v) in acc.iter_mut().enumerate() {
                    let wv = i32::from(w.add(4 * ((kk / 4) * NR + j) + kk % 4).read() as i8);
                    *v = v.wrapping_add(x * wv);
                }
            }
            let mut out = [0.0f32; NR];
            for (j, o) in out.iter_mut().enumerate() {
                let colsum = t.panel.cast::<i32>().add(2 * NR + j).read();
                let s = acc[j].wrapping_sub(q.zpu.wrapping_mul(colsum));
                *o = (s as f32).mul_add(q.scale * f32_at(t.panel, NR + j), f32_at(t.panel, j));
            }
            store(t, t.c.add(r * t.ldc), &out);
        }
    }
}

/// f32 activations × int8 weights: `(bias + Σ x·w) · wscale` (XNNPACK's definition).
///
/// # Safety
/// As [`bf16`].
pub(super) unsafe fn f32_qc8w(mr: usize, t: &Tile) {
    for r in 0..mr {
        // SAFETY: row r of A (k floats) and of C are in bounds; the panel holds the two header slots and k × NR weight bytes.
        unsafe {
            let a = t.a.add(r * t.lda).cast::<f32>();
            let w = t.panel.add(2 * 4 * NR).cast::<i8>();
            let mut acc = [0.0f32; NR];
            for (j, v) in acc.iter_mut().enumerate() {
                *v = f32_at(t.panel, j);
            }
            for kk in 0..t.k {
                let x = a.add(kk).read_unaligned();
                for (j, v) in acc.iter_mut().enumerate() {
                    *v = x.mul_add(f32::from(w.add(kk * NR + j).read()), *v);
                }
            }
            for (j, v) in acc.iter_mut().enumerate() {
                *v *= f32_at(t.panel, NR + j);
            }
            store(t, t.c.add(r * t.ldc), &acc);
        }
    }
}
