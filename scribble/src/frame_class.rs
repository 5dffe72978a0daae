//! Which frames of a stack are keepalloc's own allocation machinery and which are its
//! caller's: what both a site's identity ([`crate::sites`]) and a report's stacks start from.

/// What a frame is to a report: keepalloc's allocation machinery, glue that runs between
/// its frames (Rust's panic catching), or the caller's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// keepalloc's allocation machinery, the unwinder, the signal trampoline.
    Own,
    /// Rust's panic catching and closure calls: keepalloc's between its own frames, the
    /// caller's elsewhere.
    Glue,
    /// Everything else (an unnamed frame too).
    Caller,
}

/// The class of one function name.
pub fn class_of_name(name: Option<&str>) -> Class {
    let Some(name) = name else {
        return Class::Caller;
    };
    let name = name.trim_start_matches('<');
    const OWN: [&str; 9] = [
        "keepalloc_allocators::",
        "keepalloc_scribble::",
        "keepalloc_provider::",
        "keepalloc_capi::",
        "keepalloc_onnxruntime::",
        "allocator_api2::",
        "backtrace::",
        "_Unwind_",
        "__restore_rt",
    ];
    const GLUE: [&str; 4] = [
        "std::panicking::",
        "std::panic::",
        "core::ops::function::",
        "__rust_try",
    ];
    if OWN.iter().any(|p| name.starts_with(p)) {
        Class::Own
    } else if GLUE.iter().any(|p| name.starts_with(p)) {
        Class::Glue
    } else {
        Class::Caller
    }
}

/// The class of a frame from its function names (inlined ones first, the function the code
/// physically belongs to last): that outermost function's, or, when it is glue (a closure
/// call), the class of the function inlined into it.
pub fn class_of_frame<'a>(names: impl IntoIterator<Item = Option<&'a str>>) -> Class {
    let names: Vec<Option<&str>> = names.into_iter().collect();
    names
        .iter()
        .rev()
        .map(|&n| class_of_name(n))
        .find(|&c| c != Class::Glue)
        .unwrap_or(Class::Glue)
}

/// Where the caller's frames start in a stack (innermost first) of these classes: after
/// the leading run of keepalloc's frames (and the glue among and after them), at the first
/// caller frame; at 0 when the stack does not start in keepalloc.
pub fn caller_start(classes: &[Class]) -> usize {
    let first_caller = classes
        .iter()
        .position(|&c| c == Class::Caller)
        .unwrap_or(classes.len());
    if classes[..first_caller].contains(&Class::Own) {
        first_caller
    } else {
        0
    }
}

/// Whether a function name is keepalloc's allocation machinery (see [`Class::Own`]).
pub fn is_own_name(name: &str) -> bool {
    class_of_name(Some(name)) == Class::Own
}
