//! What the low-precision kinds add to [`FcKind`] for their operator, [`FcLowp`](crate::FcLowp): the
//! kernels' kind, the activation type, and how each packs its descriptor's weights.

use super::desc::FcDesc;
#[cfg(doc)]
use super::kind::FcKind;
use super::kind::{Bf16F32, F32Qc8w, Int8Kind, sealed::KindTag};
use crate::lowp::{self, DotIsa, Kind};

/// A low-precision kind: its operator is an [`FcLowp`](crate::FcLowp).
pub trait LowpKind: super::kind::FcKind<Isa = DotIsa, Threads = ()> + sealed::Lowp {
    /// One activation of the run's input: bf16 bits (`u16`) or `f32`.
    type Input: Copy;
}

/// A low-precision kind whose kernels read the activations as given (no workspace).
pub trait Unquantized: LowpKind {}

pub(crate) mod sealed {
    use super::{FcDesc, KindTag};

    /// What the operator of a low-precision kind needs of it.
    pub trait Lowp: super::super::kind::FcKind {
        /// The kernels' kind.
        const TAG: KindTag;
        /// Packs the descriptor's weights (validated) into `dst`, panels of `nr` columns.
        fn pack(desc: &FcDesc<'_, Self>, dst: &mut [u8], nr: usize);
    }
}

impl LowpKind for Bf16F32 {
    type Input = u16;
}
impl Unquantized for Bf16F32 {}
impl sealed::Lowp for Bf16F32 {
    const TAG: KindTag = KindTag(Kind::Bf16F32);
    fn pack(d: &FcDesc<'_, Self>, dst: &mut [u8], nr: usize) {
        let (k, n) = (d.input_channels, d.output_channels);
        lowp::pack_bf16(dst, nr, k, n, d.weights, d.transposed_weights, d.bias);
    }
}

impl<K: Int8Kind> LowpKind for K {
    type Input = f32;
}
impl<K: Int8Kind> sealed::Lowp for K {
    const TAG: KindTag = K::TAG;
    fn pack(d: &FcDesc<'_, Self>, dst: &mut [u8], nr: usize) {
        let (k, n, s) = (d.input_channels, d.output_channels, d.weight_scales);
        K::PACK(dst, nr, k, n, d.weights, s, d.transposed_weights, d.bias);
    }
}
impl Unquantized for F32Qc8w {}
