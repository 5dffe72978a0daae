//! One oneDNN matmul primitive, built once per shape, its weights reordered once.

use core::ffi::{c_int, c_void};

use super::{
    ARG_ATTR_SCALES, ARG_ATTR_ZERO_POINTS, ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS, Attr, BF16,
    ExecArg, F32, Memory, OneDnn, Primitive, QUERY_WEIGHTS_MD, S8, S32, TAG_A, TAG_AB, TAG_ANY,
    TAG_BA, U8, check,
};
use crate::peers::Aligned;

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
