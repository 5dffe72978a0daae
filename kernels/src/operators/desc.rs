//! The builder methods of the four descriptors, written once: each descriptor has the
//! fields `bias`, `input_stride`, `output_stride`, `output_min`, `output_max`,
//! `transposed_weights`, `isa` and `huge_pages`.

/// The shared builders. `f32` for [`FullyConnectedDesc`](crate::FullyConnectedDesc) (an
/// [`Isa`](crate::Isa)); `lowp` for the bf16 and int8 descriptors (a
/// [`DotIsa`](crate::DotIsa)), which also get `common`, the fields their operators validate.
macro_rules! desc_builders {
    (f32) => {
        $crate::operators::desc::desc_builders!(@shared);

        /// Forces an instruction set (it must be supported by this CPU).
        pub fn with_isa(mut self, isa: $crate::isa::Isa) -> Self {
            self.isa = Some(isa);
            self
        }
    };
    (lowp) => {
        $crate::operators::desc::desc_builders!(@shared);

        /// Forces a dot-product instruction set (supported by this CPU, with a kernel for
        /// this operator kind).
        pub fn with_isa(mut self, isa: $crate::lowp::DotIsa) -> Self {
            self.isa = Some(isa);
            self
        }

        /// The fields every low-precision operator validates, with the weight `scales` of
        /// the int8 kinds.
        pub(crate) fn common(
            &self,
            scales: Option<&'a [f32]>,
        ) -> $crate::operators::lowp_common::Common<'a> {
            $crate::operators::lowp_common::Common {
                k: self.input_channels,
                n: self.output_channels,
                input_stride: self.input_stride,
                output_stride: self.output_stride,
                weights_len: self.weights.len(),
                bias: self.bias,
                scales,
                min: self.output_min,
                max: self.output_max,
                isa: self.isa,
                huge_pages: self.huge_pages,
            }
        }
    };
    (@shared) => {
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
    };
}
pub(crate) use desc_builders;
