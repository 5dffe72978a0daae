//! The face every variant shows the scenarios: [`Subject`], and the [`Identity`] of the
//! allocator one caller got.

use keepalloc_allocators::System;
use keepalloc_kernels::AllocatorTable;

use crate::failing::Failing;
use crate::scribble::Scribble;

/// The allocator one caller got: enough to compare callers and the library's capture.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    /// Address of the owner.
    pub owner: usize,
    /// The `context` of the table the caller got.
    pub context: usize,
    /// The table the caller got.
    pub table: &'static AllocatorTable,
    /// The owner's serial, from its [`Witness`](crate::witness::Witness) (written at
    /// construction, not by the provider).
    pub serial: u64,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.context == other.context && self.serial == other.serial
    }
}
impl Eq for Identity {}

/// A provider under test: keepalloc's or a negative control.
pub trait Subject: Sync + 'static {
    /// A per-session provider value (ONNX Runtime's execution provider).
    type Session: Send + Sync;

    /// Builds a session.
    fn session(&'static self) -> Self::Session;

    /// The session asks for the process-wide allocator (creating the owner, publishing it
    /// and initializing the library if that has not happened yet). `Err` is a failed
    /// initialization; a planned panic unwinds out of this call.
    fn acquire(&'static self, session: &Self::Session) -> Result<Identity, String>;

    /// The allocation-failure gate under the owner's memory (for `out-of-memory`), once an
    /// owner exists; `None` for a subject that does not run that scenario.
    fn faults(&'static self) -> Option<&'static Failing<Scribble<System>>> {
        None
    }

    /// Checks of the subject's own bookkeeping at the end of a scenario (leaks, quarantine);
    /// records findings.
    fn final_checks(&'static self) {}
}
