//! The edge tile of the kernels without cheap masked stores (AVX2: AMD's `vmaskmovps` stores
//! are slow; NEON has none): a tile with fewer than NR valid columns runs its body on a local
//! buffer of NR-float rows, so the body never touches a column past `nvalid`.

use super::Tile;

/// A tile's C as the kernel body sees it: the caller's C in place when the tile is full,
/// else this buffer of `ROWS` rows of `NR` floats.
pub(super) struct EdgeTile<const NR: usize, const ROWS: usize> {
    buf: [[f32; NR]; ROWS],
}

impl<const NR: usize, const ROWS: usize> EdgeTile<NR, ROWS> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        EdgeTile {
            buf: [[0.0; NR]; ROWS],
        }
    }

    /// Where the body reads and writes `mr` rows of C, and their stride. An edge tile that
    /// accumulates onto C (no bias) starts from a copy of C's valid columns.
    ///
    /// # Safety
    /// `t` describes valid buffers (see `gemm::run`) and `mr <= ROWS`.
    #[inline(always)]
    pub(super) unsafe fn begin(&mut self, t: &Tile, mr: usize) -> (*mut f32, usize) {
        if t.nvalid == NR {
            return (t.c, t.ldc);
        }
        let c = self.buf.as_mut_ptr().cast::<f32>();
        if t.bias.is_null() {
            for r in 0..mr {
                // SAFETY: C row r has nvalid valid columns; buffer row r has NR >= nvalid.
                unsafe {
                    core::ptr::copy_nonoverlapping(t.c.add(r * t.ldc), c.add(r * NR), t.nvalid)
                };
            }
        }
        (c, NR)
    }

    /// Copies an edge tile's `mr` rows back to C's valid columns (nothing for a full tile).
    ///
    /// # Safety
    /// As [`begin`](Self::begin).
    #[inline(always)]
    pub(super) unsafe fn finish(&self, t: &Tile, mr: usize) {
        if t.nvalid == NR {
            return;
        }
        let c = self.buf.as_ptr().cast::<f32>();
        for r in 0..mr {
            // SAFETY: as in `begin`, the other way.
            unsafe { core::ptr::copy_nonoverlapping(c.add(r * NR), t.c.add(r * t.ldc), t.nvalid) };
        }
    }
}
