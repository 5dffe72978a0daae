//! Create, run and drop never touch the global allocator: every byte goes through the
//! captured table. A counting `#[global_allocator]` needs a process of its own.

use keepalloc_allocators::{AllocatorTable, AsGlobal, Counting, System};
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, Isa, initialize};

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
            let global_before = GLOBAL.0.stats();
            let table_before = BACKEND.stats();

            let op = FullyConnected::create(&desc).unwrap();
            op.run(batch, &input, &mut output).unwrap();
            op.run(batch, &input, &mut output).unwrap();
            drop(op);

            let global_after = GLOBAL.0.stats();
            let table_after = BACKEND.stats();
            assert_eq!(
                global_after.allocations, global_before.allocations,
                "{isa} batch {batch}: the global allocator was used"
            );
            assert_eq!(
                table_after.allocations - table_before.allocations,
                FullyConnected::CREATE_ALLOCATIONS as u64
            );
            assert_eq!(table_after.live_bytes, table_before.live_bytes);
            println!("global_alloc: {isa} batch {batch}: 0 global allocations, 1 table allocation");
        }
    }
    println!("global_alloc: ok");
}
