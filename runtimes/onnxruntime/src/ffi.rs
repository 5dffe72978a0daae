//! The part of ONNX Runtime's C API this crate calls, declared here rather than taken from a
//! binding crate, so that depending on keepalloc never pins one (`ort-sys` declares
//! `links = "onnxruntime"`: two versions of it cannot meet in one dependency graph).
//!
//! `OrtApi` is an append-only table of function pointers (ONNX Runtime never moves or removes
//! a slot), so a prefix of it, with the slots this crate does not call kept as opaque
//! placeholders, has the same layout as the full table of every runtime that serves
//! [`ORT_API_VERSION`](crate::ORT_API_VERSION). A unit test checks every declared slot's index
//! and signature, and the other types here, against `ort-sys`'s bindgen copy of the header
//! (a dev-dependency only).
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]

use core::ffi::{c_char, c_int, c_void};

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
            _not_send_sync: core::marker::PhantomData<*mut u8>,
        }
    )*};
}

opaque! {
    /// An ONNX Runtime environment (`OrtEnv*`).
    OrtEnv;
    /// An error status (`OrtStatus*`; NULL means success).
    OrtStatus;
    /// A description of a memory location (`OrtMemoryInfo*`).
    OrtMemoryInfo;
    /// An inference session.
    OrtSession;
    /// Options for creating a session.
    OrtSessionOptions;
    /// Options for one run.
    OrtRunOptions;
    /// A tensor or other value.
    OrtValue;
    /// The type of an input or output.
    OrtTypeInfo;
    /// A tensor's element type and shape.
    OrtTensorTypeAndShapeInfo;
}

/// The C type of a model path (`ORTCHAR_T`): `char` except on Windows.
#[cfg(not(windows))]
pub type os_char = c_char;
/// The C type of a model path (`ORTCHAR_T`): `wchar_t` on Windows.
#[cfg(windows)]
pub type os_char = u16;

/// What every fallible OrtApi function returns: an `OrtStatus*`, NULL on success.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct OrtStatusPtr(pub *mut OrtStatus);

macro_rules! c_enum {
    ($($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $value:ident = $n:expr,)* })*) => {$(
        $(#[$m])*
        ///
        /// A C `enum` kept as its `int`, so that a value a newer runtime adds is not undefined
        /// behaviour in Rust.
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub i32);
        impl $name {
            $($(#[$vm])* pub const $value: $name = $name($n);)*
        }
    )*};
}

c_enum! {
    /// `OrtErrorCode`.
    OrtErrorCode {
        /// Success.
        ORT_OK = 0,
        /// A generic failure.
        ORT_FAIL = 1,
    }
    /// `OrtLoggingLevel`.
    OrtLoggingLevel {
        /// Errors only.
        ORT_LOGGING_LEVEL_ERROR = 3,
    }
    /// `OrtAllocatorType`.
    OrtAllocatorType {
        /// A plain device allocator.
        OrtDeviceAllocator = 0,
        /// An arena allocator.
        OrtArenaAllocator = 1,
    }
    /// `OrtMemType`.
    OrtMemType {
        /// The device's default memory.
        OrtMemTypeDefault = 0,
    }
    /// `ONNXTensorElementDataType`.
    ONNXTensorElementDataType {
        /// `float`.
        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
    }
}

/// `OrtAllocator`, the C face of an allocator (version 22's four functions; a runtime reads
/// a later field only when `version` says it is there).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrtAllocator {
    /// The OrtApi version this struct was written for.
    pub version: u32,
    /// Returns a block of `size` bytes, or NULL.
    pub Alloc:
        Option<unsafe extern "system" fn(this_: *mut OrtAllocator, size: usize) -> *mut c_void>,
    /// Frees a block `Alloc` or `Reserve` returned.
    pub Free: Option<unsafe extern "system" fn(this_: *mut OrtAllocator, p: *mut c_void)>,
    /// The memory this allocator serves.
    pub Info: Option<unsafe extern "system" fn(this_: *const OrtAllocator) -> *const OrtMemoryInfo>,
    /// Like `Alloc`, for memory the runtime reserves outside its arena.
    pub Reserve:
        Option<unsafe extern "system" fn(this_: *const OrtAllocator, size: usize) -> *mut c_void>,
}

/// What `OrtGetApiBase()` returns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OrtApiBase {
    /// The OrtApi of `version`, or NULL when this runtime does not serve it.
    pub GetApi: unsafe extern "system" fn(version: u32) -> *const OrtApi,
    /// The runtime's version string (`"1.32.0"`), static.
    pub GetVersionString: unsafe extern "system" fn() -> *const c_char,
}

/// A slot of [`OrtApi`] this crate never calls: only its size matters.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Reserved(*const c_void);
// SAFETY: never dereferenced or called by this crate; it only fills a slot of a table that
// ONNX Runtime shares between all threads.
unsafe impl Sync for Reserved {}
// SAFETY: as above.
unsafe impl Send for Reserved {}

macro_rules! ort_api {
    ($($(#[$m:meta])* $kind:ident $vis:vis $name:ident : $ty:ty;)*) => {
        /// The first slots of ONNX Runtime's `OrtApi`, up to the last one this crate calls
        /// (`RegisterAllocator`). Only ever used behind a pointer the runtime returned, or as
        /// a copy of such a prefix: never a whole `OrtApi`.
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct OrtApi {
            $($(#[$m])* $vis $name: $ty,)*
        }

        /// For each declared slot: its name, then our offset and type, then ort-sys's.
        #[cfg(test)]
        fn declared_slots() -> Vec<tests::SlotPair> {
            let mut out = Vec::new();
            $(ort_api!(@check out $kind $name);)*
            out
        }
    };
    (@check $out:ident slot $name:ident) => {
        $out.push(tests::SlotPair {
            name: stringify!($name),
            ours: (
                core::mem::offset_of!(OrtApi, $name),
                tests::type_of(|a: &OrtApi| &a.$name),
            ),
            theirs: (
                core::mem::offset_of!(ort_sys::OrtApi, $name),
                tests::type_of(|a: &ort_sys::OrtApi| &a.$name),
            ),
        });
    };
    (@check $out:ident gap $name:ident) => {};
}

ort_api! {
    /// Slot 0.
    slot pub CreateStatus: unsafe extern "system" fn(code: OrtErrorCode, msg: *const c_char) -> OrtStatusPtr;
    gap _slots_1_1: [Reserved; 1];
    /// Slot 2.
    slot pub GetErrorMessage: unsafe extern "system" fn(status: *const OrtStatus) -> *const c_char;
    /// Slot 3.
    slot pub CreateEnv: unsafe extern "system" fn(log_severity_level: OrtLoggingLevel, logid: *const c_char, out: *mut *mut OrtEnv) -> OrtStatusPtr;
    gap _slots_4_6: [Reserved; 3];
    /// Slot 7.
    slot pub CreateSession: unsafe extern "system" fn(env: *const OrtEnv, model_path: *const os_char, options: *const OrtSessionOptions, out: *mut *mut OrtSession) -> OrtStatusPtr;
    gap _slots_8_8: [Reserved; 1];
    /// Slot 9.
    slot pub Run: unsafe extern "system" fn(session: *mut OrtSession, run_options: *const OrtRunOptions, input_names: *const *const c_char, inputs: *const *const OrtValue, input_len: usize, output_names: *const *const c_char, output_names_len: usize, outputs: *mut *mut OrtValue) -> OrtStatusPtr;
    /// Slot 10.
    slot pub CreateSessionOptions: unsafe extern "system" fn(options: *mut *mut OrtSessionOptions) -> OrtStatusPtr;
    gap _slots_11_23: [Reserved; 13];
    /// Slot 24.
    slot pub SetIntraOpNumThreads: unsafe extern "system" fn(options: *mut OrtSessionOptions, intra_op_num_threads: c_int) -> OrtStatusPtr;
    gap _slots_25_29: [Reserved; 5];
    /// Slot 30.
    slot pub SessionGetInputCount: unsafe extern "system" fn(session: *const OrtSession, out: *mut usize) -> OrtStatusPtr;
    /// Slot 31.
    slot pub SessionGetOutputCount: unsafe extern "system" fn(session: *const OrtSession, out: *mut usize) -> OrtStatusPtr;
    gap _slots_32_32: [Reserved; 1];
    /// Slot 33.
    slot pub SessionGetInputTypeInfo: unsafe extern "system" fn(session: *const OrtSession, index: usize, type_info: *mut *mut OrtTypeInfo) -> OrtStatusPtr;
    /// Slot 34.
    slot pub SessionGetOutputTypeInfo: unsafe extern "system" fn(session: *const OrtSession, index: usize, type_info: *mut *mut OrtTypeInfo) -> OrtStatusPtr;
    gap _slots_35_35: [Reserved; 1];
    /// Slot 36.
    slot pub SessionGetInputName: unsafe extern "system" fn(session: *const OrtSession, index: usize, allocator: *mut OrtAllocator, value: *mut *mut c_char) -> OrtStatusPtr;
    /// Slot 37.
    slot pub SessionGetOutputName: unsafe extern "system" fn(session: *const OrtSession, index: usize, allocator: *mut OrtAllocator, value: *mut *mut c_char) -> OrtStatusPtr;
    gap _slots_38_48: [Reserved; 11];
    /// Slot 49.
    slot pub CreateTensorWithDataAsOrtValue: unsafe extern "system" fn(info: *const OrtMemoryInfo, p_data: *mut c_void, p_data_len: usize, shape: *const i64, shape_len: usize, type_: ONNXTensorElementDataType, out: *mut *mut OrtValue) -> OrtStatusPtr;
    gap _slots_50_50: [Reserved; 1];
    /// Slot 51.
    slot pub GetTensorMutableData: unsafe extern "system" fn(value: *mut OrtValue, out: *mut *mut c_void) -> OrtStatusPtr;
    gap _slots_52_54: [Reserved; 3];
    /// Slot 55.
    slot pub CastTypeInfoToTensorInfo: unsafe extern "system" fn(type_info: *const OrtTypeInfo, out: *mut *const OrtTensorTypeAndShapeInfo) -> OrtStatusPtr;
    gap _slots_56_59: [Reserved; 4];
    /// Slot 60.
    slot pub GetTensorElementType: unsafe extern "system" fn(info: *const OrtTensorTypeAndShapeInfo, out: *mut ONNXTensorElementDataType) -> OrtStatusPtr;
    /// Slot 61.
    slot pub GetDimensionsCount: unsafe extern "system" fn(info: *const OrtTensorTypeAndShapeInfo, out: *mut usize) -> OrtStatusPtr;
    /// Slot 62.
    slot pub GetDimensions: unsafe extern "system" fn(info: *const OrtTensorTypeAndShapeInfo, dim_values: *mut i64, dim_values_length: usize) -> OrtStatusPtr;
    gap _slots_63_64: [Reserved; 2];
    /// Slot 65.
    slot pub GetTensorTypeAndShape: unsafe extern "system" fn(value: *const OrtValue, out: *mut *mut OrtTensorTypeAndShapeInfo) -> OrtStatusPtr;
    gap _slots_66_68: [Reserved; 3];
    /// Slot 69.
    slot pub CreateCpuMemoryInfo: unsafe extern "system" fn(type_: OrtAllocatorType, mem_type: OrtMemType, out: *mut *mut OrtMemoryInfo) -> OrtStatusPtr;
    gap _slots_70_75: [Reserved; 6];
    /// Slot 76.
    slot pub AllocatorFree: unsafe extern "system" fn(ort_allocator: *mut OrtAllocator, p: *mut c_void) -> OrtStatusPtr;
    gap _slots_77_77: [Reserved; 1];
    /// Slot 78.
    slot pub GetAllocatorWithDefaultOptions: unsafe extern "system" fn(out: *mut *mut OrtAllocator) -> OrtStatusPtr;
    gap _slots_79_92: [Reserved; 14];
    /// Slot 93.
    slot pub ReleaseStatus: unsafe extern "system" fn(input: *mut OrtStatus);
    /// Slot 94.
    slot pub ReleaseMemoryInfo: unsafe extern "system" fn(input: *mut OrtMemoryInfo);
    /// Slot 95.
    slot pub ReleaseSession: unsafe extern "system" fn(input: *mut OrtSession);
    /// Slot 96.
    slot pub ReleaseValue: unsafe extern "system" fn(input: *mut OrtValue);
    gap _slots_97_97: [Reserved; 1];
    /// Slot 98.
    slot pub ReleaseTypeInfo: unsafe extern "system" fn(input: *mut OrtTypeInfo);
    /// Slot 99.
    slot pub ReleaseTensorTypeAndShapeInfo: unsafe extern "system" fn(input: *mut OrtTensorTypeAndShapeInfo);
    /// Slot 100.
    slot pub ReleaseSessionOptions: unsafe extern "system" fn(input: *mut OrtSessionOptions);
    gap _slots_101_129: [Reserved; 29];
    /// Slot 130.
    slot pub AddSessionConfigEntry: unsafe extern "system" fn(options: *mut OrtSessionOptions, config_key: *const c_char, config_value: *const c_char) -> OrtStatusPtr;
    gap _slots_131_175: [Reserved; 45];
    /// Slot 176.
    slot pub RegisterAllocator: unsafe extern "system" fn(env: *mut OrtEnv, allocator: *mut OrtAllocator) -> OrtStatusPtr;
}

impl core::fmt::Debug for OrtApi {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OrtApi").finish_non_exhaustive()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use core::mem::{align_of, offset_of, size_of};

    use super::*;

    pub(crate) struct SlotPair {
        pub(crate) name: &'static str,
        pub(crate) ours: (usize, String),
        pub(crate) theirs: (usize, String),
    }

    /// The normalised name of a field's type (`|s: &S| &s.field`).
    pub(crate) fn type_of<S, T>(_field: fn(&S) -> &T) -> String {
        normalise(core::any::type_name::<T>())
    }

    /// Drops module paths (`ort_sys::OrtEnv`, `keepalloc_onnxruntime::ffi::OrtEnv` → `OrtEnv`)
    /// so that the same C type named by two crates compares equal.
    fn normalise(name: &str) -> String {
        let mut out = String::new();
        let mut word = String::new();
        let mut chars = name.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
            } else if c == ':' && chars.peek() == Some(&':') {
                chars.next();
                word.clear();
            } else {
                out.push_str(&word);
                word.clear();
                out.push(c);
            }
        }
        out.push_str(&word);
        out
    }

    /// A mismatch for every declared slot whose index or signature differs from ort-sys's.
    pub(crate) fn slot_mismatches(slots: &[SlotPair]) -> Vec<String> {
        slots
            .iter()
            .filter(|s| s.ours != s.theirs)
            .map(|s| {
                format!(
                    "{}: ours at slot {} is {}, ort-sys's at slot {} is {}",
                    s.name,
                    s.ours.0 / size_of::<usize>(),
                    s.ours.1,
                    s.theirs.0 / size_of::<usize>(),
                    s.theirs.1
                )
            })
            .collect()
    }

    #[test]
    fn every_declared_slot_has_ort_sys_index_and_signature() {
        let slots = declared_slots();
        assert_eq!(slots.len(), 32, "the slots this crate calls");
        let mismatches = slot_mismatches(&slots);
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
        // The prefix ends with its last slot: nothing after RegisterAllocator.
        assert_eq!(
            size_of::<OrtApi>(),
            offset_of!(ort_sys::OrtApi, RegisterAllocator) + size_of::<usize>()
        );
        assert_eq!(align_of::<OrtApi>(), align_of::<ort_sys::OrtApi>());
    }

    #[test]
    fn the_check_sees_a_wrong_slot() {
        // A slot one place off, or with another signature, is reported.
        let mut slots = declared_slots();
        slots[3].ours.0 += size_of::<usize>();
        slots[5].ours.1 = slots[4].ours.1.clone();
        assert_eq!(slot_mismatches(&slots).len(), 2);
        assert_eq!(
            normalise("unsafe extern \"system\" fn(*const ort_sys::OrtEnv) -> a::b::OrtStatusPtr"),
            "unsafe extern \"system\" fn(*const OrtEnv) -> OrtStatusPtr"
        );
    }

    #[test]
    fn the_api_base_and_allocator_are_the_headers() {
        macro_rules! same_fields {
            ($ours:ty, $theirs:ty, $($f:ident),*) => {
                assert_eq!(size_of::<$ours>(), size_of::<$theirs>());
                assert_eq!(align_of::<$ours>(), align_of::<$theirs>());
                $(
                    assert_eq!(offset_of!($ours, $f), offset_of!($theirs, $f), stringify!($f));
                    assert_eq!(
                        type_of(|s: &$ours| &s.$f),
                        type_of(|s: &$theirs| &s.$f),
                        stringify!($f)
                    );
                )*
            };
        }
        same_fields!(OrtApiBase, ort_sys::OrtApiBase, GetApi, GetVersionString);
        // ort-sys adds later OrtAllocator fields behind features; version 22's are a prefix.
        assert_eq!(
            size_of::<OrtAllocator>(),
            offset_of!(ort_sys::OrtAllocator, Reserve) + size_of::<usize>()
        );
        for (ours, theirs) in [
            (
                offset_of!(OrtAllocator, version),
                offset_of!(ort_sys::OrtAllocator, version),
            ),
            (
                offset_of!(OrtAllocator, Alloc),
                offset_of!(ort_sys::OrtAllocator, Alloc),
            ),
            (
                offset_of!(OrtAllocator, Free),
                offset_of!(ort_sys::OrtAllocator, Free),
            ),
            (
                offset_of!(OrtAllocator, Info),
                offset_of!(ort_sys::OrtAllocator, Info),
            ),
            (
                offset_of!(OrtAllocator, Reserve),
                offset_of!(ort_sys::OrtAllocator, Reserve),
            ),
        ] {
            assert_eq!(ours, theirs);
        }
        assert_eq!(
            type_of(|a: &OrtAllocator| &a.Alloc),
            type_of(|a: &ort_sys::OrtAllocator| &a.Alloc)
        );
        assert_eq!(
            type_of(|a: &OrtAllocator| &a.Free),
            type_of(|a: &ort_sys::OrtAllocator| &a.Free)
        );
        assert_eq!(
            type_of(|a: &OrtAllocator| &a.Info),
            type_of(|a: &ort_sys::OrtAllocator| &a.Info)
        );
        assert_eq!(
            type_of(|a: &OrtAllocator| &a.Reserve),
            type_of(|a: &ort_sys::OrtAllocator| &a.Reserve)
        );
        assert_eq!(
            size_of::<OrtStatusPtr>(),
            size_of::<ort_sys::OrtStatusPtr>()
        );
    }

    #[test]
    fn the_enum_values_are_the_headers() {
        macro_rules! same {
            ($ty:ident :: $v:ident) => {
                assert_eq!(size_of::<$ty>(), size_of::<ort_sys::$ty>());
                assert_eq!($ty::$v.0, ort_sys::$ty::$v as i32, stringify!($v));
            };
        }
        same!(OrtErrorCode::ORT_OK);
        same!(OrtErrorCode::ORT_FAIL);
        same!(OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR);
        same!(OrtAllocatorType::OrtDeviceAllocator);
        same!(OrtAllocatorType::OrtArenaAllocator);
        same!(OrtMemType::OrtMemTypeDefault);
        same!(ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT);
    }
}
