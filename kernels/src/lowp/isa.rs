//! Which dot-product instruction set the bf16 and int8 operators run: chosen per operator
//! kind at create time, overridable by `KEEPALLOC_KERNELS_DOT_ISA`.
//!
//! The f32 operator's [`Isa`](crate::Isa) says which vector width a CPU has; the low-precision
//! operators also depend on extensions (AVX512-BF16's `vdpbf16ps`, AVX512-VNNI's and
//! AVX-VNNI's `vpdpbusd`, AMX-INT8's `tdpbusd`) that come and go independently, so they have
//! an instruction set of their own. Each operator kind has kernels for a few of them ([`DotIsa::kernels_for`]).

use core::sync::atomic::{AtomicU8, Ordering};

pub use crate::cpu::DotIsa;
use crate::error::KernelError;

/// The environment variable that forces the dot-product instruction set of every bf16 and
/// int8 operator: `amx`, `avx512bf16`, `avx512vnni`, `avxvnni`, `avx512`, `avx2` or `scalar`.
/// Naming one this CPU lacks makes [`initialize`](crate::initialize) and every create fail
/// ([`KernelError::UnsupportedDotIsa`]); an operator kind without a kernel for it fails to
/// create ([`KernelError::NoKernel`]). Never a silent downgrade, so a test run with it set
/// really exercises that kernel.
pub const DOT_ISA_ENV: &str = "KEEPALLOC_KERNELS_DOT_ISA";

/// The three low-precision operator kinds, named as XNNPACK names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// `fully_connected_nc_bf16_f32`.
    Bf16F32,
    /// `fully_connected_nc_qd8_f32_qc8w`.
    Qd8F32Qc8w,
    /// `fully_connected_nc_f32_qc8w`.
    F32Qc8w,
}

impl Kind {
    /// XNNPACK's name for the operator.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Kind::Bf16F32 => "bf16_f32",
            Kind::Qd8F32Qc8w => "qd8_f32_qc8w",
            Kind::F32Qc8w => "f32_qc8w",
        }
    }
}

impl DotIsa {
    /// The instruction sets that have kernels for operator `kind` (`"bf16_f32"`,
    /// `"qd8_f32_qc8w"`, `"f32_qc8w"`), best first; empty for an unknown name.
    pub fn kernels_for(kind: &str) -> &'static [DotIsa] {
        match kind {
            "bf16_f32" => kernels(Kind::Bf16F32),
            "qd8_f32_qc8w" => kernels(Kind::Qd8F32Qc8w),
            "f32_qc8w" => kernels(Kind::F32Qc8w),
            _ => &[],
        }
    }
}

/// The instruction sets with kernels for `kind`, best first on this CPU.
pub(crate) fn kernels(kind: Kind) -> &'static [DotIsa] {
    match kind {
        Kind::Bf16F32 if crate::tuning::bf16_dot_is_half_rate() => &[
            DotIsa::Amx,
            DotIsa::Avx512,
            DotIsa::Avx512Bf16,
            DotIsa::Avx2,
            DotIsa::Scalar,
        ],
        Kind::Bf16F32 => &[
            DotIsa::Amx,
            DotIsa::Avx512Bf16,
            DotIsa::Avx512,
            DotIsa::Avx2,
            DotIsa::Scalar,
        ],
        Kind::Qd8F32Qc8w => &[
            DotIsa::Amx,
            DotIsa::Avx512Vnni,
            DotIsa::AvxVnni,
            DotIsa::Avx2,
            DotIsa::Scalar,
        ],
        Kind::F32Qc8w => &[DotIsa::Avx512, DotIsa::Avx2, DotIsa::Scalar],
    }
}

/// The environment's choice: 0 = not read yet, 1 = not forced, else a `DotIsa` code. Only
/// success is cached, so a bad environment can be fixed and retried.
static FORCED: AtomicU8 = AtomicU8::new(0);

/// The instruction set `KEEPALLOC_KERNELS_DOT_ISA` forces, if any (empty counts as unset).
/// Read on the first successful call (which allocates through the global allocator, as
/// reading the environment does; [`initialize`](crate::initialize) makes that call) and
/// kept for the life of the process.
pub(crate) fn forced() -> Result<Option<DotIsa>, KernelError> {
    match FORCED.load(Ordering::Acquire) {
        0 => {}
        1 => return Ok(None),
        code => return Ok(DotIsa::from_code(code)),
    }
    let forced = match std::env::var_os(DOT_ISA_ENV) {
        Some(value) if !value.is_empty() => {
            let isa = value
                .to_str()
                .and_then(DotIsa::from_name)
                .ok_or(KernelError::UnknownDotIsa)?;
            if !isa.is_supported() {
                return Err(KernelError::UnsupportedDotIsa { isa });
            }
            Some(isa)
        }
        _ => None,
    };
    FORCED.store(forced.map_or(1, DotIsa::to_code), Ordering::Release);
    Ok(forced)
}

/// The instruction set an operator of `kind` runs: `requested` (from its descriptor) if
/// given, else the environment's, else the best one with a kernel for `kind`.
pub(crate) fn choose(kind: Kind, requested: Option<DotIsa>) -> Result<DotIsa, KernelError> {
    let isa = match requested {
        Some(isa) => isa,
        None => match forced()? {
            Some(isa) => isa,
            None => {
                return Ok(kernels(kind)
                    .iter()
                    .copied()
                    .find(|isa| isa.is_supported())
                    .unwrap_or(DotIsa::Scalar));
            }
        },
    };
    // A kind without a kernel for `isa` is refused the same way on every CPU; only then
    // does this CPU's support decide.
    if !kernels(kind).contains(&isa) {
        return Err(KernelError::NoKernel {
            isa,
            op: kind.name(),
        });
    }
    if !isa.is_supported() {
        return Err(KernelError::UnsupportedDotIsa { isa });
    }
    Ok(isa)
}
