//! The four fully-connected kinds as types (sealed), the `K` of `FcDesc` and `FcLowp`, so
//! that one descriptor and one low-precision operator serve them all: a kind names its
//! weight and ISA types and what its descriptor adds (how the low-precision kinds pack:
//! `lowp_kind.rs`).

use core::fmt::Debug;

use crate::isa::Isa;
use crate::lowp::{self, DotIsa, Kind};

/// What a kind's descriptor holds beyond the fields every kind has.
pub trait FcKind: sealed::Sealed + Copy + Debug {
    /// One weight: `f32`, bf16 bits (`u16`) or `i8`.
    type Weight: Copy + Debug;
    /// The instruction-set type `with_isa` forces: [`Isa`] for f32, [`DotIsa`] otherwise.
    type Isa: Copy + Debug;
    /// The per-channel weight scales: `&[f32]` for the int8 kinds, `()` for the others.
    type Scales<'a>: WeightScales<'a>;
    /// The descriptor's thread count: `usize` for f32 (`with_threads`), `()` for the
    /// others, which run on the pool given to `run_in`.
    type Threads: Copy + Debug;
}

/// A descriptor's `weight_scales`: the scales to validate, if the kind has any.
pub trait WeightScales<'a>: Copy + Debug {
    /// The scales, or `None` for a kind without.
    fn get(self) -> Option<&'a [f32]>;
}

impl WeightScales<'_> for () {
    fn get(self) -> Option<&'static [f32]> {
        None
    }
}

impl<'a> WeightScales<'a> for &'a [f32] {
    fn get(self) -> Option<&'a [f32]> {
        Some(self)
    }
}

pub(crate) mod sealed {
    use super::Kind;

    /// A kind's `lowp::Kind`, behind a public name so that the sealed traits can carry it.
    #[derive(Clone, Copy)]
    pub struct KindTag(pub(crate) Kind);

    /// Only this crate's kinds.
    pub trait Sealed {}
}

/// `fully_connected_nc_f32`.
#[derive(Debug, Clone, Copy)]
pub struct F32;
/// `fully_connected_nc_bf16_f32`.
#[derive(Debug, Clone, Copy)]
pub struct Bf16F32;
/// `fully_connected_nc_qd8_f32_qc8w`.
#[derive(Debug, Clone, Copy)]
pub struct Qd8F32Qc8w;
/// `fully_connected_nc_f32_qc8w`.
#[derive(Debug, Clone, Copy)]
pub struct F32Qc8w;

impl sealed::Sealed for F32 {}
impl FcKind for F32 {
    type Weight = f32;
    type Isa = Isa;
    type Scales<'a> = ();
    type Threads = usize;
}

impl sealed::Sealed for Bf16F32 {}
impl FcKind for Bf16F32 {
    type Weight = u16;
    type Isa = DotIsa;
    type Scales<'a> = ();
    type Threads = ();
}

/// The two int8-weight kinds: `i8` weights with one scale per output channel.
pub trait Int8Weights: for<'a> FcKind<Weight = i8, Threads = (), Scales<'a> = &'a [f32]> {}

/// The packing of an int8 kind: `(dst, nr, k, n, weights, scales, transposed, bias)`.
pub(crate) type Int8Pack = fn(&mut [u8], usize, usize, usize, &[i8], &[f32], bool, Option<&[f32]>);

/// What tells the two int8 kinds apart: their kernels' kind and packing.
pub(crate) trait Int8Kind: Copy + Debug {
    const TAG: sealed::KindTag;
    const PACK: Int8Pack;
}

impl Int8Kind for Qd8F32Qc8w {
    const TAG: sealed::KindTag = sealed::KindTag(Kind::Qd8F32Qc8w);
    const PACK: Int8Pack = lowp::pack_qd8;
}

impl Int8Kind for F32Qc8w {
    const TAG: sealed::KindTag = sealed::KindTag(Kind::F32Qc8w);
    const PACK: Int8Pack = lowp::pack_f32_qc8w;
}

impl<K: Int8Kind> sealed::Sealed for K {}
impl<K: Int8Kind> FcKind for K {
    type Weight = i8;
    type Isa = DotIsa;
    type Scales<'a> = &'a [f32];
    type Threads = ();
}
impl<K: Int8Kind> Int8Weights for K {}
