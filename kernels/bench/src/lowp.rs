//! `--op bf16_f32|qd8_f32_qc8w|f32_qc8w`: the low-precision operators against current
//! XNNPACK (the executorch 1.5.1 wheel's, loaded with dlmopen) in one run.
//!
//! GOPS = 2·M·K·N / median time. Every timed closure is the whole operator: qd8 includes
//! quantizing the f32 activations (keepalloc inside `run`; XNNPACK through its
//! `convert_nc_f32_qd8` operator followed by its FC, its operator path, and through a
//! subgraph runtime of convert + FC, its subgraph path). Every library's
//! output is checked against the f64 reference of the operator's dequantized arithmetic
//! with the tolerance of `kernels/tests/common/lowp.rs` (all rows up to 2^28 multiply-adds,
//! 8 evenly spaced rows above); a mismatch fails the run. The same run measures the peak of
//! `vdpbf16ps` / `vpdpbusd` / `vpmaddwd` (and the FMA peak) before and between the shapes, keeping the
//! best. Debian's 2022 XNNPACK has none of these operators (its header predates them), so it
//! has no column.

use std::fmt::Write as _;
use std::time::Duration;

use keepalloc_kernels::{
    DotIsa, FullyConnected, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedDesc,
    FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w,
    FullyConnectedQd8F32Qc8wDesc, Parallel, ThreadPool,
};
use keepalloc_xnnpack::current::{Bf16Fc, F32Qc8wFc, Geometry, Library, Qd8Fc, Qd8Subgraph};

use crate::lowp_data::Data;
pub use crate::lowp_kind::Kind;
use crate::onednn::{self, Matmul, OneDnn, Quantizer, Weights};
use crate::peak::{Probes, amx_name, bounding_probe};
use crate::peers::Aligned;
use crate::probe::{self, DotPeak};
use crate::stats::{Measured, paired_ratio};

/// One column of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lib {
    Keepalloc,
    Xnnpack,
    /// qd8 only: XNNPACK's subgraph path (convert + FC in one runtime).
    XnnpackSubgraph,
    /// keepalloc's f32 operator on the dequantized weights (f32_qc8w's batch-1 baseline).
    KeepallocF32,
    /// oneDNN's matmul: bf16 × bf16 → f32 (bf16_f32 only).
    OneDnn,
    /// qd8 only: oneDNN's u8s8 matmul on an input quantized beforehand (per tensor).
    OneDnnU8s8,
    /// qd8 only: the f32 input quantized in the run (min/max, oneDNN's reorder to u8),
    /// then oneDNN's u8s8 matmul: the comparison with keepalloc's qd8, which quantizes too.
    OneDnnQuant,
}

impl Lib {
    fn name(self) -> &'static str {
        match self {
            Lib::Keepalloc => "keepalloc",
            Lib::Xnnpack => "XNNPACK-cur",
            Lib::XnnpackSubgraph => "XNN-subgraph",
            Lib::KeepallocF32 => "keepalloc-f32",
            Lib::OneDnn => "oneDNN",
            Lib::OneDnnU8s8 => "oneDNN-u8s8",
            Lib::OneDnnQuant => "oneDNN+quant",
        }
    }
}

type Runner<'a> = Box<dyn FnMut(&mut [f32]) + 'a>;

use crate::peers::TABLE;

fn runner<'a>(
    kind: Kind,
    lib: Lib,
    d: &'a Data,
    xnn: Option<&'static Library>,
    pool: Option<&'a ThreadPool>,
) -> Result<Runner<'a>, String> {
    let threads = pool.map_or(1, |p| p.threads());
    let (m, k, n) = (d.m, d.k, d.n);
    let g = Geometry { k, n, m };
    let e = |e: keepalloc_kernels::KernelError| e.to_string();
    match (lib, kind) {
        (Lib::Keepalloc, Kind::Bf16F32) => {
            let op = FullyConnectedBf16F32::create_with_table(
                &TABLE,
                &FullyConnectedBf16F32Desc::new(k, n, &d.wb).with_bias(&d.bias),
            )
            .map_err(e)?;
            Ok(match pool {
                Some(p) => {
                    Box::new(move |out| op.run_in(p, m, &d.xb, out).expect("keepalloc bf16 run_in"))
                }
                None => Box::new(move |out| op.run(m, &d.xb, out).expect("keepalloc bf16 run")),
            })
        }
        (Lib::Keepalloc, Kind::Qd8F32Qc8w) => {
            let op = FullyConnectedQd8F32Qc8w::create_with_table(
                &TABLE,
                &FullyConnectedQd8F32Qc8wDesc::new(k, n, &d.w8, &d.scales).with_bias(&d.bias),
            )
            .map_err(e)?;
            let mut ws = vec![0u8; op.workspace_size(m).map_err(e)?];
            Ok(match pool {
                Some(p) => Box::new(move |out| {
                    op.run_in(p, m, &d.x, out, &mut ws)
                        .expect("keepalloc qd8 run_in")
                }),
                None => {
                    Box::new(move |out| op.run(m, &d.x, out, &mut ws).expect("keepalloc qd8 run"))
                }
            })
        }
        (Lib::Keepalloc, Kind::F32Qc8w) => {
            let op = FullyConnectedF32Qc8w::create_with_table(
                &TABLE,
                &FullyConnectedF32Qc8wDesc::new(k, n, &d.w8, &d.scales).with_bias(&d.bias),
            )
            .map_err(e)?;
            Ok(match pool {
                Some(p) => Box::new(move |out| {
                    op.run_in(p, m, &d.x, out)
                        .expect("keepalloc f32_qc8w run_in")
                }),
                None => Box::new(move |out| op.run(m, &d.x, out).expect("keepalloc f32_qc8w run")),
            })
        }
        (Lib::KeepallocF32, _) => {
            // The same layer in f32: W' = ws·W, b' = ws·b.
            let w: Vec<f32> = (0..n * k)
                .map(|i| d.w8[i] as f32 * d.scales[i / k])
                .collect();
            let b: Vec<f32> = (0..n).map(|j| d.bias[j] * d.scales[j]).collect();
            let op = FullyConnected::create_with_table(
                &TABLE,
                &FullyConnectedDesc::new(k, n, &w).with_bias(&b),
            )
            .map_err(e)?;
            Ok(Box::new(move |out| {
                op.run(m, &d.x, out).expect("keepalloc f32 run")
            }))
        }
        (Lib::OneDnn, _) => {
            let dnnl = OneDnn::get()?;
            let mut mm = Matmul::new(dnnl, (m, k, n), Weights::Bf16(&d.wb), &d.bias, threads)?;
            onednn::record(
                &format!("bf16_f32 {threads}t"),
                format!("{m}x{k}x{n}"),
                &mm.implementation,
            );
            Ok(Box::new(move |out| {
                // SAFETY: xb holds m × k bf16 values, out m × n floats, borrowed for the call.
                unsafe { mm.run(d.xb.as_ptr().cast(), out.as_mut_ptr(), 1.0, 0) }
                    .expect("oneDNN bf16 run")
            }))
        }
        (Lib::OneDnnU8s8 | Lib::OneDnnQuant, _) => {
            let dnnl = OneDnn::get()?;
            let w = Weights::S8(&d.w8, &d.scales);
            let mut mm = Matmul::new(dnnl, (m, k, n), w, &d.bias, threads)?;
            onednn::record(
                &format!("u8s8_f32 {threads}t"),
                format!("{m}x{k}x{n}"),
                &mm.implementation,
            );
            if lib == Lib::OneDnnU8s8 {
                let (scale, zero) = d.tensor_q;
                return Ok(Box::new(move |out| {
                    // SAFETY: xq holds m × k bytes, out m × n floats, borrowed for the call.
                    unsafe { mm.run(d.xq.as_ptr().cast(), out.as_mut_ptr(), scale, zero) }
                        .expect("oneDNN u8s8 run")
                }));
            }
            let mut quantizer = Quantizer::new(dnnl, &d.x[..m * k], (m, k), threads)?;
            let mut q = Aligned::<u8>::filled(m * k, 0);
            Ok(Box::new(move |out| {
                let (scale, zero) = quantizer
                    .run(&d.x[..m * k], &mut q)
                    .expect("oneDNN reorder");
                // SAFETY: q holds m × k bytes, out m × n floats, borrowed for the call.
                unsafe { mm.run(q.as_ptr().cast(), out.as_mut_ptr(), scale, zero) }
                    .expect("oneDNN u8s8 run")
            }))
        }
        (Lib::XnnpackSubgraph, _) => {
            let xnn = xnn.ok_or("current XNNPACK not found (cargo xtask runtimes)")?;
            let mut sg = Qd8Subgraph::new(xnn, g, &d.w8, &d.scales, &d.bias)?;
            Ok(Box::new(move |out| {
                sg.run(&d.x, out).expect("XNNPACK subgraph run")
            }))
        }
        (Lib::Xnnpack, _) => {
            let xnn = xnn.ok_or("current XNNPACK not found (cargo xtask runtimes)")?;
            match kind {
                Kind::Bf16F32 => {
                    let mut op = Bf16Fc::new(xnn, g, &d.wb, &d.bias)?;
                    Ok(Box::new(move |out| {
                        op.run(&d.xb, out).expect("XNNPACK bf16 run")
                    }))
                }
                Kind::Qd8F32Qc8w => {
                    let mut op = Qd8Fc::new(xnn, g, &d.w8, &d.scales, &d.bias)?;
                    Ok(Box::new(move |out| {
                        op.run(&d.x, out).expect("XNNPACK qd8 run")
                    }))
                }
                Kind::F32Qc8w => {
                    let mut op = F32Qc8wFc::new(xnn, g, &d.w8, &d.scales, &d.bias)?;
                    Ok(Box::new(move |out| {
                        op.run(&d.x, out).expect("XNNPACK f32_qc8w run")
                    }))
                }
            }
        }
    }
}

/// One shape's results: GOPS (or why skipped) and correctness per library.
struct Row {
    shape: (usize, usize, usize),
    cells: Vec<(Lib, Result<Measured, String>, bool)>,
    /// Batch 1, or weights larger than L2: the GOPS at which reading the weights once at
    /// this core's measured read bandwidth for a buffer of their size takes the whole run
    /// (each weight is read at least once per run, so no kernel beats it by much).
    roof: Option<f64>,
}

impl Row {
    fn of(&self, lib: Lib) -> Option<&Measured> {
        self.cells
            .iter()
            .find(|c| c.0 == lib)
            .and_then(|c| c.1.as_ref().ok())
    }

    /// keepalloc over `lib`, paired by round ([`paired_ratio`]).
    fn ratio_to(&self, lib: Lib) -> Option<crate::stats::Paired> {
        paired_ratio(self.of(Lib::Keepalloc)?, self.of(lib)?)
    }
}

/// The larger of two optional peaks.
fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The instruction set keepalloc's operator of `kind` picks on this CPU (the choice does
/// not depend on the shape): read from a small operator.
fn keepalloc_isa(kind: Kind) -> Option<DotIsa> {
    let (k, n) = (16, 16);
    let (wb, w8, scales) = (vec![0u16; k * n], vec![0i8; k * n], vec![1.0f32; n]);
    match kind {
        Kind::Bf16F32 => FullyConnectedBf16F32::create_with_table(
            &TABLE,
            &FullyConnectedBf16F32Desc::new(k, n, &wb),
        )
        .ok()
        .map(|op| op.isa()),
        Kind::Qd8F32Qc8w => FullyConnectedQd8F32Qc8w::create_with_table(
            &TABLE,
            &FullyConnectedQd8F32Qc8wDesc::new(k, n, &w8, &scales),
        )
        .ok()
        .map(|op| op.isa()),
        Kind::F32Qc8w => FullyConnectedF32Qc8w::create_with_table(
            &TABLE,
            &FullyConnectedF32Qc8wDesc::new(k, n, &w8, &scales),
        )
        .ok()
        .map(|op| op.isa()),
    }
}

/// Runs `kinds` over `shapes`; returns false when an output was wrong.
///
/// With `threads` > 1, keepalloc runs on a `ThreadPool` of that many threads (`run_in`) and
/// oneDNN on as many OpenMP threads; XNNPACK's low-precision operators run on one thread
/// here, so they and the f32 baseline are left out.
pub fn run(
    kinds: &[Kind],
    shapes: &[(usize, usize, usize)],
    budget: Duration,
    threads: usize,
) -> (bool, serde_json::Value) {
    let pool = if threads > 1 {
        if let Err(e) = keepalloc_kernels::initialize(&TABLE) {
            eprintln!("keepalloc initialize: {e}");
            return (false, serde_json::Value::Null);
        }
        match ThreadPool::new(threads) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("ThreadPool::new({threads}): {e}");
                return (false, serde_json::Value::Null);
            }
        }
    } else {
        None
    };
    let xnn = match crate::peers::xnnpack_current() {
        Ok(x) => {
            println!("current XNNPACK: {}", x.path().display());
            Some(x)
        }
        Err(e) => {
            println!("current XNNPACK: {e}");
            None
        }
    };
    println!(
        "Debian's XNNPACK (2022): no bf16_f32, qd8_f32_qc8w or f32_qc8w operator in its header"
    );
    let mut bf16_peak = probe::dot_peak(DotPeak::Bf16).unwrap_or(0.0);
    let mut vnni_peak = probe::dot_peak(DotPeak::Vnni).unwrap_or(0.0);
    let mut madd_peak = probe::dot_peak(DotPeak::Madd).unwrap_or(0.0);
    let mut amx_bf16_peak = probe::dot_peak(DotPeak::AmxBf16);
    let mut amx_int8_peak = probe::dot_peak(DotPeak::AmxInt8);
    let l2 = probe::l2_bytes();
    match l2 {
        Some(b) => println!(
            "L2 per core: {} KiB (the memory roof is shown for weights larger)",
            b >> 10
        ),
        None => println!("L2 per core: unknown (the memory roof is shown for batch 1 only)"),
    }
    let mut fma_peak = probe::fma_peak();
    // Without VNNI, oneDNN's u8s8 is checked against its saturating arithmetic.
    let saturates = !onednn::has_vnni();
    let mut all_ok = true;
    let mut tables = String::new();
    let mut json_ops = Vec::new();
    let mut pauses = Vec::new();
    for &kind in kinds {
        let mut rows = Vec::new();
        for &(m, k, n) in shapes {
            let d = Data::new(m, k, n);
            let one = threads == 1;
            let mut libs = vec![Lib::Keepalloc];
            if one {
                libs.push(Lib::Xnnpack);
            }
            if kind == Kind::F32Qc8w && m == 1 && one {
                libs.push(Lib::KeepallocF32);
            }
            if kind == Kind::Qd8F32Qc8w {
                if one {
                    libs.push(Lib::XnnpackSubgraph);
                }
                libs.extend([Lib::OneDnnQuant, Lib::OneDnnU8s8]);
            }
            if kind == Kind::Bf16F32 {
                libs.push(Lib::OneDnn);
            }
            let flops = 2.0 * (m * k * n) as f64;
            let mut out = Aligned::filled(m * n, f32::NAN);
            let mut runners: Vec<(Lib, Result<Runner<'_>, String>)> = libs
                .iter()
                .map(|&lib| (lib, runner(kind, lib, &d, xnn, pool.as_ref())))
                .collect();
            // On a pool, each batch waits for the other library's workers to stop spinning.
            let pause = crate::timing::pause_for(threads);
            let medians =
                crate::timing::median_gflops(&mut runners, &mut out, flops, budget, pause, |_| {
                    None
                });
            let reference = d.reference(kind);
            let mut u8s8_reference = None;
            let mut requantized_reference = None;
            let mut cells = Vec::new();
            for ((lib, r), median) in runners.iter_mut().zip(medians) {
                let cell = match (r, median) {
                    (Ok(run), Some(median)) => {
                        out.fill(f32::NAN);
                        run(&mut out);
                        // The f32 baseline rounds its products differently: twice the rule.
                        let factor = if *lib == Lib::KeepallocF32 { 2.0 } else { 1.0 };
                        let reference = match lib {
                            Lib::OneDnnU8s8 => u8s8_reference
                                .get_or_insert_with(|| d.reference_u8s8(false, saturates)),
                            Lib::OneDnnQuant => requantized_reference
                                .get_or_insert_with(|| d.reference_u8s8(true, saturates)),
                            _ => &reference,
                        };
                        let ok = reference.iter().all(|(r, vals)| {
                            vals.iter().enumerate().all(|(j, &(want, tol))| {
                                (out[r * n + j] as f64 - want).abs() <= factor * tol + 1e-30
                            })
                        });
                        if !ok {
                            all_ok = false;
                            eprintln!("WRONG: {} {} on {m}x{k}x{n}", lib.name(), kind.name());
                        }
                        (*lib, Ok(median), ok)
                    }
                    (Err(why), _) => (*lib, Err(why.clone()), true),
                    (Ok(_), None) => unreachable!("every runner is calibrated"),
                };
                cells.push(cell);
            }
            drop(runners);
            match kind {
                Kind::Bf16F32 => {
                    bf16_peak = bf16_peak.max(probe::dot_peak(DotPeak::Bf16).unwrap_or(0.0));
                    fma_peak = fma_peak.max(probe::fma_peak());
                    amx_bf16_peak = max_of(amx_bf16_peak, probe::dot_peak(DotPeak::AmxBf16));
                }
                Kind::Qd8F32Qc8w => {
                    vnni_peak = vnni_peak.max(probe::dot_peak(DotPeak::Vnni).unwrap_or(0.0));
                    madd_peak = madd_peak.max(probe::dot_peak(DotPeak::Madd).unwrap_or(0.0));
                    amx_int8_peak = max_of(amx_int8_peak, probe::dot_peak(DotPeak::AmxInt8));
                }
                Kind::F32Qc8w => fma_peak = fma_peak.max(probe::fma_peak()),
            }
            eprintln!("measured {} {m}x{k}x{n}", kind.name());
            // Bytes per weight: 2 for bf16, 1 for int8; 2·K·N operations read them once.
            let weight_bytes = match kind {
                Kind::Bf16F32 => 2 * k * n,
                Kind::Qd8F32Qc8w | Kind::F32Qc8w => k * n,
            };
            let streamed = l2.map_or(m == 1, |l2| m == 1 || weight_bytes > l2);
            let roof = streamed.then(|| {
                let gbs = probe::read_bandwidth(weight_bytes);
                flops / (weight_bytes as f64 / gbs)
            });
            rows.push(Row {
                shape: (m, k, n),
                cells,
                roof,
            });
        }
        pauses.extend(
            rows.iter()
                .flat_map(|r| r.cells.iter().filter_map(|c| c.1.as_ref().ok()))
                .flat_map(|m| m.pause_ms.iter().copied()),
        );
        let isa = keepalloc_isa(kind);
        let probes = Probes {
            bf16: bf16_peak,
            vnni: vnni_peak,
            madd: madd_peak,
            fma: fma_peak,
            amx_bf16: amx_bf16_peak,
            amx_int8: amx_int8_peak,
        };
        let (peak_name, peak) = bounding_probe(kind, isa, &probes);
        let amx_peak = probes.amx(kind);
        let (dot_name, dot) = probes.dot(kind);
        let mut peaks = if dot > 0.0 {
            format!("{dot_name} peak probe {dot:.1} GOPS")
        } else {
            format!("no {dot_name} on this CPU")
        };
        if let Some(amx) = amx_peak {
            let _ = write!(peaks, ", {} (AMX) peak probe {amx:.1} GOPS", amx_name(kind));
        }
        // Said, so a reader of a run without AMX (on the CPU, or allowed by the OS) knows why
        // no AMX probe is shown.
        let no_amx = if amx_peak.is_none() && kind != Kind::F32Qc8w {
            format!(
                "; no usable AMX here (CPU, OS or permission), so no {} probe",
                amx_name(kind)
            )
        } else {
            String::new()
        };
        if peak_name != dot_name && amx_peak.is_none_or(|_| peak_name != amx_name(kind)) {
            let _ = write!(peaks, ", {peak_name} peak probe {peak:.1} GOPS");
        }
        let on = if threads == 1 {
            "single thread".to_string()
        } else {
            format!("{threads} threads (% peak: of {threads} × the one-core probe)")
        };
        let _ = writeln!(
            tables,
            "\n{}: GOPS (2·M·K·N / median time), {on}; keepalloc's ISA {}; {peaks} \
             (one core, best of the run){no_amx}; % peak is of {peak_name}; roof: one core's \
             read bandwidth of the weights",
            kind.name(),
            isa.map_or("?".into(), |i| i.to_string()),
        );
        let peak_all = peak * threads as f64;
        json_ops.push(serde_json::json!({
            "op": kind.name(),
            "threads": threads,
            "keepalloc_isa": isa.map(|i| i.to_string()),
            "peak_probe": {"instruction": peak_name, "gops_one_core": peak},
            "dot_peak_probe_gops": dot,
            "amx_peak_probe_gops": amx_peak,
            "rows": rows.iter().map(|row| row_json(row, peak_all)).collect::<Vec<_>>(),
        }));
        let mut h = format!(
            "{:<18}{:>12}{:>13}{:>10}{:>9}",
            "shape (MxKxN)", "keepalloc", "XNNPACK-cur", "vs XNN", "% peak"
        );
        if kind == Kind::F32Qc8w {
            let _ = write!(h, "{:>15}{:>10}", "keepalloc-f32", "vs f32");
        }
        if kind == Kind::Qd8F32Qc8w {
            let _ = write!(h, "{:>14}{:>13}", "XNN-subgraph", "vs best XNN");
            let _ = write!(h, "{:>14}{:>10}", "oneDNN+quant", "vs it");
            let _ = write!(h, "{:>13}{:>10}", "oneDNN-u8s8", "vs it");
        }
        if kind == Kind::Bf16F32 {
            let _ = write!(h, "{:>10}{:>11}", "oneDNN", "vs oneDNN");
        }
        let _ = write!(h, "{:>11}", "roof GOPS");
        let _ = writeln!(tables, "{h}");
        for row in &rows {
            let (m, k, n) = row.shape;
            let cell = |lib: Lib| {
                row.cells
                    .iter()
                    .find(|c| c.0 == lib)
                    .map_or("-".to_string(), |c| match &c.1 {
                        Ok(g) => {
                            let sat =
                                saturates && matches!(lib, Lib::OneDnnQuant | Lib::OneDnnU8s8);
                            let mark = match (c.2, sat) {
                                (false, _) => "!",
                                (true, true) => "s",
                                (true, false) => "",
                            };
                            format!("{:.1}{mark}", g.median)
                        }
                        Err(_) => "skipped".into(),
                    })
            };
            let ratio = |r: Option<crate::stats::Paired>| r.map_or("-".into(), |r| r.show());
            let ours = row.of(Lib::Keepalloc).map(|g| g.median);
            let mut line = format!(
                "{:<18}{:>12}{:>13}{:>10}{:>9}",
                format!("{m}x{k}x{n}"),
                cell(Lib::Keepalloc),
                cell(Lib::Xnnpack),
                ratio(row.ratio_to(Lib::Xnnpack)),
                ours.filter(|_| peak_all > 0.0)
                    .map_or("-".into(), |g| format!("{:.0}%", 100.0 * g / peak_all)),
            );
            if kind == Kind::Qd8F32Qc8w {
                // The faster XNNPACK path by median, paired by round.
                let best = match (row.of(Lib::Xnnpack), row.of(Lib::XnnpackSubgraph)) {
                    (Some(a), Some(b)) if b.median > a.median => Lib::XnnpackSubgraph,
                    (None, Some(_)) => Lib::XnnpackSubgraph,
                    _ => Lib::Xnnpack,
                };
                let _ = write!(
                    line,
                    "{:>14}{:>13}",
                    cell(Lib::XnnpackSubgraph),
                    ratio(row.ratio_to(best))
                );
                let _ = write!(
                    line,
                    "{:>14}{:>10}{:>13}{:>10}",
                    cell(Lib::OneDnnQuant),
                    ratio(row.ratio_to(Lib::OneDnnQuant)),
                    cell(Lib::OneDnnU8s8),
                    ratio(row.ratio_to(Lib::OneDnnU8s8))
                );
            }
            if kind == Kind::Bf16F32 {
                let _ = write!(
                    line,
                    "{:>10}{:>11}",
                    cell(Lib::OneDnn),
                    ratio(row.ratio_to(Lib::OneDnn))
                );
            }
            if kind == Kind::F32Qc8w {
                let _ = write!(
                    line,
                    "{:>15}{:>10}",
                    cell(Lib::KeepallocF32),
                    ratio(row.ratio_to(Lib::KeepallocF32))
                );
            }
            if let Some(roof) = row.roof {
                let _ = write!(line, "{:>11}", format!("{roof:.1}"));
            }
            let _ = writeln!(tables, "{line}");
        }
        // Why a peer was skipped (a missing library, or no kernel on this CPU).
        for (lib, why) in rows.first().into_iter().flat_map(|r| {
            r.cells
                .iter()
                .filter_map(|c| c.1.as_ref().err().map(|why| (c.0, why)))
        }) {
            let _ = writeln!(tables, "{}: skipped, {why}", lib.name());
        }
    }
    print!("{tables}");
    for line in onednn::unreported_lines() {
        println!("oneDNN chose {line}");
    }
    println!(
        "(oneDNN's int8 quantizes per tensor, keepalloc's and XNNPACK's qd8 per row; \
         oneDNN+quant times the input's quantization, by the faster of oneDNN's reorder and \
         an AVX-512 pass where the CPU has AVX-512, before its u8s8 matmul)"
    );
    if saturates && kinds.contains(&Kind::Qd8F32Qc8w) {
        println!(
            "(s: this CPU has no VNNI, so oneDNN's u8s8 sums each pair of u8·s8 products in \
             i16 with vpmaddubsw, which saturates (its documented int8 limitation); its \
             outputs are checked against that saturating arithmetic, not the exact one)"
        );
    }
    println!("({})", crate::output::ratio_method());
    if threads > 1
        && let Some(line) = crate::timing::pause_report(pauses)
    {
        println!("{line}");
    }
    if all_ok {
        println!("all outputs match their f64 references");
    }
    let json = serde_json::json!({
        "threads": threads,
        "ops": json_ops,
        "onednn": {
            "version": OneDnn::get().ok().map(|d| d.version.clone()),
            "implementations": onednn::chosen_json(),
            "u8s8_checked_as_saturating": saturates,
        },
    });
    (all_ok, json)
}

/// One row as JSON: every library's figure and correctness, keepalloc's paired ratio to
/// each, its share of `peak`, the roof.
fn row_json(row: &Row, peak: f64) -> serde_json::Value {
    use crate::output::{paired_json, result_json};
    let (m, k, n) = row.shape;
    let mut libs = serde_json::Map::new();
    let mut ratios = serde_json::Map::new();
    for (lib, r, ok) in &row.cells {
        libs.insert(lib.name().into(), result_json(r, *ok));
        if *lib != Lib::Keepalloc {
            ratios.insert(lib.name().into(), paired_json(row.ratio_to(*lib)));
        }
    }
    serde_json::json!({
        "shape": [m, k, n],
        "gops": libs,
        "keepalloc_over": ratios,
        "keepalloc_share_of_peak": row.of(Lib::Keepalloc).filter(|_| peak > 0.0).map(|g| g.median / peak),
        "roof_gops": row.roof,
    })
}
