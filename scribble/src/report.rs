//! A violation with its "where": the block's allocation and free stacks and the stack of
//! the bad access, printed the way AddressSanitizer prints them.

use core::fmt;

use crate::stack::Stack;
use crate::violation::Violation;

/// Whether the block concerned was live or freed when the violation was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out and not freed.
    Live,
    /// Freed (in quarantine, or guarded and `PROT_NONE`).
    Freed,
}

/// What the allocator knows about the block a violation concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockHistory {
    /// The block's address (the pointer handed out).
    pub address: usize,
    /// Its size in bytes, as allocated.
    pub size: usize,
    /// True for a guarded block (alone on its pages).
    pub guarded: bool,
    /// Live or freed.
    pub state: BlockState,
    /// Where it was allocated (recorded with `stacks:both`).
    pub allocated: Option<Stack>,
    /// Where it was freed (recorded with `stacks:free` or `stacks:both`).
    pub freed: Option<Stack>,
}

/// A [`Violation`] with everything known about it: what [`ScribbleHooks::fatal`]
/// receives and `Scribble::reports` returns.
///
/// [`ScribbleHooks::fatal`]: crate::ScribbleHooks::fatal
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViolationReport {
    /// What, where, how big.
    pub violation: Violation,
    /// The block concerned, when the allocator knows it.
    pub block: Option<BlockHistory>,
    /// The stack of the bad access (the faulting instruction's thread in guard-page mode,
    /// the bad free's caller for a double or invalid free), when taken.
    pub access: Option<Stack>,
    /// The faulting address and signal, for a guard-page fault.
    pub fault: Option<(usize, i32)>,
}

impl ViolationReport {
    /// A report with nothing but the violation.
    pub fn bare(violation: Violation) -> Self {
        ViolationReport {
            violation,
            block: None,
            access: None,
            fault: None,
        }
    }

    /// True when there is more to say than the violation's one line.
    pub fn has_detail(&self) -> bool {
        self.block.is_some() || self.access.is_some() || self.fault.is_some()
    }
}

impl fmt::Display for ViolationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "=={}==ERROR: keepalloc-scribble: {}",
            std::process::id(),
            self.violation
        )?;
        if let Some((address, signal)) = self.fault {
            let name = match signal {
                libc::SIGSEGV => "SIGSEGV",
                libc::SIGBUS => "SIGBUS",
                _ => "signal",
            };
            writeln!(f, "{name} on address {address:#x}")?;
        }
        if let Some(access) = &self.access {
            let what = if self.fault.is_some() {
                "faulting access"
            } else {
                "detected"
            };
            writeln!(f, "{what} by thread T{} here:", access.thread)?;
            write!(f, "{access}")?;
        }
        if let Some(block) = &self.block {
            let state = match block.state {
                BlockState::Live => "live",
                BlockState::Freed => "freed",
            };
            let guarded = if block.guarded { "guarded " } else { "" };
            write!(
                f,
                "the {state} {guarded}block [{:#x}, {:#x}) of {} bytes",
                block.address,
                block.address + block.size,
                block.size
            )?;
            if let Some((address, _)) = self.fault {
                let (a, start, end) = (address, block.address, block.address + block.size);
                if a < start {
                    write!(f, "; the address is {} bytes before it", start - a)?;
                } else if a >= end {
                    write!(f, "; the address is {} bytes after it", a - end)?;
                } else {
                    write!(f, "; the address is {} bytes inside it", a - start)?;
                }
            }
            writeln!(f)?;
            match (&block.freed, block.state) {
                (Some(freed), _) => {
                    writeln!(f, "freed by thread T{} here:", freed.thread)?;
                    write!(f, "{freed}")?;
                }
                (None, BlockState::Freed) => writeln!(
                    f,
                    "free stack not recorded (set stacks:free or stacks:both)"
                )?,
                (None, BlockState::Live) => {}
            }
            match &block.allocated {
                Some(allocated) => {
                    writeln!(
                        f,
                        "previously allocated by thread T{} here:",
                        allocated.thread
                    )?;
                    write!(f, "{allocated}")?;
                }
                None => writeln!(f, "allocation stack not recorded (set stacks:both)")?,
            }
        }
        Ok(())
    }
}
