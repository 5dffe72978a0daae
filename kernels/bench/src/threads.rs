//! `--threads T`: keepalloc-kernels on a T-thread pool against XNNPACK on a T-thread
//! pthreadpool (Debian's 2022 build, and current XNNPACK from the executorch wheel) and
//! OpenBLAS with T threads, on the same shapes, interleaved, every output checked against
//! the f64 reference.
//!
//! Peers (one column each):
//! * `keepalloc-1t`: the operator on the calling thread only (the 1-thread baseline the
//!   speed-up column divides by, measured in the same rounds);
//! * `keepalloc`: the operator on a `ThreadPool::new(T)` with `run_in` (how a runtime uses
//!   it; the pool's state comes from the captured table);
//! * `keepalloc@pthreadpool`: the operator on a T-thread Debian pthreadpool through the
//!   `Parallel` trait (`pthreadpool_parallelize_1d`): the work runs on a runtime's threads;
//! * `XNNPACK`: Debian's 2022 XNNPACK, `pthreadpool_create(T)` passed to setup and run;
//! * `XNNPACK-2026`: current XNNPACK (the executorch 1.5.1 wheel's, `cargo xtask runtimes`),
//!   loaded with `dlmopen(LM_ID_NEWLM)` into a namespace of its own, its own
//!   `pthreadpool_create(T)` (the wheel's pthreadpool, found from the same handle);
//! * `OpenBLAS`: `cblas_sgemm` (`sgemv` for batch 1) after `openblas_set_num_threads(T)`.

use core::ffi::c_void;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, Parallel, ThreadPool};
use keepalloc_xnnpack::current::{F32Fc, Geometry, Library, Threadpool};

use crate::peers::{Aligned, Data, Runner};
use crate::stats::{Measured, Paired, paired_ratio};
use crate::timing::{QUIESCE, pause_report};
use crate::verify::check;

/// A column of the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    /// The operator on the calling thread only, pinned to this CPU for its batches.
    KeepallocOne(usize),
    Keepalloc,
    KeepallocPthreadpool,
    Xnnpack,
    XnnpackCurrent,
    OpenBlas,
    /// oneDNN's f32 matmul on T OpenMP threads.
    OneDnn,
}

impl Peer {
    /// The columns: the one-thread operator pinned to each of `cpus` in turn, then the
    /// T-thread runs.
    pub fn all(cpus: &[usize]) -> Vec<Peer> {
        cpus.iter()
            .map(|&c| Peer::KeepallocOne(c))
            .chain([
                Peer::Keepalloc,
                Peer::KeepallocPthreadpool,
                Peer::Xnnpack,
                Peer::XnnpackCurrent,
                Peer::OpenBlas,
                Peer::OneDnn,
            ])
            .collect()
    }

    pub fn name(self) -> String {
        match self {
            Peer::KeepallocOne(cpu) => format!("keepalloc-1t@cpu{cpu}"),
            Peer::Keepalloc => "keepalloc".into(),
            Peer::KeepallocPthreadpool => "keepalloc@pthreadpool".into(),
            Peer::Xnnpack => "XNNPACK".into(),
            Peer::XnnpackCurrent => "XNNPACK-2026".into(),
            Peer::OpenBlas => "OpenBLAS".into(),
            Peer::OneDnn => "oneDNN".into(),
        }
    }

    /// The CPU a one-thread column's batches are pinned to.
    fn pin(self) -> Option<usize> {
        match self {
            Peer::KeepallocOne(cpu) => Some(cpu),
            _ => None,
        }
    }

    fn adds_bias(self) -> bool {
        !matches!(self, Peer::OpenBlas)
    }
}

use crate::peers::TABLE;

/// The pools every shape shares (created once, as a runtime would).
struct Pools {
    keepalloc: ThreadPool,
    pthreadpool: Result<PthreadPool, String>,
    current: Result<&'static Current, String>,
}

/// Builds `peer`'s runner for `d` on `threads` threads, or says why it is skipped.
fn runner<'a>(
    peer: Peer,
    d: &'a Data,
    pools: &'a Pools,
    threads: usize,
) -> Result<Runner<'a>, String> {
    let op = || {
        FullyConnected::create(&FullyConnectedDesc::new(d.k, d.n, &d.w).with_bias(&d.bias))
            .map_err(|e| e.to_string())
    };
    match peer {
        Peer::KeepallocOne(_) => {
            let op = op()?;
            Ok(Box::new(move |out| {
                op.run(d.m, &d.x, out).expect("keepalloc run")
            }))
        }
        Peer::Keepalloc => {
            let op = op()?;
            let pool = &pools.keepalloc;
            Ok(Box::new(move |out| {
                op.run_in(pool, d.m, &d.x, out).expect("keepalloc run_in")
            }))
        }
        Peer::KeepallocPthreadpool => {
            let pool = pools.pthreadpool.as_ref().map_err(Clone::clone)?;
            let op = op()?;
            Ok(Box::new(move |out| {
                op.run_in(pool, d.m, &d.x, out)
                    .expect("keepalloc run_in pthreadpool")
            }))
        }
        Peer::Xnnpack => {
            let pool = pools.pthreadpool.as_ref().map_err(Clone::clone)?;
            // Debian's 2022 XNNPACK: the single-thread bench's runner, on the pthreadpool.
            crate::peers::xnnpack::runner(d, pool.raw())
        }
        Peer::XnnpackCurrent => {
            let current = pools.current.as_ref().map_err(Clone::clone)?;
            current.runner(d)
        }
        Peer::OpenBlas => openblas_runner(d, threads),
        Peer::OneDnn => crate::onednn::f32_runner(d, threads),
    }
}

/// One shape's results: GFLOPS (or why skipped) and correctness, per peer.
struct Row {
    shape: (usize, usize, usize),
    cells: Vec<(Peer, Result<Measured, String>, bool)>,
    /// The one-thread figure: per round, the mean of the pinned one-thread columns.
    one: Option<Measured>,
}

/// The mean core: per round the mean of `ones`' figures, the lowest of their witness floors,
/// steady when all of theirs were; `None` without a column to average.
fn mean_of_cores(ones: &[&Measured]) -> Option<Measured> {
    let first = ones.first()?;
    let n = ones.len() as f64;
    let rounds = (0..first.rounds.len())
        .map(|r| ones.iter().map(|m| m.rounds[r]).sum::<f64>() / n)
        .collect();
    let floors = (0..first.rounds.len())
        .map(|r| ones.iter().map(|m| m.floors[r]).fold(f64::MAX, f64::min))
        .collect();
    let idle = (0..first.rounds.len())
        .map(|r| ones.iter().all(|m| m.idle[r]))
        .collect();
    let steady = (0..first.rounds.len())
        .map(|r| ones.iter().all(|m| m.steady[r]))
        .collect();
    // The longest of the pauses; NaN (a pause that never saw the process idle) if any was.
    let pause_ms = (0..first.rounds.len())
        .map(|r| {
            let p = ones.iter().map(|m| m.pause_ms[r]);
            if p.clone().any(f64::is_nan) {
                f64::NAN
            } else {
                p.fold(0.0, f64::max)
            }
        })
        .collect();
    Some(Measured {
        median: ones.iter().map(|m| m.median).sum::<f64>() / n,
        rounds,
        floors,
        idle,
        pause_ms,
        steady,
    })
}

impl Row {
    fn of(&self, peer: Peer) -> Option<&Measured> {
        self.cells
            .iter()
            .find(|c| c.0 == peer)
            .and_then(|c| c.1.as_ref().ok())
    }
}

/// Runs the comparison; writes JSON to `json` if given.
pub fn run(
    threads: usize,
    shapes: &[(usize, usize, usize)],
    budget: Duration,
) -> (ExitCode, serde_json::Value) {
    if let Err(e) = keepalloc_kernels::initialize(&TABLE) {
        eprintln!("keepalloc initialize: {e}");
        return (ExitCode::FAILURE, serde_json::Value::Null);
    }
    let keepalloc = match ThreadPool::new(threads) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ThreadPool::new({threads}): {e}");
            return (ExitCode::FAILURE, serde_json::Value::Null);
        }
    };
    let pools = Pools {
        keepalloc,
        pthreadpool: PthreadPool::new(threads),
        current: Current::load(threads),
    };
    let isa = keepalloc_kernels::selected_isa().map_or_else(|e| e.to_string(), |i| i.to_string());
    println!(
        "keepalloc-kernels bench: {threads} threads, GFLOPS = 2·M·K·N / median time; keepalloc ISA: {isa}"
    );
    // The one-thread figure is taken on each core the T threads can use, in turn: on this VM
    // each core's speed changes on its own, and one thread left where the scheduler put it
    // measures whichever core that was, against T threads that run on all of them.
    let cpus: Vec<usize> = crate::probe::allowed_cpus()
        .into_iter()
        .take(threads)
        .collect();
    let peers = Peer::all(&cpus);
    let probe = Probe::take(threads);
    println!(
        "keepalloc-1t runs pinned to CPU {cpus:?} in turn; vs_1t divides by the mean of those \
         columns, round by round"
    );
    println!(
        "FMA peak (probe, before the shapes): {:.1} GFLOPS on one core, {:.1} on {threads} at once \
         ({:.2}x)",
        probe.one,
        probe.all,
        probe.scaling()
    );
    let mut rows = Vec::new();
    let mut wrong = Vec::new();
    for &(m, k, n) in shapes {
        let d = Data::new(m, k, n);
        let reference = d.reference();
        let flops = 2.0 * (m * k * n) as f64;
        let mut out = Aligned::filled(m * n, f32::NAN);
        let mut runners: Vec<(Peer, Result<Runner<'_>, String>)> = peers
            .iter()
            .map(|&p| (p, runner(p, &d, &pools, threads)))
            .collect();
        // Before each library's samples, a pause lets the previous library's spinning
        // workers go to sleep (a worker still spinning takes the second core from the
        // library timed next): keepalloc's spin 1 ms, OpenBLAS's about 0.1 ms here
        // (`OPENBLAS_THREAD_TIMEOUT`, set by `main`), pthreadpool's about 25 ms (measured:
        // the process's CPU clock over the 300 ms after one job). The pause ends when no
        // other thread of the process is runnable (`probe::quiesce`); a batch after a pause
        // that never got there is not steady.
        let medians =
            crate::timing::median_gflops(&mut runners, &mut out, flops, budget, QUIESCE, |p| {
                p.pin()
            });
        let mut cells = Vec::new();
        for ((peer, r), median) in runners.iter_mut().zip(medians) {
            let cell = match (r, median) {
                (Ok(run), Some(median)) => {
                    out.fill(f32::NAN);
                    run(&mut out);
                    let correct = check(&d, &reference, &out, peer.adds_bias());
                    if !correct {
                        wrong.push(format!("{} on {m}x{k}x{n}", peer.name()));
                    }
                    (*peer, Ok(median), correct)
                }
                (Err(why), _) => (*peer, Err(why.clone()), true),
                (Ok(_), None) => unreachable!("every runner is calibrated"),
            };
            cells.push(cell);
        }
        drop(runners);
        eprintln!("measured {m}x{k}x{n}");
        let ones: Vec<&Measured> = cells
            .iter()
            .filter(|c| c.0.pin().is_some())
            .filter_map(|c| c.1.as_ref().ok())
            .collect();
        let one = mean_of_cores(&ones);
        rows.push(Row {
            shape: (m, k, n),
            cells,
            one,
        });
    }
    let probe = probe.best(Probe::take(threads));
    print_table(&rows, threads, &peers);
    if let Some(line) = pause_report(
        rows.iter()
            .flat_map(|r| r.cells.iter().filter_map(|c| c.1.as_ref().ok()))
            .flat_map(|m| m.pause_ms.iter().copied()),
    ) {
        println!("{line}");
    }
    println!(
        "FMA peak (probe, best of the run): {:.1} GFLOPS on one core, {:.1} on {threads} at once: \
         the machine's own {threads}-thread scaling is {:.2}x, the ceiling for vs_1t on \
         compute-bound shapes",
        probe.one,
        probe.all,
        probe.scaling()
    );
    for &peer in &peers {
        if let Some((_, Err(why), _)) = rows
            .first()
            .and_then(|r| r.cells.iter().find(|c| c.0 == peer))
        {
            println!("{}: {why}", peer.name());
        }
    }
    if let Ok(c) = &pools.current {
        println!("XNNPACK-2026: {}", c.xnn.path().display());
    }
    let json = to_json(&rows, threads, &isa, &probe, &cpus);
    if wrong.is_empty() {
        println!("all outputs match the f64 reference");
        (ExitCode::SUCCESS, json)
    } else {
        eprintln!("WRONG RESULTS: {}", wrong.join(", "));
        (ExitCode::FAILURE, json)
    }
}

/// The ratios reported per shape: keepalloc (on its pool) over each peer, and over its own
/// one-thread figure, each paired by round ([`paired_ratio`]).
fn ratios(row: &Row) -> Vec<(&'static str, Option<Paired>)> {
    let ours = row.of(Peer::Keepalloc);
    let r = |p: Peer| paired_ratio(ours?, row.of(p)?);
    vec![
        (
            "vs_1t",
            ours.zip(row.one.as_ref())
                .and_then(|(a, b)| paired_ratio(a, b)),
        ),
        ("vs_XNNPACK", r(Peer::Xnnpack)),
        ("vs_XNNPACK-2026", r(Peer::XnnpackCurrent)),
        ("vs_OpenBLAS", r(Peer::OpenBlas)),
        ("vs_oneDNN", r(Peer::OneDnn)),
    ]
}

fn print_table(rows: &[Row], threads: usize, peers: &[Peer]) {
    let mut h = format!("{:<16}", "shape (MxKxN)");
    for p in peers {
        let _ = write!(h, "{:>23}", p.name());
    }
    for (name, _) in ratios(&rows[0]) {
        let _ = write!(h, "{:>17}", name);
    }
    println!("{h}");
    for row in rows {
        let (m, k, n) = row.shape;
        let mut line = format!("{:<16}", format!("{m}x{k}x{n}"));
        for &p in peers {
            let c = row.cells.iter().find(|c| c.0 == p).unwrap();
            let s = match &c.1 {
                Ok(g) => format!("{:.1}{}", g.median, if c.2 { "" } else { "!" }),
                Err(_) => "skipped".into(),
            };
            let _ = write!(line, "{s:>23}");
        }
        for (_, r) in ratios(row) {
            let _ = write!(line, "{:>17}", r.map_or("-".into(), |r| r.show()));
        }
        println!("{line}");
    }
    println!(
        "(keepalloc = keepalloc-kernels on ThreadPool::new({threads}); {})",
        crate::output::ratio_method()
    );
    for line in crate::onednn::unreported_lines() {
        println!("oneDNN chose {line}");
    }
    let cells: Vec<(String, String, crate::stats::Paired)> = rows
        .iter()
        .flat_map(|row| {
            let (m, k, n) = row.shape;
            ratios(row).into_iter().filter_map(move |(name, r)| {
                let against = name.strip_prefix("vs_")?;
                // vs_1t has its own goal (a ratio well above 1), not a verdict against 1.
                let r = r.filter(|_| against != "1t")?;
                Some((format!("{m}x{k}x{n}"), against.to_owned(), r))
            })
        })
        .collect();
    for line in crate::stats::verdict_lines(&cells) {
        println!("against the peers: {line}");
    }
}

fn to_json(
    rows: &[Row],
    threads: usize,
    isa: &str,
    probe: &Probe,
    cpus: &[usize],
) -> serde_json::Value {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let shapes: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let (m, k, n) = row.shape;
            let results: serde_json::Map<_, _> = row
                .cells
                .iter()
                .map(|(p, g, ok)| (p.name(), crate::output::result_json(g, *ok)))
                .collect();
            let one = row.one.as_ref().map(|one| {
                serde_json::json!({
                    "gflops": one.median,
                    "round_gflops": one.rounds,
                    "round_steady": one.steady,
                })
            });
            let ratios: serde_json::Map<_, _> = ratios(row)
                .into_iter()
                .map(|(name, r)| (name.to_owned(), crate::output::paired_json(r)))
                .collect();
            serde_json::json!({
                "m": m, "k": k, "n": n,
                "results": results,
                "keepalloc-1t (mean of the pinned columns)": one,
                "ratios": ratios,
            })
        })
        .collect();
    serde_json::json!({
        "threads": threads,
        "keepalloc_isa": isa,
        "onednn_implementations": crate::onednn::chosen_json(),
        "loadavg": loadavg.trim(),
        "fma_peak_gflops_1t": probe.one,
        "fma_peak_gflops_threads": probe.all,
        "fma_scaling": probe.scaling(),
        "one_thread_cpus": cpus,
        "ratio_method": crate::output::ratio_method(),
        "shapes": shapes,
    })
}

/// The FMA probe on one core and on `threads` cores at once, best of the run: what the
/// machine itself gives a second core at this moment, beside which `vs_1t` is read (on a
/// shared machine a busy neighbour, or a lower clock with every core busy, lowers it).
struct Probe {
    one: f64,
    all: f64,
}

impl Probe {
    fn take(threads: usize) -> Probe {
        Probe {
            one: crate::probe::fma_peak(),
            all: crate::probe::fma_peak_threads(threads),
        }
    }

    /// Keeps the best of both probes (a probe can only come out low).
    fn best(self, other: Probe) -> Probe {
        Probe {
            one: self.one.max(other.one),
            all: self.all.max(other.all),
        }
    }

    fn scaling(&self) -> f64 {
        self.all / self.one
    }
}

// ---------------------------------------------------------------------------------------
// Debian's pthreadpool, run through the library's own adapter (`keepalloc_kernels::Pthreadpool`,
// what a runtime would use to run keepalloc on the pool it gives XNNPACK).

#[cfg(have_pthreadpool)]
// SAFETY: the signatures are pthreadpool.h's (`pthreadpool_t` as an opaque pointer).
unsafe extern "C" {
    fn pthreadpool_create(threads: usize) -> *mut c_void;
    fn pthreadpool_destroy(pool: *mut c_void);
    fn pthreadpool_parallelize_1d(
        pool: *mut c_void,
        function: keepalloc_kernels::PthreadpoolTask1d,
        context: *mut c_void,
        range: usize,
        flags: u32,
    );
    fn pthreadpool_get_threads_count(pool: *mut c_void) -> usize;
}

/// A Debian pthreadpool of T threads (the caller included), destroyed on drop; a
/// [`Parallel`] through [`keepalloc_kernels::Pthreadpool`].
pub struct PthreadPool {
    #[cfg(have_pthreadpool)]
    pool: keepalloc_kernels::Pthreadpool,
}

#[cfg(have_pthreadpool)]
impl PthreadPool {
    fn new(threads: usize) -> Result<PthreadPool, String> {
        // SAFETY: a plain constructor; NULL on failure.
        let p = unsafe { pthreadpool_create(threads) };
        if p.is_null() {
            return Err(format!("pthreadpool_create({threads}) failed"));
        }
        // SAFETY: a live pool of the linked library, destroyed only in drop.
        let pool = unsafe {
            keepalloc_kernels::Pthreadpool::from_raw(
                p,
                pthreadpool_parallelize_1d,
                pthreadpool_get_threads_count,
            )
        };
        Ok(PthreadPool { pool })
    }

    fn raw(&self) -> *mut c_void {
        self.pool.as_raw()
    }
}

#[cfg(not(have_pthreadpool))]
impl PthreadPool {
    fn new(_: usize) -> Result<PthreadPool, String> {
        Err("skipped (libpthreadpool-dev not installed)".into())
    }

    fn raw(&self) -> *mut c_void {
        core::ptr::null_mut()
    }
}

impl Drop for PthreadPool {
    fn drop(&mut self) {
        #[cfg(have_pthreadpool)]
        {
            // SAFETY: a pool from pthreadpool_create, destroyed once, no call in flight.
            unsafe { pthreadpool_destroy(self.pool.as_raw()) };
        }
    }
}

impl Parallel for PthreadPool {
    #[cfg(have_pthreadpool)]
    fn threads(&self) -> usize {
        self.pool.threads()
    }

    #[cfg(have_pthreadpool)]
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.pool.run(tasks, task)
    }

    #[cfg(not(have_pthreadpool))]
    fn threads(&self) -> usize {
        1
    }

    #[cfg(not(have_pthreadpool))]
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }
}

// ---------------------------------------------------------------------------------------
// Current XNNPACK (the executorch wheel's, in its own namespace: `keepalloc_xnnpack::current`)
// on a T-thread pthreadpool of its own.

struct Current {
    xnn: &'static Library,
    /// The library's own pthreadpool (never destroyed: the process ends first).
    pool: Threadpool,
}

impl Current {
    fn load(threads: usize) -> Result<&'static Current, String> {
        let xnn = crate::peers::xnnpack_current().map_err(|e| format!("skipped ({e})"))?;
        Ok(Box::leak(Box::new(Current {
            xnn,
            pool: xnn.threadpool(threads)?,
        })))
    }

    fn runner<'a>(&self, d: &'a Data) -> Result<Runner<'a>, String> {
        let g = Geometry {
            k: d.k,
            n: d.n,
            m: d.m,
        };
        let mut fc = F32Fc::with_pool(self.xnn, g, &d.w, &d.bias, Some(self.pool))?;
        Ok(Box::new(move |out: &mut [f32]| {
            fc.run(&d.x, out).expect("current XNNPACK f32 run")
        }))
    }
}

// ---------------------------------------------------------------------------------------
// OpenBLAS with T threads: the single-thread bench's runner, told the thread count.

fn openblas_runner(d: &Data, threads: usize) -> Result<Runner<'_>, String> {
    crate::peers::openblas::runner(d, threads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::measured;

    #[test]
    fn the_mean_core_keeps_the_longest_pause_and_a_pause_that_never_went_idle() {
        let mut a = measured(&[1.0; 3], &[true; 3]);
        let mut b = measured(&[1.0; 3], &[true; 3]);
        a.pause_ms = vec![5.0, f64::NAN, 4.0];
        b.pause_ms = vec![7.0, 2.0, 3.0];
        let mean = super::mean_of_cores(&[&a, &b]).unwrap();
        assert_eq!(mean.pause_ms[0], 7.0);
        assert!(mean.pause_ms[1].is_nan(), "{:?}", mean.pause_ms);
        assert_eq!(mean.pause_ms[2], 4.0);
    }

    #[test]
    fn vs_1t_divides_by_the_mean_core() {
        // CPU 0 runs at a third of CPU 1's speed all through; two threads use both. A single
        // thread left on CPU 0 would read 200 / 50 = 4.0x, on CPU 1 1.33x; the mean core
        // (100) gives 2.0x, the speed-up over what one thread gets from this machine.
        let slow = measured(&[50.0; 5], &[true; 5]);
        let fast = measured(&[150.0; 5], &[true; 5]);
        let two = measured(&[200.0; 5], &[true; 5]);
        let row = Row {
            shape: (16, 16, 16),
            cells: vec![
                (Peer::KeepallocOne(0), Ok(slow.clone()), true),
                (Peer::KeepallocOne(1), Ok(fast.clone()), true),
                (Peer::Keepalloc, Ok(two), true),
            ],
            one: mean_of_cores(&[&slow, &fast]),
        };
        let vs_1t = ratios(&row)[0];
        assert_eq!(vs_1t.0, "vs_1t");
        assert_eq!(vs_1t.1.unwrap().ratio, 2.0);
        // A round is steady only when both pinned batches were; the floor is the lower one.
        let flaky = measured(&[150.0; 5], &[true, false, true, true, true]);
        let one = mean_of_cores(&[&slow, &flaky]).unwrap();
        assert_eq!(one.steady, [true, false, true, true, true]);
        assert_eq!(one.floors[1], 70.0);
        assert!(mean_of_cores(&[]).is_none());
    }

    #[test]
    fn one_thread_columns_come_first_and_are_pinned() {
        let peers = Peer::all(&[0, 3]);
        assert_eq!(peers[..2], [Peer::KeepallocOne(0), Peer::KeepallocOne(3)]);
        assert_eq!(peers[1].name(), "keepalloc-1t@cpu3");
        assert_eq!(peers[1].pin(), Some(3));
        assert!(peers[2..].iter().all(|p| p.pin().is_none()));
        assert_eq!(peers.len(), 8);
    }
}
