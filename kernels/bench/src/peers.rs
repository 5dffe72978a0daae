//! The libraries under comparison, each behind the same closure: `run(output)` computes
//! `output[M][N]` for the shape's fixed input and weights. Setup (operator creation, weight
//! packing, transposition) happens once, outside the timed closure.

use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc};
use keepalloc_xnnpack::current::{F32Fc, Geometry, Library};

/// A buffer of `len` values whose first one is 64-byte aligned: how a runtime hands tensors
/// to its kernels (ONNX Runtime's CPU allocator aligns to MLAS's preferred buffer alignment,
/// 64 bytes on x86-64; TensorFlow Lite's arena to `kDefaultTensorAlignment`, 64). A plain
/// `Vec<f32>` of more than 128 KiB comes from glibc's `mmap` at 16 bytes past a page, so
/// each 64-byte store of a kernel would straddle two cache lines, and two threads writing
/// neighbouring columns of a row would share the line between them. Every library timed
/// gets the same buffers.
pub struct Aligned<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Aligned<T> {
    /// `len` copies of `value`.
    pub fn filled(len: usize, value: T) -> Aligned<T> {
        let size = size_of::<T>();
        assert!(
            size > 0 && 64 % size == 0,
            "an element size that divides 64"
        );
        let buf = vec![value; len + 64 / size];
        let start = (64 - buf.as_ptr() as usize % 64) % 64 / size;
        Aligned { buf, start, len }
    }

    /// A copy of `values`.
    pub fn copied(values: &[T]) -> Aligned<T> {
        let mut a = Aligned::filled(values.len(), T::default());
        a.copy_from_slice(values);
        a
    }
}

impl<T> core::ops::Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl<T> core::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// One shape's data.
pub struct Data {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// `m × k`, plus 16 floats of slack (XNNPACK may read `XNN_EXTRA_BYTES` past the end);
    /// 64-byte aligned, as a runtime's tensors are.
    pub x: Aligned<f32>,
    /// `[N][K]`, XNNPACK's default layout.
    pub w: Vec<f32>,
    /// `[K][N]`, pre-transposed for matrixmultiply, gemm and OpenBLAS sgemm.
    pub wt: Vec<f32>,
    pub bias: Vec<f32>,
}

impl Data {
    pub fn new(m: usize, k: usize, n: usize) -> Data {
        let mut state = 0x2545_F491_4F6C_DD1Du64 ^ ((m * 31 + k) * 131 + n) as u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut x: Vec<f32> = (0..m * k).map(|_| next()).collect();
        x.extend([0.0; 16]);
        let x = Aligned::copied(&x);
        let w: Vec<f32> = (0..n * k).map(|_| next()).collect();
        let mut wt = vec![0.0; k * n];
        for i in 0..n {
            for j in 0..k {
                wt[j * n + i] = w[i * k + j];
            }
        }
        let bias = (0..n).map(|_| next()).collect();
        Data {
            m,
            k,
            n,
            x,
            w,
            wt,
            bias,
        }
    }

    /// `(x·Wᵀ without bias, error bound)` per output, accumulated in f64.
    pub fn reference(&self) -> Vec<(f64, f64)> {
        let mut out = vec![(0.0, 0.0); self.m * self.n];
        for i in 0..self.m {
            let x = &self.x[i * self.k..(i + 1) * self.k];
            for j in 0..self.n {
                let w = &self.w[j * self.k..(j + 1) * self.k];
                let (mut s, mut a) = (0.0f64, 0.0f64);
                for (&xv, &wv) in x.iter().zip(w) {
                    let t = xv as f64 * wv as f64;
                    s += t;
                    a += t.abs();
                }
                out[i * self.n + j] = (s, a * (self.k as f64 + 2.0) * f32::EPSILON as f64);
            }
        }
        out
    }
}

/// A library in the comparison.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lib {
    Keepalloc,
    Xnnpack,
    /// Current XNNPACK: the executorch 1.5.1 wheel's, loaded with `dlmopen`
    /// (`keepalloc_xnnpack::current`).
    XnnpackCurrent,
    OpenBlas,
    MatrixMultiply,
    Gemm,
    /// oneDNN v3.2's matmul, weights reordered once into its layout (`onednn`).
    OneDnn,
}

impl Lib {
    pub const ALL: [Lib; 7] = [
        Lib::Keepalloc,
        Lib::Xnnpack,
        Lib::XnnpackCurrent,
        Lib::OpenBlas,
        Lib::MatrixMultiply,
        Lib::Gemm,
        Lib::OneDnn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lib::Keepalloc => "keepalloc",
            Lib::Xnnpack => "XNNPACK",
            Lib::XnnpackCurrent => "XNNPACK-2026",
            Lib::OpenBlas => "OpenBLAS",
            Lib::MatrixMultiply => "matrixmultiply",
            Lib::Gemm => "gemm",
            Lib::OneDnn => "oneDNN",
        }
    }

    /// Whether its output includes the bias (the FC operators do; the GEMMs compute x·W).
    pub fn adds_bias(self) -> bool {
        matches!(
            self,
            Lib::Keepalloc | Lib::Xnnpack | Lib::XnnpackCurrent | Lib::OneDnn
        )
    }
}

/// Current XNNPACK for a comparison: found (`crate::runtimes::executorch_xnnpack`)
/// and loaded once, or a sentence saying why not.
pub(crate) fn xnnpack_current() -> Result<&'static Library, String> {
    let path = crate::runtimes::executorch_xnnpack().ok_or_else(|| {
        "not found: run `cargo xtask runtimes` (it fetches the executorch 1.5.1 wheel and \
         writes target/runtimes/runtimes.json; KEEPALLOC_XNNPACK_CURRENT overrides the path)"
            .to_string()
    })?;
    // SAFETY: the pinned executorch 1.5.1 wheel's XNNPACK backend (hash-checked when fetched), a 2026 XNNPACK whose constructors only initialize it; or the file KEEPALLOC_XNNPACK_CURRENT names, which whoever sets it vouches for.
    unsafe { Library::load(&path) }.map_err(|e| e.to_string())
}

/// The timed closure of one library.
pub type Runner<'a> = Box<dyn FnMut(&mut [f32]) + 'a>;

static SYSTEM: System = System;
/// The one table of the bench: keepalloc-kernels captures a single table per process.
pub(crate) static TABLE: AllocatorTable = AllocatorTable::for_allocator(&SYSTEM);

/// Builds `lib`'s runner for `d`, or says why it is skipped.
pub fn runner(lib: Lib, d: &Data) -> Result<Runner<'_>, String> {
    match lib {
        Lib::Keepalloc => {
            keepalloc_kernels::initialize(&TABLE).map_err(|e| e.to_string())?;
            let op =
                FullyConnected::create(&FullyConnectedDesc::new(d.k, d.n, &d.w).with_bias(&d.bias))
                    .map_err(|e| e.to_string())?;
            let m = d.m;
            Ok(Box::new(move |out| {
                op.run(m, &d.x, out).expect("keepalloc run")
            }))
        }
        Lib::Xnnpack => xnnpack::runner(d, core::ptr::null_mut()),
        Lib::XnnpackCurrent => {
            let xnn = xnnpack_current()?;
            let g = Geometry {
                k: d.k,
                n: d.n,
                m: d.m,
            };
            let mut op = F32Fc::new(xnn, g, &d.w, &d.bias)?;
            Ok(Box::new(move |out| {
                op.run(&d.x, out).expect("current XNNPACK run")
            }))
        }
        Lib::OpenBlas => openblas::runner(d, 1),
        Lib::OneDnn => crate::onednn::f32_runner(d, 1),
        Lib::MatrixMultiply => Ok(Box::new(move |out| {
            // SAFETY: x is m × k (row stride k), wt is k × n (row stride n), out is m × n.
            unsafe {
                matrixmultiply::sgemm(
                    d.m,
                    d.k,
                    d.n,
                    1.0,
                    d.x.as_ptr(),
                    d.k as isize,
                    1,
                    d.wt.as_ptr(),
                    d.n as isize,
                    1,
                    0.0,
                    out.as_mut_ptr(),
                    d.n as isize,
                    1,
                )
            }
        })),
        Lib::Gemm => Ok(Box::new(move |out| {
            // SAFETY: as for matrixmultiply; gemm takes (column stride, row stride) pairs.
            unsafe {
                gemm::gemm(
                    d.m,
                    d.n,
                    d.k,
                    out.as_mut_ptr(),
                    1,
                    d.n as isize,
                    false,
                    d.x.as_ptr(),
                    1,
                    d.k as isize,
                    d.wt.as_ptr(),
                    1,
                    d.n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        })),
    }
}

/// Debian's 2022 XNNPACK, the `XNNPACK` column: keepalloc-xnnpack's entry points of
/// libxnnpack-dev's library (`dlopen`, never linked: a machine without it skips the column).
pub(crate) mod xnnpack {
    use core::ffi::c_void;
    use core::ptr;
    use std::sync::OnceLock;

    use keepalloc_xnnpack::{Debian2022Api, XNN_STATUS_SUCCESS};

    use super::{Data, Runner};

    /// The entry points, loaded once, or why the column is skipped.
    fn api() -> Result<&'static Debian2022Api, String> {
        static API: OnceLock<Result<Debian2022Api, String>> = OnceLock::new();
        API.get_or_init(|| {
            // SAFETY: libxnnpack-dev's libXNNPACK.so.0 is Debian's 2022 XNNPACK, whose constructors are safe to run here.
            unsafe { Debian2022Api::load_installed() }
                .map_err(|e| format!("skipped (libxnnpack-dev not installed: {e})"))
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    struct Op(&'static Debian2022Api, *mut c_void);

    impl Drop for Op {
        fn drop(&mut self) {
            // SAFETY: a live operator from xnn_create_*, deleted once.
            unsafe { (self.0.delete_operator)(self.1) };
        }
    }

    /// Debian's 2022 XNNPACK on `pool` (a pthreadpool, or NULL for the calling thread). The
    /// single-thread bench and `--threads T` share it.
    pub fn runner(d: &Data, pool: *mut c_void) -> Result<Runner<'_>, String> {
        let xnn = api()?;
        // SAFETY: NULL selects XNNPACK's default allocator; repeated calls are allowed.
        let status = unsafe { (xnn.initialize)(ptr::null()) };
        if status != XNN_STATUS_SUCCESS {
            return Err(format!("xnn_initialize failed: status {status}"));
        }
        let mut raw = ptr::null_mut();
        // SAFETY: the weights are n × k and the bias n floats; both are copied (packed).
        let status = unsafe {
            (xnn.create_fully_connected_nc_f32)(
                d.k,
                d.n,
                d.k,
                d.n,
                d.w.as_ptr(),
                d.bias.as_ptr(),
                f32::NEG_INFINITY,
                f32::INFINITY,
                0,
                &mut raw,
            )
        };
        if status != XNN_STATUS_SUCCESS {
            return Err(format!(
                "xnn_create_fully_connected_nc_f32 failed: status {status}"
            ));
        }
        let op = Op(xnn, raw);
        let mut bound: *mut f32 = ptr::null_mut();
        Ok(Box::new(move |out: &mut [f32]| {
            // Capture the whole `Op` (not just its Copy pointer field), so the operator is
            // deleted when the runner is dropped, not when this function returns.
            let op = &op;
            if bound != out.as_mut_ptr() {
                bound = out.as_mut_ptr();
                // X holds m rows of k floats plus XNN_EXTRA_BYTES of slack; out holds
                // m × n floats and stays alive while the operator runs on it.
                // SAFETY: x and out hold what the operator reads and writes, and outlive the run; `pool` is NULL or a live pthreadpool (Debian's, the library XNNPACK itself loads).
                let status = unsafe {
                    (xnn.setup_fully_connected_nc_f32)(op.1, d.m, d.x.as_ptr(), bound, pool)
                };
                assert_eq!(
                    status, XNN_STATUS_SUCCESS,
                    "xnn_setup_fully_connected_nc_f32"
                );
            }
            // SAFETY: the operator was set up on this output buffer, with this `pool`.
            let status = unsafe { (xnn.run_operator)(op.1, pool) };
            assert_eq!(status, XNN_STATUS_SUCCESS, "xnn_run_operator");
        }))
    }
}

#[cfg(have_openblas)]
pub(crate) mod openblas {
    use core::ffi::c_int;

    use super::{Data, Runner};

    const ROW_MAJOR: c_int = 101;
    const NO_TRANS: c_int = 111;

    unsafe extern "C" {
        fn openblas_get_corename() -> *const core::ffi::c_char;
        fn openblas_set_num_threads(threads: c_int);
        #[allow(clippy::too_many_arguments)]
        fn cblas_sgemm(
            order: c_int,
            trans_a: c_int,
            trans_b: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: f32,
            a: *const f32,
            lda: c_int,
            b: *const f32,
            ldb: c_int,
            beta: f32,
            c: *mut f32,
            ldc: c_int,
        );
        #[allow(clippy::too_many_arguments)]
        fn cblas_sgemv(
            order: c_int,
            trans: c_int,
            m: c_int,
            n: c_int,
            alpha: f32,
            a: *const f32,
            lda: c_int,
            x: *const f32,
            incx: c_int,
            beta: f32,
            y: *mut f32,
            incy: c_int,
        );
    }

    /// The kernel family OpenBLAS picked at load time (`openblas_get_corename`).
    pub fn core_name() -> String {
        // SAFETY: returns a static NUL-terminated string (or NULL).
        let p = unsafe { openblas_get_corename() };
        if p.is_null() {
            return "unknown".into();
        }
        // SAFETY: non-NULL: a static C string.
        unsafe { core::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    /// The core type to ask OpenBLAS for when the one it detected is weaker than this CPU:
    /// Debian's OpenBLAS 0.3.21 does not know recent Intel models (this machine's Xeon,
    /// family 6 model 207, is taken for a "Prescott": SSE3 kernels, a tenth of the speed),
    /// and a peer that runs the wrong kernels is no comparison. `None` when the detected
    /// core already matches the CPU's vector width (or the user chose one).
    pub fn better_core() -> Option<&'static str> {
        if std::env::var_os("OPENBLAS_CORETYPE").is_some() {
            return None;
        }
        let detected = core_name().to_ascii_lowercase();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            const AVX512: [&str; 3] = ["skylakex", "cooperlake", "sapphirerapids"];
            const AVX2: [&str; 4] = ["haswell", "zen", "skylakex", "cooperlake"];
            if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") {
                return (!AVX512.iter().any(|c| detected.contains(c))).then_some("SkylakeX");
            }
            if has!("avx2") && has!("fma") {
                return (!AVX2.iter().any(|c| detected.contains(c))).then_some("Haswell");
            }
        }
        let _ = detected;
        None
    }

    /// OpenBLAS on `threads` threads (`openblas_set_num_threads`): `cblas_sgemv` for batch 1,
    /// `cblas_sgemm` otherwise. The single-thread bench and `--threads T` share it.
    pub fn runner(d: &Data, threads: usize) -> Result<Runner<'_>, String> {
        let dim =
            |v: usize| c_int::try_from(v).map_err(|_| "dimension too large for cblas".to_string());
        let (m, k, n, t) = (dim(d.m)?, dim(d.k)?, dim(d.n)?, dim(threads)?);
        // SAFETY: a plain setter (nothing else in a run changes it).
        unsafe { openblas_set_num_threads(t) };
        if d.m == 1 {
            // y[N] = W[N][K] · x: row-major, no transpose (dot products of W's rows).
            return Ok(Box::new(move |out: &mut [f32]| {
                // SAFETY: W is n × k row-major, x has k floats, out has n.
                unsafe {
                    cblas_sgemv(
                        ROW_MAJOR,
                        NO_TRANS,
                        n,
                        k,
                        1.0,
                        d.w.as_ptr(),
                        k,
                        d.x.as_ptr(),
                        1,
                        0.0,
                        out.as_mut_ptr(),
                        1,
                    )
                }
            }));
        }
        Ok(Box::new(move |out: &mut [f32]| {
            // SAFETY: x is m × k, wt is k × n, out is m × n, all row-major.
            unsafe {
                cblas_sgemm(
                    ROW_MAJOR,
                    NO_TRANS,
                    NO_TRANS,
                    m,
                    n,
                    k,
                    1.0,
                    d.x.as_ptr(),
                    k,
                    d.wt.as_ptr(),
                    n,
                    0.0,
                    out.as_mut_ptr(),
                    n,
                )
            }
        }))
    }
}

#[cfg(not(have_openblas))]
pub(crate) mod openblas {
    use super::{Data, Runner};

    pub fn runner(_: &Data, _: usize) -> Result<Runner<'_>, String> {
        Err("skipped (libopenblas-dev not installed)".into())
    }

    pub fn core_name() -> String {
        "not installed".into()
    }

    pub fn better_core() -> Option<&'static str> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Aligned;

    #[test]
    fn aligned_buffers_start_on_a_cache_line_and_hold_what_was_put_in() {
        // Small (from malloc's bins) and large (from mmap, 16 bytes past a page) buffers.
        for len in [0, 1, 17, 4096, 1 << 20] {
            let a = Aligned::filled(len, 1.5f32);
            assert_eq!(a.len(), len);
            assert_eq!(a.as_ptr() as usize % 64, 0, "len {len}");
            assert!(a.iter().all(|&v| v == 1.5));
            let values: Vec<u16> = (0..len).map(|i| i as u16).collect();
            let b = Aligned::copied(&values);
            assert_eq!(&b[..], &values[..]);
            assert_eq!(b.as_ptr() as usize % 64, 0, "len {len}");
        }
        let mut c = Aligned::filled(100, 0.0f32);
        c[99] = 2.0;
        assert_eq!(c.iter().sum::<f32>(), 2.0);
    }
}
