//! The variant under test: keepalloc's real provider, over a witnessed, failing, scribbling
//! backend.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{AllocatorTable, Request, RequestAllocator, System};
use keepalloc_provider::{AllocatorHandle, GlobalProvider, InitError, Provider};

use crate::failing::Failing;
use crate::init_plan::{Reinit, planned_initialize};
use crate::report::{self, Finding};
use crate::scenario::{Identity, Subject};
use crate::scribble::{Scribble, ScribbleConfig};
use crate::witness::{self, Witness};

/// An allocator that carries its owner's [`Witness`] and checks it at the start of every
/// call, before it touches anything: the first thing any table callback reaches through the
/// provider's table. Built only by [`Witnessed::try_new`], which the build plan may refuse
/// and which counts the construction outside the provider.
#[repr(C)]
#[derive(Debug)]
pub struct Witnessed<A> {
    witness: Witness,
    inner: A,
}

impl<A> Witnessed<A> {
    /// Wraps `inner` in a newly constructed owner's witness.
    pub fn try_new(inner: A) -> Result<Self, witness::BuildRefused> {
        Ok(Witnessed {
            witness: Witness::try_new()?,
            inner,
        })
    }

    /// The owner's serial.
    pub fn serial(&self) -> u64 {
        self.witness.serial()
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    #[inline]
    fn check(&self) {
        // SAFETY: `&self` is readable; a slot rebuilt or dropped in place (the bugs this exists to find) is still readable memory of the provider's static.
        unsafe { witness::check(&self.witness, size_of::<Self>()) };
    }
}

// SAFETY: every call is forwarded unchanged to `inner` after the witness check, which
// either returns or ends the process.
unsafe impl<A: Allocator> RequestAllocator for Witnessed<A> {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        self.check();
        // SAFETY: the caller's promises, forwarded.
        unsafe { request.forward_to(&self.inner) }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        self.check();
        // SAFETY: the caller's promise, forwarded.
        unsafe { self.inner.deallocate(ptr, layout) }
    }
}
keepalloc_allocators::allocator_from_requests!([A: Allocator] Witnessed<A>);

/// The backend of the provider under test: the owner's witness, then allocation failures
/// on demand, over a scribbling allocator (violations abort the process), over the system
/// allocator.
pub type Backend = Witnessed<Failing<Scribble<System>>>;

fn make_backend() -> Result<Backend, AllocError> {
    Witnessed::try_new(Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT)))
        .map_err(|_| AllocError)
}

fn init_hook(table: &'static AllocatorTable) -> Result<(), InitError> {
    planned_initialize(table, Reinit::Strict)
}

/// The process-wide provider under test, exactly as an embedder declares one: a `static`
/// [`GlobalProvider`] whose init hook initializes the library (here through the process's
/// init plan, which may fail or panic before or after the library captured the table).
pub static PROVIDER: GlobalProvider<Backend> = GlobalProvider::new(make_backend, Some(init_hook));

/// keepalloc's provider as a [`Subject`]: each session is a [`Provider`] on [`PROVIDER`].
#[derive(Debug)]
pub struct Keepalloc;

fn identity(handle: AllocatorHandle<Backend>) -> Identity {
    Identity {
        owner: handle.owner() as *const _ as usize,
        context: handle.context() as usize,
        table: handle.table(),
        serial: handle.owner().allocator().inner().serial(),
    }
}

impl Subject for Keepalloc {
    type Session = Provider<Backend>;

    fn session(&'static self) -> Provider<Backend> {
        Provider::with_global(&PROVIDER)
    }

    fn acquire(&'static self, session: &Provider<Backend>) -> Result<Identity, String> {
        session
            .preferred_allocator()
            .map(identity)
            .map_err(|e| e.to_string())
    }

    fn faults(&'static self) -> Option<&'static Failing<Scribble<System>>> {
        PROVIDER
            .constructed_owner()
            .map(|o| o.allocator().inner().inner())
    }

    /// Judged by witnesses of our own, not by the provider's counters: the library's init
    /// hook succeeded exactly once (counted in the hook), and every block the library took
    /// through the owner was given back (the scribbling allocator's own block count; a
    /// write-after-free found while the quarantine is flushed ends the process).
    fn final_checks(&'static self) {
        if let Some(finding) = publication_finding(crate::init_plan::hook_successes()) {
            report::record(finding);
        }
        if let Some(finding) = self.faults().and_then(leak_finding) {
            report::record(finding);
        }
    }
}

/// `publication-count`, unless the library's init hook succeeded exactly once.
fn publication_finding(successes: u64) -> Option<Finding> {
    (successes != 1).then(|| {
        Finding::invariant(
            "publication-count",
            format!("the library's init hook succeeded {successes} times; exactly 1 must"),
        )
    })
}

/// `leak`, if blocks the owner's memory handed out are still live once its quarantine is
/// flushed.
fn leak_finding(failing: &Failing<Scribble<System>>) -> Option<Finding> {
    let scribble = failing.inner();
    scribble.flush_quarantine();
    let live = scribble.stats().live_blocks;
    (live != 0).then(|| Finding::invariant("leak", format!("{live} blocks never freed")))
}

/// The subject value.
pub static KEEPALLOC: Keepalloc = Keepalloc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publication_count_fires_unless_published_exactly_once() {
        let kind = |n| publication_finding(n).map(|f| f.kind());
        assert_eq!(kind(0), Some("publication-count"), "never published");
        assert_eq!(kind(2), Some("publication-count"), "published twice");
        assert_eq!(kind(1), None, "published once");
    }

    #[test]
    fn leak_fires_on_a_block_never_freed() {
        let heap = Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT));
        let layout = Layout::from_size_align(48, 8).unwrap();
        assert_eq!(leak_finding(&heap), None, "nothing allocated");
        let kept = heap.allocate(layout).unwrap().cast::<u8>();
        let freed = heap.allocate(layout).unwrap().cast::<u8>();
        // SAFETY: `freed` is live with `layout` and freed once.
        unsafe { heap.deallocate(freed, layout) };
        assert_eq!(
            leak_finding(&heap).map(|f| f.kind()),
            Some("leak"),
            "one block never freed"
        );
        // SAFETY: `kept` is live with `layout` and freed once.
        unsafe { heap.deallocate(kept, layout) };
        assert_eq!(leak_finding(&heap), None, "every block freed");
    }
}
