//! [`TableAllocator`]: the other direction, any C allocator table used as a Rust
//! [`Allocator`](allocator_api2::alloc::Allocator).

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::AllocError;

use crate::raw::{block, dangling, move_block};
use crate::{AllocatorTable, Request, RequestAllocator, TABLE_MIN_ALIGN};

/// Uses any [`AllocatorTable`] (one of ours, or a foreign `xnn_allocator`) as an
/// [`Allocator`](allocator_api2::alloc::Allocator).
///
/// Requests aligned to at most [`TABLE_MIN_ALIGN`] go through `allocate` / `reallocate` /
/// `deallocate`; stricter ones through `aligned_allocate` / `aligned_deallocate` (and are
/// moved by copy when they grow, since `reallocate` only promises malloc alignment). An empty
/// slot in the table is an allocation failure.
#[derive(Clone, Copy, Debug)]
pub struct TableAllocator<'a> {
    table: &'a AllocatorTable,
}

impl<'a> TableAllocator<'a> {
    /// Uses `table`.
    ///
    /// # Safety
    /// The table's functions must honour the `xnn_allocator` contract for as long as this
    /// value (or a copy) is used; every table from [`AllocatorTable::for_allocator`] does.
    pub unsafe fn new(table: &'a AllocatorTable) -> Self {
        TableAllocator { table }
    }

    /// The table.
    pub fn table(&self) -> &'a AllocatorTable {
        self.table
    }

    fn small(layout: Layout) -> bool {
        layout.align() <= TABLE_MIN_ALIGN
    }

    fn alloc(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        let t = self.table;
        // SAFETY: the table is sound (constructor's promise).
        let p = unsafe {
            if Self::small(layout) {
                t.allocate().ok_or(AllocError)?(t.context(), layout.size())
            } else {
                t.aligned_allocate().ok_or(AllocError)?(t.context(), layout.align(), layout.size())
            }
        };
        block(p.cast(), layout.size())
    }

    /// A resize through `reallocate` when both layouts suit it and the new bytes need not be
    /// zeroed, else allocate (zeroed when asked), copy and free.
    ///
    /// # Safety
    /// `ptr` is live with `old`, from this allocator.
    unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zeroed: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let t = self.table;
        let by_realloc = old.size() != 0 && new.size() != 0 && Self::small(old) && Self::small(new);
        if by_realloc && !zeroed {
            let realloc = t.reallocate().ok_or(AllocError)?;
            // SAFETY: `ptr` is a live `allocate` block; `reallocate` keeps its contents.
            let p = unsafe { realloc(t.context(), ptr.as_ptr().cast(), new.size()) };
            return block(p.cast(), new.size());
        }
        // SAFETY: `ptr` is a live block of this allocator with `old` (the caller's promise).
        unsafe { move_block(self, ptr, old, new, zeroed) }
    }
}

// SAFETY: `TableAllocator::new`'s caller vouched that the table follows the xnn_allocator
// contract, which gives blocks of the size and alignment asked for, valid until freed, and a
// `reallocate` that keeps contents; zero-sized layouts never reach the table, and zeroed
// blocks are zeroed here.
unsafe impl RequestAllocator for TableAllocator<'_> {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        let Some((ptr, old)) = request.resized() else {
            let fresh = self.alloc(request.layout())?;
            if request.zeroed() {
                // SAFETY: the fresh block is `fresh.len()` bytes, ours to write.
                unsafe { fresh.cast::<u8>().as_ptr().write_bytes(0, fresh.len()) };
            }
            return Ok(fresh);
        };
        // SAFETY: the caller's promises for a resize are `resize`'s.
        unsafe { self.resize(ptr, old, request.layout(), request.zeroed()) }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        let t = self.table;
        let free = if Self::small(layout) {
            t.deallocate()
        } else {
            t.aligned_deallocate()
        };
        if let Some(free) = free {
            // SAFETY: `ptr` came from the matching allocate slot (the caller's promise).
            unsafe { free(t.context(), ptr.as_ptr().cast()) }
        }
    }
}
crate::allocator_from_requests!(TableAllocator<'_>);
