//! The f32 run's results: a row per shape, a cell per library.

use crate::peers::Lib;
use crate::stats::{Measured, Paired, paired_ratio};

/// One library on one shape.
pub struct Cell {
    /// The library.
    pub lib: Lib,
    /// GFLOPS (the median, and each round's), or why it was skipped.
    pub gflops: Result<Measured, String>,
    /// Output matched the reference.
    pub correct: bool,
}

/// One shape's results.
pub struct Row {
    /// (M, K, N).
    pub shape: (usize, usize, usize),
    /// One per library, in the order of `Lib::ALL` (the order of the rounds).
    pub cells: Vec<Cell>,
    /// Batch 1: read bandwidth (GB/s) of a weights-sized buffer.
    pub bandwidth: Option<f64>,
}

impl Row {
    /// `MxKxN`.
    pub fn label(&self) -> String {
        let (m, k, n) = self.shape;
        format!("{m}x{k}x{n}")
    }

    pub(crate) fn measured(&self, lib: Lib) -> Option<&Measured> {
        self.cells
            .iter()
            .find(|c| c.lib == lib)
            .and_then(|c| c.gflops.as_ref().ok())
    }

    pub(crate) fn of(&self, lib: Lib) -> Option<f64> {
        self.measured(lib).map(|m| m.median)
    }

    /// The peer with the highest median.
    pub(crate) fn best_peer(&self) -> Option<(Lib, &Measured)> {
        self.cells
            .iter()
            .filter(|c| c.lib != Lib::Keepalloc)
            .filter_map(|c| c.gflops.as_ref().ok().map(|g| (c.lib, g)))
            .max_by(|a, b| a.1.median.total_cmp(&b.1.median))
    }

    /// keepalloc over `lib`, paired by round ([`paired_ratio`]).
    pub(crate) fn ratio_to(&self, lib: Lib) -> Option<Paired> {
        paired_ratio(self.measured(Lib::Keepalloc)?, self.measured(lib)?)
    }
}
