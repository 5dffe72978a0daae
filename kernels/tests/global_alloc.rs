//! Create, run and drop never touch the global allocator: every byte goes through the
//! captured table, with one thread and with several (the process pool, and a `ThreadPool`
//! whose creation, runs and drop are all measured). A counting `#[global_allocator]` needs a
//! process of its own.

use std::fmt::Arguments;
use std::sync::atomic::{AtomicUsize, Ordering};

use keepalloc_allocators::{AllocatorTable, AsGlobal, Counting, CountingStats, System};
use keepalloc_kernels::{
    DotIsa, FullyConnected, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedDesc,
    FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w,
    FullyConnectedQd8F32Qc8wDesc, Isa, Parallel, ThreadPool, initialize, process_pool,
};

#[global_allocator]
static GLOBAL: AsGlobal<Counting<System>> = AsGlobal(Counting::new(System));

static BACKEND: Counting<System> = Counting::new(System);
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

fn main() {
    // Initialization reads the environment once (through the global allocator); the
    // paths under test are the operator's.
    initialize(&TABLE).unwrap();
    let isas: Vec<Isa> = Isa::available().collect();
    let (k, n, m) = (300, 70, 9);
    let weights: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let input: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32).collect();
    let mut output = vec![0.0f32; m * n];
    for isa in isas {
        for batch in [1, m] {
            let desc = FullyConnectedDesc::new(k, n, &weights)
                .with_bias(&bias)
                .transposed()
                .with_isa(isa);
            let before = (GLOBAL.0.stats(), BACKEND.stats());

            let op = FullyConnected::create(&desc).unwrap();
            op.run(batch, &input, &mut output).unwrap();
            op.run(batch, &input, &mut output).unwrap();
            drop(op);

            assert_only_table(
                &before,
                FullyConnected::CREATE_ALLOCATIONS as u64,
                format_args!("{isa} batch {batch}"),
            );
            println!("global_alloc: {isa} batch {batch}: 0 global allocations, 1 table allocation");
        }
    }
    threads(&weights, &bias);
    low_precision(k, n, m, &input, &bias);
    println!("global_alloc: ok");
}

/// Several threads: the process pool behind `with_threads` and a `ThreadPool` of our own
/// (created, used by `run_in` and dropped inside the measured section) make no global
/// allocation; the pool's state is one table block, given back on drop.
fn threads(weights: &[f32], bias: &[f32]) {
    // Starting the process pool asks the OS for the CPU count, which reads /proc through the
    // global allocator once; that is outside what is measured (create, run, drop).
    let process = process_pool().unwrap();
    // Batches 17 and 64 of 300x70 are cut into several tasks (the pool's own record below
    // shows it); batch 1 is too small to cut.
    let (k, n) = (300, 70);
    let tall = 64;
    let input: Vec<f32> = (0..tall * k).map(|i| (i % 5) as f32).collect();
    let mut output = vec![0.0f32; tall * n];
    for isa in Isa::available() {
        let before = (GLOBAL.0.stats(), BACKEND.stats());

        let desc = FullyConnectedDesc::new(k, n, weights)
            .with_bias(bias)
            .transposed()
            .with_isa(isa);
        let op = FullyConnected::create(&desc.with_threads(2)).unwrap();
        for batch in [1, 17, tall] {
            op.run(batch, &input[..(batch - 1) * k + k], &mut output)
                .unwrap();
            op.run_with_threads(batch, &input[..(batch - 1) * k + k], &mut output, 4)
                .unwrap();
        }
        let pool = ThreadPool::new(3).unwrap();
        assert_eq!(
            BACKEND.stats().allocations - before.1.allocations,
            FullyConnected::CREATE_ALLOCATIONS as u64 + 1,
            "the pool's state is one table block"
        );
        for batch in [1, 17, tall] {
            let observed = Observed(&pool, AtomicUsize::new(0));
            op.run_in(&observed, batch, &input[..(batch - 1) * k + k], &mut output)
                .unwrap();
            let tasks = observed.1.load(Ordering::Relaxed);
            assert!(
                (batch == 1) == (tasks <= 1),
                "{isa}: batch {batch} was cut into {tasks} tasks"
            );
        }
        drop(pool);
        drop(op);

        assert_only_table(
            &before,
            FullyConnected::CREATE_ALLOCATIONS as u64 + 1,
            format_args!("{isa} threads"),
        );
        println!(
            "global_alloc: {isa} threads (process pool of {}, ThreadPool of 3): 0 global allocations",
            process.threads()
        );
    }
}

/// A pool that records how many tasks a run was cut into (0: the run did not use it), and
/// runs them on the pool it wraps.
struct Observed<'a>(&'a ThreadPool, AtomicUsize);

impl Parallel for Observed<'_> {
    fn threads(&self) -> usize {
        self.0.threads()
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.1.store(tasks, Ordering::Relaxed);
        self.0.run(tasks, task);
    }
}

/// One create/run/drop of an operator kind; false when it could not be created.
type Exercise<'a> = dyn Fn(&mut [f32], &mut [u8]) -> bool + 'a;

/// The bf16 and int8 operators, on every dot-product ISA this CPU has a kernel for: create,
/// two runs (batch 1 and `m`; qd8 with a workspace sized beforehand) and drop make no
/// global allocation and exactly `CREATE_ALLOCATIONS` table allocations, all freed.
fn low_precision(k: usize, n: usize, m: usize, input: &[f32], bias: &[f32]) {
    let w8: Vec<i8> = (0..k * n).map(|i| (i % 251) as u8 as i8).collect();
    let wb: Vec<u16> = (0..k * n).map(|i| 0x3f80 + (i % 17) as u16).collect();
    let xb: Vec<u16> = input
        .iter()
        .map(|&v| keepalloc_kernels::bf16_from_f32(v))
        .collect();
    let scales: Vec<f32> = (0..n).map(|i| 0.01 + i as f32 * 1e-3).collect();
    let mut output = vec![0.0f32; m * n];
    // Sized outside the measured section: the caller owns the workspace, as in XNNPACK.
    let mut workspace = vec![0u8; 1 << 20];
    let mut measured = 0;
    for isa in DotIsa::available() {
        let kinds: [(&str, usize, &Exercise<'_>); 3] = [
            (
                "bf16_f32",
                FullyConnectedBf16F32::CREATE_ALLOCATIONS,
                &|out, _| {
                    let desc = FullyConnectedBf16F32Desc::new(k, n, &wb)
                        .with_bias(bias)
                        .with_isa(isa);
                    let Ok(op) = FullyConnectedBf16F32::create(&desc) else {
                        return false;
                    };
                    for batch in [1, m] {
                        op.run(batch, &xb, out).unwrap();
                    }
                    true
                },
            ),
            (
                "qd8_f32_qc8w",
                FullyConnectedQd8F32Qc8w::CREATE_ALLOCATIONS,
                &|out, ws| {
                    let desc = FullyConnectedQd8F32Qc8wDesc::new(k, n, &w8, &scales)
                        .with_bias(bias)
                        .transposed()
                        .with_isa(isa);
                    let Ok(op) = FullyConnectedQd8F32Qc8w::create(&desc) else {
                        return false;
                    };
                    for batch in [1, m] {
                        let size = op.workspace_size(batch).unwrap();
                        op.run(batch, input, out, &mut ws[..size]).unwrap();
                    }
                    true
                },
            ),
            (
                "f32_qc8w",
                FullyConnectedF32Qc8w::CREATE_ALLOCATIONS,
                &|out, _| {
                    let desc = FullyConnectedF32Qc8wDesc::new(k, n, &w8, &scales)
                        .with_bias(bias)
                        .with_isa(isa);
                    let Ok(op) = FullyConnectedF32Qc8w::create(&desc) else {
                        return false;
                    };
                    for batch in [1, m] {
                        op.run(batch, input, out).unwrap();
                    }
                    true
                },
            ),
        ];
        for (name, allocations, run) in kinds {
            if !DotIsa::kernels_for(name).contains(&isa) {
                continue;
            }
            let before = (GLOBAL.0.stats(), BACKEND.stats());
            assert!(
                run(&mut output, &mut workspace),
                "{name} {isa}: create failed"
            );
            assert_only_table(&before, allocations as u64, format_args!("{name} {isa}"));
            println!(
                "global_alloc: {name} {isa}: 0 global allocations, {allocations} table allocation"
            );
            measured += 1;
        }
    }
    assert!(measured >= 3, "every kind has at least its scalar kernel");
}

/// Since `before` (the global and the table's stats): no global allocation, `table`
/// allocations from the table, and every table block given back. `what` is formatted
/// only after the stats are read, as formatting allocates.
fn assert_only_table(before: &(CountingStats, CountingStats), table: u64, what: Arguments<'_>) {
    let (global, tab) = (GLOBAL.0.stats(), BACKEND.stats());
    assert_eq!(
        global.allocations, before.0.allocations,
        "{what}: the global allocator was used"
    );
    assert_eq!(tab.allocations - before.1.allocations, table, "{what}");
    assert_eq!(tab.live_bytes, before.1.live_bytes, "{what}");
}
