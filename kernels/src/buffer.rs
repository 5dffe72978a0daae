//! Blocks from the allocator table, owned and freed through the same table.

use core::ptr::NonNull;

use keepalloc_allocators::AllocatorTable;

use crate::error::KernelError;

/// Alignment of every block this crate asks the table for (a cache line, one zmm register).
pub const ALIGNMENT: usize = 64;

/// `len` zero-initialised `f32`s from `table.aligned_allocate(64, ..)`, handed back to
/// `table.aligned_deallocate()` on drop.
pub(crate) struct TableBuf {
    ptr: NonNull<f32>,
    len: usize,
    table: AllocatorTable,
}

// SAFETY: the buffer is uniquely owned plain memory (shared only as `&[f32]` after it is
// filled); the table is, by the `xnn_allocator` contract, callable from any thread, so the
// block may be freed from whichever thread drops it.
unsafe impl Send for TableBuf {}
// SAFETY: `&TableBuf` only gives out `&[f32]`.
unsafe impl Sync for TableBuf {}

impl TableBuf {
    /// Allocates `len` floats from `table` (one call to `aligned_allocate`) and zeroes them.
    pub(crate) fn zeroed(table: &AllocatorTable, len: usize) -> Result<TableBuf, KernelError> {
        let bytes = len
            .checked_mul(size_of::<f32>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(KernelError::OutOfMemory { bytes: usize::MAX })?;
        // `initialize` and `create_with_table` only accept complete tables, which
        // follow the `xnn_allocator` contract (NULL on failure, `alignment`-aligned blocks).
        // SAFETY: only complete tables that keep the xnn_allocator contract get here.
        let raw = unsafe { table.aligned_alloc(ALIGNMENT, bytes) };
        let ptr = NonNull::new(raw.cast::<f32>()).ok_or(KernelError::OutOfMemory { bytes })?;
        let buf = TableBuf {
            ptr,
            len,
            table: *table,
        };
        if !(raw as usize).is_multiple_of(ALIGNMENT) {
            // A table that breaks its alignment promise cannot be used for SIMD panels.
            drop(buf);
            return Err(KernelError::InvalidTable);
        }
        // SAFETY: the block holds `bytes` writable bytes, aligned for f32.
        unsafe { core::ptr::write_bytes(raw, 0, bytes) };
        Ok(buf)
    }

    /// The floats.
    pub(crate) fn as_slice(&self) -> &[f32] {
        // SAFETY: `len` initialised floats, owned by `self`, no `&mut` outstanding.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The floats, mutably (only while packing, before the operator is shared).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: `len` initialised floats, uniquely borrowed through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The block as bytes, mutably (only while packing, before the operator is shared).
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len * 4` initialised bytes, uniquely borrowed through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.bytes()) }
    }

    /// The block's first byte (64-byte aligned).
    pub(crate) fn as_byte_ptr(&self) -> *const u8 {
        self.ptr.as_ptr().cast_const().cast()
    }

    /// Bytes taken from the table.
    pub(crate) fn bytes(&self) -> usize {
        self.len * size_of::<f32>()
    }
}

impl Drop for TableBuf {
    fn drop(&mut self) {
        // SAFETY: the block came from this table's `aligned_allocate` and is freed once.
        unsafe { self.table.aligned_free(self.ptr.as_ptr().cast()) }
    }
}
