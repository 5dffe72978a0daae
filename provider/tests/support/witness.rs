//! Witnesses the provider's tests own, independent of the provider they judge.
//!
//! A check must not read its verdict from the counters of the code under test: a provider that
//! rebuilt its owner in place (same address, construction not counted) would vouch for itself
//! through `stats()`, and the address of a zero-sized `System` says nothing about which owner
//! sits there. So these tests build their owners from [`Witnessed`], a backend the test
//! defines:
//!
//! * its constructor ([`Ledger::construct`]) counts constructions in a `static` [`Ledger`] the
//!   test owns (and refuses the first `k` of them when the test asks), not in the cell;
//! * every backend it builds carries a serial number, unique in the test process, taken at
//!   construction: "the same owner" is checked by serial, not by address;
//! * it counts every allocation and free that reaches it in the same ledger, so "allocated
//!   through the owner" is checked without the owner's own counters;
//! * [`serial_behind`] allocates through a table (as a C library does through the table it
//!   copied) and reports the serial of the backend that served the block: what a stub
//!   library's init hook records as the owner it captured.
//!
//! Included with `#[path = "support/witness.rs"] mod witness;`; each test file uses a part.
#![allow(dead_code)]

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_provider::AllocatorHandle;

/// The next serial; 0 is never handed out ("nothing seen yet").
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A fresh serial number, unique in this test process.
pub fn next_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, SeqCst)
}

/// What one test's backend constructor and allocations did, kept by the test.
pub struct Ledger {
    /// Constructor calls, refused ones included.
    tries: AtomicU64,
    /// The first `refuse_first` calls fail with `AllocError`.
    refuse_first: u64,
    /// Backends actually constructed.
    constructed: AtomicU64,
    /// The serial of the first backend constructed (0: none yet).
    first_serial: AtomicU64,
    /// The serial of the backend that served the latest allocation (0: none yet).
    last_served: AtomicU64,
    allocations: AtomicU64,
    frees: AtomicU64,
    live_bytes: AtomicUsize,
}

impl Ledger {
    /// A ledger whose constructor always succeeds.
    pub const fn new() -> Self {
        Self::refusing_first(0)
    }

    /// A ledger whose constructor refuses its first `k` calls.
    pub const fn refusing_first(k: u64) -> Self {
        Ledger {
            tries: AtomicU64::new(0),
            refuse_first: k,
            constructed: AtomicU64::new(0),
            first_serial: AtomicU64::new(0),
            last_served: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            live_bytes: AtomicUsize::new(0),
        }
    }

    /// The test's backend constructor: counts the call, refuses it if planned, otherwise
    /// counts the construction and numbers the backend.
    pub fn construct(&'static self) -> Result<Witnessed, AllocError> {
        if self.tries.fetch_add(1, SeqCst) < self.refuse_first {
            return Err(AllocError);
        }
        let serial = next_serial();
        self.constructed.fetch_add(1, SeqCst);
        let _ = self
            .first_serial
            .compare_exchange(0, serial, SeqCst, SeqCst);
        Ok(Witnessed {
            serial,
            ledger: self,
        })
    }

    /// Constructor calls, refused ones included.
    pub fn tries(&self) -> u64 {
        self.tries.load(SeqCst)
    }

    /// Backends constructed, counted by the constructor.
    pub fn constructed(&self) -> u64 {
        self.constructed.load(SeqCst)
    }

    /// The serial of the first backend this ledger's constructor built (0: none yet).
    pub fn first_serial(&self) -> u64 {
        self.first_serial.load(SeqCst)
    }

    /// The serial of the backend that served the latest allocation (0: none yet).
    pub fn last_served(&self) -> u64 {
        self.last_served.load(SeqCst)
    }

    /// Successful allocations that reached a backend of this ledger.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(SeqCst)
    }

    /// Frees that reached a backend of this ledger.
    pub fn frees(&self) -> u64 {
        self.frees.load(SeqCst)
    }

    /// Bytes allocated and not yet freed through backends of this ledger.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes.load(SeqCst)
    }
}

/// The test's backend: `System`'s memory, a serial number, and the test's ledger.
#[derive(Debug)]
pub struct Witnessed {
    serial: u64,
    ledger: &'static Ledger,
}

impl core::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ledger")
            .field("constructed", &self.constructed())
            .finish_non_exhaustive()
    }
}

impl Witnessed {
    /// This backend's serial, read as it is in memory now (an owner rebuilt in place reads
    /// as the new one).
    pub fn serial(&self) -> u64 {
        // Volatile, so that a slot rebuilt behind the reference is read afresh.
        // SAFETY: `self` is a valid reference, so its `serial` field is readable.
        unsafe { core::ptr::addr_of!(self.serial).read_volatile() }
    }

    fn served(&self, size: usize) {
        self.ledger.allocations.fetch_add(1, SeqCst);
        self.ledger.live_bytes.fetch_add(size, SeqCst);
        self.ledger.last_served.store(self.serial(), SeqCst);
    }
}

// The wrapper only counts; `grow`/`shrink` use the default allocate-copy-free.
// SAFETY: every block comes from `System` and goes back to `System` with the same layout.
unsafe impl Allocator for Witnessed {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = System.allocate(layout)?;
        self.served(layout.size());
        Ok(block)
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = System.allocate_zeroed(layout)?;
        self.served(layout.size());
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        self.ledger.frees.fetch_add(1, SeqCst);
        self.ledger.live_bytes.fetch_sub(layout.size(), SeqCst);
        // SAFETY: `ptr` is live from this allocator (so from `System`) with `layout`.
        unsafe { System.deallocate(ptr, layout) }
    }
}

/// Allocates and frees one block through `table`, as a C library does through the table it
/// copied, and returns the serial of the test backend that served it (recorded by the
/// backend, not by the provider).
pub fn serial_behind(table: &AllocatorTable, ledger: &Ledger) -> u64 {
    // The block is freed through the same table while live.
    // SAFETY: every table in these tests comes from a provider and follows the contract.
    unsafe {
        let p = table.aligned_alloc(64, 64);
        assert!(!p.is_null(), "the table refused a 64-byte block");
        let serial = ledger.last_served();
        table.aligned_free(p);
        serial
    }
}

/// The serial of the backend inside the owner `handle` points at.
pub fn owner_serial(handle: &AllocatorHandle<Witnessed>) -> u64 {
    handle.owner().allocator().inner().serial()
}
