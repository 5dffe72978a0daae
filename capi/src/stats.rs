//! The owner's counters for C: `keepalloc_get_stats` (the 0.1 struct, for ever) and
//! `keepalloc_get_stats_ex`, which lets the struct grow at its end without breaking a
//! program built against an older or a newer header.

use crate::backend::{chosen, with_provider};

/// `keepalloc_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepallocStats {
    /// Owners constructed (0 or 1).
    pub owners_constructed: u64,
    /// Init hooks of the default library called.
    pub init_attempts: u64,
    /// Init hooks of the default library that succeeded (0 or 1).
    pub init_successes: u64,
    /// Allocations through the owner.
    pub allocations: u64,
    /// Frees through the owner.
    pub deallocations: u64,
    /// Bytes live in the owner.
    pub live_bytes: u64,
    /// Most bytes ever live in the owner: exact for one thread, an upper bound when threads
    /// free what others allocated (the sum of the per-thread high-water marks).
    pub peak_bytes: u64,
}

/// The counters now (all zero before the first acquire).
fn now() -> KeepallocStats {
    let s = chosen()
        .map(|c| with_provider!(c, |p| p.stats()))
        .unwrap_or_default();
    KeepallocStats {
        owners_constructed: s.owners_constructed,
        init_attempts: s.init_attempts,
        init_successes: s.init_successes,
        allocations: s.allocator.allocations,
        deallocations: s.allocator.deallocations,
        live_bytes: s.allocator.live_bytes as u64,
        peak_bytes: s.allocator.peak_bytes as u64,
    }
}

/// See `keepalloc.h`.
///
/// # Safety
/// `out` is NULL or valid for a write of `keepalloc_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_get_stats(out: *mut KeepallocStats) {
    if out.is_null() {
        return;
    }
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { out.write(now()) };
}

/// See `keepalloc.h`: fills the first `min(size, size_of::<KeepallocStats>())` bytes, zeroes
/// the rest of `size`, returns the bytes filled.
///
/// # Safety
/// `out` is NULL or valid for writes of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_get_stats_ex(out: *mut KeepallocStats, size: usize) -> usize {
    if out.is_null() {
        return 0;
    }
    let stats = now();
    let filled = size.min(size_of::<KeepallocStats>());
    let out = out.cast::<u8>();
    // Byte copies: an older caller's struct may end inside a field's alignment.
    // SAFETY: `out` is valid for `size` bytes (the caller's promise), `filled <= size`, and `stats` is a local of at least `filled` bytes, so the ranges do not overlap.
    unsafe {
        core::ptr::copy_nonoverlapping((&raw const stats).cast::<u8>(), out, filled);
        core::ptr::write_bytes(out.add(filled), 0, size - filled);
    }
    filled
}
