//! What the three low-precision operators share: validation in the f32 operator's order,
//! the packed block from the table, and the checks of a run.

use keepalloc_allocators::AllocatorTable;

use crate::buffer::TableBuf;
use crate::error::KernelError;
use crate::lowp::{DotIsa, Job, Kind, choose, shape};
use crate::pool::Parallel;

/// Largest K of `qd8_f32_qc8w`: the exact i32 accumulation needs
/// `K · 255 · 128 < 2³¹` (see the AVX-512 kernel's notes).
pub(crate) const QD8_MAX_K: usize = 65_536;

/// Zeroed bytes after the packed panels of a qd8 operator on AMX: 16 word rows of 256 bytes,
/// more than a tile step can read past the last panel's K.
const AMX_QD8_SLACK: usize = 16 * 256;

/// The descriptor fields every kind has, borrowed from its descriptor.
pub(crate) struct Common<'a> {
    pub k: usize,
    pub n: usize,
    pub input_stride: usize,
    pub output_stride: usize,
    pub weights_len: usize,
    pub bias: Option<&'a [f32]>,
    pub scales: Option<&'a [f32]>,
    pub min: f32,
    pub max: f32,
    pub isa: Option<DotIsa>,
    pub huge_pages: bool,
}

/// An operator's packed weights and geometry.
pub(crate) struct Core {
    pub packed: TableBuf,
    pub kind: Kind,
    pub isa: DotIsa,
    pub k: usize,
    pub n: usize,
    pub input_stride: usize,
    pub output_stride: usize,
    pub min: f32,
    pub max: f32,
}

impl core::fmt::Debug for Core {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct(self.kind.name())
            .field("isa", &self.isa)
            .field("input_channels", &self.k)
            .field("output_channels", &self.n)
            .field("input_stride", &self.input_stride)
            .field("output_stride", &self.output_stride)
            .field("output_min", &self.min)
            .field("output_max", &self.max)
            .field("packed_bytes", &self.packed.bytes())
            .finish()
    }
}

impl Core {
    /// Validates `c` (nothing allocated on error), takes one block from `table` and lets
    /// `pack(block, nr)` fill it.
    pub(crate) fn create(
        table: &'static AllocatorTable,
        kind: Kind,
        c: &Common<'_>,
        pack: impl FnOnce(&mut [u8], usize),
    ) -> Result<Core, KernelError> {
        if !table.is_complete() {
            return Err(KernelError::InvalidTable);
        }
        let isa = choose(kind, c.isa)?;
        let (k, n) = (c.k, c.n);
        let bad_channels = KernelError::InvalidChannels {
            input_channels: k,
            output_channels: n,
        };
        if k == 0 || n == 0 || (kind == Kind::Qd8F32Qc8w && k > QD8_MAX_K) {
            return Err(bad_channels);
        }
        let nr = shape(kind, isa).nr;
        let bytes = crate::lowp::panel_bytes_checked(kind, nr, k)
            .and_then(|p| p.checked_mul(n.div_ceil(nr)))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(bad_channels)?;
        let weights_len = k.checked_mul(n).ok_or(bad_channels)?;
        if c.input_stride < k {
            return Err(KernelError::InvalidStride {
                which: "input",
                stride: c.input_stride,
                channels: k,
            });
        }
        if c.output_stride < n {
            return Err(KernelError::InvalidStride {
                which: "output",
                stride: c.output_stride,
                channels: n,
            });
        }
        if c.weights_len != weights_len {
            return Err(KernelError::WeightsLength {
                expected: weights_len,
                actual: c.weights_len,
            });
        }
        if let Some(bias) = c.bias
            && bias.len() != n
        {
            return Err(KernelError::BiasLength {
                expected: n,
                actual: bias.len(),
            });
        }
        if let Some(scales) = c.scales {
            if scales.len() != n {
                return Err(KernelError::ScalesLength {
                    expected: n,
                    actual: scales.len(),
                });
            }
            if let Some((channel, &scale)) = scales
                .iter()
                .enumerate()
                .find(|(_, s)| !(s.is_finite() && **s > 0.0))
            {
                return Err(KernelError::InvalidScale { channel, scale });
            }
        }
        let (min, max) = (c.min, c.max);
        if min.is_nan() || max.is_nan() || min > max {
            return Err(KernelError::InvalidRange { min, max });
        }
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
            .ok_or(bad_channels)?;
        let mut packed = TableBuf::zeroed(table, total / size_of::<f32>(), c.huge_pages)?;
        debug_assert_eq!(packed.bytes(), total);
        pack(&mut packed.as_bytes_mut()[..bytes], nr);
        Ok(Core {
            packed,
            kind,
            isa,
            k,
            n,
            input_stride: c.input_stride,
            output_stride: c.output_stride,
            min,
            max,
        })
    }

    /// Checks a run's slices: `Ok(false)` for an empty batch (nothing to do).
    pub(crate) fn check_run(
        &self,
        batch: usize,
        input_len: usize,
        output_len: usize,
    ) -> Result<bool, KernelError> {
        if batch == 0 {
            return Ok(false);
        }
        let needed = |stride: usize, channels: usize| {
            (batch - 1)
                .checked_mul(stride)
                .and_then(|v| v.checked_add(channels))
                .ok_or(KernelError::BatchOverflow { batch })
        };
        let need_in = needed(self.input_stride, self.k)?;
        let need_out = needed(self.output_stride, self.n)?;
        if input_len < need_in {
            return Err(KernelError::BufferTooShort {
                which: "input",
                needed: need_in,
                actual: input_len,
            });
        }
        if output_len < need_out {
            return Err(KernelError::BufferTooShort {
                which: "output",
                needed: need_out,
                actual: output_len,
            });
        }
        Ok(true)
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
        if !self.check_run(batch, input.len(), output.len())? {
            return Ok(());
        }
        let job = self.job(batch, input, output);
        // SAFETY: the slices hold `batch` rows at their strides (checked above), the output is borrowed mutably, the block was packed for (kind, isa) by `create`, which checked the ISA.
        unsafe { self.execute(&job, pool) }
    }

    /// The job of a run whose activations the kernels read as given (bf16, f32): `batch`
    /// rows of `input` into `output`, no quantized rows. The caller checked the run.
    pub(crate) fn job<T>(&self, batch: usize, input: &[T], output: &mut [f32]) -> Job {
        Job {
            kind: self.kind,
            isa: self.isa,
            m: batch,
            k: self.k,
            n: self.n,
            a: input.as_ptr().cast(),
            lda: self.input_stride * size_of::<T>(),
            packed: self.packed.as_byte_ptr(),
            c: output.as_mut_ptr(),
            ldc: self.output_stride,
            min: self.min,
            max: self.max,
            rows: core::ptr::null(),
            x: core::ptr::null(),
            ldx: 0,
        }
    }
}

/// The accessors every low-precision operator has, over its `core`; the argument is the
/// doc line of `packed_bytes` (what the block holds differs by kind).
macro_rules! core_accessors {
    ($packed_doc:literal) => {
        /// The instruction set whose kernels this operator runs.
        pub fn isa(&self) -> DotIsa {
            self.core.isa
        }

        /// K.
        pub fn input_channels(&self) -> usize {
            self.core.k
        }

        /// N.
        pub fn output_channels(&self) -> usize {
            self.core.n
        }

        #[doc = $packed_doc]
        pub fn packed_bytes(&self) -> usize {
            self.core.packed.bytes()
        }
    };
}
pub(crate) use core_accessors;
