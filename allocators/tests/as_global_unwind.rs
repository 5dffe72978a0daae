//! A backend that panics inside `AsGlobal` aborts the process: unwinding out of a global
//! allocator is undefined behaviour. Each case runs in a child process (this test binary,
//! run again for one test with an environment variable set), and the parent checks that the
//! child died of SIGABRT. Without the guard the child's `catch_unwind` catches the panic and
//! the child exits 0, which fails the test.
// Miri cannot start a process, so the cases run natively only.
#![cfg(all(unix, not(miri)))]

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use std::os::unix::process::ExitStatusExt;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::AsGlobal;

const CHILD: &str = "KEEPALLOC_AS_GLOBAL_UNWIND_CHILD";

/// Panics on every call.
struct Panics;

// SAFETY: it never returns a block, so it breaks no promise about blocks.
unsafe impl Allocator for Panics {
    fn allocate(&self, _: Layout) -> Result<NonNull<[u8]>, AllocError> {
        panic!("backend panics in allocate")
    }

    unsafe fn deallocate(&self, _: NonNull<u8>, _: Layout) {
        panic!("backend panics in deallocate")
    }
}

/// In the child: calls `call` on an `AsGlobal<Panics>` under `catch_unwind` and exits 0 if
/// the panic came back. In the parent: runs the child for `test` and wants SIGABRT.
fn case(test: &str, call: fn(&AsGlobal<Panics>)) {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        let g = AsGlobal(Panics);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(&g)));
        assert!(caught.is_err(), "the backend did not panic");
        // Reached only if the panic unwound out of `AsGlobal`.
        std::process::exit(0);
    }
    let out = keepalloc_testkit::rerun(test, &[(CHILD, test)]);
    assert_eq!(
        out.status.signal(),
        Some(6), // SIGABRT
        "{test}: the child should have aborted, got {:?}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_panic_in_alloc_aborts() {
    case("a_panic_in_alloc_aborts", |g| {
        // SAFETY: a non-zero-sized layout.
        unsafe { g.alloc(Layout::new::<u64>()) };
    });
}

#[test]
fn a_panic_in_alloc_zeroed_aborts() {
    case("a_panic_in_alloc_zeroed_aborts", |g| {
        // SAFETY: a non-zero-sized layout.
        unsafe { g.alloc_zeroed(Layout::new::<u64>()) };
    });
}

#[test]
fn a_panic_in_dealloc_aborts() {
    case("a_panic_in_dealloc_aborts", |g| {
        let mut word = 0u64;
        // The backend panics before it could touch the pointer.
        // SAFETY: `Panics::deallocate` never dereferences it.
        unsafe { g.dealloc((&raw mut word).cast(), Layout::new::<u64>()) };
    });
}

#[test]
fn a_panic_in_realloc_aborts() {
    case("a_panic_in_realloc_aborts", |g| {
        let mut word = 0u64;
        // `grow` falls back to `allocate`, which panics before anything is read.
        // SAFETY: `Panics` never dereferences the pointer.
        unsafe { g.realloc((&raw mut word).cast(), Layout::new::<u64>(), 64) };
    });
}
