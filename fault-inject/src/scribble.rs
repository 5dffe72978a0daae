//! `Scribble<A>`: a debugging allocator that makes use of freed memory visible.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::alloc::{AllocError, Allocator};

use crate::report::{self, Finding};
use crate::violation::{Policy, Side, Violation, ViolationKind};

/// The smallest red zone: XNNPACK reads (never writes) up to 16 bytes past the end of an
/// array, so at least this much slack after every block must be readable and must not be
/// reported when read.
pub const MIN_RED_ZONE: usize = 16;

/// Every block's base alignment (and the granularity of the red zone before it).
const BASE_ALIGN: usize = 16;

/// How a [`Scribble`] fills, guards and quarantines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScribbleConfig {
    /// Written over every new block (macOS MallocScribble: 0xAA).
    pub alloc_fill: u8,
    /// Written over every freed block, and checked when it leaves quarantine (0x55).
    pub free_fill: u8,
    /// Written into the red zones and checked when the block is freed and when it leaves
    /// quarantine.
    pub red_zone_fill: u8,
    /// Bytes of red zone before and after each block (raised to [`MIN_RED_ZONE`]); the one
    /// before is rounded up to the block's alignment.
    pub red_zone: usize,
    /// The most bytes (whole blocks, red zones included) kept in quarantine.
    pub quarantine_bytes: usize,
    /// The most blocks kept in quarantine.
    pub quarantine_count: usize,
    /// What to do with a violation.
    pub policy: Policy,
}

impl ScribbleConfig {
    /// MallocScribble's fills (0xAA new, 0x55 freed), 0xFB red zones of 32 bytes, a
    /// quarantine of 64 MiB or 4096 blocks, and [`Policy::Abort`].
    pub const DEFAULT: ScribbleConfig = ScribbleConfig {
        alloc_fill: 0xAA,
        free_fill: 0x55,
        red_zone_fill: 0xFB,
        red_zone: 32,
        quarantine_bytes: 64 << 20,
        quarantine_count: 4096,
        policy: Policy::Abort,
    };

    /// The same configuration with another policy.
    pub const fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The same configuration with another quarantine bound.
    pub const fn with_quarantine(mut self, bytes: usize, count: usize) -> Self {
        self.quarantine_bytes = bytes;
        self.quarantine_count = count;
        self
    }
}

impl Default for ScribbleConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One block handed out (or in quarantine). Addresses are kept as integers so the state is
/// `Send`; the block is reached again only through the pointer its owner passed back.
#[derive(Clone, Copy, Debug)]
struct Block {
    base: usize,
    outer: Layout,
    user: usize,
    size: usize,
    align: usize,
}

impl Block {
    fn front(&self) -> usize {
        self.user - self.base
    }
    fn back(&self) -> usize {
        self.outer.size() - self.front() - self.size
    }
}

#[derive(Debug)]
struct State {
    live: BTreeMap<usize, Block>,
    quarantine: VecDeque<Block>,
    quarantined: BTreeSet<usize>,
    quarantine_bytes: usize,
    violations: Vec<Violation>,
    stats: ScribbleStats,
}

/// Counters of a [`Scribble`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScribbleStats {
    /// Blocks handed out.
    pub allocations: u64,
    /// Blocks freed by their user (into quarantine).
    pub frees: u64,
    /// Blocks released from quarantine to the wrapped allocator.
    pub released: u64,
    /// Blocks live now.
    pub live_blocks: usize,
    /// Blocks in quarantine now.
    pub quarantined_blocks: usize,
    /// Bytes (whole blocks) in quarantine now.
    pub quarantined_bytes: usize,
    /// Violations found (recorded or not).
    pub violations: u64,
}

/// A scribbling, quarantining, red-zoned allocator around any backend `A`.
///
/// * New blocks are filled with `alloc_fill` (0xAA), freed ones with `free_fill` (0x55), as
///   macOS `MallocScribble` does, so uninitialised reads and uses after free show a
///   recognisable pattern instead of plausible data.
/// * Freed blocks go into a FIFO quarantine bounded by bytes and by count, so their
///   addresses are not handed out again at once (otherwise the next owner usually lands at
///   the freed one's address and a dangling pointer *works*).
/// * Each block has a red zone before and after it (at least [`MIN_RED_ZONE`] bytes after:
///   readable slack for kernels that over-read). Red zones are checked when the block is
///   freed; the free fill and the red zones are checked again when it leaves quarantine
///   (write-after-free). A free of a block in quarantine is a double free; a free of
///   anything else that is not live is an invalid free.
/// * Each finding is a [`Violation`]; [`ScribbleConfig::policy`] decides whether it ends the
///   process ([`Policy::Abort`]) or is recorded for a test ([`Policy::Record`], read with
///   [`violations`](Scribble::violations)). A block whose free was a violation is left alone
///   (never passed to the backend).
///
/// It implements allocator-api2's [`Allocator`], so it can be a provider backend and is
/// reachable from C through [`AllocatorTable::for_allocator`](keepalloc_allocators::AllocatorTable::for_allocator).
/// Its bookkeeping uses the global allocator, so it must not itself be the
/// `#[global_allocator]`.
///
/// ```
/// use core::alloc::Layout;
/// use allocator_api2::alloc::Allocator;
/// use keepalloc_allocators::System;
/// use keepalloc_fault_inject::{Policy, Scribble, ScribbleConfig};
///
/// let heap = Scribble::new(System, ScribbleConfig::DEFAULT.with_policy(Policy::Record));
/// let layout = Layout::from_size_align(8, 8).unwrap();
/// let p = heap.allocate(layout).unwrap().cast::<u8>();
/// // SAFETY: `p` is live with `layout`; it is freed once, then (the bug) written.
/// unsafe {
///     heap.deallocate(p, layout);
///     p.as_ptr().write(1);
/// }
/// heap.flush_quarantine();
/// assert_eq!(heap.violations()[0].kind.name(), "write-after-free");
/// ```
#[derive(Debug)]
pub struct Scribble<A: Allocator> {
    inner: A,
    config: ScribbleConfig,
    state: Mutex<State>,
}

impl<A: Allocator> Scribble<A> {
    /// Wraps `inner` (`const`, so it can be a `static`).
    pub const fn new(inner: A, config: ScribbleConfig) -> Self {
        Scribble {
            inner,
            config,
            state: Mutex::new(State {
                live: BTreeMap::new(),
                quarantine: VecDeque::new(),
                quarantined: BTreeSet::new(),
                quarantine_bytes: 0,
                violations: Vec::new(),
                stats: ScribbleStats {
                    allocations: 0,
                    frees: 0,
                    released: 0,
                    live_blocks: 0,
                    quarantined_blocks: 0,
                    quarantined_bytes: 0,
                    violations: 0,
                },
            }),
        }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// The configuration.
    pub fn config(&self) -> &ScribbleConfig {
        &self.config
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A violation under `Abort` never unwinds, and nothing under the lock panics; even
        // so, the state is consistent at every await-free step, so poison is ignored.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counters.
    pub fn stats(&self) -> ScribbleStats {
        let s = self.state();
        ScribbleStats {
            live_blocks: s.live.len(),
            quarantined_blocks: s.quarantine.len(),
            quarantined_bytes: s.quarantine_bytes,
            ..s.stats
        }
    }

    /// The violations recorded so far (always empty under [`Policy::Abort`], which exits).
    pub fn violations(&self) -> Vec<Violation> {
        self.state().violations.clone()
    }

    /// Takes the violations recorded so far, leaving the list empty.
    pub fn take_violations(&self) -> Vec<Violation> {
        core::mem::take(&mut self.state().violations)
    }

    /// True when `ptr` is a block handed out and not yet freed.
    pub fn is_live(&self, ptr: *const u8) -> bool {
        self.state().live.contains_key(&(ptr as usize))
    }

    /// Reports `violation` according to the policy: ends the process under
    /// [`Policy::Abort`], records it under [`Policy::Record`]. Used by the allocator itself
    /// and by owner canaries that live in this allocator's memory.
    pub fn report(&self, violation: Violation) {
        {
            let mut s = self.state();
            s.stats.violations += 1;
            if self.config.policy == Policy::Record {
                s.violations.push(violation);
                return;
            }
        }
        report::fatal(Finding::Violation(violation))
    }

    fn report_all(&self, violations: Vec<Violation>) {
        for v in violations {
            self.report(v);
        }
    }

    /// The red zone after a block (the readable slack).
    fn back_zone(&self) -> usize {
        self.config.red_zone.max(MIN_RED_ZONE)
    }

    /// The whole block's layout and the offset of the user pointer in it.
    fn outer(&self, layout: Layout) -> Option<(Layout, usize)> {
        let align = layout.align().max(BASE_ALIGN);
        let zone = self.config.red_zone.max(MIN_RED_ZONE);
        let front = zone.checked_next_multiple_of(align)?;
        let total = front
            .checked_add(layout.size())?
            .checked_add(self.back_zone())?;
        let outer = Layout::from_size_align(total, align).ok()?;
        Some((outer, front))
    }

    /// Checks both red zones of `block`.
    ///
    /// # Safety
    /// `block` is live or quarantined (its memory is still ours).
    unsafe fn check_red_zones(&self, block: &Block, found: &mut Vec<Violation>) {
        let rz = self.config.red_zone_fill;
        // SAFETY: the whole outer block belongs to this allocator (caller's promise).
        let (before, after) = unsafe {
            (
                core::slice::from_raw_parts(block.base as *const u8, block.front()),
                core::slice::from_raw_parts((block.user + block.size) as *const u8, block.back()),
            )
        };
        for (side, zone) in [(Side::Before, before), (Side::After, after)] {
            if let Some(offset) = zone.iter().position(|&b| b != rz) {
                found.push(Violation {
                    kind: ViolationKind::RedZoneOverwrite {
                        side,
                        offset,
                        found: zone[offset],
                    },
                    address: block.user,
                    size: block.size,
                });
            }
        }
    }

    /// Checks a quarantined block: free fill intact, red zones intact.
    ///
    /// # Safety
    /// `block` is in quarantine.
    unsafe fn check_quarantined(&self, block: &Block, found: &mut Vec<Violation>) {
        // SAFETY: a quarantined block's memory is still ours (caller's promise).
        let user = unsafe { core::slice::from_raw_parts(block.user as *const u8, block.size) };
        if let Some(offset) = user.iter().position(|&b| b != self.config.free_fill) {
            found.push(Violation {
                kind: ViolationKind::WriteAfterFree {
                    offset,
                    found: user[offset],
                },
                address: block.user,
                size: block.size,
            });
        }
        // SAFETY: as above.
        unsafe { self.check_red_zones(block, found) };
    }

    /// Checks every quarantined block now, without releasing any; returns how many
    /// violations were found (each also reported by the policy).
    pub fn verify_quarantine(&self) -> usize {
        let mut found = Vec::new();
        {
            let s = self.state();
            for block in &s.quarantine {
                // SAFETY: the block is in quarantine (we hold the lock that guards it).
                unsafe { self.check_quarantined(block, &mut found) };
            }
        }
        let n = found.len();
        self.report_all(found);
        n
    }

    /// Checks and releases every quarantined block to the wrapped allocator; returns how many
    /// violations were found (each also reported by the policy).
    pub fn flush_quarantine(&self) -> usize {
        self.evict(|_| true)
    }

    /// Evicts from the front of the quarantine while `over(state)` holds.
    fn evict(&self, mut over: impl FnMut(&State) -> bool) -> usize {
        let mut found = Vec::new();
        let mut release = Vec::new();
        {
            let mut s = self.state();
            while !s.quarantine.is_empty() && over(&s) {
                let block = s.quarantine.pop_front().expect("not empty");
                s.quarantined.remove(&block.user);
                s.quarantine_bytes -= block.outer.size();
                s.stats.released += 1;
                // The block was in quarantine until the line above, and nobody else
                // can reach it (it is in no list now).
                // SAFETY: the block is ours alone, fresh out of the quarantine.
                unsafe { self.check_quarantined(&block, &mut found) };
                release.push(block);
            }
        }
        for block in release {
            // `base` and `outer` are what the wrapped allocator returned; the block
            // is freed exactly once, here, having left every list.
            // SAFETY: a block of the wrapped allocator, freed exactly once.
            unsafe {
                self.inner
                    .deallocate(NonNull::new_unchecked(block.base as *mut u8), block.outer)
            };
        }
        let n = found.len();
        self.report_all(found);
        n
    }
}

// SAFETY: every block handed out is `layout.size()` bytes at an address aligned to
// `layout.align()` inside a block the wrapped allocator returned for a larger layout of at
// least that alignment, and it stays valid until it is freed (then it is kept in quarantine,
// never handed out again until the wrapped allocator reuses it). Resizing uses the trait's
// default allocate-copy-free, which keeps contents.
unsafe impl<A: Allocator> Allocator for Scribble<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let (outer, front) = self.outer(layout).ok_or(AllocError)?;
        let base = self.inner.allocate(outer)?.cast::<u8>();
        let size = layout.size();
        let back = outer.size() - front - size;
        // The wrapped allocator returned `outer.size()` bytes at `base`, and
        // `front + size + back == outer.size()`.
        // SAFETY: every offset below stays within the `outer` block.
        let user = unsafe {
            let p = base.as_ptr();
            p.write_bytes(self.config.red_zone_fill, front);
            p.add(front).write_bytes(self.config.alloc_fill, size);
            p.add(front + size)
                .write_bytes(self.config.red_zone_fill, back);
            NonNull::new_unchecked(p.add(front))
        };
        let block = Block {
            base: base.as_ptr() as usize,
            outer,
            user: user.as_ptr() as usize,
            size,
            align: layout.align(),
        };
        {
            let mut s = self.state();
            s.live.insert(block.user, block);
            s.stats.allocations += 1;
        }
        Ok(NonNull::slice_from_raw_parts(user, size))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let addr = ptr.as_ptr() as usize;
        let mut found = Vec::new();
        let accepted = {
            let mut s = self.state();
            match s.live.remove(&addr) {
                None => {
                    let kind = if s.quarantined.contains(&addr) {
                        ViolationKind::DoubleFree
                    } else {
                        ViolationKind::InvalidFree
                    };
                    found.push(Violation {
                        kind,
                        address: addr,
                        size: layout.size(),
                    });
                    false
                }
                Some(block) => {
                    if block.size != layout.size() || block.align != layout.align() {
                        found.push(Violation {
                            kind: ViolationKind::LayoutMismatch {
                                allocated_size: block.size,
                                allocated_align: block.align,
                                freed_align: layout.align(),
                            },
                            address: addr,
                            size: layout.size(),
                        });
                    }
                    // SAFETY: the block was live until the line above; it is ours.
                    unsafe {
                        self.check_red_zones(&block, &mut found);
                        (block.user as *mut u8).write_bytes(self.config.free_fill, block.size);
                    }
                    s.stats.frees += 1;
                    s.quarantine_bytes += block.outer.size();
                    s.quarantined.insert(block.user);
                    s.quarantine.push_back(block);
                    true
                }
            }
        };
        self.report_all(found);
        if accepted {
            let (bytes, count) = (self.config.quarantine_bytes, self.config.quarantine_count);
            self.evict(|s| s.quarantine_bytes > bytes || s.quarantine.len() > count);
        }
    }
}

impl<A: Allocator> Drop for Scribble<A> {
    fn drop(&mut self) {
        // Give quarantined blocks back without checking them again (a `static` is never
        // dropped; a test that cares calls `flush_quarantine` first). Live blocks are the
        // user's leak and are left alone.
        let s = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        s.quarantined.clear();
        s.quarantine_bytes = 0;
        for block in s.quarantine.drain(..) {
            // `base` and `outer` are what the wrapped allocator returned, and a
            // quarantined block is in no other list: it is freed exactly once, here.
            // SAFETY: a block of the wrapped allocator, freed exactly once.
            unsafe {
                self.inner
                    .deallocate(NonNull::new_unchecked(block.base as *mut u8), block.outer)
            };
        }
    }
}
