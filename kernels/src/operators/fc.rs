//! The fully-connected operator: `y[M][N] = clamp(x[M][K] · W[N][K]ᵀ + b[N], min, max)`.

use keepalloc_allocators::AllocatorTable;

use super::desc::{FcDesc, Geometry};
use super::grid::{GridCache, run_parallel};
use super::kind::F32;
use crate::buffer::TableBuf;
use crate::error::KernelError;
use crate::gemm::{self, Problem};
use crate::init;
use crate::isa::{self, Isa};
use crate::pack::{self, Layout};
use crate::pool::{self, Parallel};

/// Everything `xnn_create_fully_connected_nc_f32` takes, as a value with defaults: f32
/// weights, and the thread count of [`with_threads`](FcDesc::with_threads).
pub type FullyConnectedDesc<'a> = FcDesc<'a, F32>;

/// A fully-connected f32 operator with its weights packed into memory from the allocator
/// table.
///
/// Lifecycle as in XNNPACK: [`create`](Self::create) validates and packs (exactly
/// [`FullyConnected::CREATE_ALLOCATIONS`] call to the table's `aligned_allocate`),
/// [`run`](Self::run) computes a batch on `&self` without allocating (so many threads can
/// run one operator at once), and drop gives the block back through `aligned_deallocate`.
pub struct FullyConnected {
    packed: TableBuf,
    isa: Isa,
    geometry: Geometry,
    threads: usize,
    /// The cut of the last parallel run, so that runs of the same batch on the same thread
    /// count skip [`Grid::new`](super::grid::Grid::new)'s search (see [`GridCache`]).
    grid: GridCache,
}

impl core::fmt::Debug for FullyConnected {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.geometry
            .debug(f, "FullyConnected", &self.isa)
            .field("threads", &self.threads)
            .field("packed_bytes", &self.packed.bytes())
            .finish()
    }
}

impl FullyConnected {
    /// Allocations one `create` makes from the table (the packed weights and bias, in one
    /// 64-byte aligned block). `run` makes none; drop frees that one block. A failure
    /// plan that fails "each allocation site in turn" has this many sites.
    pub const CREATE_ALLOCATIONS: usize = 1;

    /// Creates the operator, allocating through the table captured by
    /// [`initialize`](crate::initialize); [`KernelError::Uninitialized`] before that.
    pub fn create(desc: &FullyConnectedDesc<'_>) -> Result<Self, KernelError> {
        let table = init::captured()?;
        Self::create_with_table(table, desc)
    }

    /// Creates the operator, allocating through `table` instead of the captured one (for
    /// tests and failure injection that must not touch the process-wide state).
    ///
    /// Safe because every [`AllocatorTable`] follows the `xnn_allocator` contract: safe code
    /// can only build one with [`AllocatorTable::for_allocator`] (for a `&'static` allocator,
    /// so its context outlives the operator), and [`AllocatorTable::from_raw_parts`] is
    /// `unsafe`, its caller promising the contract and the context's lifetime. A table with a
    /// NULL slot is [`KernelError::InvalidTable`].
    pub fn create_with_table(
        table: &'static AllocatorTable,
        desc: &FullyConnectedDesc<'_>,
    ) -> Result<Self, KernelError> {
        if !table.is_complete() {
            return Err(KernelError::InvalidTable);
        }
        let isa = match desc.isa {
            Some(isa) if isa.is_supported() => isa,
            Some(isa) => return Err(KernelError::UnsupportedIsa { isa }),
            None => isa::selected()?,
        };
        let (k, n) = (desc.input_channels, desc.output_channels);
        let nr = gemm::shape(isa).nr;
        let packed_len =
            pack::packed_len(nr, k, n).filter(|&len| len <= isize::MAX as usize / size_of::<f32>());
        let (geometry, packed_len) = desc.validate(usize::MAX, packed_len)?;
        if desc.threads == 0 {
            return Err(KernelError::InvalidThreads);
        }
        if desc.threads > 1 {
            // Started here, once per process, so that `run` never starts a thread.
            pool::process_pool()?;
        }
        let mut packed = TableBuf::zeroed(table, packed_len, desc.huge_pages)?;
        let layout = if desc.transposed_weights {
            Layout::InputMajor
        } else {
            Layout::OutputMajor
        };
        pack::pack(
            packed.as_mut_slice(),
            nr,
            k,
            n,
            desc.weights,
            layout,
            desc.bias,
        )?;
        Ok(FullyConnected {
            packed,
            isa,
            geometry,
            threads: desc.threads,
            grid: GridCache::new(),
        })
    }

    /// The instruction set whose kernels this operator runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// K.
    pub fn input_channels(&self) -> usize {
        self.geometry.k
    }

    /// N.
    pub fn output_channels(&self) -> usize {
        self.geometry.n
    }

    /// Threads a `run` uses.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Bytes of packed weights and bias held from the table.
    pub fn packed_bytes(&self) -> usize {
        self.packed.bytes()
    }

    /// Computes `batch` rows: row `m` of `input` starts at `m * input_stride`, row `m` of
    /// `output` at `m * output_stride`; only the first `output_channels` floats of each
    /// output row are written. `input` must hold at least
    /// `(batch - 1) * input_stride + input_channels` floats, and `output` likewise. A batch
    /// of 0 does nothing.
    ///
    /// With `threads == 1` (the default) everything runs on the calling thread. With
    /// `with_threads(t)`, `t > 1`, the work is cut into M-row × N-panel tiles and run on
    /// the [process pool](crate::process_pool) (started by `create`), using at most `t`
    /// of its threads. Never allocates and never starts a thread; the result is
    /// bit-identical to a one-thread run.
    pub fn run(&self, batch: usize, input: &[f32], output: &mut [f32]) -> Result<(), KernelError> {
        self.run_with_threads(batch, input, output, self.threads)
    }

    /// [`run`](Self::run) with an explicit thread count for this call (≥ 1): `threads > 1`
    /// runs on the [process pool](crate::process_pool), using at most `threads` of its
    /// threads (the others leave the job alone). The pool is started here if no operator
    /// with `threads > 1` started it before: that first call starts threads and asks the OS
    /// for the CPU count (through the global allocator, once). Bit-identical to a one-thread
    /// run.
    pub fn run_with_threads(
        &self,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        threads: usize,
    ) -> Result<(), KernelError> {
        match threads {
            0 => Err(KernelError::InvalidThreads),
            1 => self.execute(batch, input, output, None),
            t => {
                let pool = pool::Capped::new(pool::process_pool()?, t);
                let threads = pool.threads();
                self.execute(batch, input, output, Some((&pool, threads)))
            }
        }
    }

    /// [`run`](Self::run) on `pool`, a [`ThreadPool`](crate::ThreadPool) or a runtime's own
    /// [`Parallel`] implementation, with as many threads as it has (the operator's own
    /// thread count is ignored). This is how a runtime makes the work run on its threads.
    /// Bit-identical to a one-thread run; never allocates. An implementation that breaks
    /// the [`Parallel`] contract by skipping tasks gets
    /// [`KernelError::ParallelIncomplete`].
    ///
    /// ```
    /// use keepalloc_allocators::{AllocatorTable, System};
    /// use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, ThreadPool};
    ///
    /// static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);
    /// keepalloc_kernels::initialize(&TABLE)?;
    /// let pool = ThreadPool::new(2)?; // once, for the session
    /// let w = vec![0.5f32; 64 * 32];
    /// let op = FullyConnected::create(&FullyConnectedDesc::new(64, 32, &w))?;
    /// let x = vec![1.0f32; 16 * 64];
    /// let mut y = vec![0.0f32; 16 * 32];
    /// op.run_in(&pool, 16, &x, &mut y)?;
    /// assert!(y.iter().all(|&v| v == 32.0));
    /// # Ok::<(), keepalloc_kernels::KernelError>(())
    /// ```
    pub fn run_in(
        &self,
        pool: &dyn Parallel,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
    ) -> Result<(), KernelError> {
        let threads = pool.threads().max(1);
        self.execute(batch, input, output, Some((pool, threads)))
    }

    /// Checks the buffers, then computes on the calling thread or on `pool` with at most
    /// `threads` threads.
    fn execute(
        &self,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        pool: Option<(&dyn Parallel, usize)>,
    ) -> Result<(), KernelError> {
        let g = &self.geometry;
        if !g.check_run(batch, input.len(), output.len())? {
            return Ok(());
        }
        let problem = Problem {
            isa: self.isa,
            m: batch,
            k: g.k,
            n: g.n,
            a: input.as_ptr(),
            lda: g.input_stride,
            packed: self.packed.as_slice().as_ptr(),
            c: output.as_mut_ptr(),
            ldc: g.output_stride,
            min: g.min,
            max: g.max,
            shared: false,
        };
        match pool {
            None => {
                let panels = g.n.div_ceil(gemm::shape(self.isa).nr);
                // SAFETY: the slices, the packing and the ISA were all checked above.
                unsafe { gemm::run(&problem, 0..panels) };
                Ok(())
            }
            Some((pool, threads)) => run_parallel(&problem, pool, threads, &self.grid),
        }
    }
}

// Compile-time proof that operators can be shared across threads.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<FullyConnected>();
};
