//! Starting and joining a pool's worker threads ([`Threads`]): with `pthread_create` on
//! Unix, so no thread start touches the Rust global allocator, and their ids kept in the
//! pool's own block; `std` threads elsewhere.

#[cfg(unix)]
use core::ffi::c_void;
use core::ptr::NonNull;

use super::shared::Shared;
use super::worker::worker;
use crate::error::KernelError;

/// The worker threads of one pool.
#[cfg(unix)]
pub(super) struct Threads {
    /// The pthread ids, in the pool's block after `Shared`.
    ids: *mut ThreadId,
    len: usize,
}

/// What the pool's block keeps per worker: the `pthread_t` (an integer or a pointer, at most
/// pointer-sized and pointer-aligned on every Unix target that std supports with pthreads).
#[cfg(unix)]
pub(super) type ThreadId = libc::pthread_t;
#[cfg(not(unix))]
pub(super) type ThreadId = usize;
const _: () = assert!(
    size_of::<ThreadId>() <= size_of::<usize>() && align_of::<ThreadId>() <= align_of::<Shared>()
);

#[cfg(unix)]
extern "C" fn worker_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the pool's `Shared`, which lives until this thread has been joined.
    let s = unsafe { &*arg.cast::<Shared>() };
    worker(s);
    core::ptr::null_mut()
}

#[cfg(unix)]
impl Threads {
    pub(super) fn new(ids: *mut ThreadId) -> Threads {
        Threads { ids, len: 0 }
    }

    pub(super) fn spawn(&mut self, shared: NonNull<Shared>) -> Result<(), KernelError> {
        let mut id = core::mem::MaybeUninit::<ThreadId>::uninit();
        // The start routine only reads the shared block, which outlives the thread
        // (joined in drop before it is freed); default attributes (the C library's stack).
        // SAFETY: valid out pointer, NULL attributes, a matching start routine.
        let rc = unsafe {
            libc::pthread_create(
                id.as_mut_ptr(),
                core::ptr::null(),
                worker_main,
                shared.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(KernelError::ThreadSpawn { code: rc });
        }
        // pthread_create succeeded, so it wrote the id; the block has room for one id per
        // worker, and at most that many are started.
        // SAFETY: an initialized id, written in bounds.
        unsafe { self.ids.add(self.len).write(id.assume_init()) };
        self.len += 1;
        Ok(())
    }

    pub(super) fn join_all(&mut self) {
        for i in 0..self.len {
            // SAFETY: id `i` was written by `spawn`; that thread is joined once.
            let rc = unsafe { libc::pthread_join(self.ids.add(i).read(), core::ptr::null_mut()) };
            debug_assert_eq!(rc, 0, "pthread_join");
        }
        self.len = 0;
    }
}

/// The worker threads of one pool (std threads where there are no pthreads). A name of its
/// own: cargo-mutants' configuration (`.cargo/mutants.toml`) leaves it out, since no test
/// on a Unix machine compiles it.
#[cfg(not(unix))]
pub(super) struct StdThreads(Vec<std::thread::JoinHandle<()>>);
#[cfg(not(unix))]
pub(super) type Threads = StdThreads;

#[cfg(not(unix))]
impl StdThreads {
    pub(super) fn new(_ids: *mut ThreadId) -> StdThreads {
        StdThreads(Vec::new())
    }

    pub(super) fn spawn(&mut self, shared: NonNull<Shared>) -> Result<(), KernelError> {
        struct Ptr(NonNull<Shared>);
        // SAFETY: the block outlives the thread (joined in drop before it is freed).
        unsafe impl Send for Ptr {}
        let p = Ptr(shared);
        let handle = std::thread::Builder::new()
            .spawn(move || {
                let p = p;
                // SAFETY: see above.
                worker(unsafe { p.0.as_ref() })
            })
            .map_err(|e| KernelError::ThreadSpawn {
                code: e.raw_os_error().unwrap_or(-1),
            })?;
        self.0.push(handle);
        Ok(())
    }

    pub(super) fn join_all(&mut self) {
        for h in self.0.drain(..) {
            let _ = h.join();
        }
    }
}
