//! The process-wide `initialize`: check the hardware, then copy the table once, for good.

use std::sync::OnceLock;

use keepalloc_allocators::AllocatorTable;

use crate::error::KernelError;
use crate::isa;

/// The copy of the first table passed to a successful [`initialize`]. `OnceLock` gives the
/// guarantees the contract needs: exactly one of many racing first callers runs the copy,
/// the others wait for it and then see it, and nothing here allocates.
static CAPTURED: OnceLock<AllocatorTable> = OnceLock::new();

/// Initializes the library with the allocator table every operator will allocate through,
/// as `xnn_initialize` does.
///
/// In order:
/// 1. the hardware check: the instruction set is chosen ([`isa::selected`]); a
///    `KEEPALLOC_KERNELS_ISA` (or `KEEPALLOC_KERNELS_DOT_ISA`) that names an unknown ISA or
///    one this CPU lacks is an error that captures nothing and can be retried;
/// 2. a table with any NULL function slot is [`KernelError::InvalidTable`] and captures
///    nothing;
/// 3. the first call that gets here copies `*table` (by value: what must stay alive is
///    what its `context` points to, which `&'static` promises for the table itself and the
///    `xnn_allocator` contract asks of the context) and keeps it for the life of the
///    process. Of many concurrent first calls exactly one copies; the others wait and then
///    compare;
/// 4. a later call with an equal table (same context, same functions) succeeds; with a
///    different one it returns [`KernelError::AlreadyInitialized`] and changes nothing.
///
/// ```
/// use keepalloc_allocators::{AllocatorTable, System};
/// static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);
/// keepalloc_kernels::initialize(&TABLE).unwrap();
/// assert_eq!(keepalloc_kernels::captured_table(), Some(TABLE));
/// ```
pub fn initialize(table: &'static AllocatorTable) -> Result<(), KernelError> {
    isa::selected()?;
    crate::lowp::forced()?;
    if !table.is_complete() {
        return Err(KernelError::InvalidTable);
    }
    let mut copied = false;
    let captured = CAPTURED.get_or_init(|| {
        copied = true;
        *table
    });
    if copied || captured.same_as(table) {
        Ok(())
    } else {
        Err(KernelError::AlreadyInitialized)
    }
}

/// The table captured by the first successful [`initialize`], if any (a copy: its
/// `context` is the raw pointer the library keeps for the life of the process).
pub fn captured_table() -> Option<AllocatorTable> {
    CAPTURED.get().copied()
}

/// The captured table by reference, for operators.
pub(crate) fn captured() -> Result<&'static AllocatorTable, KernelError> {
    CAPTURED.get().ok_or(KernelError::Uninitialized)
}
