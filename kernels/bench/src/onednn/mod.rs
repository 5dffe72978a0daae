//! oneDNN, the x86 peer: its matmul primitive (f32, bf16 → f32, u8 × s8 → f32) as a runtime
//! uses it, from the pinned `onednn-cpu-gomp` wheel (`cargo xtask runtimes`), loaded with
//! `dlopen` through its C API.
//!
//! Each operator is built once, outside the timed closure: the primitive for the shape, the
//! weights reordered once from the caller's `[N][K]` into the layout the primitive asked for
//! (`format_tag_any`, its packed layout), the bias and scales in oneDNN memory. A run sets
//! the input and output handles, executes and waits on an in-order stream. The number of
//! threads is GNU OpenMP's (`omp_set_num_threads`, set before every execute: the ICV
//! belongs to the calling thread).
//!
//! The C API signatures and enum values are those of oneDNN v3.2's `dnnl.h`,
//! `dnnl_types.h` and `dnnl_common_types.h`.

use core::ffi::{CStr, c_char, c_int, c_void};
use std::ffi::CString;
use std::path::Path;

use keepalloc_xnnpack::ffi::{Namespace, open, symbol};

mod chosen;
mod matmul;
mod quantize;
mod saturating;

pub use chosen::{chosen_json, f32_runner, record, unreported_lines};
pub use matmul::{Matmul, Weights};
pub use quantize::{Quantizer, tensor_params};
pub use saturating::{dot_u8s8_pairs_saturating, has_vnni};

type Status = c_int;
type Handle = *mut c_void;
type Dims = [i64; 12];

const SUCCESS: Status = 0;
/// `dnnl_unimplemented`: no implementation of the primitive for these types on this CPU.
const UNIMPLEMENTED: Status = 3;
const ENGINE_CPU: c_int = 1;
const STREAM_IN_ORDER: u32 = 1;
const F32: c_int = 3;
const BF16: c_int = 2;
const S32: c_int = 4;
const S8: c_int = 5;
const U8: c_int = 6;
const TAG_ANY: c_int = 1;
const TAG_A: c_int = 2;
const TAG_AB: c_int = 3;
const TAG_BA: c_int = 14;
const QUERY_IMPL_INFO_STR: c_int = 8;
const QUERY_WEIGHTS_MD: c_int = 131;
const ARG_SRC: c_int = 1;
const ARG_DST: c_int = 17;
const ARG_WEIGHTS: c_int = 33;
const ARG_BIAS: c_int = 41;
const ARG_ATTR_SCALES: c_int = 4096;
const ARG_ATTR_ZERO_POINTS: c_int = 8192;

#[repr(C)]
struct ExecArg {
    arg: c_int,
    memory: Handle,
}

#[repr(C)]
struct Version {
    major: c_int,
    minor: c_int,
    patch: c_int,
    hash: *const c_char,
    cpu_runtime: u32,
    gpu_runtime: u32,
}

/// The entry points used, as `dnnl.h` declares them.
struct Api {
    engine_create: unsafe extern "C" fn(*mut Handle, c_int, usize) -> Status,
    stream_create: unsafe extern "C" fn(*mut Handle, Handle, u32) -> Status,
    stream_wait: unsafe extern "C" fn(Handle) -> Status,
    md_create_with_tag:
        unsafe extern "C" fn(*mut Handle, c_int, *const i64, c_int, c_int) -> Status,
    md_destroy: unsafe extern "C" fn(Handle) -> Status,
    md_get_size: unsafe extern "C" fn(Handle) -> usize,
    memory_create: unsafe extern "C" fn(*mut Handle, Handle, Handle, *mut c_void) -> Status,
    memory_set_data_handle: unsafe extern "C" fn(Handle, *mut c_void) -> Status,
    memory_destroy: unsafe extern "C" fn(Handle) -> Status,
    attr_create: unsafe extern "C" fn(*mut Handle) -> Status,
    attr_destroy: unsafe extern "C" fn(Handle) -> Status,
    attr_set_scales_mask: unsafe extern "C" fn(Handle, c_int, c_int) -> Status,
    attr_set_zero_points_mask: unsafe extern "C" fn(Handle, c_int, c_int) -> Status,
    matmul_pd_create:
        unsafe extern "C" fn(*mut Handle, Handle, Handle, Handle, Handle, Handle, Handle) -> Status,
    reorder_pd_create:
        unsafe extern "C" fn(*mut Handle, Handle, Handle, Handle, Handle, Handle) -> Status,
    pd_query: unsafe extern "C" fn(Handle, c_int, c_int, *mut c_void) -> Status,
    pd_query_md: unsafe extern "C" fn(Handle, c_int, c_int) -> Handle,
    pd_destroy: unsafe extern "C" fn(Handle) -> Status,
    primitive_create: unsafe extern "C" fn(*mut Handle, Handle) -> Status,
    primitive_execute: unsafe extern "C" fn(Handle, Handle, c_int, *const ExecArg) -> Status,
    primitive_destroy: unsafe extern "C" fn(Handle) -> Status,
    omp_set_num_threads: unsafe extern "C" fn(c_int),
}

/// The loaded library with one CPU engine and one in-order stream.
pub struct OneDnn {
    api: Api,
    engine: Handle,
    stream: Handle,
    /// `oneDNN v3.2.0 (<hash>)`.
    pub version: String,
}

// SAFETY: the engine and stream are only used from one thread at a time (the bench's), and the function pointers are plain code addresses.
unsafe impl Send for OneDnn {}
// SAFETY: as above.
unsafe impl Sync for OneDnn {}

fn check(what: &str, status: Status) -> Result<(), String> {
    match status {
        SUCCESS => Ok(()),
        UNIMPLEMENTED => Err(format!(
            "oneDNN has no implementation for this on this CPU ({what}: dnnl_unimplemented)"
        )),
        _ => Err(format!("oneDNN {what} failed: dnnl_status {status}")),
    }
}

impl OneDnn {
    /// The pinned wheel's library (from `cargo xtask runtimes`), loaded once.
    pub fn get() -> Result<&'static OneDnn, String> {
        static LOADED: std::sync::OnceLock<Result<&'static OneDnn, String>> =
            std::sync::OnceLock::new();
        LOADED
            .get_or_init(|| {
                let path = crate::runtimes::onednn()?;
                OneDnn::load(&path).map(|d| &*Box::leak(Box::new(d)))
            })
            .clone()
    }

    fn load(path: &Path) -> Result<OneDnn, String> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: loading runs oneDNN's and libgomp's constructors, safe to run in the bench.
        let handle = unsafe { open(&name, Namespace::Default) }
            .map_err(|why| format!("cannot load {}: {why}", path.display()))?;
        // SAFETY: each name has the signature of its field (oneDNN v3.2's dnnl.h; libgomp's omp.h for omp_set_num_threads, found through the library's dependencies).
        let api = unsafe {
            Api {
                engine_create: symbol(handle, c"dnnl_engine_create")?,
                stream_create: symbol(handle, c"dnnl_stream_create")?,
                stream_wait: symbol(handle, c"dnnl_stream_wait")?,
                md_create_with_tag: symbol(handle, c"dnnl_memory_desc_create_with_tag")?,
                md_destroy: symbol(handle, c"dnnl_memory_desc_destroy")?,
                md_get_size: symbol(handle, c"dnnl_memory_desc_get_size")?,
                memory_create: symbol(handle, c"dnnl_memory_create")?,
                memory_set_data_handle: symbol(handle, c"dnnl_memory_set_data_handle")?,
                memory_destroy: symbol(handle, c"dnnl_memory_destroy")?,
                attr_create: symbol(handle, c"dnnl_primitive_attr_create")?,
                attr_destroy: symbol(handle, c"dnnl_primitive_attr_destroy")?,
                attr_set_scales_mask: symbol(handle, c"dnnl_primitive_attr_set_scales_mask")?,
                attr_set_zero_points_mask: symbol(
                    handle,
                    c"dnnl_primitive_attr_set_zero_points_mask",
                )?,
                matmul_pd_create: symbol(handle, c"dnnl_matmul_primitive_desc_create")?,
                reorder_pd_create: symbol(handle, c"dnnl_reorder_primitive_desc_create")?,
                pd_query: symbol(handle, c"dnnl_primitive_desc_query")?,
                pd_query_md: symbol(handle, c"dnnl_primitive_desc_query_md")?,
                pd_destroy: symbol(handle, c"dnnl_primitive_desc_destroy")?,
                primitive_create: symbol(handle, c"dnnl_primitive_create")?,
                primitive_execute: symbol(handle, c"dnnl_primitive_execute")?,
                primitive_destroy: symbol(handle, c"dnnl_primitive_destroy")?,
                omp_set_num_threads: symbol(handle, c"omp_set_num_threads")?,
            }
        };
        // SAFETY: dnnl_version has the signature below and returns a pointer to a static.
        let version = unsafe {
            let f: unsafe extern "C" fn() -> *const Version = symbol(handle, c"dnnl_version")?;
            let v = &*f();
            let hash = if v.hash.is_null() {
                String::new()
            } else {
                CStr::from_ptr(v.hash).to_string_lossy().into_owned()
            };
            let hash = &hash[..hash.len().min(10)];
            format!("oneDNN v{}.{}.{} ({hash})", v.major, v.minor, v.patch)
        };
        let (mut engine, mut stream) = (core::ptr::null_mut(), core::ptr::null_mut());
        // SAFETY: out-pointers to locals; the engine outlives the stream (both kept for the process's life).
        unsafe {
            check(
                "engine_create",
                (api.engine_create)(&mut engine, ENGINE_CPU, 0),
            )?;
            check(
                "stream_create",
                (api.stream_create)(&mut stream, engine, STREAM_IN_ORDER),
            )?;
        }
        Ok(OneDnn {
            api,
            engine,
            stream,
            version,
        })
    }

    /// A plain 2-D memory descriptor.
    fn md(&self, rows: usize, cols: usize, dt: c_int, tag: c_int) -> Result<Md<'_>, String> {
        let mut dims: Dims = [0; 12];
        dims[0] = rows as i64;
        dims[1] = cols as i64;
        let ndims = if tag == TAG_A { 1 } else { 2 };
        if ndims == 1 {
            dims[0] = cols as i64;
        }
        let mut md = core::ptr::null_mut();
        // SAFETY: `dims` holds DNNL_MAX_NDIMS entries; out-pointer to a local.
        check("memory_desc_create_with_tag", unsafe {
            (self.api.md_create_with_tag)(&mut md, ndims, dims.as_ptr(), dt, tag)
        })?;
        Ok(Md { dnnl: self, md })
    }

    /// A memory object over `data` (NULL: set before each execute).
    fn memory(&self, md: Handle, data: *mut c_void) -> Result<Memory<'_>, String> {
        let mut mem = core::ptr::null_mut();
        // SAFETY: `md` is a live descriptor; the caller keeps `data` alive while `mem` is.
        check("memory_create", unsafe {
            (self.api.memory_create)(&mut mem, md, self.engine, data)
        })?;
        Ok(Memory { dnnl: self, mem })
    }

    fn execute(&self, primitive: Handle, args: &[ExecArg]) -> Result<(), String> {
        // SAFETY: `primitive` is live; each argument's memory is live and over a buffer of its descriptor's size (callers).
        unsafe {
            check(
                "primitive_execute",
                (self.api.primitive_execute)(
                    primitive,
                    self.stream,
                    args.len() as c_int,
                    args.as_ptr(),
                ),
            )?;
            check("stream_wait", (self.api.stream_wait)(self.stream))
        }
    }

    /// A primitive from `pd` (destroyed here), with the implementation it chose.
    fn primitive(&self, pd: Handle) -> Result<(Primitive<'_>, String), String> {
        let mut info: *const c_char = core::ptr::null();
        let mut prim = core::ptr::null_mut();
        // SAFETY: `pd` is a live primitive descriptor, destroyed once here; the info string is copied before that.
        unsafe {
            let queried = check(
                "primitive_desc_query",
                (self.api.pd_query)(pd, QUERY_IMPL_INFO_STR, 0, (&raw mut info).cast()),
            );
            let name = if queried.is_ok() && !info.is_null() {
                CStr::from_ptr(info).to_string_lossy().into_owned()
            } else {
                "?".into()
            };
            let made = check(
                "primitive_create",
                (self.api.primitive_create)(&mut prim, pd),
            );
            (self.api.pd_destroy)(pd);
            made?;
            Ok((Primitive { dnnl: self, prim }, name))
        }
    }
    /// Runs a reorder from `src` to `dst` once; with `quant`, the destination's per-tensor
    /// scale (a division) and zero point are those memories.
    fn reorder(
        &self,
        src: &Memory<'_>,
        src_md: Handle,
        dst: &Memory<'_>,
        dst_md: Handle,
        quant: Option<(&Memory<'_>, &Memory<'_>)>,
    ) -> Result<(), String> {
        let (prim, _) = self.reorder_primitive(src_md, dst_md, quant.is_some())?;
        self.run_reorder(&prim, src, dst, quant)
    }

    fn reorder_primitive(
        &self,
        src_md: Handle,
        dst_md: Handle,
        quantizes: bool,
    ) -> Result<(Primitive<'_>, String), String> {
        let attr = Attr::new(self)?;
        if quantizes {
            attr.scales_mask(ARG_DST, 0)?;
            attr.zero_points_mask(ARG_DST, 0)?;
        }
        let mut pd = core::ptr::null_mut();
        // SAFETY: live descriptors and attribute; out-pointer to a local.
        check("reorder_primitive_desc_create", unsafe {
            (self.api.reorder_pd_create)(&mut pd, src_md, self.engine, dst_md, self.engine, attr.0)
        })?;
        self.primitive(pd)
    }

    fn run_reorder(
        &self,
        prim: &Primitive<'_>,
        src: &Memory<'_>,
        dst: &Memory<'_>,
        quant: Option<(&Memory<'_>, &Memory<'_>)>,
    ) -> Result<(), String> {
        let mut args = vec![
            ExecArg {
                arg: ARG_SRC,
                memory: src.mem,
            },
            ExecArg {
                arg: ARG_DST,
                memory: dst.mem,
            },
        ];
        if let Some((scale, zero)) = quant {
            args.push(ExecArg {
                arg: ARG_ATTR_SCALES | ARG_DST,
                memory: scale.mem,
            });
            args.push(ExecArg {
                arg: ARG_ATTR_ZERO_POINTS | ARG_DST,
                memory: zero.mem,
            });
        }
        self.execute(prim.prim, &args)
    }
}

/// A primitive attribute.
struct Attr<'a>(Handle, &'a OneDnn);

impl<'a> Attr<'a> {
    fn new(dnnl: &'a OneDnn) -> Result<Attr<'a>, String> {
        let mut a = core::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("primitive_attr_create", unsafe {
            (dnnl.api.attr_create)(&mut a)
        })?;
        Ok(Attr(a, dnnl))
    }

    fn scales_mask(&self, arg: c_int, mask: c_int) -> Result<(), String> {
        // SAFETY: a live attribute.
        check("set_scales_mask", unsafe {
            (self.1.api.attr_set_scales_mask)(self.0, arg, mask)
        })
    }

    fn zero_points_mask(&self, arg: c_int, mask: c_int) -> Result<(), String> {
        // SAFETY: a live attribute.
        check("set_zero_points_mask", unsafe {
            (self.1.api.attr_set_zero_points_mask)(self.0, arg, mask)
        })
    }
}

impl Drop for Attr<'_> {
    fn drop(&mut self) {
        // SAFETY: created by primitive_attr_create, destroyed once.
        unsafe { (self.1.api.attr_destroy)(self.0) };
    }
}

struct Md<'a> {
    dnnl: &'a OneDnn,
    md: Handle,
}

impl Drop for Md<'_> {
    fn drop(&mut self) {
        // SAFETY: created by md_create_with_tag, destroyed once.
        unsafe { (self.dnnl.api.md_destroy)(self.md) };
    }
}

struct Memory<'a> {
    dnnl: &'a OneDnn,
    mem: Handle,
}

impl Memory<'_> {
    fn point_at(&self, data: *const c_void) -> Result<(), String> {
        // SAFETY: the memory is live; the caller's buffer is its descriptor's size and outlives the execute that follows.
        check("memory_set_data_handle", unsafe {
            (self.dnnl.api.memory_set_data_handle)(self.mem, data.cast_mut())
        })
    }
}

impl Drop for Memory<'_> {
    fn drop(&mut self) {
        // SAFETY: created by memory_create, destroyed once (before the buffer it wraps).
        unsafe { (self.dnnl.api.memory_destroy)(self.mem) };
    }
}

struct Primitive<'a> {
    dnnl: &'a OneDnn,
    prim: Handle,
}

impl Drop for Primitive<'_> {
    fn drop(&mut self) {
        // SAFETY: created by primitive_create, destroyed once.
        unsafe { (self.dnnl.api.primitive_destroy)(self.prim) };
    }
}
