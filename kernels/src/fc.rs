//! The fully-connected operator: `y[M][N] = clamp(x[M][K] · W[N][K]ᵀ + b[N], min, max)`.

use keepalloc_allocators::AllocatorTable;

use crate::buffer::TableBuf;
use crate::error::KernelError;
use crate::gemm::{self, Problem};
use crate::init;
use crate::isa::{self, Isa};
use crate::pack::{self, Layout};

/// Everything `xnn_create_fully_connected_nc_f32` takes, as a value with defaults.
///
/// ```
/// use keepalloc_kernels::FullyConnectedDesc;
/// let w = [1.0f32; 6]; // 3 outputs × 2 inputs
/// let desc = FullyConnectedDesc::new(2, 3, &w).with_bias(&[0.5, 0.0, -0.5]).with_range(0.0, 6.0);
/// assert_eq!(desc.input_stride, 2);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FullyConnectedDesc<'a> {
    /// K: values per input row.
    pub input_channels: usize,
    /// N: values per output row.
    pub output_channels: usize,
    /// Distance between input rows, in floats (≥ `input_channels`).
    pub input_stride: usize,
    /// Distance between output rows, in floats (≥ `output_channels`).
    pub output_stride: usize,
    /// `N × K` floats, `[output][input]`; or `K × N`, `[input][output]`, when
    /// `transposed_weights` is set.
    pub weights: &'a [f32],
    /// `N` floats, or none (zero bias).
    pub bias: Option<&'a [f32]>,
    /// Lower output bound (`-inf` for none).
    pub output_min: f32,
    /// Upper output bound (`+inf` for none).
    pub output_max: f32,
    /// Weights are `[input][output]` (`XNN_FLAG_TRANSPOSE_WEIGHTS`).
    pub transposed_weights: bool,
    /// The instruction set to use; `None` is the process-wide choice ([`isa::selected`]).
    pub isa: Option<Isa>,
    /// Threads one `run` uses (1 = the calling thread only, the default).
    pub threads: usize,
}

impl<'a> FullyConnectedDesc<'a> {
    /// `input_channels` → `output_channels` with `[output][input]` weights, dense rows, no
    /// bias, no clamp, the process-wide ISA and one thread.
    pub fn new(input_channels: usize, output_channels: usize, weights: &'a [f32]) -> Self {
        FullyConnectedDesc {
            input_channels,
            output_channels,
            input_stride: input_channels,
            output_stride: output_channels,
            weights,
            bias: None,
            output_min: f32::NEG_INFINITY,
            output_max: f32::INFINITY,
            transposed_weights: false,
            isa: None,
            threads: 1,
        }
    }

    /// Adds a bias of `output_channels` floats.
    pub fn with_bias(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Sets the row strides (in floats).
    pub fn with_strides(mut self, input_stride: usize, output_stride: usize) -> Self {
        self.input_stride = input_stride;
        self.output_stride = output_stride;
        self
    }

    /// Clamps the output to `[min, max]`.
    pub fn with_range(mut self, min: f32, max: f32) -> Self {
        self.output_min = min;
        self.output_max = max;
        self
    }

    /// Declares the weights `[input][output]` (`K × N`).
    pub fn transposed(mut self) -> Self {
        self.transposed_weights = true;
        self
    }

    /// Forces an instruction set (it must be supported by this CPU).
    pub fn with_isa(mut self, isa: Isa) -> Self {
        self.isa = Some(isa);
        self
    }

    /// Uses `threads` threads per run (split over output panels; results are identical to
    /// a one-thread run).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
}

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
    k: usize,
    n: usize,
    input_stride: usize,
    output_stride: usize,
    min: f32,
    max: f32,
    threads: usize,
}

impl core::fmt::Debug for FullyConnected {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FullyConnected")
            .field("isa", &self.isa)
            .field("input_channels", &self.k)
            .field("output_channels", &self.n)
            .field("input_stride", &self.input_stride)
            .field("output_stride", &self.output_stride)
            .field("output_min", &self.min)
            .field("output_max", &self.max)
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
        let bad_channels = KernelError::InvalidChannels {
            input_channels: k,
            output_channels: n,
        };
        if k == 0 || n == 0 {
            return Err(bad_channels);
        }
        let packed_len = pack::packed_len(nr, k, n)
            .filter(|&len| len <= isize::MAX as usize / size_of::<f32>())
            .ok_or(bad_channels)?;
        let weights_len = k.checked_mul(n).ok_or(bad_channels)?;
        if desc.input_stride < k {
            return Err(KernelError::InvalidStride {
                which: "input",
                stride: desc.input_stride,
                channels: k,
            });
        }
        if desc.output_stride < n {
            return Err(KernelError::InvalidStride {
                which: "output",
                stride: desc.output_stride,
                channels: n,
            });
        }
        if desc.weights.len() != weights_len {
            return Err(KernelError::WeightsLength {
                expected: weights_len,
                actual: desc.weights.len(),
            });
        }
        if let Some(bias) = desc.bias
            && bias.len() != n
        {
            return Err(KernelError::BiasLength {
                expected: n,
                actual: bias.len(),
            });
        }
        let (min, max) = (desc.output_min, desc.output_max);
        if min.is_nan() || max.is_nan() || min > max {
            return Err(KernelError::InvalidRange { min, max });
        }
        if desc.threads == 0 {
            return Err(KernelError::InvalidThreads);
        }
        let mut packed = TableBuf::zeroed(table, packed_len)?;
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
            k,
            n,
            input_stride: desc.input_stride,
            output_stride: desc.output_stride,
            min,
            max,
            threads: desc.threads,
        })
    }

    /// The instruction set whose kernels this operator runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// K.
    pub fn input_channels(&self) -> usize {
        self.k
    }

    /// N.
    pub fn output_channels(&self) -> usize {
        self.n
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
    /// of 0 does nothing. Never allocates with one thread (the default); with more it
    /// spawns scoped std threads.
    pub fn run(&self, batch: usize, input: &[f32], output: &mut [f32]) -> Result<(), KernelError> {
        self.run_with_threads(batch, input, output, self.threads)
    }

    /// [`run`](Self::run) with an explicit thread count for this call (≥ 1). Threads split
    /// the output panels; the result is bit-identical to a one-thread run.
    pub fn run_with_threads(
        &self,
        batch: usize,
        input: &[f32],
        output: &mut [f32],
        threads: usize,
    ) -> Result<(), KernelError> {
        if threads == 0 {
            return Err(KernelError::InvalidThreads);
        }
        if batch == 0 {
            return Ok(());
        }
        let needed = |stride: usize, channels: usize| {
            (batch - 1)
                .checked_mul(stride)
                .and_then(|v| v.checked_add(channels))
                .ok_or(KernelError::BatchOverflow { batch })
        };
        let need_in = needed(self.input_stride, self.k)?;
        let need_out = needed(self.output_stride, self.n)?;
        if input.len() < need_in {
            return Err(KernelError::BufferTooShort {
                which: "input",
                needed: need_in,
                actual: input.len(),
            });
        }
        if output.len() < need_out {
            return Err(KernelError::BufferTooShort {
                which: "output",
                needed: need_out,
                actual: output.len(),
            });
        }
        let problem = Problem {
            isa: self.isa,
            m: batch,
            k: self.k,
            n: self.n,
            a: input.as_ptr(),
            lda: self.input_stride,
            packed: self.packed.as_slice().as_ptr(),
            c: output.as_mut_ptr(),
            ldc: self.output_stride,
            min: self.min,
            max: self.max,
        };
        let panels = self.n.div_ceil(gemm::shape(self.isa).nr);
        let threads = threads.min(panels);
        if threads == 1 {
            // The slices were checked to hold `batch` rows at their strides; the
            // output is borrowed mutably (so not aliased by the input); the packed block is
            // this operator's, built for `self.isa`, which `create` checked is supported.
            // SAFETY: the slices, the packing and the ISA were all checked above.
            unsafe { gemm::run(&problem, 0..panels) };
            return Ok(());
        }
        let per = panels.div_ceil(threads);
        std::thread::scope(|scope| {
            let problem = &problem;
            for t in 1..threads {
                let range = (t * per).min(panels)..((t + 1) * per).min(panels);
                // SAFETY: as above; each thread writes only the columns of its own panels.
                scope.spawn(move || unsafe { gemm::run(problem, range) });
            }
            // SAFETY: as above, for panels 0..per.
            unsafe { gemm::run(problem, 0..per.min(panels)) };
        });
        Ok(())
    }
}

// Compile-time proof that operators can be shared across threads.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<FullyConnected>();
};
