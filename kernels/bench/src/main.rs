//! `cargo xtask bench`: keepalloc-kernels against XNNPACK, OpenBLAS, matrixmultiply and gemm
//! on the fully-connected shapes, single-threaded, in one run.
//!
//! For each shape (M, K, N) every library computes `x[M][K] · W` (the FC operators also add
//! the bias), its output is checked against an f64 reference (a wrong fast kernel is
//! worthless: any mismatch fails the run), and its time is the median of many timed runs,
//! reported as GFLOPS (`2·M·K·N / t`). The same run measures the core's FMA peak and, for
//! batch 1, the read bandwidth of a weights-sized buffer (the memory roof: 2 flops per
//! 4-byte weight, so GFLOPS ≤ GB/s ÷ 2).
//!
//! Options: `--json PATH`, `--svg PATH` (default `target/bench/fully_connected.svg`),
//! `--quick` (shorter timing), `--libs a,b` and `--shapes MxKxN,...` to narrow the run.

mod chart;
mod lowp;
mod peers;
mod probe;
mod threads;
mod xnn_current;

use std::fmt::Write as _;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use peers::{Data, Lib};

/// The shapes, (M, K, N).
const SHAPES: [(usize, usize, usize); 11] = [
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

/// One library on one shape.
pub struct Cell {
    /// The library.
    pub lib: Lib,
    /// GFLOPS (the median, and each round's), or why it was skipped.
    pub gflops: Result<Measured, String>,
    /// Output matched the reference.
    pub correct: bool,
}

/// One shape's results.
pub struct Row {
    /// (M, K, N).
    pub shape: (usize, usize, usize),
    /// One per library, in the order of `Lib::ALL` (the order of the rounds).
    pub cells: Vec<Cell>,
    /// Batch 1: read bandwidth (GB/s) of a weights-sized buffer.
    pub bandwidth: Option<f64>,
}

impl Row {
    /// `MxKxN`.
    pub fn label(&self) -> String {
        let (m, k, n) = self.shape;
        format!("{m}x{k}x{n}")
    }

    fn measured(&self, lib: Lib) -> Option<&Measured> {
        self.cells
            .iter()
            .find(|c| c.lib == lib)
            .and_then(|c| c.gflops.as_ref().ok())
    }

    fn of(&self, lib: Lib) -> Option<f64> {
        self.measured(lib).map(|m| m.median)
    }

    /// The peer with the highest median.
    fn best_peer(&self) -> Option<(Lib, &Measured)> {
        self.cells
            .iter()
            .filter(|c| c.lib != Lib::Keepalloc)
            .filter_map(|c| c.gflops.as_ref().ok().map(|g| (c.lib, g)))
            .max_by(|a, b| a.1.median.total_cmp(&b.1.median))
    }

    /// keepalloc over `lib`, paired by round ([`paired_ratio`]).
    fn ratio_to(&self, lib: Lib) -> Option<Paired> {
        paired_ratio(self.measured(Lib::Keepalloc)?, self.measured(lib)?)
    }
}

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "keepalloc-kernels-bench",
    about = "keepalloc-kernels against XNNPACK, OpenBLAS, matrixmultiply and gemm on the \
             issue's fully-connected shapes, single-threaded"
)]
struct Cli {
    /// Also write the results as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<String>,
    /// Where to draw the SVG chart.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/bench/fully_connected.svg"
    )]
    svg: String,
    /// Shorter timing (about 120 ms of samples a library and shape instead of 400 ms).
    #[arg(long)]
    quick: bool,
    /// Only these libraries, comma-separated, any case: keepalloc, XNNPACK (Debian's, 2022),
    /// XNNPACK-2026 (current: the executorch wheel's), OpenBLAS, matrixmultiply, gemm
    /// [default: all]. Whatever the order given, the rounds time them in the order of this
    /// list, reversed every other round and one place later every two rounds.
    #[arg(long, value_name = "a,b", value_delimiter = ',', value_parser = parse_lib)]
    libs: Option<Vec<Lib>>,
    /// Only these shapes, comma-separated [default: the eleven, plus 128x4096x4096
    /// for the low-precision operators].
    #[arg(long, value_name = "MxKxN,...", value_delimiter = ',', value_parser = parse_shape)]
    shapes: Option<Vec<(usize, usize, usize)>>,
    /// Which operator: the f32 one against every peer, or a low-precision one against
    /// current XNNPACK (the executorch wheel's), or all four.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16_f32", "qd8_f32_qc8w", "f32_qc8w", "all"])]
    op: String,
    /// Multi-threaded comparison: keepalloc on a T-thread pool (and its 1-thread figure)
    /// against XNNPACK (Debian's and current) on a T-thread pthreadpool and OpenBLAS with T
    /// threads (the f32 operator; `--json`, `--quick` and `--shapes` apply).
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

/// A library's name, any case; anything else is an error naming the choices (a name
/// dropped silently would leave a library out of the comparison unnoticed).
fn parse_lib(s: &str) -> Result<Lib, String> {
    Lib::ALL
        .into_iter()
        .find(|l| s.eq_ignore_ascii_case(l.name()))
        .ok_or_else(|| {
            let names: Vec<&str> = Lib::ALL.iter().map(|l| l.name()).collect();
            format!("unknown library `{s}`, want one of {}", names.join(", "))
        })
}

/// `MxKxN`, each positive.
fn parse_shape(s: &str) -> Result<(usize, usize, usize), String> {
    let dims: Vec<usize> = s.split('x').filter_map(|v| v.parse().ok()).collect();
    match dims[..] {
        [m, k, n] if m > 0 && k > 0 && n > 0 => Ok((m, k, n)),
        _ => Err(format!("bad shape `{s}`, want MxKxN")),
    }
}

struct Options {
    /// Run the f32 comparison.
    f32: bool,
    /// The low-precision operators to run.
    lowp: Vec<lowp::Kind>,
    /// `--shapes`, if given.
    shapes_given: Option<Vec<(usize, usize, usize)>>,
    json: Option<String>,
    svg: String,
    budget: Duration,
    libs: Vec<Lib>,
    shapes: Vec<(usize, usize, usize)>,
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

/// Rounds per shape: the libraries take turns (each round times every library), so a
/// neighbour's load on this shared machine slows all of them alike instead of one.
const ROUNDS: usize = 11;

/// How long a runner runs untimed after a pause, before its batch (see `median_gflops`).
const WARM_UP: Duration = Duration::from_millis(8);

/// A batch of samples is steady when every core's probe, just before and just after it,
/// read at least this share of the best one-core probe of the run ([`probe::core_speeds`]).
/// On this VM a core in a slow phase reads 60-100 GFLOPS against 130-155 in a normal one.
const STEADY: f64 = 0.8;

/// Fewest steady pairs of rounds a ratio is taken over; with fewer, every round is used and
/// the ratio is marked unsteady.
const MIN_STEADY: usize = 3;

/// A runner being timed: runs per sample (so each sample lasts at least ~50 µs) and the
/// GFLOPS of every sample so far.
struct Timing {
    inner: u32,
    samples: Vec<f64>,
}

impl Timing {
    /// Warms `run` up and sizes its samples.
    fn calibrate(run: &mut dyn FnMut(&mut [f32]), out: &mut [f32]) -> (Timing, Duration) {
        for _ in 0..3 {
            run(out);
        }
        let t = Instant::now();
        run(out);
        let one = t.elapsed().max(Duration::from_nanos(50));
        let inner = (Duration::from_micros(50).as_nanos() / one.as_nanos()).max(1) as u32;
        (
            Timing {
                inner,
                samples: Vec::new(),
            },
            one * inner,
        )
    }

    /// Takes `count` samples.
    fn sample(
        &mut self,
        run: &mut dyn FnMut(&mut [f32]),
        out: &mut [f32],
        flops: f64,
        count: usize,
    ) {
        for _ in 0..count {
            let t = Instant::now();
            for _ in 0..self.inner {
                run(black_box(&mut *out));
            }
            self.samples
                .push(flops * self.inner as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }

    fn median(&self) -> f64 {
        median(&self.samples)
    }
}

/// The median of `xs` (the upper middle of an even count); NaN for none.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One runner's figures: the median GFLOPS of all its samples, and each round's own median.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// The median of every sample.
    pub median: f64,
    /// Per round, the median of that round's samples.
    pub rounds: Vec<f64>,
    /// Per round, the slowest core's GFLOPS in the probes just before and after the batch.
    pub floors: Vec<f64>,
    /// Per round, whether the process was idle before the batch ([`probe::quiesce`]; always
    /// true where the runners take no pause).
    pub idle: Vec<bool>,
    /// Per round, how long the pause before the batch lasted, in ms (0 without one).
    pub pause_ms: Vec<f64>,
    /// Per round, whether the batch was steady: its floor at least [`STEADY`] of the best
    /// one-core probe of the run, and the process idle before it.
    pub steady: Vec<bool>,
}

/// A ratio paired by round, and how many rounds it was taken over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// The median of the rounds' own ratios.
    pub ratio: f64,
    /// The lower quartile of the rounds' own ratios (over the same rounds): with `q3`, the
    /// spread the median comes from.
    pub q1: f64,
    /// The upper quartile of the rounds' own ratios.
    pub q3: f64,
    /// The rounds in which both batches were steady.
    pub steady_rounds: usize,
    /// The rounds the ratio was taken over: the steady ones when there are at least
    /// [`MIN_STEADY`], else all.
    pub used: usize,
}

impl Paired {
    /// Taken over steady rounds only.
    pub fn steady(&self) -> bool {
        self.steady_rounds >= MIN_STEADY
    }

    /// `1.23x`, or `1.23x~` when it is not [`steady`](Self::steady).
    pub fn show(&self) -> String {
        format!("{:.2}x{}", self.ratio, if self.steady() { "" } else { "~" })
    }

    /// Ahead when even the lower quartile of the rounds' ratios is above 1, behind when even
    /// the upper one is below 1, else within the spread of the rounds: a tie that this run
    /// cannot decide.
    pub fn verdict(&self) -> Verdict {
        if self.q1 > 1.0 {
            Verdict::Ahead
        } else if self.q3 < 1.0 {
            Verdict::Behind
        } else {
            Verdict::Within
        }
    }
}

/// What a [`Paired`] ratio says about keepalloc against the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The lower quartile is above 1.
    Ahead,
    /// The quartiles are on both sides of 1 (or on it).
    Within,
    /// The upper quartile is below 1.
    Behind,
}

/// One line per verdict for `ratios` (`(shape, against, ratio)`): how many cells are ahead,
/// and each cell within the spread or behind with its median and quartiles.
pub(crate) fn verdict_lines(ratios: &[(String, String, Paired)]) -> Vec<String> {
    let ahead = ratios
        .iter()
        .filter(|r| r.2.verdict() == Verdict::Ahead)
        .count();
    let mut lines = vec![format!(
        "ahead in {ahead} of {} cells (the lower quartile of the rounds' own ratios above 1)",
        ratios.len()
    )];
    for (verdict, what) in [
        (
            Verdict::Within,
            "within the rounds' spread (quartiles around 1)",
        ),
        (Verdict::Behind, "behind (the upper quartile below 1)"),
    ] {
        let cells: Vec<String> = ratios
            .iter()
            .filter(|r| r.2.verdict() == verdict)
            .map(|(shape, against, p)| {
                format!(
                    "{shape} vs {against} {} [{:.3}-{:.3}]",
                    p.show(),
                    p.q1,
                    p.q3
                )
            })
            .collect();
        if !cells.is_empty() {
            lines.push(format!("{what}: {}", cells.join(", ")));
        }
    }
    lines
}

/// `a / b` as the median of the rounds' own ratios, `a.rounds[r] / b.rounds[r]`. The runners
/// of a round run back to back, so a slow phase of this shared machine slows both sides of a
/// round's ratio and divides out; the ratio of the two overall medians does not pair them (a
/// slow phase over some rounds can drag one median and not the other).
///
/// Only rounds in which both batches were steady count, when there are at least
/// [`MIN_STEADY`] of them: on this VM one core can run at half speed while the other runs at
/// full, so a one-thread batch on the slow core against a two-thread batch on both reads
/// above the machine's own two-core scaling. The probes that decide it are the witness, not
/// the timings being compared.
pub fn paired_ratio(a: &Measured, b: &Measured) -> Option<Paired> {
    if a.rounds.is_empty() || a.rounds.len() != b.rounds.len() {
        return None;
    }
    let pairs = || a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y);
    let steady: Vec<f64> = pairs()
        .zip(a.steady.iter().zip(&b.steady))
        .filter(|(_, (sa, sb))| **sa && **sb)
        .map(|(r, _)| r)
        .collect();
    let used: Vec<f64> = if steady.len() >= MIN_STEADY {
        steady.clone()
    } else {
        pairs().collect()
    };
    let mut sorted = used.clone();
    sorted.sort_by(f64::total_cmp);
    Some(Paired {
        ratio: median(&used),
        q1: sorted[(sorted.len() - 1) / 4],
        q3: sorted[(3 * (sorted.len() - 1)).div_ceil(4)],
        steady_rounds: steady.len(),
        used: used.len(),
    })
}

/// Times every runner that was built, in [`ROUNDS`] rounds in which each takes its turn
/// (after sleeping `pause`), about `budget` in all per runner; returns each runner's median
/// GFLOPS and per-round medians, `None` for a runner that could not be built.
fn median_gflops<L>(
    runners: &mut [(L, Result<peers::Runner<'_>, String>)],
    out: &mut [f32],
    flops: f64,
    budget: Duration,
    pause: Duration,
    pin: impl Fn(&L) -> Option<usize>,
) -> Vec<Option<Measured>> {
    let floor = || probe::core_speeds().into_iter().fold(f64::MAX, f64::min);
    // Each runner's timing, samples per batch, and per round its median, witness floor and
    // the pause before it (its length in ms, or None when the process never went idle).
    type Batches = (Timing, usize, Vec<f64>, Vec<f64>, Vec<Option<f64>>);
    let mut timings: Vec<Option<Batches>> = runners
        .iter_mut()
        .map(|(_, r)| {
            let run = r.as_mut().ok()?;
            let (t, sample) = Timing::calibrate(run, out);
            let per_round =
                (budget.as_nanos() / ROUNDS as u128 / sample.as_nanos()).clamp(3, 300) as usize;
            Some((t, per_round, Vec::new(), Vec::new(), Vec::new()))
        })
        .collect();
    for round in 0..ROUNDS {
        for i in round_order(round, runners.len()) {
            let ((lib, r), t) = (&mut runners[i], &mut timings[i]);
            if let (Ok(run), Some((t, per_round, rounds, floors, pauses))) =
                (r.as_mut(), t.as_mut())
            {
                let pinned = pin(lib);
                if let Some(cpu) = pinned {
                    // A column labelled with its CPU must run there: no silent fallback.
                    probe::pin_to(cpu)
                        .unwrap_or_else(|e| panic!("pinning the bench to CPU {cpu}: {e}"));
                }
                // With a pause, also until every other thread of the process sleeps: a worker
                // still spinning after the previous library's batch takes a core from this one.
                pauses.push(if pause.is_zero() {
                    Some(0.0)
                } else {
                    probe::quiesce(pause).map(|d| d.as_secs_f64() * 1e3)
                });
                // The witness: every core's speed just before and just after the batch.
                let before = floor();
                if !pause.is_zero() {
                    // The pause put every pool's workers to sleep; woken, one can land on the
                    // caller's core until the scheduler moves it (up to a 4 ms tick here), so
                    // the batch starts once the runner has run that long untimed.
                    let warm = Instant::now();
                    while warm.elapsed() < WARM_UP {
                        run(black_box(&mut *out));
                    }
                }
                let first = t.samples.len();
                t.sample(run, out, flops, *per_round);
                rounds.push(median(&t.samples[first..]));
                floors.push(before.min(floor()));
                if pinned.is_some() {
                    probe::unpin().unwrap_or_else(|e| panic!("unpinning the bench: {e}"));
                }
            }
        }
    }
    let best = probe::best_core_speed();
    timings
        .into_iter()
        .map(|t| {
            t.map(|(t, _, rounds, floors, pauses)| Measured {
                median: t.median(),
                steady: floors
                    .iter()
                    .zip(&pauses)
                    .map(|(&f, p)| p.is_some() && f >= STEADY * best)
                    .collect(),
                rounds,
                floors,
                idle: pauses.iter().map(Option::is_some).collect(),
                pause_ms: pauses.iter().map(|p| p.unwrap_or(f64::NAN)).collect(),
            })
        })
        .collect()
}

/// The order in which the `n` runners take their turns in round `round`: reversed every
/// other round, and one place later every two rounds. A fixed order ran keepalloc first in every
/// round, always after the same library, whose data then filled the caches (at 1×4096×4096
/// every library's 64 MiB of weights is partly in the L3 or not depending on what ran
/// before); now each runner takes different places and follows different neighbours.
fn round_order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    let shift = round / 2;
    (0..n).map(move |j| {
        let j = if round % 2 == 1 { n - 1 - j } else { j };
        (j + shift) % n
    })
}

fn check(d: &Data, reference: &[(f64, f64)], out: &[f32], bias: bool) -> bool {
    reference.iter().enumerate().all(|(i, &(want, tol))| {
        let want = if bias {
            want + d.bias[i % d.n] as f64
        } else {
            want
        };
        (out[i] as f64 - want).abs() <= tol + 1e-6
    })
}

/// How long (as a power of two of cycles) OpenBLAS's idle threads spin before they sleep,
/// in the multi-thread comparison: 2^18 cycles, about 0.1 ms. Its default, 2^28 (about
/// 0.1 s), keeps a spinning OpenBLAS thread on the second core while the next library is
/// timed: measured here, keepalloc's two-thread figure then equalled its one-thread one.
/// Inside one sample OpenBLAS's calls are back to back, so the shorter spin costs it
/// nothing.
const OPENBLAS_THREAD_TIMEOUT: &str = "18";

/// Runs this bench again with OpenBLAS's environment fixed when it needs to be (OpenBLAS
/// reads it once, when it is loaded, so the process has to start again): `OPENBLAS_CORETYPE`
/// when OpenBLAS picked kernels below this CPU's vector width, and, with `--threads`,
/// `OPENBLAS_THREAD_TIMEOUT`. A variable the user set is kept. Returns only when nothing
/// needs changing or the exec failed.
fn fix_openblas_env(threads: bool) {
    use std::os::unix::process::CommandExt;
    let mut set: Vec<(&str, &str)> = Vec::new();
    if let Some(core) = peers::openblas::better_core() {
        eprintln!(
            "OpenBLAS detected this CPU as {:?}: running again with OPENBLAS_CORETYPE={core}",
            peers::openblas::core_name()
        );
        set.push(("OPENBLAS_CORETYPE", core));
    }
    if threads && std::env::var_os("OPENBLAS_THREAD_TIMEOUT").is_none() {
        set.push(("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT));
    }
    if set.is_empty() {
        return;
    }
    let err = std::process::Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .envs(set.iter().copied())
        .exec();
    eprintln!("could not run again with {set:?}: {err}; OpenBLAS's environment stays as it is");
}

fn main() -> ExitCode {
    // A bad option prints the usage and exits with 2, as before.
    let cli = Cli::parse();
    // The process's CPUs, read before anything pins a thread (see `probe::allowed_cpus`).
    probe::allowed_cpus();
    fix_openblas_env(cli.threads.is_some());
    println!(
        "OpenBLAS kernels: {}{}",
        peers::openblas::core_name(),
        std::env::var("OPENBLAS_THREAD_TIMEOUT")
            .map(|t| format!(", idle threads spin 2^{t} cycles"))
            .unwrap_or_default()
    );
    if let Some(t) = cli.threads {
        let budget = Duration::from_millis(if cli.quick { 120 } else { 400 });
        let shapes = cli.shapes.clone().unwrap_or_else(|| SHAPES.to_vec());
        return threads::run(t.into(), &shapes, budget, cli.json.as_deref());
    }
    let o = Options::from(cli);
    let mut code = ExitCode::SUCCESS;
    if o.f32 {
        code = run_f32(&o);
    }
    if !o.lowp.is_empty() {
        let shapes = o.shapes_given.clone().unwrap_or_else(|| {
            let mut s = SHAPES.to_vec();
            s.push((128, 4096, 4096));
            s
        });
        if !lowp::run(&o.lowp, &shapes, o.budget) {
            eprintln!("WRONG RESULTS in the low-precision operators");
            code = ExitCode::FAILURE;
        }
    }
    code
}

/// The workspace root (where `cargo xtask runtimes` writes `target/runtimes/`).
fn workspace_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Why current XNNPACK (the executorch wheel's) was skipped, when it was asked for and was.
fn current_xnnpack_missing(rows: &[Row], libs: &[Lib]) -> Option<String> {
    if !libs.contains(&Lib::XnnpackCurrent) {
        return None;
    }
    rows.iter()
        .flat_map(|r| &r.cells)
        .filter(|c| c.lib == Lib::XnnpackCurrent)
        .find_map(|c| c.gflops.as_ref().err().cloned())
}

/// The f32 operator against every peer.
fn run_f32(o: &Options) -> ExitCode {
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
        .and_then(|_| xnn_current::find_library(&workspace_dir()))
    {
        println!(
            "XNNPACK-2026: current XNNPACK, {} (Debian's 2022 build is `XNNPACK`)",
            path.display()
        );
    }
    if let Some(path) = &o.json {
        if let Some(dir) = std::path::Path::new(path).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = std::fs::write(path, json(&rows, peak, &isa)) {
            eprintln!("could not write {path}: {e}");
            return ExitCode::FAILURE;
        }
        println!("JSON: {path}");
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
        return ExitCode::FAILURE;
    }
    if wrong.is_empty() {
        println!("all outputs match the f64 reference");
        ExitCode::SUCCESS
    } else {
        eprintln!("WRONG RESULTS: {}", wrong.join(", "));
        ExitCode::FAILURE
    }
}

fn print_row(row: &Row, peak: f64, header: bool, libs: &[Lib]) {
    if header {
        let mut h = format!("{:<16}", "shape (MxKxN)");
        for lib in libs {
            let _ = write!(h, "{:>15}", lib.name());
        }
        let _ = write!(
            h,
            "  {:>24} {:>9} {:>7} {:>8} {:>7}",
            "best peer", "vs best", "vs XNN", "vs XNN26", "% peak"
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
        "  {:>24} {:>9} {:>7} {:>8} {:>7}",
        best_s,
        ratio(best.and_then(|(l, _)| row.ratio_to(l))),
        ratio(row.ratio_to(Lib::Xnnpack)),
        ratio(row.ratio_to(Lib::XnnpackCurrent)),
        ours.map_or("-".into(), |g| format!("{:.0}%", 100.0 * g / peak))
    );
    if let Some(bw) = row.bandwidth {
        let _ = write!(line, "  {:>16}", format!("{:.1} ({bw:.0} GB/s)", bw / 2.0));
    }
    println!("{line}");
}

fn json(rows: &[Row], peak: f64, isa: &str) -> String {
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
            });
            o
        })
        .collect();
    to_pretty(&serde_json::json!({
        "fma_peak_gflops": peak,
        "keepalloc_isa": isa,
        "threads": 1,
        "ratio_method": ratio_method(),
        "shapes": shapes,
    }))
}

/// How every ratio, printed or in the JSON (`ratio_method`), is computed; `~` in print is
/// `"steady": false` in the JSON.
pub(crate) fn ratio_method() -> String {
    format!(
        "vs * = keepalloc / that library: the median of the rounds' own ratios over the rounds \
         in which every core's FMA probe read >= {:.0}% of the run's best just before and after \
         both batches; ~ = fewer than {MIN_STEADY} such rounds, all {ROUNDS} rounds used",
        100.0 * STEADY
    )
}

/// A paired ratio in the JSON: `{"ratio", "steady", "steady_rounds", "rounds_used"}`, or
/// null.
pub(crate) fn paired_json(p: Option<Paired>) -> serde_json::Value {
    p.map_or(serde_json::Value::Null, |p| {
        serde_json::json!({
            "ratio": p.ratio,
            "q1": p.q1,
            "q3": p.q3,
            "verdict": format!("{:?}", p.verdict()).to_lowercase(),
            "steady": p.steady(),
            "steady_rounds": p.steady_rounds,
            "rounds_used": p.used,
        })
    })
}

/// One library's cell in the JSON: `{"gflops", "round_gflops", "correct"}`, or
/// `{"skipped": why}`.
pub(crate) fn result_json(gflops: &Result<Measured, String>, correct: bool) -> serde_json::Value {
    match gflops {
        Ok(g) => serde_json::json!({
            "gflops": g.median,
            "round_gflops": g.rounds,
            "round_floor_gflops": g.floors,
            "round_idle": g.idle,
            "round_pause_ms": g.pause_ms,
            "round_steady": g.steady,
            "correct": correct,
        }),
        Err(why) => serde_json::json!({ "skipped": why }),
    }
}

/// A JSON document as the bench writes it: pretty, with a final newline.
pub(crate) fn to_pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("a JSON value always serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(Options::from)
    }

    #[test]
    fn runners_change_place_and_neighbour_from_round_to_round() {
        for n in [2, 6, 7] {
            let orders: Vec<Vec<usize>> =
                (0..ROUNDS).map(|r| round_order(r, n).collect()).collect();
            for order in &orders {
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(
                    sorted,
                    (0..n).collect::<Vec<_>>(),
                    "each runner once a round"
                );
            }
            for runner in 0..n {
                let places: std::collections::BTreeSet<usize> = orders
                    .iter()
                    .map(|o| o.iter().position(|&i| i == runner).unwrap())
                    .collect();
                // Every place when there are at most six (the rounds reach six shifts).
                assert!(
                    places.len() >= n.min(6),
                    "runner {runner} of {n} takes only places {places:?}"
                );
                let before: std::collections::BTreeSet<Option<usize>> = orders
                    .iter()
                    .map(|o| {
                        let p = o.iter().position(|&i| i == runner).unwrap();
                        p.checked_sub(1).map(|q| o[q])
                    })
                    .collect();
                assert!(
                    before.len() >= 2.min(n),
                    "runner {runner} of {n} always follows the same one: {before:?}"
                );
            }
        }
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
        let v: serde_json::Value = serde_json::from_str(&json(&rows, 170.0, "avx512")).unwrap();
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

    #[test]
    fn paired_ratio_divides_out_a_slow_phase() {
        // The machine slows to half speed from round 4 on, both cores alike (every batch
        // still steady by the rule: no witness flagged it); keepalloc is 10% ahead in every
        // round. The medians fall on different sides of the slow phase (10 against 4.5), so
        // their ratio reads 2.22x; the rounds' own ratios all read 1.11x.
        let ours = measured(&[10.0, 10.0, 10.0, 10.0, 5.0, 5.0, 5.0], &[true; 7]);
        let peer = measured(&[9.0, 9.0, 9.0, 4.5, 4.5, 4.5, 4.5], &[true; 7]);
        let r = paired_ratio(&ours, &peer).unwrap();
        assert!((r.ratio - 10.0 / 9.0).abs() < 1e-12, "{r:?}");
        assert!((ours.median / peer.median - 10.0 / 9.0).abs() > 1.0);
        assert_eq!((r.steady_rounds, r.used, r.steady()), (7, 7, true));
        // Unpaired inputs have no paired ratio.
        assert_eq!(paired_ratio(&ours, &Measured::default()), None);
    }

    #[test]
    fn the_verdict_comes_from_the_quartiles_of_the_rounds_ratios() {
        use super::{Verdict, verdict_lines};
        let ours = measured(&[10.0; 5], &[true; 5]);
        // Ratios 1.11, 1.00, 0.95, 0.91, 1.25: median 1.00, quartiles 0.95 and 1.11.
        let tie = measured(&[9.0, 10.0, 10.5, 11.0, 8.0], &[true; 5]);
        let r = paired_ratio(&ours, &tie).unwrap();
        assert!((r.ratio - 1.0).abs() < 1e-12, "{r:?}");
        assert!((r.q1 - 10.0 / 10.5).abs() < 1e-12 && (r.q3 - 10.0 / 9.0).abs() < 1e-12);
        assert_eq!(r.verdict(), Verdict::Within);
        // A median above 1 is not enough: ahead needs the lower quartile above 1.
        let mostly = measured(&[9.0, 9.0, 9.0, 11.0, 11.0], &[true; 5]);
        let m = paired_ratio(&ours, &mostly).unwrap();
        assert!(m.ratio > 1.0);
        assert_eq!(m.verdict(), Verdict::Within);
        let ahead = paired_ratio(&ours, &measured(&[9.5, 9.0, 9.8, 9.9, 8.0], &[true; 5]));
        assert_eq!(ahead.unwrap().verdict(), Verdict::Ahead);
        let behind = paired_ratio(
            &ours,
            &measured(&[10.5, 11.0, 10.2, 10.1, 12.0], &[true; 5]),
        );
        assert_eq!(behind.unwrap().verdict(), Verdict::Behind);
        let lines = verdict_lines(&[
            ("1x2x3".into(), "X".into(), r),
            ("4x5x6".into(), "Y".into(), ahead.unwrap()),
            ("7x8x9".into(), "Z".into(), behind.unwrap()),
        ]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("ahead in 1 of 3 cells"), "{lines:?}");
        assert!(
            lines[1].contains("1x2x3 vs X 1.00x [0.952-1.111]"),
            "{lines:?}"
        );
        assert!(lines[2].starts_with("behind") && lines[2].contains("7x8x9 vs Z"));
    }

    /// Rounds with GFLOPS `rounds`, each batch steady or not as `steady` says (also used by
    /// the `--threads` tests).
    pub(crate) fn measured(rounds: &[f64], steady: &[bool]) -> Measured {
        Measured {
            median: median(rounds),
            rounds: rounds.to_vec(),
            floors: steady
                .iter()
                .map(|&s| if s { 150.0 } else { 70.0 })
                .collect(),
            idle: vec![true; rounds.len()],
            pause_ms: vec![0.0; rounds.len()],
            steady: steady.to_vec(),
        }
    }

    #[test]
    fn paired_ratio_leaves_out_rounds_a_slow_core_spoiled() {
        // Two threads against one: 2.0x while both cores run at full speed. In four of the
        // seven rounds the one-thread batch ran on a core at half speed (its witness says
        // so) and read 4.0x, so the median of all seven rounds would be 4.0x. Only the
        // steady rounds count.
        let two = measured(&[200.0; 7], &[true; 7]);
        let one = measured(
            &[100.0, 50.0, 100.0, 50.0, 50.0, 100.0, 50.0],
            &[true, false, true, false, false, true, false],
        );
        let r = paired_ratio(&two, &one).unwrap();
        assert_eq!(
            (r.ratio, r.steady_rounds, r.used, r.steady()),
            (2.0, 3, 3, true)
        );
        // All seven rounds would read 4.0x.
        assert_eq!(median(&[2.0, 4.0, 2.0, 4.0, 4.0, 2.0, 4.0]), 4.0);
        // Fewer than MIN_STEADY steady rounds: every round is used, and the ratio says so.
        let one = measured(
            &[100.0, 50.0, 100.0, 50.0, 50.0, 50.0, 50.0],
            &[true, false, true, false, false, false, false],
        );
        let r = paired_ratio(&two, &one).unwrap();
        assert_eq!(
            (r.ratio, r.steady_rounds, r.used, r.steady()),
            (4.0, 2, 7, false)
        );
        assert_eq!(r.show(), "4.00x~");
    }

    #[test]
    fn median_gflops_records_every_round() {
        let mut runners: Vec<(Lib, Result<peers::Runner<'_>, String>)> = vec![
            (Lib::ALL[0], Ok(Box::new(|out: &mut [f32]| out[0] += 1.0))),
            (Lib::ALL[1], Err("not built".into())),
        ];
        let mut out = [0.0f32];
        let m = median_gflops(
            &mut runners,
            &mut out,
            1.0,
            Duration::from_millis(7),
            Duration::ZERO,
            |_| None,
        );
        let first = m[0].as_ref().unwrap();
        assert_eq!(first.rounds.len(), ROUNDS);
        assert!(first.rounds.iter().all(|g| g.is_finite() && *g > 0.0));
        // The witness probed around every batch.
        assert_eq!(first.floors.len(), ROUNDS);
        assert_eq!(first.steady.len(), ROUNDS);
        assert!(first.floors.iter().all(|f| f.is_finite() && *f > 0.0));
        assert!(probe::best_core_speed() >= first.floors.iter().copied().fold(0.0, f64::max));
        assert!(m[1].is_none());
    }

    #[test]
    fn median_gflops_runs_a_pinned_runner_on_its_cpu_only() {
        let allowed = probe::allowed_cpus();
        let cpu = *allowed.last().unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let mut runners: Vec<(Lib, Result<peers::Runner<'_>, String>)> = vec![
            (
                Lib::ALL[0],
                Ok(Box::new(|out: &mut [f32]| {
                    // SAFETY: sched_getcpu takes no arguments and only reads.
                    let cpu = unsafe { libc::sched_getcpu() };
                    seen.borrow_mut().push(cpu as usize);
                    out[0] += 1.0;
                })),
            ),
            (Lib::ALL[1], Ok(Box::new(|out: &mut [f32]| out[0] += 1.0))),
        ];
        let mut out = [0.0f32];
        // Start on another CPU, so that a runner left unpinned would be seen there.
        probe::pin_to(allowed[0]).unwrap();
        median_gflops(
            &mut runners,
            &mut out,
            1.0,
            Duration::from_millis(7),
            Duration::ZERO,
            |&lib| (lib == Lib::ALL[0]).then_some(cpu),
        );
        drop(runners);
        // The first four calls are the unpinned calibration; every timed one ran on `cpu`.
        let seen = seen.into_inner();
        assert!(seen.len() > 4 + ROUNDS);
        assert!(seen[4..].iter().all(|&c| c == cpu), "{seen:?}");
        // The thread may run anywhere again afterwards.
        assert_eq!(probe::affinity_now(), allowed);
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
