//! Allocation failure plans and `Failing<A>`, the allocator that follows them.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering::Relaxed};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{Request, RequestAllocator};

use rand::Rng;

/// When allocations fail. Calls are counted from 1 since the plan was armed; an allocation
/// call is any `allocate`, `allocate_zeroed`, `grow` or `grow_zeroed` (a `shrink` never
/// fails, as in the allocators it stands for).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AllocPlan {
    /// Never fail (but count the calls).
    Never,
    /// Fail only the `n`th call (1-based).
    Nth(u64),
    /// Fail the `n`th call and every call after it.
    From(u64),
    /// Fail each call with probability `p`: call `n` (from 1) fails when ChaCha8 stream `n` of
    /// `seed` says so, whatever the order in which threads made their calls.
    Probability {
        /// Chance of failure per call, in `[0, 1]`.
        p: f64,
        /// The generator's seed.
        seed: u64,
    },
    /// Grant requests while their total bytes (since armed, frees not given back) stay
    /// within `bytes`; fail every request that would pass it.
    Budget(usize),
}

impl core::fmt::Display for AllocPlan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AllocPlan::Never => write!(f, "never"),
            AllocPlan::Nth(n) => write!(f, "nth:{n}"),
            AllocPlan::From(n) => write!(f, "from:{n}"),
            AllocPlan::Probability { p, seed } => write!(f, "probability:{p}@{seed}"),
            AllocPlan::Budget(b) => write!(f, "budget:{b}"),
        }
    }
}

const NEVER: u8 = 0;
const NTH: u8 = 1;
const FROM: u8 = 2;
const PROBABILITY: u8 = 3;
const BUDGET: u8 = 4;

/// Wraps an allocator and makes allocation calls fail according to an [`AllocPlan`] that
/// can be changed at any time ([`arm`](Failing::arm)). A refused call never reaches the
/// wrapped allocator. Lock-free; `const`-constructible.
///
/// Arm a plan while no other thread allocates through this allocator: arming resets the
/// counters field by field, not atomically as a whole.
#[derive(Debug)]
pub struct Failing<A> {
    inner: A,
    mode: AtomicU8,
    n: AtomicU64,
    p_bits: AtomicU64,
    seed: AtomicU64,
    budget: AtomicUsize,
    calls: AtomicU64,
    failures: AtomicU64,
    granted: AtomicUsize,
    /// The `fn()` of [`on_first_failure`](Failing::on_first_failure) as an address, 0 for none.
    first_failure: AtomicUsize,
}

impl<A> Failing<A> {
    /// Wraps `inner` with the plan [`AllocPlan::Never`].
    pub const fn new(inner: A) -> Self {
        Failing {
            inner,
            mode: AtomicU8::new(NEVER),
            n: AtomicU64::new(0),
            p_bits: AtomicU64::new(0),
            seed: AtomicU64::new(0),
            budget: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            granted: AtomicUsize::new(0),
            first_failure: AtomicUsize::new(0),
        }
    }

    /// Calls `notice` on the thread of the first call refused after each [`arm`](Failing::arm),
    /// before that refusal returns: a witness that a fault was injected which survives the
    /// process crashing right after it (the ONNX Runtime campaign's child writes a line to
    /// stdout from it). `notice` runs inside an allocation call, so it must not allocate
    /// through this allocator; a panic in it reaches the caller of that allocation.
    pub fn on_first_failure(&self, notice: fn()) {
        self.first_failure.store(notice as usize, Relaxed);
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// Follows `plan` from now on, with the call and failure counters at zero.
    pub fn arm(&self, plan: AllocPlan) {
        self.calls.store(0, Relaxed);
        self.failures.store(0, Relaxed);
        self.granted.store(0, Relaxed);
        let mode = match plan {
            AllocPlan::Never => NEVER,
            AllocPlan::Nth(n) => {
                self.n.store(n, Relaxed);
                NTH
            }
            AllocPlan::From(n) => {
                self.n.store(n, Relaxed);
                FROM
            }
            AllocPlan::Probability { p, seed } => {
                self.p_bits.store(p.to_bits(), Relaxed);
                self.seed.store(seed, Relaxed);
                PROBABILITY
            }
            AllocPlan::Budget(bytes) => {
                self.budget.store(bytes, Relaxed);
                BUDGET
            }
        };
        self.mode.store(mode, Relaxed);
    }

    /// Back to [`AllocPlan::Never`] (counters reset).
    pub fn disarm(&self) {
        self.arm(AllocPlan::Never);
    }

    /// Allocation calls since the plan was armed.
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }

    /// Calls refused since the plan was armed.
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    /// Bytes of the calls admitted since the plan was armed (frees not subtracted): what
    /// [`AllocPlan::Budget`] counts.
    pub fn granted_bytes(&self) -> usize {
        self.granted.load(Relaxed)
    }

    /// Counts one call of `bytes` and decides whether it fails.
    fn admit(&self, bytes: usize) -> Result<(), AllocError> {
        let call = self.calls.fetch_add(1, Relaxed) + 1;
        let fail = match self.mode.load(Relaxed) {
            NTH => call == self.n.load(Relaxed),
            FROM => call >= self.n.load(Relaxed),
            PROBABILITY => {
                let p = f64::from_bits(self.p_bits.load(Relaxed)).clamp(0.0, 1.0);
                crate::seeds::stream(self.seed.load(Relaxed), call).random_bool(p)
            }
            BUDGET => self
                .budget
                .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(bytes))
                .is_err(),
            _ => false,
        };
        if fail {
            if self.failures.fetch_add(1, Relaxed) == 0 {
                let notice = self.first_failure.load(Relaxed);
                if notice != 0 {
                    // SAFETY: a non-zero `first_failure` is a `fn()` stored by `on_first_failure`.
                    let notice: fn() = unsafe { core::mem::transmute::<usize, fn()>(notice) };
                    notice();
                }
            }
            Err(AllocError)
        } else {
            self.granted.fetch_add(bytes, Relaxed);
            Ok(())
        }
    }
}

// SAFETY: a call is either refused before the wrapped allocator sees it, or forwarded with the
// caller's own arguments, so every block and every promise is the wrapped allocator's.
unsafe impl<A: Allocator> RequestAllocator for Failing<A> {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        if !matches!(request, Request::Shrink { .. }) {
            self.admit(request.added_bytes())?;
        }
        // SAFETY: the caller's promises are forwarded unchanged.
        unsafe { request.forward_to(&self.inner) }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.inner.deallocate(ptr, layout) }
    }
}
keepalloc_allocators::allocator_from_requests!([A: Allocator] Failing<A>);

#[cfg(test)]
mod tests {
    use super::*;
    use keepalloc_allocators::System;

    fn outcomes(f: &Failing<System>, n: usize, size: usize) -> Vec<bool> {
        let layout = Layout::from_size_align(size, 8).unwrap();
        (0..n)
            .map(|_| match f.allocate(layout) {
                Ok(b) => {
                    // SAFETY: live block with `layout`.
                    unsafe { f.deallocate(b.cast(), layout) };
                    true
                }
                Err(_) => false,
            })
            .collect()
    }

    #[test]
    fn nth_from_budget() {
        let f = Failing::new(System);
        f.arm(AllocPlan::Nth(3));
        assert_eq!(outcomes(&f, 5, 8), [true, true, false, true, true]);
        f.arm(AllocPlan::From(2));
        assert_eq!(outcomes(&f, 4, 8), [true, false, false, false]);
        assert_eq!((f.calls(), f.failures()), (4, 3));
        f.arm(AllocPlan::Budget(100));
        assert_eq!(outcomes(&f, 4, 40), [true, true, false, false]);
        f.disarm();
        assert!(outcomes(&f, 10, 8).into_iter().all(|ok| ok));
    }

    #[test]
    fn probability_is_reproducible() {
        let f = Failing::new(System);
        f.arm(AllocPlan::Probability { p: 0.5, seed: 9 });
        let a = outcomes(&f, 64, 8);
        f.arm(AllocPlan::Probability { p: 0.5, seed: 9 });
        assert_eq!(a, outcomes(&f, 64, 8));
        let fails = a.iter().filter(|ok| !**ok).count();
        assert!((10..54).contains(&fails), "{fails}");
    }

    static NOTICES: AtomicU64 = AtomicU64::new(0);
    /// The refusal counter at the moment of each notice: the notice comes before any later
    /// refusal is counted.
    static SEEN_AT: AtomicU64 = AtomicU64::new(u64::MAX);
    static WATCHED: Failing<System> = Failing::new(System);

    fn notice() {
        NOTICES.fetch_add(1, Relaxed);
        SEEN_AT.store(WATCHED.failures(), Relaxed);
    }

    #[test]
    fn first_failure_noticed_once_per_arm() {
        WATCHED.on_first_failure(notice);
        WATCHED.arm(AllocPlan::From(3));
        assert_eq!(outcomes(&WATCHED, 2, 8), [true, true]);
        assert_eq!(NOTICES.load(Relaxed), 0, "no refusal yet, no notice");
        assert_eq!(outcomes(&WATCHED, 3, 8), [false, false, false]);
        assert_eq!(NOTICES.load(Relaxed), 1, "one notice for three refusals");
        assert_eq!(
            SEEN_AT.load(Relaxed),
            1,
            "the notice ran during the first refusal"
        );
        WATCHED.arm(AllocPlan::Nth(1));
        assert_eq!(outcomes(&WATCHED, 2, 8), [false, true]);
        assert_eq!(
            NOTICES.load(Relaxed),
            2,
            "arming again watches for a first refusal again"
        );
        WATCHED.disarm();
        assert!(outcomes(&WATCHED, 4, 8).into_iter().all(|ok| ok));
        assert_eq!(NOTICES.load(Relaxed), 2);
    }
}
