//! Two threads against the mean core, with the output on a cache line or 16 bytes past one:
//! the measurement behind the bench's 64-byte aligned buffers (`peers::Aligned`).
//!
//! `cargo run --release -p keepalloc-kernels-bench --example output_alignment -- [--shape
//! 32x96x1536] [--rounds 600]`
//!
//! Each round times the operator (median of at least 4 ms of back-to-back runs) on one thread
//! pinned to the first CPU, on two threads (`ThreadPool::new(2)`, caller unpinned) writing an
//! output that starts on a cache line, the same writing an output 16 bytes past one (where
//! glibc's `mmap` puts a large `Vec`), then on one thread pinned to the second CPU; the
//! two-thread variants swap places every round and the pinned CPUs every other round. Each
//! two-thread figure is divided by the mean of the round's two one-thread figures, and the
//! median of those ratios is printed, then the aligned one again over the rounds grouped by
//! how far apart the two one-thread figures were (within 5%, 5–15%, 15–30%, more). Every
//! output is checked bit for bit against the first one-thread run. Needs two CPUs.

use std::time::{Duration, Instant};

use clap::Parser;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, ThreadPool};

static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);

#[derive(Parser)]
struct Args {
    /// The shape, MxKxN.
    #[arg(long, default_value = "32x96x1536")]
    shape: String,
    /// Rounds.
    #[arg(long, default_value_t = 600)]
    rounds: usize,
}

/// Pins the calling thread to `cpu`, or lets it run on both CPUs (`None`).
fn pin(cpus: [usize; 2], cpu: Option<usize>) {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpu.map_or(cpus.to_vec(), |c| vec![c]) {
        // SAFETY: `c` is a CPU number below CPU_SETSIZE (from sched_getaffinity).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: a valid set of the size passed, for the calling thread (0).
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// The first two CPUs this process may run on.
fn two_cpus() -> [usize; 2] {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out set of the size passed, for the calling thread (0).
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| {
            // SAFETY: CPU_ISSET only reads the set, and `c` is below CPU_SETSIZE.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect();
    assert!(cpus.len() >= 2, "needs two CPUs, has {cpus:?}");
    [cpus[0], cpus[1]]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let dims: Vec<usize> = args
        .shape
        .split('x')
        .map(|d| d.parse().expect("MxKxN"))
        .collect();
    let [m, k, n] = dims[..] else {
        panic!("--shape MxKxN")
    };
    keepalloc_kernels::initialize(&TABLE).expect("initialize");
    let cpus = two_cpus();
    let w: Vec<f32> = (0..k * n)
        .map(|i| (i * 7 % 13) as f32 / 13.0 - 0.5)
        .collect();
    let x: Vec<f32> = (0..m * k)
        .map(|i| (i * 5 % 11) as f32 / 11.0 - 0.5)
        .collect();
    let op = FullyConnected::create(&FullyConnectedDesc::new(k, n, &w)).expect("create");
    let pool = ThreadPool::new(2).expect("pool");
    // One buffer, two windows into it: on a cache line, and 16 bytes (4 floats) past one.
    let mut buf = vec![0f32; m * n + 32];
    let line = (64 - buf.as_ptr() as usize % 64) % 64 / size_of::<f32>();
    let offsets = [line, line + 4];
    let flops = 2.0 * (m * k * n) as f64;
    let mut reference: Option<Vec<f32>> = None;
    let mut ratios = [Vec::new(), Vec::new()];
    // (how far apart the two cores read alone, the aligned run's ratio) per round.
    let mut balance = Vec::new();
    for round in 0..args.rounds {
        let first = round % 2;
        let mut one = [0.0; 2];
        let mut two = [0.0; 2];
        let order = if round % 4 < 2 { [0, 1] } else { [1, 0] };
        // (pinned CPU or none, output offset index)
        let steps = [
            (Some(cpus[first]), 0),
            (None, order[0]),
            (None, order[1]),
            (Some(cpus[1 - first]), 0),
        ];
        for (i, &(cpu, o)) in steps.iter().enumerate() {
            pin(cpus, cpu);
            let y = &mut buf[offsets[o]..offsets[o] + m * n];
            let mut samples = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(4) || samples.len() < 5 {
                let t = Instant::now();
                match cpu {
                    Some(_) => op.run(m, &x, y),
                    None => op.run_in(&pool, m, &x, y),
                }
                .expect("run");
                samples.push(flops / t.elapsed().as_secs_f64() / 1e9);
            }
            match &reference {
                None => reference = Some(y.to_vec()),
                Some(r) => assert!(
                    r.iter()
                        .zip(y.iter())
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "output differs from the one-thread reference"
                ),
            }
            let gflops = median(samples);
            match (i, cpu) {
                (0, _) => one[0] = gflops,
                (_, Some(_)) => one[1] = gflops,
                (_, None) => two[o] = gflops,
            }
        }
        let mean_core = (one[0] + one[1]) / 2.0;
        balance.push(((one[0] - one[1]).abs() / mean_core, two[0] / mean_core));
        for (r, t) in ratios.iter_mut().zip(two) {
            r.push(t / mean_core);
        }
    }
    let [aligned, past] = ratios;
    println!(
        "{m}x{k}x{n}, two threads against the mean core, median of {} rounds' ratios: output on \
         a cache line {:.3}x, 16 bytes past one {:.3}x",
        args.rounds,
        median(aligned),
        median(past)
    );
    // The aligned figure by how far apart the two cores read alone in the same round (the
    // cores of a shared host are often not equally fast; the pool balances within a run).
    for (label, lo, hi) in [
        ("within 5%", 0.0, 0.05),
        ("5-15%", 0.05, 0.15),
        ("15-30%", 0.15, 0.30),
        ("over 30%", 0.30, f64::INFINITY),
    ] {
        let within: Vec<f64> = balance
            .iter()
            .filter(|&&(gap, _)| gap >= lo && gap < hi)
            .map(|&(_, r)| r)
            .collect();
        if !within.is_empty() {
            println!(
                "  cores alone {label:>9} apart: {:4} rounds, aligned {:.3}x",
                within.len(),
                median(within)
            );
        }
    }
}
