//! A bumpalo arena that many threads can share.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use allocator_api2::alloc::{AllocError, Allocator};
use bumpalo::Bump;

use crate::{Request, RequestAllocator};

/// A [`bumpalo::Bump`] arena behind a mutex, so it is `Sync` and can back a process-wide table.
///
/// Design: one `Bump` and a `std::sync::Mutex`, not per-thread arenas. A bump allocation is a
/// pointer increment, and an uncontended futex lock costs about the same as one `malloc`; the
/// workloads an arena suits here (packing an operator's weights, per-session scratch) allocate
/// in bursts from one thread at a time. Per-thread shards would make `deallocate`, `grow` and
/// `shrink` (which bumpalo only honours for the most recent block) route to the shard that owns
/// the pointer, costing a lookup on every call, and would waste a chunk per thread.
///
/// Memory is never returned block by block (bumpalo reclaims only the most recent allocation);
/// it all goes back when the arena is dropped or [`reset`](Arena::reset). Blocks never move:
/// bumpalo allocates new chunks rather than moving old ones, so a pointer stays valid after the
/// lock is released.
#[derive(Debug, Default)]
pub struct Arena {
    bump: Mutex<Bump>,
}

impl Arena {
    /// An empty arena; its first chunk is allocated on first use.
    pub fn new() -> Self {
        Arena {
            bump: Mutex::new(Bump::new()),
        }
    }

    /// An arena whose first chunk holds at least `bytes`, allocated now.
    pub fn with_capacity(bytes: usize) -> Result<Self, AllocError> {
        Bump::try_with_capacity(bytes)
            .map(|bump| Arena {
                bump: Mutex::new(bump),
            })
            .map_err(|_| AllocError)
    }

    /// An arena with a small first chunk (4 KiB) allocated now, so that a failure to get
    /// memory is reported here and not at the first allocation.
    pub fn try_new() -> Result<Self, AllocError> {
        Self::with_capacity(4096)
    }

    /// Bytes the arena holds in chunks (capacity, not what is in use).
    pub fn allocated_bytes(&self) -> usize {
        self.lock().allocated_bytes()
    }

    /// Frees every block at once, keeping the largest chunk for reuse. `&mut self` proves no
    /// block is still borrowed through this value.
    pub fn reset(&mut self) {
        self.bump
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .reset();
    }

    fn lock(&self) -> MutexGuard<'_, Bump> {
        // No bumpalo call panics while holding the lock in a way that breaks the arena's
        // invariants, so a poisoned lock is still a good arena.
        self.bump.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// SAFETY: every call is bumpalo's own `Allocator` implementation for `&Bump`, made while
// holding the lock, so no two threads touch the `Bump` at once; blocks live in chunks owned by
// the `Bump`, which outlive the lock guard and are released only when the arena is dropped or
// reset (which needs `&mut self`, so no block can still be in use).
unsafe impl RequestAllocator for Arena {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        unsafe { request.forward_to(&&*self.lock()) }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { (&*self.lock()).deallocate(ptr, layout) }
    }
}
crate::allocator_from_requests!(Arena);
