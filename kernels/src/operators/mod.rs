//! The operators, XNNPACK's `operators/` to the microkernels' `gemm/` and `lowp/`: each
//! validates a descriptor, packs its weights through the captured table and cuts a run into
//! tiles for the microkernels.

mod desc;
pub(crate) mod fc;
pub(crate) mod fc_bf16;
pub(crate) mod fc_qc8w;
pub(crate) mod fc_qd8;
mod grid;
mod lowp_common;
