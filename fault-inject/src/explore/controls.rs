//! The explorer's negative controls (feature `explore-controls`, never in a default build):
//! keepalloc's f32 FC operator driven by code with a bug on its failure path, as a runtime
//! might have one. Each must be found by `cargo xtask fault-explore` with its own signature.
//!
//! * `control-leak`: the operator (its packed weights from the table) and then a workspace
//!   from the table; when the workspace allocation fails, the operator is forgotten instead
//!   of dropped, so its packed weights leak. Signature: failing the workspace site (in
//!   `controls::leak`) is a `leak` of exactly the packed-weights site.
//! * `control-null`: a workspace from the table, written without a NULL check. Signature:
//!   failing the workspace site is a `crash` (SIGSEGV) whose faulting stack starts in
//!   `control_null_workspace`.

use keepalloc_allocators::AllocatorTable;
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc};

use super::Outcome;

const K: usize = 64;
const N: usize = 48;
const WORKSPACE: usize = 4096;

fn operator(table: &'static AllocatorTable) -> Result<FullyConnected, String> {
    let w: Vec<f32> = (0..K * N).map(|i| (i % 7) as f32 * 0.125).collect();
    FullyConnected::create_with_table(table, &FullyConnectedDesc::new(K, N, &w))
        .map_err(|e| e.to_string())
}

/// `control-leak`.
pub fn leak(table: &'static AllocatorTable) -> Outcome {
    Outcome::from(operator(table).and_then(|op| {
        // SAFETY: a complete table; the block is freed below through the same table.
        let ws = unsafe { table.aligned_alloc(64, WORKSPACE) };
        if ws.is_null() {
            // The bug: the failure path forgets the operator and its packed weights.
            core::mem::forget(op);
            return Err("workspace: out of memory".into());
        }
        // SAFETY: `ws` came from this table's aligned_alloc.
        unsafe { table.aligned_free(ws) };
        Ok(true)
    }))
}

/// `control-null`.
pub fn null(table: &'static AllocatorTable) -> Outcome {
    Outcome::from(operator(table).map(|op| {
        control_null_workspace(table);
        drop(op);
        true
    }))
}

#[inline(never)]
fn control_null_workspace(table: &'static AllocatorTable) {
    // SAFETY: a complete table. The bug: the block is written without checking for NULL (a volatile write, so the NULL store is not optimized into something else).
    unsafe {
        let ws = table.aligned_alloc(64, WORKSPACE);
        core::ptr::write_volatile(ws, 1);
        table.aligned_free(ws);
    }
}
