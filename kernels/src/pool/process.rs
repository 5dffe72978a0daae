//! [`process_pool`]: the process-wide pool behind `FullyConnectedDesc::with_threads`, its
//! block a static, started once on first use and never stopped.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

use super::shared::Shared;
use super::threads::ThreadId;
use super::{MAX_POOL_THREADS, ThreadPool};
use crate::error::KernelError;

/// The process pool's state: a static, since the pool lives as long as the process.
struct ProcessBlock {
    shared: UnsafeCell<core::mem::MaybeUninit<Shared>>,
    ids: UnsafeCell<[core::mem::MaybeUninit<ThreadId>; MAX_POOL_THREADS]>,
}

// SAFETY: written only under `PROCESS_INIT` before the pool exists, then used through the pool.
unsafe impl Sync for ProcessBlock {}

static PROCESS_BLOCK: ProcessBlock = ProcessBlock {
    shared: UnsafeCell::new(core::mem::MaybeUninit::uninit()),
    ids: UnsafeCell::new([const { core::mem::MaybeUninit::uninit() }; MAX_POOL_THREADS]),
};

/// The process-wide pool behind `FullyConnectedDesc::with_threads`.
static PROCESS: OnceLock<ThreadPool> = OnceLock::new();
/// Serializes the start of [`PROCESS`] (starting can fail, and must not run twice).
static PROCESS_INIT: Mutex<()> = Mutex::new(());

/// The process-wide pool that operators created with `with_threads(t)`, `t > 1`, run on:
/// started once, on first use, with one thread per CPU this process may use
/// (`std::thread::available_parallelism`), and never stopped. It lives as long as the
/// process, so its state is a `static`: it allocates nothing, neither through the table nor
/// through the global allocator (the workers' stacks are the C library's). Pools of your
/// own ([`ThreadPool::new`]) allocate their state through the table instead.
///
/// The first operator created with `threads > 1` starts it, so `run` never starts threads;
/// call this to start it at a moment of your choosing (asking the OS for the CPU count reads
/// `/proc`, which allocates through the global allocator, once).
pub fn process_pool() -> Result<&'static ThreadPool, KernelError> {
    if let Some(pool) = PROCESS.get() {
        return Ok(pool);
    }
    let _g = PROCESS_INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = PROCESS.get() {
        return Ok(pool);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_POOL_THREADS);
    let shared = PROCESS_BLOCK.shared.get().cast::<Shared>();
    // Under `PROCESS_INIT` with no process pool yet, nothing else uses the static block (a
    // failed earlier start dropped its `Shared` in place after joining its workers).
    // SAFETY: exclusive access to the static block, which lives for ever.
    let pool = unsafe {
        shared.write(Shared::new(threads - 1));
        ThreadPool::start(
            NonNull::new_unchecked(shared),
            None,
            PROCESS_BLOCK.ids.get().cast(),
            threads - 1,
        )?
    };
    Ok(PROCESS.get_or_init(|| pool))
}
