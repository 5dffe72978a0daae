//! The checks a test makes after real work (XNNPACK's operators, ONNX Runtime's sessions) ran
//! on keepalloc's owner over a [`Witnessed`] backend the test reads directly: first the
//! backend's own block counts, the witness outside the owner, then the owner's counters, which
//! must agree with it. `what` names the work in every failure.

use core::sync::atomic::{AtomicU32, Ordering};

use allocator_api2::alloc::AllocError;
use keepalloc_allocators::{CountingStats, System};

use crate::{Policy, Scribble, ScribbleConfig, ScribbleStats};

/// A test's own backend, a static it reads directly (nothing but the owner allocates from
/// it), and the owners built over it, counted in the constructor the test gives the provider:
/// `GlobalProvider::new(|| BACKEND.construct(), ..)`.
pub struct Witnessed {
    backend: Scribble<System>,
    constructed: AtomicU32,
}

impl Witnessed {
    /// A backend that records violations rather than ending the process.
    pub const fn new() -> Witnessed {
        let config = ScribbleConfig::DEFAULT.with_policy(Policy::Record);
        Witnessed {
            backend: Scribble::new(System, config),
            constructed: AtomicU32::new(0),
        }
    }

    /// The owner's constructor: counts one construction and hands out the backend.
    pub fn construct(&'static self) -> Result<&'static Scribble<System>, AllocError> {
        self.constructed.fetch_add(1, Ordering::SeqCst);
        Ok(&self.backend)
    }

    /// The owners constructed so far.
    pub fn constructed(&self) -> u32 {
        self.constructed.load(Ordering::SeqCst)
    }
}

impl Default for Witnessed {
    fn default() -> Witnessed {
        Witnessed::new()
    }
}

impl core::ops::Deref for Witnessed {
    type Target = Scribble<System>;
    fn deref(&self) -> &Scribble<System> {
        &self.backend
    }
}

/// The blocks the backend handed out between `before` and `after`; panics unless there were
/// some and every one came back.
pub fn blocks_returned(what: &str, before: &ScribbleStats, after: &ScribbleStats) -> u64 {
    let blocks = after.allocations - before.allocations;
    assert!(
        blocks > 0,
        "{what}: nothing allocated through the owner (the backend's own count)"
    );
    assert_eq!(
        after.frees - before.frees,
        blocks,
        "{what}: not every block freed (the backend's own count)"
    );
    assert_eq!(
        after.live_blocks, before.live_blocks,
        "{what}: live blocks not back to the baseline (the backend's own count)"
    );
    blocks
}

/// Panics unless the owner's counter moved by the backend's `blocks` (a reallocation is one
/// new block for the backend), freed what it allocated and got every byte back.
pub fn owner_agrees(what: &str, before: &CountingStats, after: &CountingStats, blocks: u64) {
    assert_eq!(
        (after.allocations + after.reallocations) - (before.allocations + before.reallocations),
        blocks,
        "{what}: the owner's counter disagrees with the backend's"
    );
    assert_eq!(
        after.deallocations - before.deallocations,
        after.allocations - before.allocations,
        "{what}: the owner did not free what it allocated"
    );
    assert_eq!(
        after.live_bytes, before.live_bytes,
        "{what}: the owner's live bytes not back to the baseline"
    );
}
