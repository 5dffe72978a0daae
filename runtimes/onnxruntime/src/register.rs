//! Registration on the env as keepalloc's init hook.

use core::sync::atomic::{AtomicPtr, Ordering};

use allocator_api2::alloc::Allocator;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, InitError, ProviderError};
use ort_sys::OrtEnv;

use crate::env_allocator::EnvAllocator;
use crate::session::Env;

/// The env the face was registered on (NULL until a registration succeeded).
static REGISTERED_ON: AtomicPtr<OrtEnv> = AtomicPtr::new(core::ptr::null_mut());

/// The library name ONNX Runtime's registration runs under on a shared owner
/// ([`GlobalProvider::acquire_library`]): XNNPACK and other libraries on the same owner keep
/// their own once.
pub const LIBRARY: &str = "onnxruntime";

/// Builds `provider`'s owner (once, ever), publishes its table and registers the owner's
/// `OrtAllocator` face on `env` with `RegisterAllocator`, inside the once of the library
/// named [`LIBRARY`] on top of the owner's once.
///
/// A failed registration (ONNX Runtime's error message is in
/// [`ProviderError::InitFailed`]) leaves the once incomplete and keeps the owner: the next
/// call retries with the same owner and the same face, never a second one. After the first
/// success this is one acquire load plus one check.
///
/// The check: success means "this provider's owner is registered on `env`". A provider that
/// was published earlier (a publish-only `acquire`, or other libraries' hooks) still runs this
/// registration, since it has its own once. If the registration went to another env, the once
/// is already complete and the hook will never run again, so this returns
/// [`ProviderError::InitFailed`] saying so rather than a success that ONNX Runtime would never
/// see.
pub fn register_env_allocator<B>(
    provider: &'static GlobalProvider<B>,
    env: &'static Env,
) -> Result<AllocatorHandle<B>, ProviderError>
where
    B: Allocator + Send + Sync + 'static,
{
    let (handle, _) = provider.acquire_library(LIBRARY, |table| {
        let runtime = env.runtime();
        let face =
            EnvAllocator::for_table(runtime, table).map_err(|e| InitError::new(e.to_string()))?;
        // SAFETY: `env` is live for the process (an `Env` is never released); the face is a complete OrtAllocator that is never dropped, as ONNX Runtime requires of an allocator it keeps.
        let status = unsafe { (runtime.api().RegisterAllocator)(env.as_ptr(), face.as_ort()) };
        runtime
            .check(status, "RegisterAllocator")
            .map_err(|e| InitError::new(e.to_string()))?;
        REGISTERED_ON.store(env.as_ptr(), Ordering::Release);
        Ok(())
    })?;
    let registered = EnvAllocator::get().is_some_and(|f| core::ptr::eq(f.table(), handle.table()))
        && REGISTERED_ON.load(Ordering::Acquire) == env.as_ptr();
    if registered {
        Ok(handle)
    } else {
        Err(ProviderError::InitFailed(InitError::new(
            "this provider's allocator was registered on another OrtEnv, not this one \
             (the registration runs once per process); register it on one env",
        )))
    }
}
