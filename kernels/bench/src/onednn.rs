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

use keepalloc_xnnpack::ffi::{dl_error, symbol};

use crate::peers::Aligned;

type Status = c_int;
type Handle = *mut c_void;
type Dims = [i64; 12];

const SUCCESS: Status = 0;
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

// SAFETY: the engine and stream are only used from one thread at a time (the bench's), and
// the function pointers are plain code addresses.
unsafe impl Send for OneDnn {}
// SAFETY: as above.
unsafe impl Sync for OneDnn {}

fn check(what: &str, status: Status) -> Result<(), String> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(format!("oneDNN {what} failed: dnnl_status {status}"))
    }
}

impl OneDnn {
    /// The pinned wheel's library (fetched first if `target/runtimes` lacks it), loaded once.
    pub fn get() -> Result<&'static OneDnn, String> {
        static LOADED: std::sync::OnceLock<Result<&'static OneDnn, String>> =
            std::sync::OnceLock::new();
        LOADED
            .get_or_init(|| {
                let rt = keepalloc_testkit::runtimes::ensure()?;
                OneDnn::load(&rt.onednn).map(|d| &*Box::leak(Box::new(d)))
            })
            .clone()
    }

    fn load(path: &Path) -> Result<OneDnn, String> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path; loading runs oneDNN's and libgomp's constructors.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {}: {}", path.display(), dl_error()));
        }
        // SAFETY: each name has the signature of its field (oneDNN v3.2's dnnl.h; libgomp's
        // omp.h for omp_set_num_threads, found through the library's dependencies).
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
        // SAFETY: out-pointers to locals; the engine outlives the stream (both kept for
        // the process's life).
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
        // SAFETY: `primitive` is live; each argument's memory is live and over a buffer of
        // its descriptor's size (callers).
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
        // SAFETY: `pd` is a live primitive descriptor, destroyed once here; the info string
        // is copied before that.
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
        // SAFETY: the memory is live; the caller's buffer is its descriptor's size and
        // outlives the execute that follows.
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

/// The weights of a matmul as the caller holds them, `[N][K]`.
pub enum Weights<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
    /// The int8 weights and their per-output-channel scales.
    S8(&'a [i8], &'a [f32]),
}

/// `y[M][N] = x[M][K] · W[N][K]ᵀ + b[N]` as one oneDNN matmul primitive.
pub struct Matmul {
    // Fields drop in order: the primitive and memories before the buffers they wrap.
    prim: Primitive<'static>,
    src: Memory<'static>,
    dst: Memory<'static>,
    wei: Memory<'static>,
    bias: Memory<'static>,
    quant: Option<Quant>,
    _wei_buf: Aligned<u8>,
    _bias_buf: Vec<f32>,
    threads: c_int,
    dnnl: &'static OneDnn,
    /// The implementation oneDNN chose (`brg:avx512_core_amx`, …).
    pub implementation: String,
}

/// The u8s8 run-time arguments: the input's scale and zero point, the weights' scales.
struct Quant {
    src_scale: Memory<'static>,
    src_zero: Memory<'static>,
    wei_scales: Memory<'static>,
    src_scale_buf: Box<f32>,
    src_zero_buf: Box<i32>,
    _wei_scales_buf: Vec<f32>,
}

impl Matmul {
    /// Builds the primitive for `m` rows and reorders `weights` (`[N][K]`) once.
    pub fn new(
        dnnl: &'static OneDnn,
        (m, k, n): (usize, usize, usize),
        weights: Weights<'_>,
        bias: &[f32],
        threads: usize,
    ) -> Result<Matmul, String> {
        let (src_t, wei_t, user_wei): (c_int, c_int, *const c_void) = match weights {
            Weights::F32(w) => {
                assert_eq!(w.len(), n * k);
                (F32, F32, w.as_ptr().cast())
            }
            Weights::Bf16(w) => {
                assert_eq!(w.len(), n * k);
                (BF16, BF16, w.as_ptr().cast())
            }
            Weights::S8(w, s) => {
                assert_eq!((w.len(), s.len()), (n * k, n));
                (U8, S8, w.as_ptr().cast())
            }
        };
        assert_eq!(bias.len(), n);
        let src_md = dnnl.md(m, k, src_t, TAG_AB)?;
        let wei_any = dnnl.md(k, n, wei_t, TAG_ANY)?;
        let bias_md = dnnl.md(1, n, F32, TAG_AB)?;
        let dst_md = dnnl.md(m, n, F32, TAG_AB)?;
        let attr = Attr::new(dnnl)?;
        if wei_t == S8 {
            attr.scales_mask(ARG_SRC, 0)?;
            attr.zero_points_mask(ARG_SRC, 0)?;
            // Per output channel: bit 1 of the (K, N) weights' dimensions.
            attr.scales_mask(ARG_WEIGHTS, 1 << 1)?;
        }
        let mut pd = core::ptr::null_mut();
        // SAFETY: live descriptors and attribute; out-pointer to a local.
        check("matmul_primitive_desc_create", unsafe {
            (dnnl.api.matmul_pd_create)(
                &mut pd,
                dnnl.engine,
                src_md.md,
                wei_any.md,
                bias_md.md,
                dst_md.md,
                attr.0,
            )
        })?;
        // The layout the primitive chose for the weights (owned by `pd`, used before the
        // primitive consumes it): the caller's [N][K], dims (K, N) tag `ba`, is reordered
        // into it once.
        // SAFETY: `pd` is live; the returned descriptor lives as long as it.
        let wei_md = unsafe { (dnnl.api.pd_query_md)(pd, QUERY_WEIGHTS_MD, 0) };
        let packed = (|| {
            // SAFETY: `wei_md` is live (above).
            let bytes = unsafe { (dnnl.api.md_get_size)(wei_md) };
            let mut buf = Aligned::<u8>::filled(bytes, 0);
            let wei = dnnl.memory(wei_md, buf.as_mut_ptr().cast())?;
            let user_md = dnnl.md(k, n, wei_t, TAG_BA)?;
            let user = dnnl.memory(user_md.md, user_wei.cast_mut())?;
            dnnl.reorder(&user, user_md.md, &wei, wei_md, None)?;
            Ok::<_, String>((buf, wei))
        })();
        let (prim, implementation) = dnnl.primitive(pd)?;
        let (wei_buf, wei) = packed?;
        let mut bias_buf = bias.to_vec();
        let bias_mem = dnnl.memory(bias_md.md, bias_buf.as_mut_ptr().cast())?;
        let quant = match weights {
            Weights::S8(_, scales) => {
                let one = dnnl.md(0, 1, F32, TAG_A)?;
                let one_i = dnnl.md(0, 1, S32, TAG_A)?;
                let per_n = dnnl.md(0, n, F32, TAG_A)?;
                let mut src_scale_buf = Box::new(1.0f32);
                let mut src_zero_buf = Box::new(0i32);
                let mut wei_scales_buf = scales.to_vec();
                Some(Quant {
                    src_scale: dnnl.memory(one.md, (&raw mut *src_scale_buf).cast())?,
                    src_zero: dnnl.memory(one_i.md, (&raw mut *src_zero_buf).cast())?,
                    wei_scales: dnnl.memory(per_n.md, wei_scales_buf.as_mut_ptr().cast())?,
                    src_scale_buf,
                    src_zero_buf,
                    _wei_scales_buf: wei_scales_buf,
                })
            }
            _ => None,
        };
        Ok(Matmul {
            prim,
            src: dnnl.memory(src_md.md, core::ptr::null_mut())?,
            dst: dnnl.memory(dst_md.md, core::ptr::null_mut())?,
            wei,
            bias: bias_mem,
            quant,
            _wei_buf: wei_buf,
            _bias_buf: bias_buf,
            threads: threads as c_int,
            dnnl,
            implementation,
        })
    }

    /// Computes `y` from `x` (`m × k` values of the input type; for u8s8 quantized with
    /// `scale` and `zero_point`, which are ignored otherwise).
    ///
    /// # Safety
    /// `x` points to `m × k` readable values of the matmul's input type and `y` to `m × n`
    /// writable floats, aliased by nothing else for the call.
    pub unsafe fn run(
        &mut self,
        x: *const c_void,
        y: *mut f32,
        scale: f32,
        zero_point: i32,
    ) -> Result<(), String> {
        self.src.point_at(x)?;
        self.dst.point_at(y.cast())?;
        let mut args = vec![
            ExecArg {
                arg: ARG_SRC,
                memory: self.src.mem,
            },
            ExecArg {
                arg: ARG_WEIGHTS,
                memory: self.wei.mem,
            },
            ExecArg {
                arg: ARG_BIAS,
                memory: self.bias.mem,
            },
            ExecArg {
                arg: ARG_DST,
                memory: self.dst.mem,
            },
        ];
        if let Some(q) = &mut self.quant {
            *q.src_scale_buf = scale;
            *q.src_zero_buf = zero_point;
            args.extend([
                ExecArg {
                    arg: ARG_ATTR_SCALES | ARG_SRC,
                    memory: q.src_scale.mem,
                },
                ExecArg {
                    arg: ARG_ATTR_ZERO_POINTS | ARG_SRC,
                    memory: q.src_zero.mem,
                },
                ExecArg {
                    arg: ARG_ATTR_SCALES | ARG_WEIGHTS,
                    memory: q.wei_scales.mem,
                },
            ]);
        }
        // SAFETY: plain call into libgomp; the ICV is this thread's.
        unsafe { (self.dnnl.api.omp_set_num_threads)(self.threads) };
        self.dnnl.execute(self.prim.prim, &args)
    }
}

/// The per-tensor quantization a runtime does before a u8s8 matmul: the input's range (a
/// min/max pass), then `q = sat_u8(round(x / scale) + zero_point)`, by whichever of two
/// ways is faster here (timed once, at construction): oneDNN's own reorder f32 → u8 with
/// that scale and zero point, or a hand-written AVX-512 pass. oneDNN's quantizing column
/// is then never slowed by a slow quantizer of ours or of its own.
pub struct Quantizer {
    prim: Primitive<'static>,
    src: Memory<'static>,
    dst: Memory<'static>,
    scale: Memory<'static>,
    zero: Memory<'static>,
    scale_buf: Box<f32>,
    zero_buf: Box<i32>,
    threads: c_int,
    dnnl: &'static OneDnn,
    /// The AVX-512 pass is the faster.
    own: bool,
}

impl Quantizer {
    /// For `m × k` inputs; `x` is a sample input the two ways are timed on.
    pub fn new(
        dnnl: &'static OneDnn,
        x: &[f32],
        (m, k): (usize, usize),
        threads: usize,
    ) -> Result<Quantizer, String> {
        let src_md = dnnl.md(m, k, F32, TAG_AB)?;
        let dst_md = dnnl.md(m, k, U8, TAG_AB)?;
        let one = dnnl.md(0, 1, F32, TAG_A)?;
        let one_i = dnnl.md(0, 1, S32, TAG_A)?;
        let mut scale_buf = Box::new(1.0f32);
        let mut zero_buf = Box::new(0i32);
        let (prim, name) = dnnl.reorder_primitive(src_md.md, dst_md.md, true)?;
        let mut quantizer = Quantizer {
            prim,
            src: dnnl.memory(src_md.md, core::ptr::null_mut())?,
            dst: dnnl.memory(dst_md.md, core::ptr::null_mut())?,
            scale: dnnl.memory(one.md, (&raw mut *scale_buf).cast())?,
            zero: dnnl.memory(one_i.md, (&raw mut *zero_buf).cast())?,
            scale_buf,
            zero_buf,
            threads: threads as c_int,
            dnnl,
            own: false,
        };
        let mut q = vec![0u8; m * k];
        let mut time = |own: bool| -> Result<std::time::Duration, String> {
            quantizer.own = own;
            let mut best = std::time::Duration::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                quantizer.run(x, &mut q)?;
                best = best.min(t.elapsed());
            }
            Ok(best)
        };
        let theirs = time(false)?;
        let ours = if has_avx512() {
            time(true)?
        } else {
            std::time::Duration::MAX
        };
        quantizer.own = ours < theirs;
        let chosen = if quantizer.own {
            format!("AVX-512 pass ({ours:.0?}; oneDNN's {name} reorder {theirs:.0?})")
        } else {
            format!("oneDNN's {name} reorder ({theirs:.0?})")
        };
        record("quantize f32→u8", (m, k, 0), &chosen);
        Ok(quantizer)
    }

    /// Quantizes `x` into `q` (both `m × k`); returns `(scale, zero_point)` of the u8 values.
    pub fn run(&mut self, x: &[f32], q: &mut [u8]) -> Result<(f32, i32), String> {
        assert_eq!(x.len(), q.len());
        let (scale, zero) = tensor_params(x);
        if self.own {
            // SAFETY: `own` is set only where AVX-512F is present.
            unsafe { quantize_avx512(x, q, 1.0 / scale, zero) };
            return Ok((scale, zero));
        }
        *self.scale_buf = scale;
        *self.zero_buf = zero;
        self.src.point_at(x.as_ptr().cast())?;
        self.dst.point_at(q.as_mut_ptr().cast())?;
        // SAFETY: plain call into libgomp.
        unsafe { (self.dnnl.api.omp_set_num_threads)(self.threads) };
        self.dnnl.run_reorder(
            &self.prim,
            &self.src,
            &self.dst,
            Some((&self.scale, &self.zero)),
        )?;
        Ok((scale, zero))
    }
}

fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `q = sat_u8(round_ne(x · inv) + zero)`, sixteen at a time.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_avx512(x: &[f32], q: &mut [u8], inv: f32, zero: i32) {
    use core::arch::x86_64::*;
    let (vinv, vzero, vnil) = (
        _mm512_set1_ps(inv),
        _mm512_set1_epi32(zero),
        _mm512_setzero_si512(),
    );
    let n16 = x.len() / 16 * 16;
    for i in (0..n16).step_by(16) {
        // SAFETY: i + 16 <= len for both slices (asserted equal by the caller).
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            // Rounds to nearest even (the default MXCSR mode).
            let r = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vinv)), vzero);
            let b = _mm512_cvtusepi32_epi8(_mm512_max_epi32(r, vnil));
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), b);
        }
    }
    for i in n16..x.len() {
        q[i] = ((x[i] * inv).round_ties_even() as i32 + zero).clamp(0, 255) as u8;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn quantize_avx512(_: &[f32], _: &mut [u8], _: f32, _: i32) {
    unreachable!("own is never set without AVX-512")
}

/// `(scale, zero point)` of a u8 quantization of `x` whose range includes 0 (the qd8 rule,
/// over the whole tensor).
pub fn tensor_params(x: &[f32]) -> (f32, i32) {
    let (lo, hi) = min_max(x);
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    let zero = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
    (scale, zero)
}

/// The smallest and largest of `x`, sixteen lanes at a time.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16]);
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            lo[i] = lo[i].min(c[i]);
            hi[i] = hi[i].max(c[i]);
        }
    }
    for &v in tail {
        lo[0] = lo[0].min(v);
        hi[0] = hi[0].max(v);
    }
    (
        lo.into_iter().fold(f32::INFINITY, f32::min),
        hi.into_iter().fold(f32::NEG_INFINITY, f32::max),
    )
}

/// The implementations oneDNN chose in this run, `(operator, shape, name)`, in order.
static CHOSEN: std::sync::Mutex<Vec<Chosen>> = std::sync::Mutex::new(Vec::new());

/// `(operator, shape, implementation)`.
type Chosen = (String, (usize, usize, usize), String);

pub fn record(op: &str, shape: (usize, usize, usize), implementation: &str) {
    let mut chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    if !chosen.iter().any(|c| c.0 == op && c.1 == shape) {
        chosen.push((op.into(), shape, implementation.into()));
    }
}

/// What oneDNN chose for each operator, shapes grouped by implementation:
/// `f32: brg:avx512_core on 1x96x64, 4x512x512; gemm:jit on …`.
pub fn chosen_lines() -> Vec<String> {
    let chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut ops: Vec<&str> = Vec::new();
    for c in chosen.iter() {
        if !ops.contains(&c.0.as_str()) {
            ops.push(&c.0);
        }
    }
    ops.into_iter()
        .map(|op| {
            let mut by_impl: Vec<(&str, Vec<String>)> = Vec::new();
            for (_, (m, k, n), name) in chosen.iter().filter(|c| c.0 == op) {
                let shape = format!("{m}x{k}x{n}");
                match by_impl.iter_mut().find(|b| b.0 == name) {
                    Some(b) => b.1.push(shape),
                    None => by_impl.push((name, vec![shape])),
                }
            }
            let parts: Vec<String> = by_impl
                .into_iter()
                .map(|(name, shapes)| format!("{name} on {}", shapes.join(", ")))
                .collect();
            format!("{op}: {}", parts.join("; "))
        })
        .collect()
}

/// The implementations as JSON: `{"f32": {"1x96x64": "brg:avx512_core", …}, …}`.
pub fn chosen_json() -> serde_json::Value {
    let chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = serde_json::Map::new();
    for (op, (m, k, n), name) in chosen.iter() {
        let entry = out
            .entry(op.clone())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        entry[format!("{m}x{k}x{n}")] = name.clone().into();
    }
    out.into()
}

/// The f32 matmul of `d` on `threads` OpenMP threads, as a bench runner.
pub fn f32_runner(
    d: &crate::peers::Data,
    threads: usize,
) -> Result<crate::peers::Runner<'_>, String> {
    let dnnl = OneDnn::get()?;
    let mut mm = Matmul::new(dnnl, (d.m, d.k, d.n), Weights::F32(&d.w), &d.bias, threads)?;
    record(
        &format!("f32 {threads}t"),
        (d.m, d.k, d.n),
        &mm.implementation,
    );
    Ok(Box::new(move |out| {
        assert!(out.len() >= d.m * d.n);
        // SAFETY: x holds m × k floats, out m × n (asserted), borrowed for the call.
        unsafe { mm.run(d.x.as_ptr().cast(), out.as_mut_ptr(), 1.0, 0) }.expect("oneDNN run")
    }))
}
