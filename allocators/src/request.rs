//! One allocator call that hands out a block, as a value. A backend or wrapper says what it
//! does with such a call once, in [`RequestAllocator::serve`], instead of once per `Allocator`
//! method; [`allocator_from_requests!`](crate::allocator_from_requests) writes the methods.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

/// A call of [`Allocator`] that returns a block: `allocate`, `grow` or `shrink`, the first two
/// zeroed or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `allocate`, or `allocate_zeroed` when `zeroed`.
    Allocate {
        /// The block asked for.
        layout: Layout,
        /// Whether the block must be zeroed.
        zeroed: bool,
    },
    /// `grow`, or `grow_zeroed` when `zeroed`.
    Grow {
        /// The block to grow.
        ptr: NonNull<u8>,
        /// Its layout.
        old: Layout,
        /// The layout it grows to, no smaller than `old`.
        new: Layout,
        /// Whether the bytes past `old.size()` must be zeroed.
        zeroed: bool,
    },
    /// `shrink`.
    Shrink {
        /// The block to shrink.
        ptr: NonNull<u8>,
        /// Its layout.
        old: Layout,
        /// The layout it shrinks to, no larger than `old`.
        new: Layout,
    },
}

impl Request {
    /// The layout of the block the call returns.
    #[inline]
    pub fn layout(self) -> Layout {
        match self {
            Request::Allocate { layout, .. } => layout,
            Request::Grow { new, .. } | Request::Shrink { new, .. } => new,
        }
    }

    /// The block a resize moves, with its layout; `None` for an allocation.
    #[inline]
    pub fn resized(self) -> Option<(NonNull<u8>, Layout)> {
        match self {
            Request::Allocate { .. } => None,
            Request::Grow { ptr, old, .. } | Request::Shrink { ptr, old, .. } => Some((ptr, old)),
        }
    }

    /// Whether the bytes the call adds must be zeroed (never for a shrink).
    #[inline]
    pub fn zeroed(self) -> bool {
        match self {
            Request::Allocate { zeroed, .. } | Request::Grow { zeroed, .. } => zeroed,
            Request::Shrink { .. } => false,
        }
    }

    /// The bytes the call adds to what the caller holds: a new block's size, what a grow adds,
    /// 0 for a shrink (which asks for nothing: wrappers that refuse or cap calls never refuse
    /// one).
    #[inline]
    pub fn added_bytes(self) -> usize {
        match self {
            Request::Allocate { layout, .. } => layout.size(),
            // Saturating: a `Grow` built by hand with a smaller `new` adds nothing.
            Request::Grow { old, new, .. } => new.size().saturating_sub(old.size()),
            Request::Shrink { .. } => 0,
        }
    }

    /// Makes this same call on `allocator` (a wrapper's inner one).
    ///
    /// # Safety
    /// For a resize, the promises of `grow` (`grow_zeroed`, `shrink`) hold for `allocator`:
    /// `ptr` is a live block of it with `old`.
    #[inline]
    pub unsafe fn forward_to<A: Allocator + ?Sized>(
        self,
        allocator: &A,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let zeroed = self.zeroed();
        // SAFETY: for a resize, the caller's promises are those of the method called.
        unsafe {
            match self {
                Request::Allocate { layout, .. } if zeroed => allocator.allocate_zeroed(layout),
                Request::Allocate { layout, .. } => allocator.allocate(layout),
                Request::Grow { ptr, old, new, .. } if zeroed => {
                    allocator.grow_zeroed(ptr, old, new)
                }
                Request::Grow { ptr, old, new, .. } => allocator.grow(ptr, old, new),
                Request::Shrink { ptr, old, new } => allocator.shrink(ptr, old, new),
            }
        }
    }
}

/// An allocator written as two functions: [`serve`](Self::serve) for every call that returns
/// a block, and [`free_block`](Self::free_block). Its [`Allocator`] impl is then
/// [`allocator_from_requests!`](crate::allocator_from_requests), the same six lines of
/// plumbing for every backend and wrapper.
///
/// # Safety
/// The two functions keep [`Allocator`]'s contract for the calls they stand for: a served
/// block has the layout asked for and stays valid until it is freed or resized through this
/// allocator; a resize keeps the first `min(old, new)` bytes and leaves the block untouched
/// when it fails; a zeroed request zeroes the bytes it adds.
pub unsafe trait RequestAllocator {
    /// Serves `request`.
    ///
    /// # Safety
    /// The promises of the `Allocator` method the request stands for hold: for a resize,
    /// `ptr` is a live block of this allocator with `old`, and `new` is no smaller (`Grow`)
    /// or no larger (`Shrink`) than `old`, with the same rules as `grow`/`shrink`.
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError>;

    /// Frees a block, as [`Allocator::deallocate`].
    ///
    /// # Safety
    /// `ptr` is a live block of this allocator with `layout`.
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout);
}

/// Implements [`Allocator`] for a type that implements
/// [`RequestAllocator`]: each method becomes one [`Request`]. A macro because the orphan rule
/// forbids a blanket impl of the foreign `Allocator` trait; generic parameters, with their
/// bounds, go in brackets before the type.
///
/// ```
/// use core::alloc::Layout;
/// use core::ptr::NonNull;
/// use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
///
/// use keepalloc_allocators::allocator_api2::alloc::{AllocError, Allocator};
/// use keepalloc_allocators::{Request, RequestAllocator, System, allocator_from_requests};
///
/// /// Counts the calls that return a block.
/// struct Calls<A>(A, AtomicUsize);
///
/// // SAFETY: every call is forwarded unchanged to the wrapped allocator.
/// unsafe impl<A: Allocator> RequestAllocator for Calls<A> {
///     unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
///         self.1.fetch_add(1, Relaxed);
///         // SAFETY: the caller's promises, forwarded.
///         unsafe { request.forward_to(&self.0) }
///     }
///     unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
///         // SAFETY: the caller's promise, forwarded.
///         unsafe { self.0.deallocate(ptr, layout) }
///     }
/// }
/// allocator_from_requests!([A: Allocator] Calls<A>);
///
/// let calls = Calls(System, AtomicUsize::new(0));
/// let layout = Layout::new::<u64>();
/// let block = calls.allocate_zeroed(layout).unwrap();
/// // SAFETY: `block` is live with `layout`.
/// unsafe { calls.deallocate(block.cast(), layout) };
/// assert_eq!(calls.1.load(Relaxed), 1);
/// ```
#[macro_export]
macro_rules! allocator_from_requests {
    ([$($generics:tt)*] $ty:ty) => {
        // An unnamed const scopes the imports to the impl.
        const _: () = {
            use ::core::alloc::Layout;
            use ::core::ptr::NonNull;
            use $crate::allocator_api2::alloc::{AllocError, Allocator};
            use $crate::{Request, RequestAllocator};

            // SAFETY: every method is the type's `RequestAllocator` function for the same
            // call, and that trait's safety condition is `Allocator`'s contract for it.
            unsafe impl<$($generics)*> Allocator for $ty {
                #[inline]
                fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                    let request = Request::Allocate { layout, zeroed: false };
                    // SAFETY: an allocation has no precondition.
                    unsafe { RequestAllocator::serve(self, request) }
                }

                #[inline]
                fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                    let request = Request::Allocate { layout, zeroed: true };
                    // SAFETY: an allocation has no precondition.
                    unsafe { RequestAllocator::serve(self, request) }
                }

                #[inline]
                unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                    // SAFETY: the caller's promise is `free_block`'s.
                    unsafe { RequestAllocator::free_block(self, ptr, layout) }
                }

                #[inline]
                unsafe fn grow(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, AllocError> {
                    let request = Request::Grow { ptr, old, new, zeroed: false };
                    // SAFETY: the caller's promises for `grow` are `serve`'s for this request.
                    unsafe { RequestAllocator::serve(self, request) }
                }

                #[inline]
                unsafe fn grow_zeroed(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, AllocError> {
                    let request = Request::Grow { ptr, old, new, zeroed: true };
                    // SAFETY: as for `grow`.
                    unsafe { RequestAllocator::serve(self, request) }
                }

                #[inline]
                unsafe fn shrink(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, AllocError> {
                    let request = Request::Shrink { ptr, old, new };
                    // SAFETY: as for `grow`, with `shrink`'s promises.
                    unsafe { RequestAllocator::serve(self, request) }
                }
            }
        };
    };
    ($ty:ty) => {
        $crate::allocator_from_requests!([] $ty);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_bytes_is_what_the_caller_gains() {
        let l = |size| Layout::from_size_align(size, 8).unwrap();
        let ptr = NonNull::<u8>::dangling();
        let grow = |old, new| Request::Grow {
            ptr,
            old: l(old),
            new: l(new),
            zeroed: false,
        };
        let allocate = Request::Allocate {
            layout: l(24),
            zeroed: true,
        };
        assert_eq!(allocate.added_bytes(), 24);
        assert_eq!(grow(16, 40).added_bytes(), 24);
        let shrink = Request::Shrink {
            ptr,
            old: l(40),
            new: l(16),
        };
        assert_eq!(shrink.added_bytes(), 0);
        // Safe code can build a `Grow` that shrinks; it adds nothing rather than overflowing.
        assert_eq!(grow(40, 16).added_bytes(), 0);
    }
}
