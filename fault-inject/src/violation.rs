//! Memory-safety findings: what the scribbling allocator and the owner canaries report.
//!
//! The types live in `keepalloc-scribble` (so that keepalloc's C library can carry the
//! allocator without this crate); they are re-exported here unchanged. Their exit codes are
//! the ones of [`crate::report::exit`] (a test keeps the two lists equal).

pub use keepalloc_scribble::{Policy, Side, Violation, ViolationKind};
