//! The C ABI from Rust: the header's version macros agree with the crate, and a Rust panic
//! escaping an `extern "C-unwind"` hook comes back as `KEEPALLOC_INIT_FAILED` (the C++
//! trampoline rethrows it untouched to keepalloc's `catch_unwind`).

use core::ffi::{c_int, c_void};

use keepalloc_capi::{
    KeepallocHookResult, KeepallocStatus, KeepallocTable, VERSION, VERSION_MAJOR, VERSION_MINOR,
    VERSION_PATCH, keepalloc_acquire_ex, keepalloc_status_string, keepalloc_version,
};

/// `#define NAME value` from keepalloc.h.
fn header_define(header: &str, name: &str) -> u32 {
    header
        .lines()
        .find_map(|l| {
            l.strip_prefix("#define ")?
                .strip_prefix(name)?
                .strip_prefix(' ')
                .map(|v| v.trim().parse::<u32>().expect("a number"))
        })
        .unwrap_or_else(|| panic!("keepalloc.h defines no {name}"))
}

#[test]
fn header_version_macros_match_the_crate_version() {
    let header = include_str!("../include/keepalloc.h");
    let crate_version: Vec<u32> = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    let macros = [
        header_define(header, "KEEPALLOC_VERSION_MAJOR"),
        header_define(header, "KEEPALLOC_VERSION_MINOR"),
        header_define(header, "KEEPALLOC_VERSION_PATCH"),
    ];
    assert_eq!(
        macros.as_slice(),
        crate_version.as_slice(),
        "keepalloc.h vs Cargo.toml"
    );
    assert_eq!([VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH], macros);
    assert_eq!(keepalloc_version(), VERSION);
    assert_eq!(
        VERSION,
        (macros[0] << 16) | (macros[1] << 8) | macros[2],
        "KEEPALLOC_MAKE_VERSION's encoding"
    );
    assert_eq!(
        header_define(header, "KEEPALLOC_MAX_LIBRARIES") as usize,
        keepalloc_provider::MAX_LIBRARIES
    );
    assert_eq!(
        header_define(header, "KEEPALLOC_MAX_LIBRARY_NAME") as usize,
        keepalloc_provider::MAX_LIBRARY_NAME
    );
}

unsafe extern "C-unwind" fn panicking_hook(_: *const KeepallocTable, _: *mut c_void) -> c_int {
    panic!("a Rust hook panicked");
}

unsafe extern "C-unwind" fn ok_hook(_: *const KeepallocTable, ran: *mut c_void) -> c_int {
    // SAFETY: the test passes a `bool` it owns.
    unsafe { *ran.cast::<bool>() = true };
    0
}

#[test]
fn a_rust_panic_escaping_a_hook_is_init_failed_and_retryable() {
    let mut out: *const KeepallocTable = core::ptr::null();
    let mut result = KeepallocHookResult::NotCalled;
    // SAFETY: a valid name, hook and out-pointers.
    let status = unsafe {
        keepalloc_acquire_ex(
            c"rust-panics".as_ptr(),
            Some(panicking_hook),
            core::ptr::null_mut(),
            &mut out,
            &mut result,
        )
    };
    assert_eq!(status, KeepallocStatus::InitFailed);
    assert_eq!(result, KeepallocHookResult::Threw);
    assert!(out.is_null());
    let mut ran = false;
    // SAFETY: as above; `ran` outlives the call.
    let status = unsafe {
        keepalloc_acquire_ex(
            c"rust-panics".as_ptr(),
            Some(ok_hook),
            (&mut ran as *mut bool).cast(),
            &mut out,
            &mut result,
        )
    };
    assert_eq!(status, KeepallocStatus::Ok);
    assert_eq!(result, KeepallocHookResult::Succeeded);
    assert!(ran && !out.is_null());
}

#[test]
fn header_ort_api_version_is_the_one_keepalloc_asks_for() {
    let header = include_str!("../include/keepalloc.h");
    assert_eq!(
        header_define(header, "KEEPALLOC_ORT_API_VERSION"),
        keepalloc_onnxruntime::ORT_API_VERSION
    );
}

/// `examples/ort_register.c` reaches ONNX Runtime through `OrtApiBase` (`GetApi`,
/// `GetVersionString`) and OrtApi's slot 3 (`CreateEnv`) without ONNX Runtime's header; these
/// places come from ort-sys, bindgen's copy of that header.
#[test]
fn the_ort_slots_the_c_example_uses_are_the_headers() {
    use core::mem::{offset_of, size_of};
    use ort_sys::{OrtApi, OrtApiBase};
    let slot = size_of::<usize>();
    assert_eq!(offset_of!(OrtApiBase, GetApi), 0);
    assert_eq!(offset_of!(OrtApiBase, GetVersionString), slot);
    assert_eq!(offset_of!(OrtApi, CreateEnv), 3 * slot);
}

/// The header's `keepalloc_status` enumerators, by value, are exactly the Rust enum's, so
/// `keepalloc_status_string` (which walks `KeepallocStatus::ALL`) names every one of them.
#[test]
fn every_header_status_has_a_string() {
    let header = include_str!("../include/keepalloc.h");
    let body = header
        .split("typedef enum keepalloc_status {")
        .nth(1)
        .and_then(|rest| rest.split("} keepalloc_status;").next())
        .expect("keepalloc.h declares enum keepalloc_status");
    let values: Vec<c_int> = body
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(" = ")?;
            name.starts_with("KEEPALLOC_")
                .then(|| value.trim_end_matches(',').parse().expect("a number"))
        })
        .collect();
    let ours: Vec<c_int> = KeepallocStatus::ALL.iter().map(|s| *s as c_int).collect();
    assert_eq!(values, ours);
    for status in KeepallocStatus::ALL {
        let text = keepalloc_status_string(status as c_int);
        // SAFETY: keepalloc_status_string returns a static NUL-terminated string.
        let text = unsafe { core::ffi::CStr::from_ptr(text) };
        assert_eq!(text, status.description());
        assert!(!text.is_empty());
    }
    // SAFETY: as above.
    let unknown = unsafe { core::ffi::CStr::from_ptr(keepalloc_status_string(99)) };
    assert_eq!(unknown, c"unknown keepalloc_status");
}
