//! Each f32 microkernel's tile shape, declared once (as matrixmultiply's `GemmKernel`):
//! the ISA's own file and [`shape`](super::shape) both read it. Compiled on every target,
//! so the shape table stays whole where an ISA's kernels are not built.

/// The tile of one ISA's microkernel.
pub(crate) trait Kernel {
    /// Most rows per call.
    const MR: usize;
    /// Columns per panel: the packing's NR.
    const NR: usize;
}

/// AVX-512F: 8 × 32 (16 zmm accumulators).
pub(crate) struct Avx512;
impl Kernel for Avx512 {
    const MR: usize = 8;
    const NR: usize = 32;
}

/// AVX2 + FMA: 6 × 16 (12 ymm accumulators).
pub(crate) struct Avx2;
impl Kernel for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
}

/// NEON: 8 × 8.
pub(crate) struct Neon;
impl Kernel for Neon {
    const MR: usize = 8;
    const NR: usize = 8;
}

/// Portable: 4 × 8.
pub(crate) struct Scalar;
impl Kernel for Scalar {
    const MR: usize = 4;
    const NR: usize = 8;
}
