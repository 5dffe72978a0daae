//! The f32 operator's run: every library on every shape, one row per shape, printed and
//! written as JSON and SVG.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::Options;
use crate::output::{paired_json, ratio_method, result_json};
use crate::peers::{Data, Lib};
use crate::stats::{Paired, verdict_lines};
use crate::table::{Cell, Row};
use crate::timing::median_gflops;
use crate::verify::check;
use crate::{chart, peers, probe};

/// Why current XNNPACK (the executorch wheel's) was skipped, when it was asked for and was.
pub(crate) fn current_xnnpack_missing(rows: &[Row], libs: &[Lib]) -> Option<String> {
    if !libs.contains(&Lib::XnnpackCurrent) {
        return None;
    }
    rows.iter()
        .flat_map(|r| &r.cells)
        .filter(|c| c.lib == Lib::XnnpackCurrent)
        .find_map(|c| c.gflops.as_ref().err().cloned())
}

/// The f32 operator against every peer.
/// Returns the exit code and the run's JSON.
pub(crate) fn run_f32(o: &Options) -> (ExitCode, serde_json::Value) {
    let isa = keepalloc_kernels::selected_isa().map_or_else(|e| e.to_string(), |i| i.to_string());
    println!(
        "keepalloc-kernels bench: single thread, GFLOPS = 2·M·K·N / median time; keepalloc ISA: {isa}"
    );
    // The peak is a maximum: a busy neighbour can only lower a probe, so keep the best of
    // the probes taken before and between the shapes.
    let mut peak = probe::fma_peak();
    println!("FMA peak (probe, this core, before the shapes): {peak:.1} GFLOPS");
    let mut rows = Vec::new();
    let mut wrong = Vec::new();
    for &(m, k, n) in &o.shapes {
        let d = Data::new(m, k, n);
        let reference = d.reference();
        let flops = 2.0 * (m * k * n) as f64;
        let mut out = peers::Aligned::filled(m * n, f32::NAN);
        let mut runners: Vec<(Lib, Result<peers::Runner<'_>, String>)> = o
            .libs
            .iter()
            .map(|&lib| (lib, peers::runner(lib, &d)))
            .collect();
        let medians = median_gflops(
            &mut runners,
            &mut out,
            flops,
            o.budget,
            Duration::ZERO,
            |_| None,
        );
        let mut cells = Vec::new();
        for ((lib, r), median) in runners.iter_mut().zip(medians) {
            let lib = *lib;
            let cell = match (r, median) {
                (Ok(run), Some(median)) => {
                    out.fill(f32::NAN);
                    run(&mut out);
                    let correct = check(&d, &reference, &out, lib.adds_bias());
                    if !correct {
                        wrong.push(format!("{} on {m}x{k}x{n}", lib.name()));
                    }
                    Cell {
                        lib,
                        gflops: Ok(median),
                        correct,
                    }
                }
                (Err(why), _) => Cell {
                    lib,
                    gflops: Err(why.clone()),
                    correct: true,
                },
                (Ok(_), None) => unreachable!("every runner is calibrated"),
            };
            cells.push(cell);
        }
        drop(runners);
        peak = peak.max(probe::fma_peak());
        let bandwidth = (m == 1).then(|| probe::read_bandwidth(k * n * 4));
        let row = Row {
            shape: (m, k, n),
            cells,
            bandwidth,
        };
        eprintln!("measured {}", row.label());
        rows.push(row);
    }
    println!("FMA peak (probe, best of the run): {peak:.1} GFLOPS");
    for (i, row) in rows.iter().enumerate() {
        print_row(row, peak, i == 0, &o.libs);
    }
    for line in crate::onednn::unreported_lines() {
        println!("oneDNN chose {line}");
    }
    println!("({})", ratio_method());
    let cells: Vec<(String, String, Paired)> = rows
        .iter()
        .filter_map(|row| {
            let (lib, _) = row.best_peer()?;
            Some((row.label(), lib.name().to_owned(), row.ratio_to(lib)?))
        })
        .collect();
    for line in verdict_lines(&cells) {
        println!("against the best peer: {line}");
    }
    for lib in &o.libs {
        if let Some(Cell {
            gflops: Err(why), ..
        }) = rows
            .first()
            .and_then(|r| r.cells.iter().find(|c| c.lib == *lib))
        {
            println!("{}: {why}", lib.name());
        }
    }
    if let Some(path) = rows
        .first()
        .filter(|r| r.of(Lib::XnnpackCurrent).is_some())
        .and_then(|_| crate::runtimes::executorch_xnnpack())
    {
        println!(
            "XNNPACK-2026: current XNNPACK, {} (Debian's 2022 build is `XNNPACK`)",
            path.display()
        );
    }
    if let Some(dir) = std::path::Path::new(&o.svg).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match chart::draw(&o.svg, &rows, &o.libs, peak) {
        Ok(()) => println!("SVG chart: {}", o.svg),
        Err(e) => eprintln!("SVG chart failed: {e}"),
    }
    if let Some(why) = current_xnnpack_missing(&rows, &o.libs)
        && std::env::var("CI").is_ok_and(|v| v == "true")
    {
        eprintln!("CI=true: current XNNPACK is required: {why}");
        return (ExitCode::FAILURE, json(&rows, peak, &isa));
    }
    let code = if wrong.is_empty() {
        println!("all outputs match the f64 reference");
        ExitCode::SUCCESS
    } else {
        eprintln!("WRONG RESULTS: {}", wrong.join(", "));
        ExitCode::FAILURE
    };
    (code, json(&rows, peak, &isa))
}

pub(crate) fn print_row(row: &Row, peak: f64, header: bool, libs: &[Lib]) {
    if header {
        let mut h = format!("{:<16}", "shape (MxKxN)");
        for lib in libs {
            let _ = write!(h, "{:>15}", lib.name());
        }
        let _ = write!(
            h,
            "  {:>24} {:>9} {:>7} {:>8} {:>9} {:>7}",
            "best peer", "vs best", "vs XNN", "vs XNN26", "vs oneDNN", "% peak"
        );
        let _ = write!(h, "  {:>16}", "b=1 roof GFLOPS");
        println!("{h}");
    }
    let mut line = format!("{:<16}", row.label());
    for lib in libs {
        let cell = row.cells.iter().find(|c| c.lib == *lib).unwrap();
        match &cell.gflops {
            Ok(g) => {
                let mark = if cell.correct { "" } else { "!" };
                let _ = write!(line, "{:>15}", format!("{:.1}{mark}", g.median));
            }
            Err(_) => {
                let _ = write!(line, "{:>15}", "skipped");
            }
        }
    }
    let ours = row.of(Lib::Keepalloc);
    let best = row.best_peer();
    let best_s = best.map_or("-".into(), |(l, g)| format!("{} {:.1}", l.name(), g.median));
    let ratio = |r: Option<Paired>| r.map_or("-".into(), |r| r.show());
    let _ = write!(
        line,
        "  {:>24} {:>9} {:>7} {:>8} {:>9} {:>7}",
        best_s,
        ratio(best.and_then(|(l, _)| row.ratio_to(l))),
        ratio(row.ratio_to(Lib::Xnnpack)),
        ratio(row.ratio_to(Lib::XnnpackCurrent)),
        ratio(row.ratio_to(Lib::OneDnn)),
        ours.map_or("-".into(), |g| format!("{:.0}%", 100.0 * g / peak))
    );
    if let Some(bw) = row.bandwidth {
        let _ = write!(line, "  {:>16}", format!("{:.1} ({bw:.0} GB/s)", bw / 2.0));
    }
    println!("{line}");
}

pub(crate) fn json(rows: &[Row], peak: f64, isa: &str) -> serde_json::Value {
    let shapes: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let (m, k, n) = row.shape;
            let mut o = serde_json::json!({ "m": m, "k": k, "n": n });
            if let Some(bw) = row.bandwidth {
                o["read_bandwidth_gbs"] = bw.into();
                o["memory_roof_gflops"] = (bw / 2.0).into();
            }
            o["results"] = row
                .cells
                .iter()
                .map(|c| (c.lib.name().to_owned(), result_json(&c.gflops, c.correct)))
                .collect::<serde_json::Map<_, _>>()
                .into();
            let best = row.best_peer();
            o["ratios"] = serde_json::json!({
                "best_peer": best.map(|(l, _)| l.name()),
                "vs_best_peer": paired_json(best.and_then(|(l, _)| row.ratio_to(l))),
                "vs_XNNPACK": paired_json(row.ratio_to(Lib::Xnnpack)),
                "vs_XNNPACK-2026": paired_json(row.ratio_to(Lib::XnnpackCurrent)),
                "vs_oneDNN": paired_json(row.ratio_to(Lib::OneDnn)),
            });
            o
        })
        .collect();
    serde_json::json!({
        "fma_peak_gflops": peak,
        "keepalloc_isa": isa,
        "threads": 1,
        "ratio_method": ratio_method(),
        "onednn_implementations": crate::onednn::chosen_json(),
        "shapes": shapes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::measured;

    #[test]
    fn json_keeps_every_figure_and_reason() {
        let why = "dlopen(\"C:\\x\"): no such file\nsecond line\t\u{1}";
        let rows = [Row {
            shape: (1, 2, 3),
            cells: vec![
                Cell {
                    lib: Lib::ALL[0],
                    gflops: Ok(measured(&[12.0, 12.5, 13.0], &[true, false, true])),
                    correct: true,
                },
                Cell {
                    lib: Lib::ALL[1],
                    gflops: Err(why.into()),
                    correct: true,
                },
            ],
            bandwidth: Some(20.0),
        }];
        let v = json(&rows, 170.0, "avx512");
        assert_eq!(v["fma_peak_gflops"], 170.0);
        let shape = &v["shapes"][0];
        assert_eq!(
            (&shape["m"], &shape["k"], &shape["n"]),
            (&1.into(), &2.into(), &3.into())
        );
        assert_eq!(shape["memory_roof_gflops"], 10.0);
        let results = &shape["results"];
        assert_eq!(results[Lib::ALL[0].name()]["gflops"], 12.5);
        assert_eq!(
            results[Lib::ALL[0].name()]["round_gflops"],
            serde_json::json!([12.0, 12.5, 13.0])
        );
        assert_eq!(
            results[Lib::ALL[0].name()]["round_steady"],
            serde_json::json!([true, false, true])
        );
        assert_eq!(results[Lib::ALL[0].name()]["correct"], true);
        assert_eq!(results[Lib::ALL[1].name()]["skipped"], why);
    }
}
