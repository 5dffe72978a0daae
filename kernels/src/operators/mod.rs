//! The operators, XNNPACK's `operators/` to the microkernels' `gemm/` and `lowp/`: each
//! validates a descriptor, packs its weights through the captured table and cuts a run into
//! tiles for the microkernels. The four kinds share one descriptor type (`desc`) and the
//! three low-precision ones one operator type (`lowp_common`), told apart by `kind`.

pub(crate) mod desc;
pub(crate) mod fc;
pub(crate) mod fc_bf16;
pub(crate) mod fc_qc8w;
pub(crate) mod fc_qd8;
mod grid;
pub mod kind;
pub(crate) mod lowp_common;
