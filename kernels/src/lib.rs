//! SIMD f32 fully-connected operators that allocate only through a published allocator
//! table: the consuming library of keepalloc, in XNNPACK's role.
//!
//! Like XNNPACK, the library has one process-wide [`initialize`] that checks the hardware,
//! then copies the caller's [`AllocatorTable`] once and keeps it (and its raw `context`) for
//! the life of the process. Every allocation an operator makes, the packed weights above
//! all, goes through that copied table's `aligned_allocate` / `aligned_deallocate` with
//! 64-byte alignment; nothing on the create, run or drop paths uses the global allocator
//! (the `global_alloc` test proves it with a counting `#[global_allocator]`). The crate
//! meets `keepalloc-provider` only through the table type of `keepalloc-allocators`.
//!
//! Threads: a run can be cut into M-row × N-panel tiles and spread over a pool, with a
//! result bit-identical to one thread. [`ThreadPool::new`] is a persistent pool whose state
//! is one block from the captured table (its workers started once with `pthread_create`,
//! their stacks the C library's); [`FullyConnected::run_in`] runs on it, or on a runtime's
//! own pool through the [`Parallel`] trait (a runtime's pthreadpool, the one it gives
//! XNNPACK, through [`Pthreadpool`]); `FullyConnectedDesc::with_threads(t)` runs on
//! the [`process_pool`] (one thread per CPU, started by the first such `create`, a static),
//! using at most `t` of its threads. No `run` starts a thread or allocates, at any thread
//! count, once the pool it runs on exists: `create` with `threads > 1` starts the process
//! pool, and only a `run_with_threads(t > 1)` before any such `create` starts it itself.
//!
//! The operator is [`FullyConnected`]:
//! `y[M][N] = clamp(x[M][K] · W[N][K]ᵀ + b[N], min, max)`, created from a
//! [`FullyConnectedDesc`] (XNNPACK's `xnn_create_fully_connected_nc_f32` arguments), run on
//! `&self` from any number of threads, and freed through the table on drop.
//!
//! Kernels: AVX-512F (8×32 tiles) and AVX2+FMA (6×16) on x86-64, NEON (8×8) on aarch64,
//! and a portable fallback, chosen once at run time ([`selected_isa`]); the environment
//! variable `KEEPALLOC_KERNELS_ISA` ([`ISA_ENV`]) forces a lower one. Batch 1 runs a GEMV
//! kernel of its own with eight independent accumulator chains (on AVX2 over four panels
//! at once, four weight streams).
//!
//! Low-precision variants, named and created as XNNPACK's (each from its own descriptor,
//! packed through the same table, with the same errors and allocation rules):
//! [`FullyConnectedBf16F32`] (bf16 activations and weights, f32 accumulation; AMX-BF16
//! `tdpbf16ps`, AVX512-BF16 `vdpbf16ps` or bf16 widened to f32 for FMA),
//! [`FullyConnectedQd8F32Qc8w`] (activations quantized per row to int8 inside the run, int8
//! weights with per-channel scales; AMX-INT8 `tdpbusd`, AVX512-VNNI / AVX-VNNI `vpdpbusd`) and
//! [`FullyConnectedF32Qc8w`] (f32 activations, int8 weights widened in registers). They
//! choose their kernels by [`DotIsa`], forced with `KEEPALLOC_KERNELS_DOT_ISA`
//! ([`DOT_ISA_ENV`]).
//!
//! Pages: on Linux x86-64 every `create` asks, by default, for transparent huge pages under
//! its packed weights (`madvise(MADV_HUGEPAGE)` on the whole 2 MiB pages inside the block,
//! before it is filled), so a run streaming them takes a TLB entry per 2 MiB, not per
//! 4 KiB. No memory is added and nothing is allocated; `with_huge_pages(false)` on a
//! descriptor leaves the block as the allocator made it.
//!
//! ```
//! use keepalloc_allocators::{AllocatorTable, Counting, System};
//! use keepalloc_kernels::{FullyConnected, FullyConnectedDesc};
//!
//! static BACKEND: Counting<System> = Counting::new(System);
//! static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);
//! keepalloc_kernels::initialize(&TABLE)?;
//!
//! // 2 inputs → 3 outputs, W is [output][input].
//! let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let op = FullyConnected::create(&FullyConnectedDesc::new(2, 3, &w).with_bias(&[0.0, 0.0, 1.0]))?;
//! let mut y = [0.0f32; 3];
//! op.run(1, &[1.0, 1.0], &mut y)?;
//! assert_eq!(y, [3.0, 7.0, 12.0]);
//! assert_eq!(BACKEND.stats().allocations, 1);
//! drop(op);
//! assert_eq!(BACKEND.stats().live_bytes, 0);
//! # Ok::<(), keepalloc_kernels::KernelError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

mod buffer;
mod cpu;
mod error;
mod gemm;
mod init;
mod isa;
mod lowp;
mod operators;
mod pack;
mod pool;
mod pthreadpool;
mod selftest;
mod tuning;

pub use buffer::ALIGNMENT;
pub use error::KernelError;
pub use init::{captured_table, initialize};
pub use isa::{ISA_ENV, Isa, selected as selected_isa};
pub use keepalloc_allocators::AllocatorTable;
pub use lowp::{DOT_ISA_ENV, DotIsa};
pub use operators::desc::FcDesc;
pub use operators::fc::{FullyConnected, FullyConnectedDesc};
pub use operators::fc_bf16::{
    FullyConnectedBf16F32, FullyConnectedBf16F32Desc, bf16_from_f32, bf16_to_f32,
};
pub use operators::fc_qc8w::{FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc};
pub use operators::fc_qd8::{
    FullyConnectedQd8F32Qc8w, FullyConnectedQd8F32Qc8wDesc, Qd8Params, quantize_qd8,
};
pub use operators::kinds;
pub use operators::lowp_common::FcLowp;
pub use pool::{MAX_POOL_THREADS, Parallel, Sequential, ThreadPool, process_pool};
pub use pthreadpool::{
    Pthreadpool, PthreadpoolGetThreadsCount, PthreadpoolParallelize1d, PthreadpoolTask1d,
};
pub use selftest::{LOW_PRECISION_ALLOCATIONS, low_precision_path};
