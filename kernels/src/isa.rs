//! Which microkernels this CPU runs: detected once, overridable (downwards only) by the
//! `KEEPALLOC_KERNELS_ISA` environment variable.

use core::sync::atomic::{AtomicU8, Ordering};

pub use crate::cpu::Isa;
use crate::error::KernelError;

/// The environment variable that forces an instruction set: `avx512`, `avx2`, `neon` or
/// `scalar`. Forcing one the CPU lacks is an error ([`KernelError::UnsupportedIsa`]), never a
/// silent downgrade, so a test run with it set really exercises that kernel.
pub const ISA_ENV: &str = "KEEPALLOC_KERNELS_ISA";

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
