//! The C allocator table: XNNPACK's `struct xnn_allocator`, field for field, and the entry
//! points of the header table (the headerless ones are in `headerless.rs`; the other
//! direction, a table as a Rust allocator, is `table_allocator.rs`).

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::{self, NonNull};

use allocator_api2::alloc::Allocator;

use crate::SizelessFree;
use crate::headerless::{
    sizeless_aligned_allocate, sizeless_allocate, sizeless_deallocate, sizeless_reallocate,
};
// Only `if_sizeless!`'s fast paths call these, and they are compiled out under Miri and
// where no backend frees without a size.
#[cfg(all(
    not(miri),
    any(all(target_os = "linux", target_env = "gnu"), feature = "mimalloc")
))]
use crate::headerless::{sizeless_aligned_alloc, sizeless_alloc, sizeless_free, sizeless_realloc};
use crate::no_unwind::{abort_with, no_unwind, no_unwind_free};

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
/// * a size that would overflow (once the per-block header is added, where there is one)
///   returns NULL;
/// * the two free functions are interchangeable: the C API frees without a size, so either
///   the backend finds the size itself (a headerless table, below) or every block records its
///   own size and alignment in a 16-byte header just before the pointer handed out.
///
/// The struct is `Copy`: the consuming library copies it once, as `xnn_initialize` does, and
/// what must stay alive is what `context` points to.
///
/// # Soundness: every table keeps the contract
///
/// The fields are private. Safe code gets a table only from [`for_allocator`] (which builds
/// one that keeps the contract for a `&'static` allocator) or by copying an existing one;
/// building a table from raw function pointers and a raw context is
/// [`from_raw_parts`](AllocatorTable::from_raw_parts), an `unsafe fn` whose caller promises
/// the contract. So a `&AllocatorTable` in safe code is always a table that may be called
/// through (which is what lets `keepalloc_kernels::initialize` be a safe function), and a
/// foreign (C) table enters Rust only through an `unsafe` step.
///
/// # Headerless and header tables
///
/// A backend that frees without a size ([`SizelessFree`]: glibc `malloc`/`posix_memalign` +
/// `free`, mimalloc `mi_malloc`/`mi_malloc_aligned` + `mi_free`, and [`Counting`](crate::Counting) over either)
/// gets a **headerless** table: the C library receives the backend's own pointer, `deallocate`
/// is the backend's `free`, and a 64-byte-aligned block costs exactly what the backend charges
/// for it. [`for_sizeless`](Self::for_sizeless) builds one for any such backend;
/// [`for_allocator`](Self::for_allocator) builds one for the built-in sizeless backends
/// ([`System`](crate::System) on glibc Linux, `Mimalloc` (feature `mimalloc`), and `Counting` of
/// either), recognised by type since Rust has no specialization. Every other allocator (the
/// `Arena`, [`Limited`](crate::Limited), a scribbling allocator, any allocator-api2
/// `Allocator`) gets the **header** table: a 16-byte (or alignment-sized) header before every
/// block records its size, alignment and owner cookie. (Under Miri every table is a header
/// table: Miri cannot run `malloc_usable_size` or mimalloc.)
///
/// What the header gave, and what a headerless table keeps of it:
/// * *The size on free*: the backend finds it itself; [`Counting`](crate::Counting) counts the
///   size the backend reports for the block at allocation and again at free (glibc's
///   `malloc_usable_size`; the whole block as mimalloc's `mi_umalloc`/`mi_ufree` report it), so
///   its counts and live bytes stay exact.
/// * *The alignment through `reallocate`*: a headerless `reallocate` keeps the alignment the
///   old pointer has by its address, up to 64 KiB (at least what was asked for, sometimes
///   more: a block whose address happens to be 64-aligned is moved to another 64-aligned
///   one). A block asked with an alignment above 64 KiB comes back from `reallocate` 64
///   KiB-aligned only; a header table keeps any alignment.
/// * *The owner cookie*: a header table aborts when a block is freed through a table of
///   another owner, and refuses to reallocate it. A headerless table has nowhere to keep a
///   cookie, and checks nothing: blocks of two owners of the same sizeless backend live in the
///   one process-wide heap (glibc's, mimalloc's), so a block freed or reallocated through the
///   other owner's table is freed or moved correctly and the heap stays intact; what is lost
///   is the detection, and the accounting (the wrong owner's [`Counting`](crate::Counting) records the free:
///   the allocating owner's live bytes stay up, the other's go below zero). Freeing through a
///   table of a *different backend* (a glibc block through a mimalloc owner) is undefined, as
///   it is for `free` itself. A runtime that wants the check back runs its owner on a header
///   backend: the C library's scribbling mode (`KEEPALLOC_SCRIBBLE`) does, and so does any
///   wrapper that is not `SizelessFree`.
///
/// # Which blocks go where
///
/// Blocks from this table and blocks from the Rust face of the same owner (the `Allocator`
/// impl of the provider's `AllocatorHandle`, or the backend itself) are NOT interchangeable:
/// free a table block through a table of the same owner built the same way (any table built
/// by `for_allocator` for the same allocator; or by `for_sizeless`), and a Rust block through
/// the Rust `Allocator` with its `Layout`. A header table's cookie is derived from the table's
/// context: a block freed or reallocated through a header table of another owner is detected
/// (free aborts with a message, since it has no status to return; `reallocate` returns NULL
/// and leaves the block alone).
///
/// Safe code cannot write a table's fields:
///
/// ```compile_fail
/// use keepalloc_allocators::{AllocatorTable, System};
/// static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);
/// let mut bogus = TABLE;
/// bogus.context = 0x10 as *mut core::ffi::c_void; // error: the field is private
/// ```
///
/// [`for_allocator`]: AllocatorTable::for_allocator
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocatorTable {
    /// Opaque pointer passed as the first argument to every function.
    context: *mut c_void,
    /// General allocation ([`TABLE_MIN_ALIGN`]-aligned).
    allocate: Option<AllocateFn>,
    /// Resize, keeping contents; `NULL` pointer allocates.
    reallocate: Option<ReallocateFn>,
    /// Frees a block from `allocate` or `reallocate`; NULL is a no-op.
    deallocate: Option<DeallocateFn>,
    /// Allocation with a power-of-two alignment.
    aligned_allocate: Option<AlignedAllocateFn>,
    /// Frees a block from `aligned_allocate`; NULL is a no-op.
    aligned_deallocate: Option<DeallocateFn>,
}

/// The raw parts of a table, as [`AllocatorTable::raw_parts`] returns them and
/// [`AllocatorTable::from_raw_parts`] takes them.
pub type RawTableParts = (
    *mut c_void,
    Option<AllocateFn>,
    Option<ReallocateFn>,
    Option<DeallocateFn>,
    Option<AlignedAllocateFn>,
    Option<DeallocateFn>,
);

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

/// Written before every user pointer. `tag` is the block's alignment's log2 in its low byte
/// and the context's cookie above it.
#[repr(C)]
struct Header {
    size: usize,
    tag: usize,
}

/// The cookie of a table's context: which owner a block belongs to.
#[inline]
fn cookie(context: *mut c_void) -> usize {
    ((context as usize) ^ 0x6b65_6570_616c_6c6f_u64 as usize)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize)
        & !0xff
}

#[inline]
fn tag(context: *mut c_void, align: usize) -> usize {
    cookie(context) | align.trailing_zeros() as usize
}

impl AllocatorTable {
    /// A table from raw parts: a C library's `xnn_allocator`, a runtime's own functions, a
    /// test's deliberately broken callbacks.
    ///
    /// # Safety
    /// For as long as the table (or a copy) can be called through, every function that is
    /// `Some` must honour the contract in the type's docs when called with `context`, from any
    /// thread; what `context` points to must stay alive that long. Empty slots are allowed
    /// (callers check [`is_complete`](Self::is_complete) or the slot).
    pub const unsafe fn from_raw_parts(
        context: *mut c_void,
        allocate: Option<AllocateFn>,
        reallocate: Option<ReallocateFn>,
        deallocate: Option<DeallocateFn>,
        aligned_allocate: Option<AlignedAllocateFn>,
        aligned_deallocate: Option<DeallocateFn>,
    ) -> Self {
        AllocatorTable {
            context,
            allocate,
            reallocate,
            deallocate,
            aligned_allocate,
            aligned_deallocate,
        }
    }

    /// The raw parts, in field order (to rebuild a changed table with
    /// [`from_raw_parts`](Self::from_raw_parts)).
    pub const fn raw_parts(&self) -> RawTableParts {
        (
            self.context,
            self.allocate,
            self.reallocate,
            self.deallocate,
            self.aligned_allocate,
            self.aligned_deallocate,
        )
    }

    /// The `context` passed to every function.
    #[inline]
    pub const fn context(&self) -> *mut c_void {
        self.context
    }

    /// The `allocate` slot.
    #[inline]
    pub const fn allocate(&self) -> Option<AllocateFn> {
        self.allocate
    }

    /// The `reallocate` slot.
    #[inline]
    pub const fn reallocate(&self) -> Option<ReallocateFn> {
        self.reallocate
    }

    /// The `deallocate` slot.
    #[inline]
    pub const fn deallocate(&self) -> Option<DeallocateFn> {
        self.deallocate
    }

    /// The `aligned_allocate` slot.
    #[inline]
    pub const fn aligned_allocate(&self) -> Option<AlignedAllocateFn> {
        self.aligned_allocate
    }

    /// The `aligned_deallocate` slot.
    #[inline]
    pub const fn aligned_deallocate(&self) -> Option<DeallocateFn> {
        self.aligned_deallocate
    }

    /// A raw pointer to the `context` field of the table at `table`, for code that must
    /// rewrite a live table in place (the negative control that reproduces ONNX Runtime's
    /// racy provider). Computing it is safe; writing through it is `unsafe` and must keep the
    /// table's contract (the new context must be one the table's functions accept).
    #[inline]
    pub const fn context_field(table: *mut AllocatorTable) -> *mut *mut c_void {
        // Pointer arithmetic only: `table` is never dereferenced here.
        table
            .cast::<u8>()
            .wrapping_add(core::mem::offset_of!(AllocatorTable, context))
            .cast()
    }

    /// Builds the table for `allocator`, which must live for the rest of the process because
    /// a C library may keep the context pointer that long.
    ///
    /// Headerless for the built-in sizeless backends (`System` on glibc Linux, `Mimalloc`,
    /// and `Counting` of either; see the type's docs), a header table for everything else.
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

    /// Builds the headerless table for `backend`: every function goes straight to the
    /// backend's [`SizelessFree`] functions (see the type's docs for what that keeps and what
    /// it gives up). Blocks of this table are freed through a `for_sizeless` table of the same
    /// backend; for a backend that `for_allocator` does not know as sizeless, its blocks are
    /// not interchangeable with a `for_allocator` table's.
    pub const fn for_sizeless<B: SizelessFree>(backend: &'static B) -> Self {
        AllocatorTable {
            context: backend as *const B as *mut c_void,
            allocate: Some(sizeless_allocate::<B>),
            reallocate: Some(sizeless_reallocate::<B>),
            deallocate: Some(sizeless_deallocate::<B>),
            aligned_allocate: Some(sizeless_aligned_allocate::<B>),
            aligned_deallocate: Some(sizeless_deallocate::<B>),
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
            tag: tag(context, layout.align()),
        });
        user.cast()
    }
}

/// Recovers the block layout of a user pointer from its header; `None` when the header's
/// cookie is not `context`'s (a block of another owner, or not a table block).
///
/// # Safety
/// `user` is a live block returned by a table of this module (of any owner).
#[inline]
unsafe fn block_of(
    context: *mut c_void,
    user: *mut c_void,
) -> Option<(NonNull<u8>, Layout, usize)> {
    // SAFETY: every user pointer has its header in the HEADER bytes before it.
    let header = unsafe { user.cast::<u8>().sub(HEADER).cast::<Header>().read() };
    if header.tag & !0xff != cookie(context) {
        return None;
    }
    let align = 1usize << (header.tag & 0xff);
    let pad = align.max(HEADER);
    // SAFETY: the header was written from a layout that `from_size_align` accepted.
    let layout = unsafe { Layout::from_size_align_unchecked(header.size + pad, align) };
    // SAFETY: `user - pad` is the block base, non-null since it came from an allocator.
    let base = unsafe { NonNull::new_unchecked(user.cast::<u8>().sub(pad)) };
    Some((base, layout, pad))
}

/// Runs `$body` with `$b` bound to the context as the concrete built-in sizeless backend when
/// `$A` is one of them (`System` on glibc Linux, `Mimalloc`, `Counting` of either), `$other`
/// otherwise. The type comparison is between constants and folds away when compiled: each
/// instantiation keeps exactly one branch.
macro_rules! if_sizeless {
    ($A:ty, $context:expr, |$b:ident| $body:expr, else $other:expr) => {{
        #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
        {
            if is::<$A, crate::System>() {
                // SAFETY: `$A` is `System`, and the context is a `&'static $A`.
                let $b = unsafe { &*($context as *const crate::System) };
                return $body;
            }
            if is::<$A, crate::Counting<crate::System>>() {
                // SAFETY: `$A` is `Counting<System>`, and the context is a `&'static $A`.
                let $b = unsafe { &*($context as *const crate::Counting<crate::System>) };
                return $body;
            }
        }
        #[cfg(all(feature = "mimalloc", not(miri)))]
        {
            if is::<$A, crate::Mimalloc>() {
                // SAFETY: `$A` is `Mimalloc`, and the context is a `&'static $A`.
                let $b = unsafe { &*($context as *const crate::Mimalloc) };
                return $body;
            }
            if is::<$A, crate::Counting<crate::Mimalloc>>() {
                // SAFETY: `$A` is `Counting<Mimalloc>`, and the context is a `&'static $A`.
                let $b = unsafe { &*($context as *const crate::Counting<crate::Mimalloc>) };
                return $body;
            }
        }
        $other
    }};
}

/// True when `A` and `B` are the same type.
#[allow(dead_code)]
#[inline(always)]
fn is<A: 'static, B: 'static>() -> bool {
    core::any::TypeId::of::<A>() == core::any::TypeId::of::<B>()
}

unsafe extern "C" fn table_allocate<A: Allocator + Sync + 'static>(
    context: *mut c_void,
    size: usize,
) -> *mut c_void {
    if_sizeless!(A, context, |b| sizeless_alloc(b, size), else ());
    // SAFETY: a table built by `for_allocator::<A>` is only called with its own context.
    no_unwind(ptr::null_mut(), || unsafe {
        alloc_block::<A>(context, TABLE_MIN_ALIGN, size)
    })
}

unsafe extern "C" fn table_aligned_allocate<A: Allocator + Sync + 'static>(
    context: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    if_sizeless!(A, context, |b| sizeless_aligned_alloc(b, alignment, size), else ());
    // SAFETY: as for `table_allocate`.
    no_unwind(ptr::null_mut(), || unsafe {
        alloc_block::<A>(context, alignment, size)
    })
}

unsafe extern "C" fn table_reallocate<A: Allocator + Sync + 'static>(
    context: *mut c_void,
    pointer: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: the context is the table's own and `pointer` one of its blocks or NULL.
    if_sizeless!(A, context, |b| unsafe { sizeless_realloc(b, pointer, size) }, else ());
    if pointer.is_null() {
        // SAFETY: forwarding the same context.
        return unsafe { table_allocate::<A>(context, size) };
    }
    no_unwind(ptr::null_mut(), || {
        // SAFETY: `pointer` is a live table block (the C caller's promise).
        let Some((base, old, pad)) = (unsafe { block_of(context, pointer) }) else {
            // Another owner's block: refuse (NULL), and leave it alone.
            return ptr::null_mut();
        };
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
                tag: tag(context, old.align()),
            });
            user.cast()
        }
    })
}

unsafe extern "C" fn table_deallocate<A: Allocator + Sync + 'static>(
    context: *mut c_void,
    pointer: *mut c_void,
) {
    // SAFETY: the context is the table's own and `pointer` one of its blocks or NULL.
    if_sizeless!(A, context, |b| unsafe { sizeless_free(b, pointer) }, else ());
    if pointer.is_null() {
        return;
    }
    // SAFETY: `pointer` is a live table block (the C caller's promise).
    let Some((base, layout, _)) = (unsafe { block_of(context, pointer) }) else {
        // There is no status to return from a free, and freeing another owner's block
        // through this one would corrupt both heaps.
        abort_with(format_args!(
            "keepalloc: {pointer:p} was freed through a table that did not allocate it \
             (another owner's block, or not a table block); aborting\n"
        ));
    };
    // SAFETY: `base` is a live block of the `&'static A` behind `context`, with `layout`.
    no_unwind_free(pointer, || unsafe {
        (*(context as *const A)).deallocate(base, layout)
    });
}

#[cfg(test)]
mod cookie_tests {
    use super::*;

    /// Two owners whose addresses differ in any one bit get different cookies, so a block
    /// freed through the wrong table is always told apart (the cookie is a bijection of the
    /// address above the tag byte).
    #[test]
    fn cookies_of_contexts_one_bit_apart_differ() {
        for base in [0x5555_5555_5000usize, 0x7f12_3456_7890, 0x1000] {
            for bit in 0..usize::BITS - 1 {
                let a = base as *mut c_void;
                let b = (base ^ (1 << bit)) as *mut c_void;
                assert_ne!(cookie(a), cookie(b), "base {base:#x}, bit {bit}");
                assert_eq!(cookie(a) & 0xff, 0, "the tag byte stays free");
            }
        }
    }

    #[test]
    fn a_tag_keeps_the_cookie_and_the_alignment() {
        let ctx = 0x7f00_dead_b000usize as *mut c_void;
        for shift in 0..13 {
            let t = tag(ctx, 1 << shift);
            assert_eq!(t & !0xff, cookie(ctx));
            assert_eq!(t & 0xff, shift);
        }
    }
}
