//! The process-wide `initialize` lifecycle, step by step, in one fresh process (the state
//! it tests lives for the life of the process, so the steps must run in this order).

use std::sync::Barrier;

use keepalloc_allocators::{AllocatorTable, Counting, System};
use keepalloc_kernels::{
    FullyConnected, FullyConnectedDesc, ISA_ENV, Isa, KernelError, captured_table, initialize,
};

static FIRST: Counting<System> = Counting::new(System);
static SECOND: Counting<System> = Counting::new(System);
static TABLE_A: AllocatorTable = AllocatorTable::for_allocator(&FIRST);
static TABLE_B: AllocatorTable = AllocatorTable::for_allocator(&SECOND);
/// Equal to `TABLE_A` field by field, at another address.
static TABLE_A_COPY: AllocatorTable = AllocatorTable::for_allocator(&FIRST);
static INCOMPLETE: AllocatorTable = {
    let p = AllocatorTable::for_allocator(&FIRST).raw_parts();
    // SAFETY: `for_allocator`'s parts with one slot emptied keep the contract.
    unsafe { AllocatorTable::from_raw_parts(p.0, p.1, p.2, None, p.4, p.5) }
};

fn set_env(value: Option<&str>) {
    // `main` is single-threaded while it changes the environment: the racing threads below
    // are spawned after the last change and joined before returning.
    // SAFETY: no other thread reads or writes the environment meanwhile.
    unsafe {
        match value {
            Some(v) => std::env::set_var(ISA_ENV, v),
            None => std::env::remove_var(ISA_ENV),
        }
    }
}

fn step(name: &str) {
    println!("lifecycle: {name}");
}

fn main() {
    let w = [1.0f32, 2.0, 3.0, 4.0];
    let desc = FullyConnectedDesc::new(2, 2, &w);

    step("an operator created before initialize is Uninitialized");
    assert_eq!(
        FullyConnected::create(&desc).map(drop),
        Err(KernelError::Uninitialized)
    );
    assert_eq!(captured_table(), None);

    step("an ISA the CPU lacks is a hardware error that captures nothing, and can be retried");
    // (Before any successful call: the hardware check caches only success.)
    let original = std::env::var(ISA_ENV).ok();
    if let Some(missing) = Isa::ALL.into_iter().find(|isa| !isa.is_supported()) {
        set_env(Some(missing.name()));
        assert_eq!(
            initialize(&TABLE_A),
            Err(KernelError::UnsupportedIsa { isa: missing })
        );
        assert_eq!(captured_table(), None);
    }
    set_env(Some("not-an-isa"));
    assert_eq!(initialize(&TABLE_A), Err(KernelError::UnknownIsa));
    assert_eq!(captured_table(), None);
    set_env(original.as_deref());

    step("a table with a NULL slot captures nothing");
    assert_eq!(initialize(&INCOMPLETE), Err(KernelError::InvalidTable));
    assert_eq!(captured_table(), None);

    step("many concurrent first calls with two tables: exactly one table wins");
    let threads = 32;
    let barrier = Barrier::new(threads);
    let results: Vec<(bool, Result<(), KernelError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    let table = if i % 2 == 0 { &TABLE_A } else { &TABLE_B };
                    barrier.wait();
                    (i % 2 == 0, initialize(table))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let captured = captured_table().expect("one call must have captured");
    let a_won = captured == TABLE_A;
    assert!(a_won || captured == TABLE_B);
    for (is_a, result) in results {
        if is_a == a_won {
            assert_eq!(result, Ok(()));
        } else {
            assert_eq!(result, Err(KernelError::AlreadyInitialized));
        }
    }
    let (winner, winner_copy, loser, owner, other) = if a_won {
        (&TABLE_A, Some(&TABLE_A_COPY), &TABLE_B, &FIRST, &SECOND)
    } else {
        (&TABLE_B, None, &TABLE_A, &SECOND, &FIRST)
    };
    assert_eq!(
        captured.context(),
        owner as *const _ as *mut core::ffi::c_void
    );

    step("later calls: the same table (or an equal one) succeeds, another is refused");
    assert_eq!(initialize(winner), Ok(()));
    if let Some(copy) = winner_copy {
        assert_eq!(initialize(copy), Ok(()));
    }
    assert_eq!(initialize(loser), Err(KernelError::AlreadyInitialized));
    assert_eq!(initialize(&INCOMPLETE), Err(KernelError::InvalidTable));
    assert_eq!(captured_table(), Some(*winner));

    step("operators allocate through the captured table only");
    let (owner_before, other_before) = (owner.stats(), other.stats());
    let op = FullyConnected::create(&desc).unwrap();
    assert_eq!(owner.stats().allocations - owner_before.allocations, 1);
    let mut y = [0.0f32; 2];
    op.run(1, &[1.0, 1.0], &mut y).unwrap();
    assert_eq!(y, [3.0, 7.0]);
    drop(op);
    assert_eq!(owner.stats().live_bytes, owner_before.live_bytes);
    assert_eq!(other.stats().allocations, other_before.allocations);

    println!("lifecycle: ok");
}
