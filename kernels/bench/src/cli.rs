//! The command line: which shapes, libraries and operators a run covers.

use std::time::Duration;

use clap::Parser;

use crate::lowp;
use crate::peers::Lib;

/// The shapes, (M, K, N).
pub(crate) const SHAPES: [(usize, usize, usize); 11] = [
    (1, 96, 64),
    (1, 256, 256),
    (1, 1536, 1536),
    (1, 4096, 4096),
    (4, 512, 512),
    (16, 1024, 1024),
    (32, 96, 1536),
    (64, 1024, 1024),
    (128, 2048, 2048),
    (256, 512, 2048),
    (512, 512, 512),
];

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "keepalloc-kernels-bench",
    about = "keepalloc-kernels against XNNPACK, OpenBLAS, matrixmultiply and gemm on the \
             issue's fully-connected shapes, single-threaded"
)]
pub(crate) struct Cli {
    /// Also write the results as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<String>,
    /// Where to draw the SVG chart.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/bench/fully_connected.svg"
    )]
    pub(crate) svg: String,
    /// Shorter timing (about 120 ms of samples a library and shape instead of 400 ms).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Only these libraries, comma-separated, any case: keepalloc, XNNPACK (Debian's, 2022),
    /// XNNPACK-2026 (current: the executorch wheel's), OpenBLAS, matrixmultiply, gemm
    /// [default: all]. Whatever the order given, the rounds time them in the order of this
    /// list, reversed every other round and one place later every two rounds.
    #[arg(long, value_name = "a,b", value_delimiter = ',', value_parser = parse_lib)]
    pub(crate) libs: Option<Vec<Lib>>,
    /// Only these shapes, comma-separated [default: the eleven, plus 128x4096x4096
    /// for the low-precision operators].
    #[arg(long, value_name = "MxKxN,...", value_delimiter = ',', value_parser = parse_shape)]
    pub(crate) shapes: Option<Vec<(usize, usize, usize)>>,
    /// Which operator: the f32 one against every peer, or a low-precision one against
    /// current XNNPACK (the executorch wheel's) and oneDNN, or all four.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16_f32", "qd8_f32_qc8w", "f32_qc8w", "all"])]
    pub(crate) op: String,
    /// Multi-threaded comparison: keepalloc on a T-thread pool (and, for f32, its 1-thread
    /// figure) against oneDNN on T OpenMP threads, and for f32 XNNPACK (Debian's and
    /// current) on a T-thread pthreadpool and OpenBLAS with T threads (`--op`, `--json`,
    /// `--quick` and `--shapes` apply).
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) threads: Option<u16>,
}

/// A library's name, any case; anything else is an error naming the choices (a name
/// dropped silently would leave a library out of the comparison unnoticed).
pub(crate) fn parse_lib(s: &str) -> Result<Lib, String> {
    Lib::ALL
        .into_iter()
        .find(|l| s.eq_ignore_ascii_case(l.name()))
        .ok_or_else(|| {
            let names: Vec<&str> = Lib::ALL.iter().map(|l| l.name()).collect();
            format!("unknown library `{s}`, want one of {}", names.join(", "))
        })
}

/// `MxKxN`, each positive.
pub(crate) fn parse_shape(s: &str) -> Result<(usize, usize, usize), String> {
    let dims: Vec<usize> = s.split('x').filter_map(|v| v.parse().ok()).collect();
    match dims[..] {
        [m, k, n] if m > 0 && k > 0 && n > 0 => Ok((m, k, n)),
        _ => Err(format!("bad shape `{s}`, want MxKxN")),
    }
}

pub(crate) struct Options {
    /// Run the f32 comparison.
    pub(crate) f32: bool,
    /// The low-precision operators to run.
    pub(crate) lowp: Vec<lowp::Kind>,
    /// `--shapes`, if given.
    pub(crate) shapes_given: Option<Vec<(usize, usize, usize)>>,
    pub(crate) json: Option<String>,
    pub(crate) svg: String,
    pub(crate) budget: Duration,
    pub(crate) libs: Vec<Lib>,
    pub(crate) shapes: Vec<(usize, usize, usize)>,
}

impl From<Cli> for Options {
    fn from(cli: Cli) -> Options {
        let lowp = lowp::Kind::ALL
            .into_iter()
            .filter(|k| cli.op == "all" || cli.op == k.name())
            .collect();
        Options {
            f32: cli.op == "f32" || cli.op == "all",
            lowp,
            shapes_given: cli.shapes.clone(),
            json: cli.json,
            svg: cli.svg,
            budget: Duration::from_millis(if cli.quick { 120 } else { 400 }),
            libs: match cli.libs {
                Some(chosen) => Lib::ALL
                    .into_iter()
                    .filter(|l| chosen.contains(l))
                    .collect(),
                None => Lib::ALL.to_vec(),
            },
            shapes: cli.shapes.unwrap_or_else(|| SHAPES.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(Options::from)
    }

    #[test]
    fn libs_are_named_in_any_case_run_in_fixed_order_and_unknown_names_are_refused() {
        let o = options(&["--libs", "gemm,OPENBLAS,keepalloc"]).unwrap();
        assert_eq!(o.libs, [Lib::Keepalloc, Lib::OpenBlas, Lib::Gemm]);
        let err = options(&["--libs", "keepalloc,xnnpack-current"])
            .err()
            .expect("an unknown library must be refused")
            .to_string();
        assert!(
            err.contains("unknown library `xnnpack-current`") && err.contains("XNNPACK-2026"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_every_library_and_shape() {
        let o = options(&[]).unwrap();
        assert_eq!(o.libs, Lib::ALL);
        assert_eq!(o.shapes, SHAPES);
        assert_eq!(o.svg, "target/bench/fully_connected.svg");
        assert_eq!(o.budget, Duration::from_millis(400));
    }

    #[test]
    fn narrows_libraries_and_shapes() {
        let o = options(&[
            "--libs",
            "gemm,xnnpack",
            "--shapes",
            "1x2x3,4x5x6",
            "--quick",
        ])
        .unwrap();
        assert_eq!(o.libs, [Lib::Xnnpack, Lib::Gemm]);
        assert_eq!(o.shapes, [(1, 2, 3), (4, 5, 6)]);
        assert_eq!(o.budget, Duration::from_millis(120));
        for bad in ["1x2", "0x2x3", "ax2x3", "1x2x3x4"] {
            assert!(options(&["--shapes", bad]).is_err(), "{bad}");
        }
        assert!(options(&["--frobnicate"]).is_err());
    }

    #[test]
    fn op_selects_the_operators() {
        let o = options(&[]).unwrap();
        assert!(o.f32 && o.lowp.is_empty());
        let o = options(&["--op", "qd8_f32_qc8w"]).unwrap();
        assert!(!o.f32);
        assert_eq!(o.lowp, [lowp::Kind::Qd8F32Qc8w]);
        let o = options(&["--op", "all"]).unwrap();
        assert!(o.f32);
        assert_eq!(o.lowp, lowp::Kind::ALL);
        assert!(options(&["--op", "int4"]).is_err());
    }
}
