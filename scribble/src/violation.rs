//! Memory-safety findings: what the scribbling allocator, its guard pages and the owner
//! canaries of keepalloc's fault injection report.

use core::fmt;

/// Which side of a block a red zone is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The red zone before the first byte handed out (an underflow).
    Before,
    /// The red zone after the last byte handed out (an overflow into the slack).
    After,
}

/// What a faulting instruction did, when the CPU says (x86-64 reports it; elsewhere it is
/// [`Access::Unknown`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A read.
    Read,
    /// A write.
    Write,
    /// Not known.
    Unknown,
}

impl Access {
    /// `READ`, `WRITE` or `ACCESS`, as ASan prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Access::Read => "READ",
            Access::Write => "WRITE",
            Access::Unknown => "ACCESS",
        }
    }
}

/// What was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A block was freed twice (it was still in quarantine when freed again).
    DoubleFree,
    /// A pointer that is not a live block was freed (never returned by this allocator, an
    /// interior pointer, or freed so long ago that it already left quarantine).
    InvalidFree,
    /// A live block was freed with a different size or alignment than it was allocated with.
    LayoutMismatch {
        /// Size it was allocated with.
        allocated_size: usize,
        /// Alignment it was allocated with.
        allocated_align: usize,
        /// Alignment it was freed with (its size is the violation's `size`).
        freed_align: usize,
    },
    /// A byte of a red zone was changed: someone wrote outside the block.
    RedZoneOverwrite {
        /// Before or after the block.
        side: Side,
        /// Offset of the first changed byte within that red zone.
        offset: usize,
        /// The byte found there.
        found: u8,
    },
    /// A byte of a freed block no longer holds the free fill: someone wrote after free.
    WriteAfterFree {
        /// Offset of the first changed byte within the block.
        offset: usize,
        /// The byte found there.
        found: u8,
    },
    /// An owner was used after it was freed: its canary reads as the free fill.
    UseAfterFree {
        /// The canary word found.
        found: u64,
    },
    /// An owner's canary is neither intact nor the free fill (reused or corrupted memory).
    CanaryDead {
        /// The canary word found.
        found: u64,
    },
    /// The library's context holds a live owner, but not the one it captured: the owner was
    /// rebuilt in place (same address, new construction).
    OwnerRebuilt {
        /// The serial of the owner the library captured.
        captured: u64,
        /// The serial found at the captured context now.
        found: u64,
    },
    /// A callback ran for a live owner at another address than the one the library
    /// captured: two owners are in use (e.g. two libraries captured different ones).
    ForeignOwner {
        /// The serial of the owner the library captured.
        captured: u64,
        /// The serial of the owner the callback ran for.
        found: u64,
    },
    /// Guard-page mode: an instruction read or wrote a guarded block after it was freed
    /// (found at the faulting instruction).
    GuardUseAfterFree {
        /// Read or write.
        access: Access,
        /// Offset of the faulting address from the block's start (negative before it).
        offset: isize,
    },
    /// Guard-page mode: an instruction touched the guard page before or after a live guarded
    /// block (found at the faulting instruction).
    GuardOutOfBounds {
        /// Read or write.
        access: Access,
        /// Before (underflow) or after (overflow past the slack).
        side: Side,
        /// How far out: after the end, 0 is the byte right after the last one; before the
        /// start, 1 is the byte right before the first one.
        distance: usize,
    },
}

impl ViolationKind {
    /// A short, stable, kebab-case name for reports and JSON (`double-free`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            ViolationKind::DoubleFree => "double-free",
            ViolationKind::InvalidFree => "invalid-free",
            ViolationKind::LayoutMismatch { .. } => "layout-mismatch",
            ViolationKind::RedZoneOverwrite {
                side: Side::Before, ..
            } => "red-zone-before",
            ViolationKind::RedZoneOverwrite {
                side: Side::After, ..
            } => "red-zone-after",
            ViolationKind::WriteAfterFree { .. } => "write-after-free",
            ViolationKind::UseAfterFree { .. } => "use-after-free",
            ViolationKind::CanaryDead { .. } => "canary-dead",
            ViolationKind::OwnerRebuilt { .. } => "owner-rebuilt",
            ViolationKind::ForeignOwner { .. } => "identity-mismatch",
            ViolationKind::GuardUseAfterFree { .. } => "guard-use-after-free",
            ViolationKind::GuardOutOfBounds { .. } => "guard-out-of-bounds",
        }
    }

    /// The process exit code used when this violation ends a process (one per kind; see
    /// [`exit`]).
    pub const fn exit_code(&self) -> i32 {
        use crate::exit;
        match self {
            ViolationKind::UseAfterFree { .. } => exit::USE_AFTER_FREE,
            ViolationKind::CanaryDead { .. } => exit::CANARY_DEAD,
            ViolationKind::OwnerRebuilt { .. } => exit::OWNER_REBUILT,
            ViolationKind::ForeignOwner { .. } => exit::IDENTITY_MISMATCH,
            ViolationKind::WriteAfterFree { .. } => exit::WRITE_AFTER_FREE,
            ViolationKind::DoubleFree => exit::DOUBLE_FREE,
            ViolationKind::InvalidFree => exit::INVALID_FREE,
            ViolationKind::RedZoneOverwrite {
                side: Side::Before, ..
            } => exit::RED_ZONE_BEFORE,
            ViolationKind::RedZoneOverwrite {
                side: Side::After, ..
            } => exit::RED_ZONE_AFTER,
            ViolationKind::LayoutMismatch { .. } => exit::LAYOUT_MISMATCH,
            ViolationKind::GuardUseAfterFree { .. } => exit::GUARD_USE_AFTER_FREE,
            ViolationKind::GuardOutOfBounds { .. } => exit::GUARD_OUT_OF_BOUNDS,
        }
    }
}

/// One finding: where, how big, and what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What was wrong.
    pub kind: ViolationKind,
    /// The address of the block (the pointer handed out, or the owner) concerned.
    pub address: usize,
    /// The block's size in bytes (as allocated, or as passed to the bad free).
    pub size: usize,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {:#x} (size {})",
            self.kind.name(),
            self.address,
            self.size
        )?;
        match self.kind {
            ViolationKind::DoubleFree => write!(f, ": freed again while in quarantine"),
            ViolationKind::InvalidFree => write!(f, ": not a live block of this allocator"),
            ViolationKind::LayoutMismatch {
                allocated_size,
                allocated_align,
                freed_align,
            } => write!(
                f,
                ": allocated as {allocated_size} bytes align {allocated_align}, \
                 freed with align {freed_align}"
            ),
            ViolationKind::RedZoneOverwrite { offset, found, .. } => {
                write!(f, ": red-zone byte {offset} is {found:#04x}")
            }
            ViolationKind::WriteAfterFree { offset, found } => {
                write!(
                    f,
                    ": freed byte {offset} is {found:#04x}, not the free fill"
                )
            }
            ViolationKind::UseAfterFree { found } => {
                write!(
                    f,
                    ": owner canary reads {found:#018x} (freed and scribbled)"
                )
            }
            ViolationKind::CanaryDead { found } => {
                write!(
                    f,
                    ": owner canary reads {found:#018x} (corrupted or reused)"
                )
            }
            ViolationKind::OwnerRebuilt { captured, found } => write!(
                f,
                ": the library captured owner #{captured}, the context now holds owner #{found} \
                 (rebuilt in place)"
            ),
            ViolationKind::ForeignOwner { captured, found } => write!(
                f,
                ": the library captured owner #{captured}, but a callback ran for owner \
                 #{found} at another address"
            ),
            ViolationKind::GuardUseAfterFree { access, offset } => write!(
                f,
                ": {} of a freed guarded block at offset {offset} (the page is PROT_NONE)",
                access.name()
            ),
            ViolationKind::GuardOutOfBounds {
                access,
                side,
                distance,
            } => match side {
                Side::After => write!(
                    f,
                    ": {} {distance} bytes past the end of a guarded block (the guard page)",
                    access.name()
                ),
                Side::Before => write!(
                    f,
                    ": {} {distance} bytes before the start of a guarded block (the guard page)",
                    access.name()
                ),
            },
        }
    }
}

/// The process exit codes of violations that end a process
/// (`keepalloc_fault_inject::report::exit` re-exports them and adds the harness's own codes).
pub mod exit {
    /// An owner was used after free (its canary reads as the free fill).
    pub const USE_AFTER_FREE: i32 = 10;
    /// An owner's canary was corrupted.
    pub const CANARY_DEAD: i32 = 11;
    /// A freed block was written (found when it left quarantine).
    pub const WRITE_AFTER_FREE: i32 = 12;
    /// A block was freed twice.
    pub const DOUBLE_FREE: i32 = 13;
    /// A pointer that is not a live block was freed.
    pub const INVALID_FREE: i32 = 14;
    /// The red zone before a block was written.
    pub const RED_ZONE_BEFORE: i32 = 15;
    /// The red zone after a block was written.
    pub const RED_ZONE_AFTER: i32 = 16;
    /// A block was freed with another layout than it was allocated with.
    pub const LAYOUT_MISMATCH: i32 = 17;
    /// The library's context holds a live owner other than the one it captured.
    pub const OWNER_REBUILT: i32 = 18;
    /// Guard-page mode: a freed guarded block was read or written (a `SIGSEGV` or `SIGBUS`
    /// at the faulting instruction, turned into a report and this exit code).
    pub const GUARD_USE_AFTER_FREE: i32 = 19;
    /// Callers got different allocators, or the library captured another one.
    pub const IDENTITY_MISMATCH: i32 = 20;
    /// Guard-page mode: the guard page before or after a live guarded block was touched.
    pub const GUARD_OUT_OF_BOUNDS: i32 = 22;
}

/// What to do with a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Hand the report to the allocator's [`ScribbleHooks::fatal`](crate::ScribbleHooks::fatal),
    /// which ends the process (by default: the report on stderr, then exit with the kind's
    /// distinct code, [`ViolationKind::exit_code`]). The default: a use of freed memory must
    /// not be allowed to continue.
    Abort,
    /// Keep it in a list for a test to assert on, and carry on (the allocator leaves the
    /// offending block alone).
    Record,
}
