//! Which microkernels this CPU runs: detected once, overridable (downwards only) by the
//! `KEEPALLOC_KERNELS_ISA` environment variable.

use core::fmt;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::error::KernelError;

/// The environment variable that forces an instruction set: `avx512`, `avx2`, `neon` or
/// `scalar`. Forcing one the CPU lacks is an error ([`KernelError::UnsupportedIsa`]), never a
/// silent downgrade, so a test run with it set really exercises that kernel.
pub const ISA_ENV: &str = "KEEPALLOC_KERNELS_ISA";

/// An instruction set with its own microkernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust, any target.
    Scalar,
    /// x86-64 AVX2 + FMA (6x16 tiles).
    Avx2,
    /// x86-64 AVX-512F (up to 8x32 tiles, masked edges).
    Avx512,
    /// aarch64 NEON (8x8 tiles).
    Neon,
}

impl Isa {
    /// Every instruction set, best first.
    pub const ALL: [Isa; 4] = [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar];

    /// The lower-case name `KEEPALLOC_KERNELS_ISA` accepts.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a name as `KEEPALLOC_KERNELS_ISA` spells it (case-insensitive).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }

    /// True when this CPU can run the kernels of `self`.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The best instruction set this CPU supports (ignoring the environment).
    pub fn detect() -> Isa {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// Every instruction set this CPU supports, best first.
    pub fn available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.is_supported())
    }

    fn to_code(self) -> u8 {
        match self {
            Isa::Scalar => 1,
            Isa::Avx2 => 2,
            Isa::Avx512 => 3,
            Isa::Neon => 4,
        }
    }

    fn from_code(code: u8) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.to_code() == code)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The process-wide choice, 0 until one succeeded. Only success is cached, so a bad
/// environment is an error that can be fixed and retried.
static SELECTED: AtomicU8 = AtomicU8::new(0);

/// The instruction set operators use unless told otherwise: `KEEPALLOC_KERNELS_ISA` if set
/// (and supported; empty counts as unset), else the best one the CPU has. Decided on the first successful call and
/// kept for the life of the process (the first call reads the environment, which allocates
/// through the global allocator; later calls are one atomic load).
pub fn selected() -> Result<Isa, KernelError> {
    if let Some(isa) = Isa::from_code(SELECTED.load(Ordering::Acquire)) {
        return Ok(isa);
    }
    let isa = match std::env::var_os(ISA_ENV) {
        Some(value) if !value.is_empty() => {
            let isa = value
                .to_str()
                .and_then(Isa::from_name)
                .ok_or(KernelError::UnknownIsa)?;
            if !isa.is_supported() {
                return Err(KernelError::UnsupportedIsa { isa });
            }
            isa
        }
        _ => Isa::detect(),
    };
    // Racing first calls read the same environment and CPU, so they store the same value.
    SELECTED.store(isa.to_code(), Ordering::Release);
    Ok(isa)
}
