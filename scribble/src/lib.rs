//! Scribble: a debugging allocator a runtime engineer reaches for when chasing a use after
//! free, from Rust or (through keepalloc's C library and `KEEPALLOC_SCRIBBLE`) from C.
//!
//! [`Scribble`] wraps any allocator-api2 backend. Every block is filled on allocation (0xAA)
//! and on free (0x55), freed blocks wait in a bounded quarantine before their memory is
//! reused, and red zones around each block are checked at free and when the block leaves
//! quarantine: double frees, invalid frees, layout mismatches, red-zone overwrites and
//! writes after free become typed [`Violation`]s. On top of that:
//!
//! * **Stacks** ([`StackMode`]): where each block was allocated and freed, captured
//!   unsymbolized (return addresses, DWARF unwinding through the `backtrace` crate) and
//!   symbolized only when a report is printed, ASan's layout ([`ViolationReport`]).
//! * **Guard pages** ([`GuardConfig`]): one allocation in N sits alone on its pages between
//!   `PROT_NONE` guard pages, right-aligned (leaving [`XNN_EXTRA_BYTES`] of readable slack) or
//!   left-aligned, and becomes `PROT_NONE` when freed; reads and writes after free and
//!   overflows past the slack fault at the faulting instruction, and a `SIGSEGV`/`SIGBUS`
//!   handler turns the fault into a report with both stacks and exits with
//!   [`exit::GUARD_USE_AFTER_FREE`] or [`exit::GUARD_OUT_OF_BOUNDS`].
//! * **Run-time configuration**: [`ScribbleConfig::from_env_spec`] parses the
//!   `KEEPALLOC_SCRIBBLE` language (`guard:1/64,stacks:both,quarantine:8MiB`) with typed
//!   [`ConfigError`]s.
//! * **Hooks** ([`ScribbleHooks`]): how a fatal violation ends the process (default: report on
//!   stderr, `_exit` with the kind's code) and a last word on the configuration at first use.
//!
//! The crate depends only on `keepalloc-allocators`' vocabulary, `allocator-api2`, `libc` and
//! `backtrace`, so keepalloc's C library can carry it; keepalloc's fault injection
//! (`keepalloc-fault-inject`) re-exports it with hooks that print its harness result line.
//! Linux (and other Unix systems with `mmap` and `sigaction`) only.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

mod config;
mod frame_class;
mod guard;
mod hooks;
mod report;
mod scribble;
pub mod sites;
mod stack;
mod violation;

pub use config::{
    ConfigError, GuardAlign, GuardConfig, MAX_STACK_DEPTH, SPEC_KEYS, ScribbleConfig, StackMode,
    XNN_EXTRA_BYTES,
};
pub use guard::{GUARD_SLOTS, interrupted_pc};
pub use hooks::{DefaultHooks, ScribbleHooks, print_report};
pub use report::{BlockHistory, BlockState, ViolationReport};
pub use scribble::{MIN_RED_ZONE, Scribble, ScribbleStats};
pub use stack::{Stack, SymbolizedFrame};
pub use violation::{Access, Policy, Side, Violation, ViolationKind, exit};

/// The environment variable keepalloc's C library (and the fault harness) read a
/// [`ScribbleConfig`] spec from.
pub const ENV_VAR: &str = "KEEPALLOC_SCRIBBLE";
