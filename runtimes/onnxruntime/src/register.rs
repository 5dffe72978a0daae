//! Registration on the env as keepalloc's init hook.

use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::ffi::OrtEnv;
use allocator_api2::alloc::Allocator;
use keepalloc_allocators::AllocatorTable;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, HookRan, InitError, ProviderError};

use crate::OrtError;
use crate::env_allocator::EnvAllocator;
use crate::runtime::OnnxRuntime;
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

/// [`register_env_allocator`] on an ONNX Runtime and an env the application already has, given
/// as raw pointers: `api` is its `OrtApi` (from the `ort` crate, `ort::api()`) and `env` its
/// `OrtEnv` (`ort`'s `Environment::ptr()`). Nothing of ONNX Runtime is loaded or linked here,
/// so this works with whichever ONNX Runtime the application loaded. With the `ort` crate
/// (the whole program, compiled and run in CI: `examples/ort-crate` in keepalloc's repository):
///
/// ```ignore
/// use ort::AsPointer;
/// let env = ort::init_from(library_path)?.with_name("app").build()?;
/// std::mem::forget(env.clone()); // ONNX Runtime keeps our allocator as long as the env lives
/// // SAFETY: ort's loaded OrtApi and its env, which is never released.
/// unsafe {
///     keepalloc::onnxruntime::register_with(&ALLOCATOR, ort::api() as *const _ as _, env.ptr() as _)
/// }?;
/// // then: Session::builder()?.with_config_entry("session.use_env_allocators", "1")?
/// ```
///
/// Errors: [`OrtError::NullPointer`] for a NULL `api` or `env`, [`OrtError::Register`] when
/// the registration failed (retry: the owner is kept) or was made on another env.
///
/// # Safety
/// `api` is NULL or the `OrtApi` (version 11 or later) of an ONNX Runtime that stays loaded
/// for the rest of the process; `env` is NULL or a live `OrtEnv` of that runtime that is never
/// released (ONNX Runtime keeps a registered allocator for as long as its env lives).
pub unsafe fn register_with<B>(
    provider: &'static GlobalProvider<B>,
    api: *const c_void,
    env: *mut c_void,
) -> Result<AllocatorHandle<B>, OrtError>
where
    B: Allocator + Send + Sync + 'static,
{
    if api.is_null() {
        return Err(OrtError::NullPointer("api"));
    }
    if env.is_null() {
        return Err(OrtError::NullPointer("env"));
    }
    // SAFETY: non-NULL, and the caller promises a runtime that stays loaded.
    let runtime = unsafe { OnnxRuntime::from_api(api.cast()) }?;
    // SAFETY: non-NULL, and the caller promises a live env of this runtime, never released.
    let env = unsafe { Env::from_raw(runtime, env.cast()) }.ok_or(OrtError::NullPointer("env"))?;
    register_env_allocator(provider, env).map_err(OrtError::Register)
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
