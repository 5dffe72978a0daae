//! `Scribble<A, H>`: a debugging allocator that makes use of freed memory visible.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use allocator_api2::alloc::{AllocError, Allocator};

use crate::config::{ScribbleConfig, StackMode};
use crate::guard;
use crate::hooks::{DefaultHooks, ScribbleHooks};
use crate::report::{BlockHistory, BlockState, ViolationReport};
use crate::stack::Stack;
use crate::violation::{Policy, Side, Violation, ViolationKind};

/// The smallest red zone: XNNPACK reads (never writes) up to 16 bytes past the end of an
/// array, so at least this much slack after every block must be readable and must not be
/// reported when read.
pub const MIN_RED_ZONE: usize = 16;

/// Every block's base alignment (and the granularity of the red zone before it).
const BASE_ALIGN: usize = 16;

/// One block handed out (or in quarantine) on the ordinary path. Addresses are kept as
/// integers so the state is `Send`; the block is reached again only through the pointer its
/// owner passed back.
#[derive(Clone, Debug)]
struct Block {
    base: usize,
    outer: Layout,
    user: usize,
    size: usize,
    align: usize,
    allocated: Option<Stack>,
    freed: Option<Stack>,
}

impl Block {
    fn front(&self) -> usize {
        self.user - self.base
    }
    fn back(&self) -> usize {
        self.outer.size() - self.front() - self.size
    }
    fn history(&self, state: BlockState) -> BlockHistory {
        BlockHistory {
            address: self.user,
            size: self.size,
            guarded: false,
            state,
            allocated: self.allocated.clone(),
            freed: self.freed.clone(),
        }
    }
}

/// A guarded block: its slot in the guard table and its layout.
#[derive(Clone, Copy, Debug)]
struct GuardedBlock {
    slot: usize,
    size: usize,
    align: usize,
}

#[derive(Debug)]
struct State {
    live: BTreeMap<usize, Block>,
    quarantine: VecDeque<Block>,
    quarantined: BTreeSet<usize>,
    quarantine_bytes: usize,
    guarded: BTreeMap<usize, GuardedBlock>,
    guard_quarantine: VecDeque<(usize, GuardedBlock)>,
    guard_quarantined: BTreeMap<usize, GuardedBlock>,
    violations: Vec<Violation>,
    reports: Vec<ViolationReport>,
    stats: ScribbleStats,
}

/// Counters of a [`Scribble`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScribbleStats {
    /// Blocks handed out (guarded ones included).
    pub allocations: u64,
    /// Blocks freed by their user (into quarantine).
    pub frees: u64,
    /// Blocks released from quarantine to the wrapped allocator (or unmapped).
    pub released: u64,
    /// Blocks live now (guarded ones included).
    pub live_blocks: usize,
    /// Blocks in quarantine now (ordinary ones).
    pub quarantined_blocks: usize,
    /// Bytes (whole blocks) in quarantine now (ordinary ones).
    pub quarantined_bytes: usize,
    /// Violations found (recorded or not).
    pub violations: u64,
    /// Blocks handed out in guard-page mode.
    pub guarded_allocations: u64,
    /// Guarded blocks live now.
    pub guarded_live: usize,
    /// Freed guarded blocks kept `PROT_NONE` now.
    pub guarded_quarantined: usize,
}

/// A scribbling, quarantining, red-zoned allocator around any backend `A`, with per-block
/// stacks and sampled guard pages. `H` decides how a fatal violation ends the process and may
/// adjust the configuration at first use ([`DefaultHooks`]: report on stderr, exit with the
/// kind's code).
///
/// * New blocks are filled with `alloc_fill` (0xAA), freed ones with `free_fill` (0x55), as
///   macOS `MallocScribble` does, so uninitialised reads and uses after free show a
///   recognisable pattern instead of plausible data.
/// * Freed blocks go into a FIFO quarantine bounded by bytes and by count, so their
///   addresses are not handed out again at once.
/// * Each block has a red zone before and after it (at least [`MIN_RED_ZONE`] bytes after:
///   readable slack for kernels that over-read). Red zones are checked when the block is
///   freed; the free fill and the red zones are checked again when it leaves quarantine
///   (write-after-free). A free of a block in quarantine is a double free; a free of
///   anything else that is not live is an invalid free.
/// * With [`StackMode::Free`] or [`StackMode::Both`] each block records where it was freed
///   (and allocated), and every report prints those stacks, symbolized.
/// * With guard pages on ([`GuardConfig`](crate::GuardConfig)), one allocation in N is
///   mapped alone between `PROT_NONE` guard pages and turned `PROT_NONE` when freed: a read
///   or write after free, or an overflow past the slack, faults at the faulting instruction
///   and the fault handler reports it (see the `guard` module docs).
/// * Each finding is a [`Violation`]; [`ScribbleConfig::policy`] decides whether it ends the
///   process ([`Policy::Abort`], through [`ScribbleHooks::fatal`]) or is recorded for a test
///   ([`Policy::Record`], read with [`violations`](Scribble::violations) and
///   [`reports`](Scribble::reports)). A block whose free was a violation is left alone.
///
/// Its bookkeeping uses the global allocator, so it must not itself be the
/// `#[global_allocator]`.
///
/// ```
/// use core::alloc::Layout;
/// use allocator_api2::alloc::Allocator;
/// use keepalloc_allocators::System;
/// use keepalloc_scribble::{Policy, Scribble, ScribbleConfig, StackMode};
///
/// let config = ScribbleConfig::DEFAULT.with_policy(Policy::Record).with_stacks(StackMode::Both);
/// let heap: Scribble<System> = Scribble::new(System, config);
/// let layout = Layout::from_size_align(8, 8).unwrap();
/// let p = heap.allocate(layout).unwrap().cast::<u8>();
/// // SAFETY: `p` is live with `layout`; it is freed once, then (the bug) written.
/// unsafe {
///     heap.deallocate(p, layout);
///     p.as_ptr().write(1);
/// }
/// heap.flush_quarantine();
/// let report = &heap.reports()[0];
/// assert_eq!(report.violation.kind.name(), "write-after-free");
/// assert!(report.block.as_ref().unwrap().freed.is_some());
/// ```
pub struct Scribble<A: Allocator, H: ScribbleHooks = DefaultHooks> {
    inner: A,
    requested: ScribbleConfig,
    config: OnceLock<ScribbleConfig>,
    sampled: AtomicU64,
    state: Mutex<State>,
    hooks: PhantomData<fn() -> H>,
}

impl<A: Allocator + core::fmt::Debug, H: ScribbleHooks> core::fmt::Debug for Scribble<A, H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Scribble")
            .field("inner", &self.inner)
            .field("config", self.config())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<A: Allocator, H: ScribbleHooks> Scribble<A, H> {
    /// Wraps `inner` (`const`, so it can be a `static`). The configuration in effect is
    /// `H::configure(config)`, fixed at first use.
    pub const fn new(inner: A, config: ScribbleConfig) -> Self {
        Scribble {
            inner,
            requested: config,
            config: OnceLock::new(),
            sampled: AtomicU64::new(0),
            state: Mutex::new(State {
                live: BTreeMap::new(),
                quarantine: VecDeque::new(),
                quarantined: BTreeSet::new(),
                quarantine_bytes: 0,
                guarded: BTreeMap::new(),
                guard_quarantine: VecDeque::new(),
                guard_quarantined: BTreeMap::new(),
                violations: Vec::new(),
                reports: Vec::new(),
                stats: ScribbleStats {
                    allocations: 0,
                    frees: 0,
                    released: 0,
                    live_blocks: 0,
                    quarantined_blocks: 0,
                    quarantined_bytes: 0,
                    violations: 0,
                    guarded_allocations: 0,
                    guarded_live: 0,
                    guarded_quarantined: 0,
                },
            }),
            hooks: PhantomData,
        }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// The configuration in effect (the one given, adjusted by `H::configure` at first use).
    pub fn config(&self) -> &ScribbleConfig {
        self.config.get_or_init(|| {
            let config = H::configure(self.requested);
            if config.own_frames {
                crate::stack::show_own_frames();
            }
            config
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A violation under `Abort` never unwinds, and nothing under the lock panics; even
        // so, the state is consistent at every step, so poison is ignored.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counters.
    pub fn stats(&self) -> ScribbleStats {
        let s = self.state();
        ScribbleStats {
            live_blocks: s.live.len() + s.guarded.len(),
            quarantined_blocks: s.quarantine.len(),
            quarantined_bytes: s.quarantine_bytes,
            guarded_live: s.guarded.len(),
            guarded_quarantined: s.guard_quarantine.len(),
            ..s.stats
        }
    }

    /// The violations recorded so far (always empty under [`Policy::Abort`], which exits).
    pub fn violations(&self) -> Vec<Violation> {
        self.state().violations.clone()
    }

    /// The violations recorded so far with their stacks and blocks.
    pub fn reports(&self) -> Vec<ViolationReport> {
        self.state().reports.clone()
    }

    /// Takes the violations recorded so far, leaving the lists empty.
    pub fn take_violations(&self) -> Vec<Violation> {
        let mut s = self.state();
        s.reports.clear();
        core::mem::take(&mut s.violations)
    }

    /// True when `ptr` is a block handed out and not yet freed.
    pub fn is_live(&self, ptr: *const u8) -> bool {
        let s = self.state();
        s.live.contains_key(&(ptr as usize)) || s.guarded.contains_key(&(ptr as usize))
    }

    /// What this allocator remembers of the block that holds `address` (live, or freed and
    /// still in quarantine): its size, state and recorded stacks. For reports of findings
    /// made outside the allocator (an owner canary found dead: who freed it?).
    pub fn history(&self, address: usize) -> Option<BlockHistory> {
        let s = self.state();
        let inside = |user: usize, size: usize| address >= user && address - user < size.max(1);
        if let Some((_, b)) = s.live.range(..=address).next_back()
            && inside(b.user, b.size)
        {
            return Some(b.history(BlockState::Live));
        }
        if let Some(b) = s.quarantine.iter().find(|b| inside(b.user, b.size)) {
            return Some(b.history(BlockState::Freed));
        }
        s.guarded
            .range(..=address)
            .next_back()
            .into_iter()
            .chain(s.guard_quarantined.range(..=address).next_back())
            .find(|(user, g)| inside(**user, g.size))
            .map(|(_, g)| guard::history(g.slot))
    }

    /// Reports `violation` according to the policy: ends the process under
    /// [`Policy::Abort`], records it under [`Policy::Record`]. Used by the allocator itself
    /// and by owner canaries that live in this allocator's memory; the report carries the
    /// stacks of the block at the violation's address when they were recorded.
    pub fn report(&self, violation: Violation) {
        let block = self.history(violation.address);
        self.report_full(ViolationReport {
            violation,
            block,
            access: None,
            fault: None,
        });
    }

    fn report_full(&self, report: ViolationReport) {
        {
            let mut s = self.state();
            s.stats.violations += 1;
            if self.config().policy == Policy::Record {
                s.violations.push(report.violation);
                s.reports.push(report);
                return;
            }
        }
        H::fatal(&report)
    }

    fn report_all(&self, reports: Vec<ViolationReport>) {
        for r in reports {
            self.report_full(r);
        }
    }

    fn capture(&self, wanted: bool) -> Option<Stack> {
        wanted.then(|| Stack::capture(self.config().stack_depth))
    }

    /// The red zone after a block (the readable slack).
    fn back_zone(&self) -> usize {
        self.config().red_zone.max(MIN_RED_ZONE)
    }

    /// The whole block's layout and the offset of the user pointer in it.
    fn outer(&self, layout: Layout) -> Option<(Layout, usize)> {
        let align = layout.align().max(BASE_ALIGN);
        let zone = self.config().red_zone.max(MIN_RED_ZONE);
        let front = zone.checked_next_multiple_of(align)?;
        let total = front
            .checked_add(layout.size())?
            .checked_add(self.back_zone())?;
        let outer = Layout::from_size_align(total, align).ok()?;
        Some((outer, front))
    }

    /// Checks `[start, end)` for the red-zone fill; the first stray byte is a violation on
    /// `side` of the block `(user, size)`.
    ///
    /// # Safety
    /// `[start, end)` is readable memory of this allocator.
    unsafe fn check_zone(
        &self,
        (start, end): (usize, usize),
        side: Side,
        (user, size): (usize, usize),
    ) -> Option<Violation> {
        // SAFETY: readable (caller's promise).
        let zone = unsafe { core::slice::from_raw_parts(start as *const u8, end - start) };
        let rz = self.config().red_zone_fill;
        zone.iter().position(|&b| b != rz).map(|offset| Violation {
            kind: ViolationKind::RedZoneOverwrite {
                side,
                offset,
                found: zone[offset],
            },
            address: user,
            size,
        })
    }

    /// Checks both red zones of `block`.
    ///
    /// # Safety
    /// `block` is live or quarantined (its memory is still ours).
    unsafe fn check_red_zones(&self, block: &Block, found: &mut Vec<Violation>) {
        let at = (block.user, block.size);
        let before = (block.base, block.user);
        let after = (
            block.user + block.size,
            block.user + block.size + block.back(),
        );
        // SAFETY: the whole outer block belongs to this allocator (caller's promise).
        unsafe {
            found.extend(self.check_zone(before, Side::Before, at));
            found.extend(self.check_zone(after, Side::After, at));
        }
    }

    /// Checks a quarantined block: free fill intact, red zones intact.
    ///
    /// # Safety
    /// `block` is in quarantine.
    unsafe fn check_quarantined(&self, block: &Block, found: &mut Vec<Violation>) {
        // SAFETY: a quarantined block's memory is still ours (caller's promise).
        let user = unsafe { core::slice::from_raw_parts(block.user as *const u8, block.size) };
        if let Some(offset) = user.iter().position(|&b| b != self.config().free_fill) {
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
    /// violations were found (each also reported by the policy). Freed guarded blocks need
    /// no check: they cannot be touched without a fault.
    pub fn verify_quarantine(&self) -> usize {
        let mut found = Vec::new();
        {
            let s = self.state();
            for block in &s.quarantine {
                let mut v = Vec::new();
                // SAFETY: the block is in quarantine (we hold the lock that guards it).
                unsafe { self.check_quarantined(block, &mut v) };
                found.extend(v.into_iter().map(|violation| ViolationReport {
                    violation,
                    block: Some(block.history(BlockState::Freed)),
                    access: None,
                    fault: None,
                }));
            }
        }
        let n = found.len();
        self.report_all(found);
        n
    }

    /// Checks and releases every quarantined block to the wrapped allocator (and unmaps
    /// every freed guarded block); returns how many violations were found (each also
    /// reported by the policy).
    pub fn flush_quarantine(&self) -> usize {
        self.evict_guarded(0);
        self.evict(|_| true)
    }

    /// Unmaps freed guarded blocks, oldest first, until at most `keep` remain.
    fn evict_guarded(&self, keep: usize) {
        let mut s = self.state();
        while s.guard_quarantine.len() > keep {
            let (user, g) = s.guard_quarantine.pop_front().expect("not empty");
            s.guard_quarantined.remove(&user);
            s.stats.released += 1;
            guard::unmap(g.slot);
        }
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
                let mut v = Vec::new();
                // The block was in quarantine until the line above, and nobody else
                // can reach it (it is in no list now).
                // SAFETY: the block is ours alone, fresh out of the quarantine.
                unsafe { self.check_quarantined(&block, &mut v) };
                found.extend(v.into_iter().map(|violation| ViolationReport {
                    violation,
                    block: Some(block.history(BlockState::Freed)),
                    access: None,
                    fault: None,
                }));
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

    /// Whether this allocation is sampled into guard-page mode.
    fn sample(&self) -> bool {
        let every = self.config().guard.sample_every;
        every != 0
            && self
                .sampled
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(u64::from(every))
    }

    fn allocate_guarded(&self, layout: Layout) -> Option<NonNull<[u8]>> {
        let config = *self.config();
        if self.state().guarded.len() >= config.guard.max_live {
            return None;
        }
        let allocated = self.capture(config.stacks == StackMode::Both);
        let mapped = guard::map(
            layout.size(),
            layout.align(),
            &config.guard,
            config.alloc_fill,
            config.red_zone_fill,
            allocated.as_ref(),
            config.stack_depth,
            H::fatal,
        )?;
        {
            let mut s = self.state();
            s.guarded.insert(
                mapped.user,
                GuardedBlock {
                    slot: mapped.slot,
                    size: layout.size(),
                    align: layout.align(),
                },
            );
            s.stats.allocations += 1;
            s.stats.guarded_allocations += 1;
        }
        // SAFETY: `user` is inside a fresh readable, writable mapping with `size` bytes from it, and is not null.
        let user = unsafe { NonNull::new_unchecked(mapped.user as *mut u8) };
        Some(NonNull::slice_from_raw_parts(user, layout.size()))
    }

    /// Frees a guarded block: checks the fill around it, then makes its pages `PROT_NONE`.
    fn deallocate_guarded(&self, addr: usize, g: GuardedBlock, layout: Layout) {
        let config = *self.config();
        let freed = self.capture(config.stacks != StackMode::None);
        let mut found = Vec::new();
        if g.size != layout.size() || g.align != layout.align() {
            found.push(Violation {
                kind: ViolationKind::LayoutMismatch {
                    allocated_size: g.size,
                    allocated_align: g.align,
                    freed_align: layout.align(),
                },
                address: addr,
                size: layout.size(),
            });
        }
        let (start, end) = guard::data_range(g.slot);
        let at = (addr, g.size);
        // SAFETY: the block is live until `retire` below, so its pages are readable.
        unsafe {
            found.extend(self.check_zone((start, addr), Side::Before, at));
            found.extend(self.check_zone((addr + g.size, end), Side::After, at));
        }
        guard::retire(g.slot, freed.as_ref());
        {
            let mut s = self.state();
            s.stats.frees += 1;
            s.guard_quarantine.push_back((addr, g));
            s.guard_quarantined.insert(addr, g);
        }
        self.evict_guarded(config.guard.quarantine);
        let history = guard::history(g.slot);
        let reports = found
            .into_iter()
            .map(|violation| ViolationReport {
                violation,
                block: Some(history.clone()),
                access: None,
                fault: None,
            })
            .collect();
        self.report_all(reports);
    }
}

// SAFETY: every block handed out is `layout.size()` bytes at an address aligned to
// `layout.align()`, either inside a block the wrapped allocator returned for a larger layout
// of at least that alignment, or inside a fresh mapping of its own (guarded), and it stays
// valid until it is freed (then it is kept in quarantine, never handed out again until the
// wrapped allocator reuses it or the mapping is unmapped). Resizing uses the trait's default
// allocate-copy-free, which keeps contents.
unsafe impl<A: Allocator, H: ScribbleHooks> Allocator for Scribble<A, H> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let config = *self.config();
        if config.guard.enabled() {
            guard::ensure_alt_stack();
            if self.sample()
                && let Some(block) = self.allocate_guarded(layout)
            {
                return Ok(block);
            }
        }
        let (outer, front) = self.outer(layout).ok_or(AllocError)?;
        let allocated = self.capture(config.stacks == StackMode::Both);
        let base = self.inner.allocate(outer)?.cast::<u8>();
        let size = layout.size();
        let back = outer.size() - front - size;
        // The wrapped allocator returned `outer.size()` bytes at `base`, and
        // `front + size + back == outer.size()`.
        // SAFETY: every offset below stays within the `outer` block.
        let user = unsafe {
            let p = base.as_ptr();
            p.write_bytes(config.red_zone_fill, front);
            p.add(front).write_bytes(config.alloc_fill, size);
            p.add(front + size).write_bytes(config.red_zone_fill, back);
            NonNull::new_unchecked(p.add(front))
        };
        let block = Block {
            base: base.as_ptr() as usize,
            outer,
            user: user.as_ptr() as usize,
            size,
            align: layout.align(),
            allocated,
            freed: None,
        };
        {
            let mut s = self.state();
            s.live.insert(block.user, block);
            s.stats.allocations += 1;
        }
        Ok(NonNull::slice_from_raw_parts(user, size))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let config = *self.config();
        let addr = ptr.as_ptr() as usize;
        if config.guard.enabled() {
            guard::ensure_alt_stack();
            let guarded = self.state().guarded.remove(&addr);
            if let Some(g) = guarded {
                self.deallocate_guarded(addr, g, layout);
                return;
            }
        }
        let mut freed = self.capture(config.stacks != StackMode::None);
        let mut found = Vec::new();
        let accepted = {
            let mut s = self.state();
            match s.live.remove(&addr) {
                None => {
                    let (kind, block) = if s.quarantined.contains(&addr) {
                        let block = s
                            .quarantine
                            .iter()
                            .find(|b| b.user == addr)
                            .map(|b| b.history(BlockState::Freed));
                        (ViolationKind::DoubleFree, block)
                    } else if let Some(g) = s.guard_quarantined.get(&addr) {
                        (ViolationKind::DoubleFree, Some(guard::history(g.slot)))
                    } else {
                        (ViolationKind::InvalidFree, None)
                    };
                    found.push(ViolationReport {
                        violation: Violation {
                            kind,
                            address: addr,
                            size: layout.size(),
                        },
                        block,
                        access: freed
                            .take()
                            .or_else(|| Some(Stack::capture(config.stack_depth))),
                        fault: None,
                    });
                    false
                }
                Some(mut block) => {
                    let mut v = Vec::new();
                    if block.size != layout.size() || block.align != layout.align() {
                        v.push(Violation {
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
                        self.check_red_zones(&block, &mut v);
                        (block.user as *mut u8).write_bytes(config.free_fill, block.size);
                    }
                    block.freed = freed.take();
                    found.extend(v.into_iter().map(|violation| ViolationReport {
                        violation,
                        block: Some(block.history(BlockState::Freed)),
                        access: None,
                        fault: None,
                    }));
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
            let (bytes, count) = (config.quarantine_bytes, config.quarantine_count);
            self.evict(|s| s.quarantine_bytes > bytes || s.quarantine.len() > count);
        }
    }
}

impl<A: Allocator, H: ScribbleHooks> Drop for Scribble<A, H> {
    fn drop(&mut self) {
        // Give quarantined blocks back without checking them again (a `static` is never
        // dropped; a test that cares calls `flush_quarantine` first). Live blocks are the
        // user's leak and are left alone.
        let s = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        s.quarantined.clear();
        s.quarantine_bytes = 0;
        s.guard_quarantined.clear();
        for (_, g) in s.guard_quarantine.drain(..) {
            guard::unmap(g.slot);
        }
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
