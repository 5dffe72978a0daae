//! The operators, XNNPACK's `operators/` to the microkernels' `gemm/` and `lowp/`: each
//! validates a descriptor, packs its weights through the captured table and cuts a run into
//! tiles for the microkernels. The four kinds share one descriptor type (`desc`) and the
//! three low-precision ones one operator type (`lowp_common`), told apart by `kind` (and
//! `lowp_kind` for what the low-precision kinds add).

pub(crate) mod desc;
pub(crate) mod fc;
pub(crate) mod fc_bf16;
pub(crate) mod fc_qc8w;
pub(crate) mod fc_qd8;
mod grid;
pub(crate) mod kind;
pub(crate) mod lowp_common;
pub(crate) mod lowp_kind;

/// The fully-connected kinds, the `K` of [`FcDesc`](crate::FcDesc) and
/// [`FcLowp`](crate::FcLowp), and the traits that describe them.
pub mod kinds {
    pub use super::kind::{Bf16F32, F32, F32Qc8w, FcKind, Int8Weights, Qd8F32Qc8w, WeightScales};
    pub use super::lowp_kind::{LowpKind, Unquantized};
}
