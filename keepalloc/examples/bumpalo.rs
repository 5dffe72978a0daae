//! The owner on a bumpalo arena: `cargo run -p keepalloc --features bumpalo --example bumpalo`.
//!
//! An arena suits a short-lived process (a batch job, a test): frees are counted but memory
//! comes back only when the arena is dropped, and a process-wide owner never is.

use keepalloc::{Arena, GlobalProvider};

static ALLOCATOR: GlobalProvider<Arena> =
    GlobalProvider::new(|| Arena::with_capacity(1 << 20), None);

fn main() {
    let handle = ALLOCATOR.acquire().expect("arena owner");
    let table = handle.table();
    let allocate = table.allocate().expect("allocate");
    let free = table.deallocate().expect("deallocate");
    let mut blocks = Vec::new();
    for size in [16usize, 1000, 64 << 10] {
        // SAFETY: keepalloc's table, filled; each block is freed once below.
        let p = unsafe { allocate(table.context(), size) };
        assert!(!p.is_null());
        blocks.push(p);
    }
    println!(
        "arena owner: {} allocations, live bytes {}",
        handle.stats().allocations,
        handle.stats().live_bytes
    );
    for p in blocks {
        // SAFETY: from this table's allocate, freed once.
        unsafe { free(table.context(), p) };
    }
    assert_eq!(handle.stats().live_bytes, 0);
    println!("after the frees: live bytes {}", handle.stats().live_bytes);
}
