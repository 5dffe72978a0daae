//! The one descriptor of the four fully-connected kinds (what XNNPACK's
//! `xnn_create_fully_connected_nc_*` take, as a value with defaults), its builders, and its
//! validation into the [`Geometry`] an operator keeps.

use super::kind::{F32, FcKind, Int8Weights, WeightScales};
use crate::error::KernelError;

/// Everything `xnn_create_fully_connected_nc_*` takes for the kind `K`; named per kind as
/// [`FullyConnectedDesc`](crate::FullyConnectedDesc) and the low-precision descriptors.
///
/// ```
/// use keepalloc_kernels::FullyConnectedDesc;
/// let w = [1.0f32; 6]; // 3 outputs × 2 inputs
/// let desc = FullyConnectedDesc::new(2, 3, &w).with_bias(&[0.5, 0.0, -0.5]).with_range(0.0, 6.0);
/// assert_eq!(desc.input_stride, 2);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FcDesc<'a, K: FcKind> {
    /// K: values per input row.
    pub input_channels: usize,
    /// N: values per output row.
    pub output_channels: usize,
    /// Distance between input rows, in input values (≥ `input_channels`).
    pub input_stride: usize,
    /// Distance between output rows, in floats (≥ `output_channels`).
    pub output_stride: usize,
    /// `N × K` weights `[output][input]`, or `K × N` `[input][output]` when
    /// `transposed_weights` is set.
    pub weights: &'a [K::Weight],
    /// The int8 kinds: `N` positive finite scales, one per output channel (`kernel_scale`).
    pub weight_scales: K::Scales<'a>,
    /// `N` floats, or none (zero bias).
    pub bias: Option<&'a [f32]>,
    /// Lower output bound (`-inf` for none).
    pub output_min: f32,
    /// Upper output bound (`+inf` for none).
    pub output_max: f32,
    /// Weights are `[input][output]` (`XNN_FLAG_TRANSPOSE_WEIGHTS`).
    pub transposed_weights: bool,
    /// The instruction set to use; `None` is the process-wide (or the environment's)
    /// choice, the best with a kernel for this kind.
    pub isa: Option<K::Isa>,
    /// f32: threads one `run` uses (1 = the calling thread only, the default).
    pub threads: K::Threads,
    /// Ask Linux for transparent huge pages under the packed weights (the default): see
    /// [`with_huge_pages`](Self::with_huge_pages).
    pub huge_pages: bool,
}

impl<'a, K: FcKind> FcDesc<'a, K> {
    /// Dense rows, `[output][input]` weights, no bias, no clamp, the default ISA.
    fn dense(
        input_channels: usize,
        output_channels: usize,
        weights: &'a [K::Weight],
        weight_scales: K::Scales<'a>,
        threads: K::Threads,
    ) -> Self {
        FcDesc {
            input_channels,
            output_channels,
            input_stride: input_channels,
            output_stride: output_channels,
            weights,
            weight_scales,
            bias: None,
            output_min: f32::NEG_INFINITY,
            output_max: f32::INFINITY,
            transposed_weights: false,
            isa: None,
            threads,
            huge_pages: true,
        }
    }

    /// Adds a bias of `output_channels` floats.
    pub fn with_bias(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Sets the row strides (in elements).
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

    /// Declares the weights `[input][output]` (`K × N`, `XNN_FLAG_TRANSPOSE_WEIGHTS`).
    pub fn transposed(mut self) -> Self {
        self.transposed_weights = true;
        self
    }

    /// Forces an instruction set (supported by this CPU, with a kernel for this kind).
    /// `create` refuses one with no kernel for the kind with `NoKernel` on every CPU, and
    /// then one this CPU lacks with `UnsupportedDotIsa` (or `UnsupportedIsa` for f32).
    pub fn with_isa(mut self, isa: K::Isa) -> Self {
        self.isa = Some(isa);
        self
    }

    /// On (the default): `create` calls `madvise(MADV_HUGEPAGE)` on the whole 2 MiB pages
    /// inside the packed block before filling it (Linux x86-64; with THP in `madvise` or
    /// `always` mode). It adds no memory (the advice covers only pages the block fills
    /// anyway) and no allocation; it makes the weights' stream cheaper on the TLB. Off:
    /// the block is left as the allocator made it, for a runtime that manages its pages
    /// itself.
    pub fn with_huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Validates the descriptor in XNNPACK's order (nothing allocated on error): the
    /// channels (K at most `max_k`), the size of the packed block (`block`, computed by
    /// the caller; `None` when it overflows), the strides, the lengths, the scales and the
    /// range. Returns the geometry and the block size.
    pub(crate) fn validate(
        &self,
        max_k: usize,
        block: Option<usize>,
    ) -> Result<(Geometry, usize), KernelError> {
        let (k, n) = (self.input_channels, self.output_channels);
        let bad_channels = KernelError::InvalidChannels {
            input_channels: k,
            output_channels: n,
        };
        if k == 0 || n == 0 || k > max_k {
            return Err(bad_channels);
        }
        let block = block.ok_or(bad_channels)?;
        let weights_len = k.checked_mul(n).ok_or(bad_channels)?;
        for (which, stride, channels) in [
            ("input", self.input_stride, k),
            ("output", self.output_stride, n),
        ] {
            if stride < channels {
                return Err(KernelError::InvalidStride {
                    which,
                    stride,
                    channels,
                });
            }
        }
        if self.weights.len() != weights_len {
            return Err(KernelError::WeightsLength {
                expected: weights_len,
                actual: self.weights.len(),
            });
        }
        if let Some(bias) = self.bias
            && bias.len() != n
        {
            return Err(KernelError::BiasLength {
                expected: n,
                actual: bias.len(),
            });
        }
        if let Some(scales) = self.weight_scales.get() {
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
        let (min, max) = (self.output_min, self.output_max);
        if min.is_nan() || max.is_nan() || min > max {
            return Err(KernelError::InvalidRange { min, max });
        }
        let geometry = Geometry {
            k,
            n,
            input_stride: self.input_stride,
            output_stride: self.output_stride,
            min,
            max,
        };
        Ok((geometry, block))
    }
}

impl<'a> FcDesc<'a, F32> {
    /// `input_channels` → `output_channels` with `[output][input]` weights, dense rows, no
    /// bias, no clamp, the process-wide ISA and one thread.
    pub fn new(input_channels: usize, output_channels: usize, weights: &'a [f32]) -> Self {
        Self::dense(input_channels, output_channels, weights, (), 1)
    }

    /// Runs on at most `threads` threads of the [process pool](crate::process_pool) (one
    /// per CPU, started by the first `create` with `threads > 1`, allocating nothing);
    /// 1, the default, runs on the calling thread. The work is cut
    /// into M-row × N-panel tiles; results are bit-identical to a one-thread run. To run
    /// on a pool of your own (or your runtime's), use
    /// [`FullyConnected::run_in`](crate::FullyConnected::run_in).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
}

impl<'a> FcDesc<'a, super::kind::Bf16F32> {
    /// `input_channels` → `output_channels` with `[output][input]` bf16 weights (raw bits),
    /// dense rows, no bias, no clamp.
    pub fn new(input_channels: usize, output_channels: usize, weights: &'a [u16]) -> Self {
        Self::dense(input_channels, output_channels, weights, (), ())
    }
}

impl<'a, K: Int8Weights> FcDesc<'a, K> {
    /// `input_channels` → `output_channels` with `[output][input]` int8 weights and their
    /// per-channel scales, dense rows, no bias, no clamp.
    pub fn new(
        input_channels: usize,
        output_channels: usize,
        weights: &'a [i8],
        weight_scales: &'a [f32],
    ) -> Self {
        Self::dense(input_channels, output_channels, weights, weight_scales, ())
    }
}

/// A validated descriptor's shape, strides and clamp, which every operator keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub k: usize,
    pub n: usize,
    pub input_stride: usize,
    pub output_stride: usize,
    pub min: f32,
    pub max: f32,
}

impl Geometry {
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
        for (which, needed, actual) in [
            ("input", need_in, input_len),
            ("output", need_out, output_len),
        ] {
            if actual < needed {
                return Err(KernelError::BufferTooShort {
                    which,
                    needed,
                    actual,
                });
            }
        }
        Ok(true)
    }

    /// `name { isa, input_channels, …, output_max, <extra fields> }`, the operators' Debug.
    pub(crate) fn debug<'f, 'g>(
        &self,
        f: &'f mut core::fmt::Formatter<'g>,
        name: &str,
        isa: &dyn core::fmt::Debug,
    ) -> core::fmt::DebugStruct<'f, 'g> {
        let mut d = f.debug_struct(name);
        d.field("isa", isa)
            .field("input_channels", &self.k)
            .field("output_channels", &self.n)
            .field("input_stride", &self.input_stride)
            .field("output_stride", &self.output_stride)
            .field("output_min", &self.min)
            .field("output_max", &self.max);
        d
    }
}
