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
    /// Allocates `len` floats from `table` (one call to `aligned_allocate`) and zeroes them;
    /// with `huge_pages`, first asks the kernel to back the whole huge pages inside the
    /// block with transparent huge pages (see `advise_huge_pages`).
    pub(crate) fn zeroed(
        table: &AllocatorTable,
        len: usize,
        huge_pages: bool,
    ) -> Result<TableBuf, KernelError> {
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
        if huge_pages {
            // Before the first write, so that the zeroing faults the pages in huge.
            // SAFETY: the block was just allocated for `bytes` bytes and is not shared yet.
            unsafe { advise_huge_pages(raw, bytes) };
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

/// Size of a transparent huge page (the PMD size of x86-64 Linux).
#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
const HUGE_PAGE: usize = 2 << 20;

/// The whole `HUGE_PAGE`-aligned pages inside `[block, block + bytes)`, as `(start, len)`;
/// `None` when the block holds no whole huge page.
#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
fn huge_page_interior(block: usize, bytes: usize) -> Option<(usize, usize)> {
    let start = block.checked_next_multiple_of(HUGE_PAGE)?;
    let end = block.checked_add(bytes)? / HUGE_PAGE * HUGE_PAGE;
    (end > start).then(|| (start, end - start))
}

/// `madvise(MADV_HUGEPAGE)` on the whole huge pages inside the block (nothing when it
/// holds none). The packed weights are read in full by every run; on 2 MiB pages a
/// stream through them takes one TLB entry per 2 MiB instead of per 4 KiB.
///
/// Advice only: it changes neither the contents, nor the protection, nor anything outside
/// the block, and the allocator keeps owning the memory. The flag stays on that address
/// range after the block is freed (the allocator may hand it out again, it then faults in
/// huge pages too). With THP set to `never`, or a kernel without THP, the call fails or is
/// ignored and the block is the same as without it, so its result is not looked at.
///
/// # Safety
/// `[block, block + bytes)` is a live block the caller owns and nobody else uses yet.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn advise_huge_pages(block: *mut u8, bytes: usize) {
    if let Some((start, len)) = huge_page_interior(block as usize, bytes) {
        // MADV_HUGEPAGE only sets how the kernel backs those pages: it neither frees nor
        // changes them, and touches no address outside the range.
        // SAFETY: `[start, start + len)` lies inside the caller's own block (the contract).
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    }
}

/// Transparent huge pages are a Linux x86-64 feature here: elsewhere, no advice.
///
/// # Safety
/// As the Linux version's: `[block, block + bytes)` is the caller's own live block.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
unsafe fn advise_huge_pages(_block: *mut u8, _bytes: usize) {}

impl Drop for TableBuf {
    fn drop(&mut self) {
        // SAFETY: the block came from this table's `aligned_allocate` and is freed once.
        unsafe { self.table.aligned_free(self.ptr.as_ptr().cast()) }
    }
}

#[cfg(test)]
mod tests {
    use super::{HUGE_PAGE, huge_page_interior};

    #[test]
    fn the_interior_is_the_whole_huge_pages_inside_the_block() {
        // Aligned at both ends: all of it.
        assert_eq!(
            huge_page_interior(4 * HUGE_PAGE, 3 * HUGE_PAGE),
            Some((4 * HUGE_PAGE, 3 * HUGE_PAGE))
        );
        // 64 bytes past a boundary, 4 MiB long: only the one page wholly inside.
        assert_eq!(
            huge_page_interior(HUGE_PAGE + 64, 2 * HUGE_PAGE),
            Some((2 * HUGE_PAGE, HUGE_PAGE))
        );
        // Just short of a whole page, or straddling a boundary: none.
        assert_eq!(huge_page_interior(HUGE_PAGE, HUGE_PAGE - 1), None);
        assert_eq!(huge_page_interior(HUGE_PAGE + 64, HUGE_PAGE + 1024), None);
        // At the top of the address space, no overflow.
        assert_eq!(huge_page_interior(usize::MAX - 100, 50), None);
    }
}
