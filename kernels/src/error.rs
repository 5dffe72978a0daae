//! The one error type of the crate.

use crate::cpu::{DotIsa, Isa};

/// Everything that can go wrong in `keepalloc-kernels`.
///
/// No operation panics on bad input: each problem below is reported before anything is
/// allocated or written, except [`KernelError::OutOfMemory`], which is reported after every
/// block already taken has been given back to the table.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// `KEEPALLOC_KERNELS_ISA` names an instruction set this CPU (or build target) lacks.
    /// Nothing was captured; fix the environment and call again.
    #[error("this CPU cannot run the {isa} kernels forced by KEEPALLOC_KERNELS_ISA")]
    UnsupportedIsa {
        /// The instruction set that was asked for.
        isa: Isa,
    },
    /// `KEEPALLOC_KERNELS_ISA` is set to something that is not `avx512`, `avx2`, `neon` or
    /// `scalar`. Nothing was captured.
    #[error("KEEPALLOC_KERNELS_ISA must be one of avx512, avx2, neon, scalar")]
    UnknownIsa,
    /// The allocator table has an empty (NULL) function slot; nothing was captured.
    #[error("the allocator table has a NULL function pointer")]
    InvalidTable,
    /// `initialize` was already called successfully with a different table (other context
    /// or functions). The first table stays in use; XNNPACK would ignore the new one
    /// silently, this crate says so.
    #[error("already initialized with a different allocator table; the first one stays in use")]
    AlreadyInitialized,
    /// An operator was created before [`initialize`](crate::initialize) succeeded.
    #[error("keepalloc-kernels is not initialized: call initialize(&table) first")]
    Uninitialized,
    /// The table's `aligned_allocate` returned NULL. Everything allocated before the failure
    /// was freed; the call can be retried.
    #[error("the allocator table could not provide {bytes} bytes")]
    OutOfMemory {
        /// Size of the refused request.
        bytes: usize,
    },
    /// A channel count is zero, or the packed weights would not fit in the address space.
    #[error("invalid channel counts: {input_channels} input, {output_channels} output")]
    InvalidChannels {
        /// Input channels (K).
        input_channels: usize,
        /// Output channels (N).
        output_channels: usize,
    },
    /// A row stride is smaller than its row's channel count.
    #[error("{which} stride {stride} is smaller than its {channels} channels")]
    InvalidStride {
        /// `"input"` or `"output"`.
        which: &'static str,
        /// The stride given.
        stride: usize,
        /// The channel count it must cover.
        channels: usize,
    },
    /// The weight slice does not hold exactly `input_channels * output_channels` values.
    #[error("weights hold {actual} values, expected {expected}")]
    WeightsLength {
        /// `input_channels * output_channels`.
        expected: usize,
        /// The slice length given.
        actual: usize,
    },
    /// The bias slice does not hold exactly `output_channels` values.
    #[error("bias holds {actual} values, expected {expected}")]
    BiasLength {
        /// `output_channels`.
        expected: usize,
        /// The slice length given.
        actual: usize,
    },
    /// The output clamp is unusable: `min > max`, or a bound is NaN.
    #[error("invalid output range [{min}, {max}]")]
    InvalidRange {
        /// Lower bound given.
        min: f32,
        /// Upper bound given.
        max: f32,
    },
    /// A slice passed to `run` is too short for `batch` rows at its stride.
    #[error("{which} holds {actual} values, {needed} needed for the batch")]
    BufferTooShort {
        /// `"input"` or `"output"`.
        which: &'static str,
        /// `(batch - 1) * stride + channels`.
        needed: usize,
        /// The slice length given.
        actual: usize,
    },
    /// `batch * stride` overflows `usize`.
    #[error("batch {batch} overflows the address space at this stride")]
    BatchOverflow {
        /// The batch size given.
        batch: usize,
    },
    /// `KEEPALLOC_KERNELS_DOT_ISA` (or a descriptor) names a dot-product instruction set this
    /// CPU lacks. Nothing was created.
    #[error("this CPU cannot run the {isa} kernels")]
    UnsupportedDotIsa {
        /// The instruction set that was asked for.
        isa: DotIsa,
    },
    /// `KEEPALLOC_KERNELS_DOT_ISA` is set to something that is not `avx512bf16`,
    /// `avx512vnni`, `avx512`, `avxvnni`, `avx2`, `scalar` or `amx`.
    #[error(
        "KEEPALLOC_KERNELS_DOT_ISA must be one of amx, avx512bf16, avx512vnni, avx512, avxvnni, avx2, scalar"
    )]
    UnknownDotIsa,
    /// The forced dot-product instruction set has no kernel for this operator kind (for
    /// example `avx512bf16` for an int8 operator).
    #[error("the {op} operator has no {isa} kernel")]
    NoKernel {
        /// The instruction set that was asked for.
        isa: DotIsa,
        /// XNNPACK's name of the operator kind (`"bf16_f32"`, ...).
        op: &'static str,
    },
    /// The per-channel weight scales do not hold exactly `output_channels` values.
    #[error("weight scales hold {actual} values, expected {expected}")]
    ScalesLength {
        /// `output_channels`.
        expected: usize,
        /// The slice length given.
        actual: usize,
    },
    /// A per-channel weight scale is not a positive finite number.
    #[error("weight scale {scale} of output channel {channel} is not positive and finite")]
    InvalidScale {
        /// The output channel.
        channel: usize,
        /// Its scale.
        scale: f32,
    },
    /// A thread count of zero was asked for (or, for a pool, more than
    /// [`MAX_POOL_THREADS`](crate::MAX_POOL_THREADS)).
    #[error("thread count must be at least 1 (and at most MAX_POOL_THREADS for a pool)")]
    InvalidThreads,
    /// The OS refused to start a worker thread of a [`ThreadPool`](crate::ThreadPool)
    /// (`pthread_create`'s error number). The workers already started were joined and the
    /// pool's block freed.
    #[error("could not start a worker thread (error {code})")]
    ThreadSpawn {
        /// The error number.
        code: i32,
    },
    /// A [`Parallel`](crate::Parallel) implementation returned from `run` without calling
    /// every task: the output is incomplete. (Our own pools never do this.)
    #[error("the parallel pool ran {ran} of {tasks} tasks")]
    ParallelIncomplete {
        /// Tasks that ran.
        ran: usize,
        /// Tasks asked for.
        tasks: usize,
    },
}
