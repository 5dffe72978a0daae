//! The pool's hand-off, batch by batch: how long `run_ranges` takes on a job of two tasks
//! that each spin `--task-ns` (so the worker has to take one, or the caller runs both), and
//! the raw cross-core round trip of a cache line between the caller and a second thread
//! measured just before the batch (on the Zen 4 VM about 120 ns with the timer's own cost,
//! 300+ ns when the host places the two vCPUs far apart).
//!
//! `cargo run --release -p keepalloc-kernels-bench --example pool_handoff -- [--batches 40]
//! [--task-ns 500]`
//!
//! Each batch: 5 ms of untimed runs, then 2000 timed ones; prints the batch's median and
//! 90th percentile run time, the run time above the task's own spin (the hand-off), the
//! share of timed runs in which a thread other than the caller ran a task (the witness that
//! there was a hand-off: where the caller ran both tasks, the "hand-off" is a second task's
//! spin), and the cache-line round trip. At the end, the hand-off's median over the batches
//! whose round trip was below 150 ns and over those above.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{Parallel, ThreadPool};

static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);

#[derive(Parser)]
struct Args {
    /// Batches.
    #[arg(long, default_value_t = 40)]
    batches: usize,
    /// How long each of the two tasks spins, in ns.
    #[arg(long, default_value_t = 500)]
    task_ns: u64,
}

fn spin_for(ns: u64) {
    let t = Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// The round trip of one cache line between this thread and a fresh one, median of 20000.
fn round_trip_ns() -> f64 {
    #[repr(align(64))]
    struct Line(AtomicU64);
    let line = Line(AtomicU64::new(0));
    const N: u64 = 20000;
    let mut times = Vec::with_capacity(N as usize);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..N {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        for i in 0..N {
            let t = Instant::now();
            line.0.store(2 * i + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
            times.push(t.elapsed().as_nanos() as f64);
        }
    });
    median(&mut times)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    keepalloc_kernels::initialize(&TABLE).expect("initialize");
    let pool = ThreadPool::new(2).expect("pool");
    let caller = std::thread::current().id();
    // Set by a task that runs on another thread than the caller: the kernel's scheduling,
    // not the pool's own account of who took what.
    let elsewhere = AtomicBool::new(false);
    let task = |r: std::ops::Range<usize>| {
        if std::thread::current().id() != caller {
            elsewhere.store(true, Ordering::Relaxed);
        }
        for _ in r {
            spin_for(args.task_ns);
        }
    };
    let (mut near, mut far) = (Vec::new(), Vec::new());
    for _ in 0..args.batches {
        let rt = round_trip_ns();
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(5) {
            pool.run_ranges(2, &task);
        }
        let mut shared = 0;
        let mut t: Vec<f64> = (0..2000)
            .map(|_| {
                elsewhere.store(false, Ordering::Relaxed);
                let s = Instant::now();
                pool.run_ranges(2, &task);
                let ns = s.elapsed().as_nanos() as f64;
                shared += usize::from(elsewhere.load(Ordering::Relaxed));
                ns
            })
            .collect();
        let p50 = median(&mut t);
        let p90 = t[t.len() * 9 / 10];
        let handoff = p50 - args.task_ns as f64;
        let share = 100.0 * shared as f64 / t.len() as f64;
        println!(
            "run p50 {p50:6.0} ns  p90 {p90:6.0} ns  hand-off {handoff:6.0} ns  worker ran a task \
             in {share:5.1}% of runs  cache-line round trip {rt:5.0} ns"
        );
        if rt < 150.0 { &mut near } else { &mut far }.push(handoff);
    }
    for (name, v) in [
        ("near (< 150 ns)", &mut near),
        ("far (>= 150 ns)", &mut far),
    ] {
        if !v.is_empty() {
            let n = v.len();
            println!(
                "hand-off, batches with the round trip {name}: median {:.0} ns over {n}",
                median(v)
            );
        }
    }
}
