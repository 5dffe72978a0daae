//! Guard-page mode (GWP-ASan's design): a sampled block is mapped alone on its own pages
//! between two `PROT_NONE` guard pages; when it is freed its pages become `PROT_NONE` too (and
//! give their memory back with `MADV_DONTNEED`) and stay mapped in a bounded quarantine, so a
//! read or write after free, or a touch of a guard page, faults at the faulting instruction.
//!
//! The process-wide fault handler (`SIGSEGV` and `SIGBUS`, `sigaction` with `SA_SIGINFO` and
//! `SA_ONSTACK`) maps the faulting address to its block through a fixed table of slots that
//! it reads with atomic loads only, writes a first line with `write(2)`, then builds the full
//! report and hands it to the allocator's [`ScribbleHooks::fatal`](crate::ScribbleHooks),
//! which ends the process. A fault that is not in a guarded block is passed to the handler
//! that was installed before (or, if that was the default action, the default action is
//! restored and the faulting instruction runs again, which re-raises the signal).
//!
//! Async-signal safety, and the compromises: finding the block, reading its recorded stacks
//! and writing the first line use only atomic loads, a stack buffer and `write(2)`; that part
//! is async-signal-safe. Capturing the faulting thread's stack (libgcc's unwinder) and
//! everything after it (symbolizing, which reads debug info and allocates; formatting;
//! the hook) is not. GWP-ASan makes the same trade: the process is dying, and the report is
//! what it dies for. It can deadlock only if the faulting thread itself held the global
//! allocator's or the unwinder's lock at the faulting instruction, which a plain load or store
//! in user code does not. A second thread that faults while the first reports waits for the
//! exit. Capturing the faulting stack runs on the thread's alternate signal stack (each thread
//! that allocates or frees through a guarding allocator gets a 256 KiB one when its own is
//! smaller; Rust threads come with 8 KiB); symbolizing needs far more, so on x86-64 Linux the
//! handler switches to a 1 MiB report stack mapped when it was installed (elsewhere it runs
//! in place).

use core::cell::Cell;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::Once;

use crate::config::{GuardAlign, GuardConfig};
use crate::report::{BlockHistory, BlockState, ViolationReport};
use crate::stack::{MAX_FRAMES, Stack, capture_into};
use crate::violation::{Access, Side, Violation, ViolationKind};

/// How the handler ends the process for a guarded block: the owning allocator's
/// [`ScribbleHooks::fatal`](crate::ScribbleHooks::fatal).
pub(crate) type FatalFn = fn(&ViolationReport) -> !;

/// Guarded blocks, live and quarantined, across all allocators of the process.
pub const GUARD_SLOTS: usize = 4096;

const EMPTY: u8 = 0;
const CLAIMED: u8 = 1;
const LIVE: u8 = 2;
const FREED: u8 = 3;

struct Head {
    state: AtomicU8,
    /// The whole mapping: guard page, data pages, guard page.
    region: AtomicUsize,
    region_len: AtomicUsize,
    user: AtomicUsize,
    size: AtomicUsize,
    fatal: AtomicUsize,
    depth: AtomicUsize,
}

struct RecordedStack {
    thread: AtomicU32,
    len: AtomicUsize,
    frames: [AtomicUsize; MAX_FRAMES],
}

struct SlotStacks {
    allocated: RecordedStack,
    freed: RecordedStack,
}

#[allow(clippy::declare_interior_mutable_const)]
const HEAD: Head = Head {
    state: AtomicU8::new(EMPTY),
    region: AtomicUsize::new(0),
    region_len: AtomicUsize::new(0),
    user: AtomicUsize::new(0),
    size: AtomicUsize::new(0),
    fatal: AtomicUsize::new(0),
    depth: AtomicUsize::new(0),
};

#[allow(clippy::declare_interior_mutable_const)]
const RECORDED: RecordedStack = RecordedStack {
    thread: AtomicU32::new(0),
    len: AtomicUsize::new(0),
    frames: [const { AtomicUsize::new(0) }; MAX_FRAMES],
};

static HEADS: [Head; GUARD_SLOTS] = [HEAD; GUARD_SLOTS];
static STACKS: [SlotStacks; GUARD_SLOTS] = [const {
    SlotStacks {
        allocated: RECORDED,
        freed: RECORDED,
    }
}; GUARD_SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

impl RecordedStack {
    fn store(&self, stack: Option<&Stack>) {
        match stack {
            None => self.len.store(0, Ordering::Relaxed),
            Some(s) => {
                let frames = &s.frames()[..s.frames().len().min(MAX_FRAMES)];
                for (slot, &ip) in self.frames.iter().zip(frames) {
                    slot.store(ip, Ordering::Relaxed);
                }
                self.thread.store(s.thread, Ordering::Relaxed);
                self.len.store(frames.len(), Ordering::Relaxed);
            }
        }
    }

    fn load(&self, depth: usize) -> Option<Stack> {
        let len = self.len.load(Ordering::Relaxed).min(MAX_FRAMES);
        if len == 0 {
            return None;
        }
        let mut frames = [0usize; MAX_FRAMES];
        for (out, slot) in frames.iter_mut().zip(&self.frames[..len]) {
            *out = slot.load(Ordering::Relaxed);
        }
        Some(Stack::from_frames(
            self.thread.load(Ordering::Relaxed),
            &frames[..len],
            depth,
        ))
    }
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let p = if p > 0 { p as usize } else { 4096 };
            PAGE.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// A guarded block just mapped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mapped {
    pub slot: usize,
    pub user: usize,
}

/// Maps a guarded block of `size` bytes aligned to `align`, fills it (`alloc_fill` for the
/// block, `slack_fill` for the rest of its pages) and records it in a slot. `None` when the
/// alignment is larger than a page, every slot is taken or the kernel refuses the mapping:
/// the caller then takes the ordinary path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn map(
    size: usize,
    align: usize,
    guard: &GuardConfig,
    alloc_fill: u8,
    slack_fill: u8,
    allocated: Option<&Stack>,
    depth: usize,
    fatal: FatalFn,
) -> Option<Mapped> {
    let page = page_size();
    if align > page {
        return None;
    }
    let slack = match guard.align {
        GuardAlign::Right => guard.slack,
        GuardAlign::Left => 0,
    };
    let data_len = size
        .checked_add(slack)?
        .checked_next_multiple_of(page)?
        .max(page);
    let region_len = data_len.checked_add(2 * page)?;
    let slot = claim()?;
    // SAFETY: a fresh anonymous mapping; no existing memory is touched.
    let region = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            region_len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if region == libc::MAP_FAILED {
        HEADS[slot].state.store(EMPTY, Ordering::Release);
        return None;
    }
    let data = region as usize + page;
    // SAFETY: `[data, data + data_len)` lies inside the mapping just made.
    if unsafe {
        libc::mprotect(
            data as *mut libc::c_void,
            data_len,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    } != 0
    {
        // SAFETY: the mapping just made, unmapped once.
        unsafe { libc::munmap(region, region_len) };
        HEADS[slot].state.store(EMPTY, Ordering::Release);
        return None;
    }
    let user = match guard.align {
        // The block ends `slack` to `slack + align - 1` bytes before the guard page; `data`
        // is page-aligned, so rounding down keeps the block inside the data pages.
        GuardAlign::Right => (data + data_len - slack - size) & !(align - 1),
        GuardAlign::Left => data,
    };
    // SAFETY: the data pages are mapped readable and writable and belong to this block alone; `data <= user` and `user + size <= data + data_len`.
    unsafe {
        let p = data as *mut u8;
        p.write_bytes(slack_fill, user - data);
        (user as *mut u8).write_bytes(alloc_fill, size);
        ((user + size) as *mut u8).write_bytes(slack_fill, data + data_len - user - size);
    }
    let head = &HEADS[slot];
    head.region.store(region as usize, Ordering::Relaxed);
    head.region_len.store(region_len, Ordering::Relaxed);
    head.user.store(user, Ordering::Relaxed);
    head.size.store(size, Ordering::Relaxed);
    head.fatal.store(fatal as usize, Ordering::Relaxed);
    head.depth.store(depth, Ordering::Relaxed);
    STACKS[slot].allocated.store(allocated);
    STACKS[slot].freed.store(None);
    head.state.store(LIVE, Ordering::Release);
    install_handler();
    Some(Mapped { slot, user })
}

fn claim() -> Option<usize> {
    let start = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
    (0..GUARD_SLOTS)
        .map(|i| (start + i) % GUARD_SLOTS)
        .find(|&i| {
            HEADS[i]
                .state
                .compare_exchange(EMPTY, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
}

/// The readable bytes of a live guarded block's pages around the block: `(data start,
/// data end)`.
pub(crate) fn data_range(slot: usize) -> (usize, usize) {
    let page = page_size();
    let head = &HEADS[slot];
    let region = head.region.load(Ordering::Relaxed);
    (
        region + page,
        region + head.region_len.load(Ordering::Relaxed) - page,
    )
}

/// Turns a live guarded block's pages into `PROT_NONE` and gives their memory back; the
/// mapping stays (quarantine) until [`unmap`].
pub(crate) fn retire(slot: usize, freed: Option<&Stack>) {
    STACKS[slot].freed.store(freed);
    HEADS[slot].state.store(FREED, Ordering::Release);
    let (start, end) = data_range(slot);
    // SAFETY: the data pages of this slot's mapping, which only this allocator uses; the block was freed by its user, so nobody may touch them any more (that is the point).
    unsafe {
        libc::mprotect(start as *mut libc::c_void, end - start, libc::PROT_NONE);
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
    }
}

/// Unmaps a guarded block (leaving quarantine, or given back on drop) and frees its slot.
pub(crate) fn unmap(slot: usize) {
    let head = &HEADS[slot];
    let (region, len) = (
        head.region.load(Ordering::Relaxed),
        head.region_len.load(Ordering::Relaxed),
    );
    head.state.store(CLAIMED, Ordering::Release);
    // SAFETY: this slot's own mapping, unmapped once: the slot is then free for reuse.
    unsafe { libc::munmap(region as *mut libc::c_void, len) };
    head.state.store(EMPTY, Ordering::Release);
}

/// What is recorded about the block in `slot`.
pub(crate) fn history(slot: usize) -> BlockHistory {
    let head = &HEADS[slot];
    let depth = head.depth.load(Ordering::Relaxed);
    BlockHistory {
        address: head.user.load(Ordering::Relaxed),
        size: head.size.load(Ordering::Relaxed),
        guarded: true,
        state: if head.state.load(Ordering::Acquire) == FREED {
            BlockState::Freed
        } else {
            BlockState::Live
        },
        allocated: STACKS[slot].allocated.load(depth),
        freed: STACKS[slot].freed.load(depth),
    }
}

// ---------------------------------------------------------------------------------------
// The fault handler.

struct OldActions(core::cell::UnsafeCell<[core::mem::MaybeUninit<libc::sigaction>; 2]>);
// SAFETY: written only inside `INSTALL.call_once`, before the handler that reads it is
// installed; read-only afterwards.
unsafe impl Sync for OldActions {}

static OLD: OldActions = OldActions(core::cell::UnsafeCell::new(
    [core::mem::MaybeUninit::uninit(); 2],
));
static INSTALL: Once = Once::new();
static REPORTING: AtomicBool = AtomicBool::new(false);

const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

fn install_handler() {
    INSTALL.call_once(|| {
        map_report_stack();
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: `OLD` is written here only, before the handler that reads it exists; `action` is a fully initialized sigaction (zeroed, then the fields we use).
            unsafe {
                let old = (*OLD.0.get())[i].as_mut_ptr();
                libc::sigaction(sig, core::ptr::null(), old);
                let mut action: libc::sigaction = core::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, core::ptr::null_mut());
            }
        }
    });
    ensure_alt_stack();
}

/// A fixed buffer that `core::fmt` can write into without allocating.
struct LineBuf {
    buf: [u8; 256],
    len: usize,
}

impl core::fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The slot whose mapping holds `address`, with its state (async-signal-safe: atomic loads).
fn find(address: usize) -> Option<(usize, u8)> {
    (0..GUARD_SLOTS).find_map(|i| {
        let head = &HEADS[i];
        let state = head.state.load(Ordering::Acquire);
        if state != LIVE && state != FREED {
            return None;
        }
        let region = head.region.load(Ordering::Relaxed);
        let len = head.region_len.load(Ordering::Relaxed);
        (address >= region && address - region < len).then_some((i, state))
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn access_of(sig: libc::c_int, context: *mut libc::c_void) -> Access {
    if sig != libc::SIGSEGV || context.is_null() {
        return Access::Unknown;
    }
    // SAFETY: for an SA_SIGINFO handler the third argument is the interrupted ucontext.
    let err = unsafe {
        (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize]
    };
    // The page-fault error code: bit 1 set for a write.
    if err & 2 != 0 {
        Access::Write
    } else {
        Access::Read
    }
}

/// The interrupted (for a fault, the faulting) instruction's address, read from a signal
/// handler's context; `None` where keepalloc does not read contexts (outside x86-64 Linux).
/// The fault-exploration crash handler shares it.
///
/// # Safety
///
/// `context` is NULL or the third argument of an `SA_SIGINFO` handler: the interrupted
/// `ucontext_t`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub unsafe fn interrupted_pc(context: *mut libc::c_void) -> Option<usize> {
    if context.is_null() {
        return None;
    }
    // SAFETY: the caller passes an SA_SIGINFO handler's third argument, the interrupted ucontext.
    let pc = unsafe {
        (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize]
    };
    Some(pc as usize)
}

/// The interrupted instruction's address: unknown on this target.
///
/// # Safety
///
/// None: the context is not read (the contract is the x86-64 Linux one's).
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub unsafe fn interrupted_pc(_: *mut libc::c_void) -> Option<usize> {
    None
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn access_of(_: libc::c_int, _: *mut libc::c_void) -> Access {
    Access::Unknown
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: for an SA_SIGINFO handler `info` is the kernel's siginfo for this fault.
    let address = unsafe { (*info).si_addr() } as usize;
    let Some((slot, state)) = find(address) else {
        // SAFETY: the arguments this handler was given, passed on unchanged.
        unsafe { chain(sig, info, context) };
        return;
    };
    let head = &HEADS[slot];
    let (user, size) = (
        head.user.load(Ordering::Relaxed),
        head.size.load(Ordering::Relaxed),
    );
    let (data_start, data_end) = data_range(slot);
    let access = access_of(sig, context);
    let kind = if state == FREED {
        ViolationKind::GuardUseAfterFree {
            access,
            offset: address.wrapping_sub(user) as isize,
        }
    } else if address < data_start {
        ViolationKind::GuardOutOfBounds {
            access,
            side: Side::Before,
            distance: user - address,
        }
    } else if address >= data_end {
        ViolationKind::GuardOutOfBounds {
            access,
            side: Side::After,
            distance: address - (user + size),
        }
    } else {
        // A fault inside a live block's readable pages is not a guard fault.
        // SAFETY: as above.
        unsafe { chain(sig, info, context) };
        return;
    };
    if REPORTING.swap(true, Ordering::SeqCst) {
        // Another thread is reporting and will end the process.
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    let violation = Violation {
        kind,
        address: user,
        size,
    };
    // The async-signal-safe first line, in case what follows cannot finish.
    let mut line = LineBuf {
        buf: [0; 256],
        len: 0,
    };
    let _ = writeln!(
        line,
        "keepalloc-scribble: fault at {address:#x}: {violation}"
    );
    // SAFETY: write(2) of an initialized buffer to stderr.
    unsafe { libc::write(2, line.buf.as_ptr().cast(), line.len) };
    // From here on: not async-signal-safe (see the module docs).
    let depth = head.depth.load(Ordering::Relaxed).max(1);
    let mut frames = [0usize; MAX_FRAMES];
    let n = capture_into(&mut frames[..(depth + crate::stack::OWN_FRAMES + 4).min(MAX_FRAMES)]);
    // Start the stack at the faulting instruction: drop the handler's frames and the signal
    // trampoline (the interrupted frame's address is the faulting PC itself; it is stored
    // plus one because symbolization looks up the byte before a return address).
    let mut captured = &mut frames[..n];
    // SAFETY: `context` is this SA_SIGINFO handler's third argument.
    if let Some(pc) = unsafe { interrupted_pc(context) }
        && let Some(k) = captured.iter().position(|&ip| ip == pc || ip == pc + 1)
    {
        captured[k] = pc + 1;
        captured = &mut captured[k..];
    }
    let mut job = ReportJob {
        slot,
        violation,
        address,
        sig,
        depth,
        frames: [0; MAX_FRAMES],
        len: captured.len(),
    };
    job.frames[..captured.len()].copy_from_slice(captured);
    // Symbolizing and formatting need far more stack than a thread's alternate signal stack
    // may have (Rust gives its threads 8 KiB): run them on the report stack.
    // SAFETY: `job` outlives the call; the report stack is used by one thread only (the one that set `REPORTING`).
    unsafe { on_report_stack(finish_report, (&mut job as *mut ReportJob).cast()) };
    // `finish_report` ends the process; reaching this line would mean a hook returned.
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// What the handler hands to [`finish_report`].
struct ReportJob {
    slot: usize,
    violation: Violation,
    address: usize,
    sig: libc::c_int,
    depth: usize,
    frames: [usize; MAX_FRAMES],
    len: usize,
}

/// The part of a fault report that is not async-signal-safe: the block's history,
/// symbolization (inside the hook's formatting) and the hook, which ends the process.
extern "C" fn finish_report(job: *mut libc::c_void) {
    // SAFETY: `job` is the handler's `ReportJob`, alive while this runs.
    let job = unsafe { &*(job as *const ReportJob) };
    let head = &HEADS[job.slot];
    let report = ViolationReport {
        violation: job.violation,
        block: Some(history(job.slot)),
        access: Some(Stack::from_frames(
            crate::stack::thread_id(),
            &job.frames[..job.len],
            job.depth,
        )),
        fault: Some((job.address, job.sig)),
    };
    let fatal: FatalFn =
        // SAFETY: `fatal` was stored from a `FatalFn` when the slot was filled (Release on `state`, Acquire in `find`).
        unsafe { core::mem::transmute::<usize, FatalFn>(head.fatal.load(Ordering::Relaxed)) };
    fatal(&report)
}

/// Size of the stack the handler builds its report on.
const REPORT_STACK: usize = 1 << 20;
/// The top of the report stack (mapped when the handler is installed), or 0.
static REPORT_STACK_TOP: AtomicUsize = AtomicUsize::new(0);

fn map_report_stack() {
    let page = page_size();
    // SAFETY: a fresh anonymous mapping, its lowest page made a guard page.
    unsafe {
        let base = libc::mmap(
            core::ptr::null_mut(),
            page + REPORT_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if base != libc::MAP_FAILED {
            libc::mprotect(base, page, libc::PROT_NONE);
            REPORT_STACK_TOP.store(base as usize + page + REPORT_STACK, Ordering::Release);
        }
    }
}

/// Calls `f(arg)` on the report stack (x86-64 Linux), or in place when there is none.
///
/// # Safety
/// `f` may be called with `arg`; only one thread at a time uses the report stack.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn on_report_stack(f: extern "C" fn(*mut libc::c_void), arg: *mut libc::c_void) {
    let top = REPORT_STACK_TOP.load(Ordering::Acquire) & !15;
    if top == 0 {
        f(arg);
        return;
    }
    // SAFETY: `top` is the 16-byte-aligned top of a mapped, otherwise unused stack; the current stack pointer is kept in callee-saved r12 across the call and restored after it; the call follows the C ABI (`clobber_abi`).
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// Calls `f(arg)` in place (no report stack on this target).
///
/// # Safety
/// `f` may be called with `arg`.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
unsafe fn on_report_stack(f: extern "C" fn(*mut libc::c_void), arg: *mut libc::c_void) {
    f(arg)
}

/// Passes a fault that is not ours to the handler installed before ours.
///
/// # Safety
/// The arguments of a signal handler invocation for `sig`, one of [`SIGNALS`].
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let i = SIGNALS.iter().position(|&s| s == sig).unwrap_or(0);
    // SAFETY: `OLD` was filled before this handler was installed and is read-only now.
    let old = unsafe { (*OLD.0.get())[i].assume_init_ref() };
    let handler = old.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default action and return: the faulting instruction runs again and
        // the signal is raised again, now with the default action (core dump).
        // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask and no flags.
        unsafe {
            let mut default: libc::sigaction = core::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, core::ptr::null_mut());
        }
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            // SAFETY: with SA_SIGINFO, `sa_sigaction` is a three-argument handler.
            unsafe { core::mem::transmute(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: without SA_SIGINFO, `sa_sigaction` is a one-argument handler.
        let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(handler) };
        f(sig);
    }
}

// ---------------------------------------------------------------------------------------
// Alternate signal stacks.

const ALT_STACK: usize = 256 << 10;

struct AltStack {
    /// The mapping (a guard page, then the stack); 0 when none was made, 1 when the thread's
    /// own is big enough.
    base: Cell<usize>,
}

impl Drop for AltStack {
    fn drop(&mut self) {
        let base = self.base.get();
        if base <= 1 {
            return;
        }
        let page = page_size();
        // SAFETY: the query writes `current`; disabling is done only when the installed stack is still ours; then our mapping is unmapped once.
        unsafe {
            let mut current: libc::stack_t = core::mem::zeroed();
            libc::sigaltstack(core::ptr::null(), &mut current);
            if current.ss_sp as usize == base + page && current.ss_flags & libc::SS_ONSTACK == 0 {
                let disable = libc::stack_t {
                    ss_sp: core::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&disable, core::ptr::null_mut());
            }
            libc::munmap(base as *mut libc::c_void, page + ALT_STACK);
        }
    }
}

thread_local! {
    static ALT: AltStack = const { AltStack { base: Cell::new(0) } };
}

/// Gives the calling thread an alternate signal stack big enough for a report, unless it
/// already has one.
pub(crate) fn ensure_alt_stack() {
    let _ = ALT.try_with(|alt| {
        if alt.base.get() != 0 {
            return;
        }
        // SAFETY: queries and installs the calling thread's alternate stack; the new one is a fresh mapping that lives until the thread ends (`AltStack::drop`).
        unsafe {
            let mut current: libc::stack_t = core::mem::zeroed();
            libc::sigaltstack(core::ptr::null(), &mut current);
            if current.ss_flags & libc::SS_ONSTACK != 0 {
                return;
            }
            if current.ss_flags & libc::SS_DISABLE == 0 && current.ss_size >= ALT_STACK {
                alt.base.set(1);
                return;
            }
            let page = page_size();
            let base = libc::mmap(
                core::ptr::null_mut(),
                page + ALT_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return;
            }
            libc::mprotect(base, page, libc::PROT_NONE);
            let stack = libc::stack_t {
                ss_sp: (base as usize + page) as *mut libc::c_void,
                ss_flags: 0,
                ss_size: ALT_STACK,
            };
            if libc::sigaltstack(&stack, core::ptr::null_mut()) != 0 {
                libc::munmap(base, page + ALT_STACK);
                return;
            }
            alt.base.set(base as usize);
        }
    });
}
