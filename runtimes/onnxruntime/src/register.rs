//! Registration on the env as keepalloc's init hook.

use core::sync::atomic::{AtomicPtr, Ordering};

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::AllocatorTable;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, HookRan, InitError, ProviderError};
use ort_sys::OrtEnv;

use crate::env_allocator::EnvAllocator;
use crate::session::Env;

/// The env the face was registered on (NULL until a registration succeeded).
static REGISTERED_ON: AtomicPtr<OrtEnv> = AtomicPtr::new(core::ptr::null_mut());

/// The message of the error [`register_env_allocator`] returns when the registration was made
/// on another env.
pub const OTHER_ENV: &str = "this provider's allocator was registered on another OrtEnv, not \
     this one (the registration runs once per process); register it on one env";

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
    register_env_allocator_ex(provider, env).map(|(handle, _)| handle)
}

/// [`register_env_allocator`], also saying whether this call ran the registration
/// ([`HookRan::Ran`]) or found it done ([`HookRan::AlreadyInitialized`]). On an error, whether the
/// registration ran and failed is in the error ([`ProviderError::InitFailed`] carries ONNX
/// Runtime's message).
pub fn register_env_allocator_ex<B>(
    provider: &'static GlobalProvider<B>,
    env: &'static Env,
) -> Result<(AllocatorHandle<B>, HookRan), ProviderError>
where
    B: Allocator + Send + Sync + 'static,
{
    let (handle, ran) = provider.acquire_library(LIBRARY, |table| register_on(env, table))?;
    let registered = is_registered_on(env, handle.table());
    if registered {
        Ok((handle, ran))
    } else {
        Err(ProviderError::InitFailed(InitError::new(OTHER_ENV)))
    }
}

/// The registration itself, the init hook [`register_env_allocator`] runs inside the once
/// of [`LIBRARY`]: creates (or finds) the process's [`EnvAllocator`] for `table` and
/// registers it on `env` with `RegisterAllocator`. Public so that other entry points (the C
/// API's `keepalloc_ort_register`) can run the same hook inside their own provider's once;
/// calling it outside a once registers again, which is what the once exists to prevent.
pub fn register_on(env: &'static Env, table: &'static AllocatorTable) -> Result<(), InitError> {
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
}

/// Whether [`register_on`] succeeded for `table` on `env` (not on another env).
pub fn is_registered_on(env: &Env, table: &'static AllocatorTable) -> bool {
    EnvAllocator::get().is_some_and(|f| core::ptr::eq(f.table(), table))
        && REGISTERED_ON.load(Ordering::Acquire) == env.as_ptr()
}
