//! The C allocator table: XNNPACK's `struct xnn_allocator`, field for field.

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind};

use allocator_api2::alloc::{AllocError, Allocator};

/// `allocate(context, size)`.
pub type AllocateFn = unsafe extern "C" fn(context: *mut c_void, size: usize) -> *mut c_void;
/// `reallocate(context, pointer, size)`.
pub type ReallocateFn =
    unsafe extern "C" fn(context: *mut c_void, pointer: *mut c_void, size: usize) -> *mut c_void;
/// `deallocate(context, pointer)` and `aligned_deallocate(context, pointer)`.
pub type DeallocateFn = unsafe extern "C" fn(context: *mut c_void, pointer: *mut c_void);
/// `aligned_allocate(context, alignment, size)`.
pub type AlignedAllocateFn =
    unsafe extern "C" fn(context: *mut c_void, alignment: usize, size: usize) -> *mut c_void;

/// The alignment of every block the table's `allocate` and `reallocate` return (glibc
/// `malloc`'s, and what C code expects of `max_align_t`).
pub const TABLE_MIN_ALIGN: usize = 16;

/// A C allocator callback table with exactly the layout of XNNPACK's `struct xnn_allocator`
/// (and `keepalloc_table` in `keepalloc.h`).
///
/// The contract, which [`AllocatorTable::for_allocator`] implements and the conformance suite
/// checks:
/// * every function returns NULL on failure, never aborts, and never lets a panic cross into
///   C (a panicking backend is reported as NULL; a panic while freeing aborts the process
///   with a message, since there is no way to report it);
/// * `allocate` and `reallocate` return blocks aligned to [`TABLE_MIN_ALIGN`];
///   `aligned_allocate` returns blocks aligned to `alignment`, which must be a power of two
///   (anything else, zero included, returns NULL);
/// * `reallocate(ctx, NULL, n)` allocates; a failed `reallocate` returns NULL and leaves the
///   old block valid and unchanged; a block keeps its alignment through `reallocate`;
/// * `deallocate(ctx, NULL)` and `aligned_deallocate(ctx, NULL)` do nothing;
/// * size 0 allocates a real, unique, non-NULL block with no usable bytes, which must be
///   freed like any other (glibc's `malloc(0)` behaviour); `reallocate(ctx, p, 0)` likewise
///   returns such a block (it does not free);
/// * a size that would overflow once the per-block header is added returns NULL;
/// * the two free functions are interchangeable: every block records its own size and
///   alignment in a 16-byte header just before the pointer handed out, because the C API
///   frees without a size.
///
/// The struct is `Copy`: the consuming library copies it once, as `xnn_initialize` does, and
/// what must stay alive is what `context` points to.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocatorTable {
    /// Opaque pointer passed as the first argument to every function.
    pub context: *mut c_void,
    /// General allocation ([`TABLE_MIN_ALIGN`]-aligned).
    pub allocate: Option<AllocateFn>,
    /// Resize, keeping contents; `NULL` pointer allocates.
    pub reallocate: Option<ReallocateFn>,
    /// Frees a block from `allocate` or `reallocate`; NULL is a no-op.
    pub deallocate: Option<DeallocateFn>,
    /// Allocation with a power-of-two alignment.
    pub aligned_allocate: Option<AlignedAllocateFn>,
    /// Frees a block from `aligned_allocate`; NULL is a no-op.
    pub aligned_deallocate: Option<DeallocateFn>,
}

/// Tables are equal when [`same_as`](AllocatorTable::same_as) says so (address equality).
impl PartialEq for AllocatorTable {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}
impl Eq for AllocatorTable {}

// SAFETY: the table is plain data. Tables built by `for_allocator` point at an `A: Sync`
// that lives forever; a table from elsewhere must, like any `xnn_allocator`, be callable from
// any thread (XNNPACK calls it from whichever thread creates or deletes an operator).
unsafe impl Send for AllocatorTable {}
// SAFETY: as above.
unsafe impl Sync for AllocatorTable {}

/// Size of the per-block header that records `(size, alignment)`.
const HEADER: usize = 16;

#[repr(C)]
struct Header {
    size: usize,
    align: usize,
}

impl AllocatorTable {
    /// Builds the table for `allocator`, which must live for the rest of the process because
    /// a C library may keep the context pointer that long.
    pub const fn for_allocator<A: Allocator + Sync>(allocator: &'static A) -> Self {
        AllocatorTable {
            context: allocator as *const A as *mut c_void,
            allocate: Some(table_allocate::<A>),
            reallocate: Some(table_reallocate::<A>),
            deallocate: Some(table_deallocate::<A>),
            aligned_allocate: Some(table_aligned_allocate::<A>),
            aligned_deallocate: Some(table_deallocate::<A>),
        }
    }

    /// True when every function pointer is set (a table a library can use).
    pub fn is_complete(&self) -> bool {
        self.allocate.is_some()
            && self.reallocate.is_some()
            && self.deallocate.is_some()
            && self.aligned_allocate.is_some()
            && self.aligned_deallocate.is_some()
    }

    /// True when `self` and `other` hold the same context and the same function addresses
    /// (what a C library that compares tables sees; two tables built by `for_allocator` for
    /// the same allocator compare equal).
    pub fn same_as(&self, other: &AllocatorTable) -> bool {
        self.addresses() == other.addresses()
    }

    fn addresses(&self) -> [usize; 6] {
        [
            self.context as usize,
            self.allocate.map_or(0, |f| f as usize),
            self.reallocate.map_or(0, |f| f as usize),
            self.deallocate.map_or(0, |f| f as usize),
            self.aligned_allocate.map_or(0, |f| f as usize),
            self.aligned_deallocate.map_or(0, |f| f as usize),
        ]
    }

    /// Calls `aligned_allocate(context, alignment, size)`; NULL when the slot is empty.
    ///
    /// # Safety
    /// The table must honour the `xnn_allocator` contract (any table from `for_allocator`
    /// does).
    #[inline]
    pub unsafe fn aligned_alloc(&self, alignment: usize, size: usize) -> *mut u8 {
        match self.aligned_allocate {
            // SAFETY: the caller vouches for the table.
            Some(f) => unsafe { f(self.context, alignment, size).cast() },
            None => ptr::null_mut(),
        }
    }

    /// Calls `aligned_deallocate(context, pointer)`.
    ///
    /// # Safety
    /// `pointer` is NULL or a live block from this table's `aligned_allocate`.
    #[inline]
    pub unsafe fn aligned_free(&self, pointer: *mut u8) {
        if let Some(f) = self.aligned_deallocate {
            // SAFETY: the caller vouches for the table and the pointer.
            unsafe { f(self.context, pointer.cast()) }
        }
    }
}

/// Runs `f`, turning a panic into `on_panic` so that none crosses into C.
#[inline]
fn no_unwind<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// The layout of the whole block (header + padding + user bytes) for a user request.
#[inline]
fn block_layout(size: usize, align: usize) -> Option<(Layout, usize)> {
    if !align.is_power_of_two() {
        return None;
    }
    let align = align.max(TABLE_MIN_ALIGN);
    // The header sits in the `pad` bytes before the user pointer; `pad >= HEADER`.
    let pad = align.max(HEADER);
    let total = size.checked_add(pad)?;
    Layout::from_size_align(total, align).ok().map(|l| (l, pad))
}

/// # Safety
/// `context` points to a live `A`.
unsafe fn alloc_block<A: Allocator>(
    context: *mut c_void,
    align: usize,
    size: usize,
) -> *mut c_void {
    let Some((layout, pad)) = block_layout(size, align) else {
        return ptr::null_mut();
    };
    // SAFETY: the table was built by `for_allocator::<A>`, so `context` is a `&'static A`.
    let allocator = unsafe { &*(context as *const A) };
    let Ok(block) = allocator.allocate(layout) else {
        return ptr::null_mut();
    };
    let base = block.as_ptr().cast::<u8>();
    // The block is `pad + size` bytes with `pad >= HEADER`, aligned to at least 16,
    // so `user - HEADER` is in bounds and aligned for `Header`.
    // SAFETY: `user - HEADER` and `user` lie inside the fresh block.
    unsafe {
        let user = base.add(pad);
        user.sub(HEADER).cast::<Header>().write(Header {
            size,
            align: layout.align(),
        });
        user.cast()
    }
}

/// Recovers the block layout of a user pointer from its header.
///
/// # Safety
/// `user` is a live block returned by this module.
#[inline]
unsafe fn block_of(user: *mut c_void) -> (NonNull<u8>, Layout, usize) {
    // SAFETY: every user pointer has its header in the HEADER bytes before it.
    let header = unsafe { user.cast::<u8>().sub(HEADER).cast::<Header>().read() };
    let pad = header.align.max(HEADER);
    // SAFETY: the header was written from a layout that `from_size_align` accepted.
    let layout = unsafe { Layout::from_size_align_unchecked(header.size + pad, header.align) };
    // SAFETY: `user - pad` is the block base, non-null since it came from an allocator.
    let base = unsafe { NonNull::new_unchecked(user.cast::<u8>().sub(pad)) };
    (base, layout, pad)
}

unsafe extern "C" fn table_allocate<A: Allocator + Sync>(
    context: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: a table built by `for_allocator::<A>` is only called with its own context.
    no_unwind(ptr::null_mut(), || unsafe {
        alloc_block::<A>(context, TABLE_MIN_ALIGN, size)
    })
}

unsafe extern "C" fn table_aligned_allocate<A: Allocator + Sync>(
    context: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: as for `table_allocate`.
    no_unwind(ptr::null_mut(), || unsafe {
        alloc_block::<A>(context, alignment, size)
    })
}

unsafe extern "C" fn table_reallocate<A: Allocator + Sync>(
    context: *mut c_void,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    if pointer.is_null() {
        // SAFETY: forwarding the same context.
        return unsafe { table_allocate::<A>(context, size) };
    }
    no_unwind(ptr::null_mut(), || {
        // SAFETY: `pointer` is a live block of this table (the C caller's promise).
        let (base, old, pad) = unsafe { block_of(pointer) };
        let Some((new, new_pad)) = block_layout(size, old.align()) else {
            return ptr::null_mut();
        };
        debug_assert_eq!(pad, new_pad);
        // SAFETY: the table's context is a `&'static A`.
        let allocator = unsafe { &*(context as *const A) };
        // `base` came from `allocator` with `old`; the alignment is unchanged and the
        // size decides grow or shrink. On failure the old block is untouched.
        // SAFETY: `base` is a live block of `allocator` with layout `old`.
        let moved = unsafe {
            if new.size() >= old.size() {
                allocator.grow(base, old, new)
            } else {
                allocator.shrink(base, old, new)
            }
        };
        let Ok(block) = moved else {
            return ptr::null_mut();
        };
        // SAFETY: the header moved with the block; rewrite its size. `pad` is unchanged.
        unsafe {
            let user = block.as_ptr().cast::<u8>().add(pad);
            user.sub(HEADER).cast::<Header>().write(Header {
                size,
                align: old.align(),
            });
            user.cast()
        }
    })
}

unsafe extern "C" fn table_deallocate<A: Allocator + Sync>(
    context: *mut c_void,
    pointer: *mut c_void,
) {
    if pointer.is_null() {
        return;
    }
    let freed = catch_unwind(AssertUnwindSafe(|| {
        // `pointer` is a live block of this table (the C caller's promise), and the
        // context is a `&'static A`.
        // SAFETY: `pointer` is a live block of this table and `context` a `&'static A`.
        unsafe {
            let (base, layout, _) = block_of(pointer);
            (*(context as *const A)).deallocate(base, layout);
        }
    }));
    if freed.is_err() {
        // There is no status to return from a free, and unwinding into C is undefined.
        eprintln!("keepalloc: the allocator panicked while freeing {pointer:p}; aborting");
        std::process::abort();
    }
}

/// Uses any [`AllocatorTable`] (one of ours, or a foreign `xnn_allocator`) as an
/// [`Allocator`].
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
}

// SAFETY: `TableAllocator::new`'s caller vouched that the table follows the xnn_allocator
// contract, which gives blocks of the size and alignment asked for, valid until freed, and a
// `reallocate` that keeps contents; zero-sized layouts never reach the table.
unsafe impl Allocator for TableAllocator<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(crate::raw::dangling(layout));
        }
        let t = self.table;
        // SAFETY: the table is sound (constructor's promise).
        let p = unsafe {
            if Self::small(layout) {
                t.allocate.ok_or(AllocError)?(t.context, layout.size())
            } else {
                t.aligned_allocate.ok_or(AllocError)?(t.context, layout.align(), layout.size())
            }
        };
        NonNull::new(p.cast::<u8>())
            .map(|p| NonNull::slice_from_raw_parts(p, layout.size()))
            .ok_or(AllocError)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        let t = self.table;
        let free = if Self::small(layout) {
            t.deallocate
        } else {
            t.aligned_deallocate
        };
        if let Some(free) = free {
            // SAFETY: `ptr` came from the matching allocate slot (the caller's promise).
            unsafe { free(t.context, ptr.as_ptr().cast()) }
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises for `grow` are `resize`'s.
        unsafe { self.resize(ptr, old, new) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises for `shrink` are `resize`'s.
        unsafe { self.resize(ptr, old, new) }
    }
}

impl TableAllocator<'_> {
    /// # Safety
    /// `ptr` is live with `old`, from this allocator.
    unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let t = self.table;
        if old.size() != 0 && new.size() != 0 && Self::small(old) && Self::small(new) {
            let realloc = t.reallocate.ok_or(AllocError)?;
            // SAFETY: `ptr` is a live `allocate` block; `reallocate` keeps its contents.
            let p = unsafe { realloc(t.context, ptr.as_ptr().cast(), new.size()) };
            return NonNull::new(p.cast::<u8>())
                .map(|p| NonNull::slice_from_raw_parts(p, new.size()))
                .ok_or(AllocError);
        }
        let fresh = self.allocate(new)?;
        // SAFETY: both blocks are live and distinct; copy what both hold, then free the old.
        unsafe {
            ptr::copy_nonoverlapping(
                ptr.as_ptr(),
                fresh.as_ptr().cast::<u8>(),
                old.size().min(new.size()),
            );
            self.deallocate(ptr, old);
        }
        Ok(fresh)
    }
}
