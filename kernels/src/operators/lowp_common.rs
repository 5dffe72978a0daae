//! The three low-precision operators, one generic type: the packed block from the table
//! (validated by the descriptor), and the runs whose kernels read the input as given.

use core::marker::PhantomData;

use keepalloc_allocators::AllocatorTable;

use super::desc::{FcDesc, Geometry};
use super::lowp_kind::{LowpKind, Unquantized};
use crate::buffer::TableBuf;
use crate::error::KernelError;
use crate::init;
use crate::lowp::{DotIsa, Job, Kind, choose, shape};
use crate::pool::Parallel;

/// Largest K of `qd8_f32_qc8w`: the exact i32 accumulation needs
/// `K · 255 · 128 < 2³¹` (see the AVX-512 kernel's notes).
pub(crate) const QD8_MAX_K: usize = 65_536;

/// Zeroed bytes after the packed panels of a qd8 operator on AMX: 16 word rows of 256 bytes,
/// more than a tile step can read past the last panel's K.
const AMX_QD8_SLACK: usize = 16 * 256;

/// An operator's packed weights and geometry.
pub(crate) struct Core {
    pub packed: TableBuf,
    pub kind: Kind,
    pub isa: DotIsa,
    pub geometry: Geometry,
}

impl core::fmt::Debug for Core {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.geometry
            .debug(f, self.kind.name(), &self.isa)
            .field("packed_bytes", &self.packed.bytes())
            .finish()
    }
}

impl Core {
    /// Validates `desc` (nothing allocated on error), takes one block from `table` and
    /// packs the weights into it.
    fn create<K: LowpKind>(
        table: &'static AllocatorTable,
        desc: &FcDesc<'_, K>,
    ) -> Result<Core, KernelError> {
        if !table.is_complete() {
            return Err(KernelError::InvalidTable);
        }
        let kind = K::TAG.0;
        let isa = choose(kind, desc.isa)?;
        let (k, n) = (desc.input_channels, desc.output_channels);
        let max_k = if kind == Kind::Qd8F32Qc8w {
            QD8_MAX_K
        } else {
            usize::MAX
        };
        let nr = shape(kind, isa).nr;
        let bytes = crate::lowp::panel_bytes_checked(kind, nr, k)
            .and_then(|p| p.checked_mul(n.div_ceil(nr)))
            .filter(|&b| b <= isize::MAX as usize);
        let (geometry, bytes) = desc.validate(max_k, bytes)?;
        // qd8 on AMX reads whole 16-word tile steps: up to 15 word rows (of 256 bytes) past
        // the last panel's K, against zeroed activation bytes (see `blocked::qd8_with`).
        let slack = if kind == Kind::Qd8F32Qc8w && isa == DotIsa::Amx {
            AMX_QD8_SLACK
        } else {
            0
        };
        let total = bytes
            .checked_add(slack)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(KernelError::InvalidChannels {
                input_channels: k,
                output_channels: n,
            })?;
        let mut packed = TableBuf::zeroed(table, total / size_of::<f32>(), desc.huge_pages)?;
        debug_assert_eq!(packed.bytes(), total);
        K::pack(desc, &mut packed.as_bytes_mut()[..bytes], nr);
        Ok(Core {
            packed,
            kind,
            isa,
            geometry,
        })
    }
}

impl Core {
    /// Runs `job` (built from this operator and a checked run) on the calling thread, or on
    /// `pool` with as many threads as it has.
    ///
    /// # Safety
    /// As `lowp::run`.
    pub(crate) unsafe fn execute(
        &self,
        job: &Job,
        pool: Option<&dyn Parallel>,
    ) -> Result<(), KernelError> {
        match pool {
            // SAFETY: forwarded (caller).
            None => unsafe { crate::lowp::run(job) },
            // SAFETY: forwarded (caller).
            Some(pool) => unsafe { crate::lowp::run_in(job, pool, pool.threads().max(1))? },
        }
        Ok(())
    }

    /// A run of an operator whose kernels read the activations as given (bf16 or f32):
    /// checks the buffers, then computes on the calling thread or on `pool`.
    pub(crate) fn run_plain<T>(
        &self,
        batch: usize,
        input: &[T],
        output: &mut [f32],
        pool: Option<&dyn Parallel>,
    ) -> Result<(), KernelError> {
        debug_assert_eq!(
            size_of::<T>(),
            if self.kind == Kind::Bf16F32 { 2 } else { 4 }
        );
        if !self.geometry.check_run(batch, input.len(), output.len())? {
            return Ok(());
        }
        let job = self.job(batch, input, output);
        // SAFETY: the slices hold `batch` rows at their strides (checked above), the output is borrowed mutably, the block was packed for (kind, isa) by `create`, which checked the ISA.
        unsafe { self.execute(&job, pool) }
    }

    /// The job of a run whose activations the kernels read as given (bf16, f32): `batch`
    /// rows of `input` into `output`, no quantized rows. The caller checked the run.
    pub(crate) fn job<T>(&self, batch: usize, input: &[T], output: &mut [f32]) -> Job {
        let g = &self.geometry;
        Job {
            kind: self.kind,
            isa: self.isa,
            m: batch,
            k: g.k,
            n: g.n,
            a: input.as_ptr().cast(),
            lda: g.input_stride * size_of::<T>(),
            packed: self.packed.as_byte_ptr(),
            c: output.as_mut_ptr(),
            ldc: g.output_stride,
            min: g.min,
            max: g.max,
            rows: core::ptr::null(),
            x: core::ptr::null(),
            ldx: 0,
        }
    }
}

/// A low-precision fully-connected operator of kind `K`, named per kind as
/// [`FullyConnectedBf16F32`](crate::FullyConnectedBf16F32),
/// [`FullyConnectedQd8F32Qc8w`](crate::FullyConnectedQd8F32Qc8w) and
/// [`FullyConnectedF32Qc8w`](crate::FullyConnectedF32Qc8w).
///
/// Lifecycle as the f32 operator's: [`create`](Self::create) validates and packs (exactly
/// [`Self::CREATE_ALLOCATIONS`] call to the table), `run` allocates nothing and runs on the
/// calling thread, drop frees the block through the table.
pub struct FcLowp<K: LowpKind> {
    pub(crate) core: Core,
    kind: PhantomData<K>,
}

impl<K: LowpKind> core::fmt::Debug for FcLowp<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.core.fmt(f)
    }
}

impl<K: LowpKind> FcLowp<K> {
    /// Allocations one `create` makes from the table: the one block of packed weights and
    /// bias (and the int8 kinds' scales, and qd8's column sums).
    pub const CREATE_ALLOCATIONS: usize = 1;

    /// Creates the operator through the table captured by [`initialize`](crate::initialize).
    pub fn create(desc: &FcDesc<'_, K>) -> Result<Self, KernelError> {
        Self::create_with_table(init::captured()?, desc)
    }

    /// Creates the operator through `table` (same contract as
    /// [`FullyConnected::create_with_table`](crate::FullyConnected::create_with_table)).
    pub fn create_with_table(
        table: &'static AllocatorTable,
        desc: &FcDesc<'_, K>,
    ) -> Result<Self, KernelError> {
        Ok(FcLowp {
            core: Core::create(table, desc)?,
            kind: PhantomData,
        })
    }

    /// The instruction set whose kernels this operator runs.
    pub fn isa(&self) -> DotIsa {
        self.core.isa
    }

    /// K.
    pub fn input_channels(&self) -> usize {
        self.core.geometry.k
    }

    /// N.
    pub fn output_channels(&self) -> usize {
        self.core.geometry.n
    }

    /// Bytes of the packed block held from the table.
    pub fn packed_bytes(&self) -> usize {
        self.core.packed.bytes()
    }
}

impl<K: Unquantized> FcLowp<K> {
    /// Computes `batch` rows (input rows `input_stride` apart, f32 output rows
    /// `output_stride` apart; only the first `output_channels` of each are written). A batch
    /// of 0 does nothing. Never allocates.
    pub fn run(
        &self,
        batch: usize,
        input: &[K::Input],
        output: &mut [f32],
    ) -> Result<(), KernelError> {
        self.core.run_plain(batch, input, output, None)
    }

    /// [`run`](Self::run) on `pool`, a [`ThreadPool`](crate::ThreadPool) or a runtime's own
    /// [`Parallel`] implementation, with as many threads as it has: the output panels (or,
    /// for a tall batch, its rows in units of 32) are shared out, and the result is
    /// bit-identical to a one-thread run. Never allocates. A pool that skips tasks gets
    /// [`KernelError::ParallelIncomplete`].
    pub fn run_in(
        &self,
        pool: &dyn Parallel,
        batch: usize,
        input: &[K::Input],
        output: &mut [f32],
    ) -> Result<(), KernelError> {
        self.core.run_plain(batch, input, output, Some(pool))
    }
}

// Compile-time proof that operators can be shared across threads.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<FcLowp<super::kind::Bf16F32>>();
};
