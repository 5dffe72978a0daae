//! A runtime's pthreadpool as a [`Parallel`]: the operators' work runs on the threads of the
//! pool the runtime already gave XNNPACK, through the runtime's own
//! `pthreadpool_parallelize_1d` (no link-time dependency: the caller hands over the function
//! pointers, from its own link or from `dlsym`).

use core::any::Any;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;

use crate::pool::Parallel;

/// `pthreadpool_task_1d_t` (pthreadpool.h): `void (*)(void* context, size_t i)`.
pub type PthreadpoolTask1d = unsafe extern "C" fn(context: *mut c_void, i: usize);

/// `pthreadpool_parallelize_1d` (pthreadpool.h): `void (pthreadpool_t, pthreadpool_task_1d_t,
/// void* context, size_t range, uint32_t flags)`.
pub type PthreadpoolParallelize1d = unsafe extern "C" fn(
    pool: *mut c_void,
    function: PthreadpoolTask1d,
    context: *mut c_void,
    range: usize,
    flags: u32,
);

/// `pthreadpool_get_threads_count` (pthreadpool.h): `size_t (pthreadpool_t)`.
pub type PthreadpoolGetThreadsCount = unsafe extern "C" fn(pool: *mut c_void) -> usize;

/// A `pthreadpool_t` that the caller owns, driven through its library's
/// `pthreadpool_parallelize_1d`, as a [`Parallel`] for
/// [`FullyConnected::run_in`](crate::FullyConnected::run_in).
///
/// A task that panics is caught on the pool's thread (a panic must not unwind through C);
/// the tasks not yet started are skipped, and when `pthreadpool_parallelize_1d` has returned
/// the first panic is resumed on the caller, as the [`Parallel`] contract asks. Running
/// allocates nothing (a panic's payload is the panic's own allocation).
///
/// A runtime passes its pool and its library's functions (linked, or from `dlsym`). Here
/// two stand-ins with pthreadpool's signatures and its NULL-pool behaviour (every item on
/// the caller) keep the example self-contained:
///
/// ```
/// use core::ffi::c_void;
/// use keepalloc_kernels::{Parallel, Pthreadpool, PthreadpoolTask1d};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// unsafe extern "C" fn parallelize_1d(
///     _pool: *mut c_void,
///     f: PthreadpoolTask1d,
///     ctx: *mut c_void,
///     range: usize,
///     _flags: u32,
/// ) {
///     for i in 0..range {
///         // SAFETY: the caller's task and context, called as pthreadpool would.
///         unsafe { f(ctx, i) };
///     }
/// }
/// unsafe extern "C" fn get_threads_count(_pool: *mut c_void) -> usize {
///     1
/// }
///
/// // SAFETY: a NULL pool, and functions that treat it as pthreadpool does.
/// let pool = unsafe {
///     Pthreadpool::from_raw(core::ptr::null_mut(), parallelize_1d, get_threads_count)
/// };
/// let sum = AtomicUsize::new(0);
/// pool.run(10, &|i| {
///     sum.fetch_add(i, Ordering::Relaxed);
/// });
/// assert_eq!((pool.threads(), sum.into_inner()), (1, 45));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Pthreadpool {
    pool: *mut c_void,
    parallelize_1d: PthreadpoolParallelize1d,
    threads: usize,
}

// pthreadpool serializes concurrent `parallelize` calls on one pool itself.
// SAFETY: pthreadpool may be called from any thread; the handle is only passed back to it.
unsafe impl Send for Pthreadpool {}
// SAFETY: as above.
unsafe impl Sync for Pthreadpool {}

impl Pthreadpool {
    /// Wraps `pool`, asking its library how many threads it has (at least 1; a NULL pool
    /// is pthreadpool's "run on the caller").
    ///
    /// # Safety
    /// `pool` is NULL or a live `pthreadpool_t` that stays alive (not destroyed) as long as
    /// the returned value or a copy is used; `parallelize_1d` and `get_threads_count` are
    /// that pthreadpool library's `pthreadpool_parallelize_1d` and
    /// `pthreadpool_get_threads_count`.
    pub unsafe fn from_raw(
        pool: *mut c_void,
        parallelize_1d: PthreadpoolParallelize1d,
        get_threads_count: PthreadpoolGetThreadsCount,
    ) -> Pthreadpool {
        // SAFETY: a live pool (or NULL, which pthreadpool accepts) of this library (caller).
        let threads = unsafe { get_threads_count(pool) }.max(1);
        Pthreadpool {
            pool,
            parallelize_1d,
            threads,
        }
    }

    /// The wrapped `pthreadpool_t`.
    pub fn as_raw(&self) -> *mut c_void {
        self.pool
    }
}

/// What one `run` hands to its tasks through pthreadpool's `context`.
struct Context<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    failed: AtomicBool,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// The `pthreadpool_task_1d_t` of every run: runs task `i` unless one has panicked.
unsafe extern "C" fn call_task(context: *mut c_void, i: usize) {
    // `pthreadpool_parallelize_1d` returns after every call of this function.
    // SAFETY: `run` passes its `Context`, alive until that call returns.
    let ctx = unsafe { &*context.cast_const().cast::<Context<'_>>() };
    if ctx.failed.load(Ordering::Relaxed) {
        return;
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (ctx.task)(i))) {
        ctx.failed.store(true, Ordering::Relaxed);
        let mut slot = ctx.panic.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(payload);
        }
    }
}

impl Parallel for Pthreadpool {
    fn threads(&self) -> usize {
        self.threads
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let ctx = Context {
            task,
            failed: AtomicBool::new(false),
            panic: Mutex::new(None),
        };
        // `call_task` matches `pthreadpool_task_1d_t`; the call returns after every item has
        // run, so `ctx` outlives it; flags 0.
        // SAFETY: a live pool of this library (`from_raw`'s contract); see above.
        unsafe {
            (self.parallelize_1d)(
                self.pool,
                call_task,
                (&ctx as *const Context<'_>).cast_mut().cast(),
                tasks,
                0,
            )
        };
        let panic = ctx.panic.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(payload) = panic {
            resume_unwind(payload);
        }
    }
}
