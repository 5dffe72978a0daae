//! The C table's entry points never unwind into C: an allocation that panics returns its
//! failure value, a free that panics aborts with a message.

use core::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, turning a panic into `on_panic` so that none crosses into C.
#[inline(always)]
pub(crate) fn no_unwind<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Writes `message` to stderr, ignoring a failed write, and aborts. Not `eprintln!`, which
/// panics when stderr is closed: inside an `extern "C"` free that panic would abort too, but
/// without the message, and a panic there is the very thing the abort stands in for.
#[cold]
pub(crate) fn abort_with(message: core::fmt::Arguments<'_>) -> ! {
    use std::io::Write;
    let _ = std::io::stderr().write_fmt(message);
    std::process::abort()
}

/// Runs `f`, aborting with a message if it panics (a free has no status to report, and
/// unwinding into C is undefined).
#[inline(always)]
pub(crate) fn no_unwind_free(pointer: *mut c_void, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        abort_with(format_args!(
            "keepalloc: the allocator panicked while freeing {pointer:p}; aborting\n"
        ));
    }
}
