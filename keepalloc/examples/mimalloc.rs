//! The owner on mimalloc: `cargo run -p keepalloc --features mimalloc --example mimalloc`.
//!
//! Two sessions acquire the process-wide allocator; a C library would get `table` once and
//! allocate through it. The owner counts what passes through it.

use keepalloc::{GlobalProvider, Mimalloc};

static ALLOCATOR: GlobalProvider<Mimalloc> = GlobalProvider::new(|| Ok(Mimalloc::new()), None);

fn main() {
    let a = ALLOCATOR.acquire().expect("mimalloc owner");
    let b = ALLOCATOR.acquire().expect("the same owner");
    assert_eq!(a, b);
    let table = a.table();
    let allocate = table.aligned_allocate().expect("aligned_allocate");
    let free = table.aligned_deallocate().expect("aligned_deallocate");
    // SAFETY: keepalloc's table, filled; the block is freed once, through the same table.
    let p = unsafe { allocate(table.context(), 64, 4096) };
    assert!(!p.is_null() && (p as usize).is_multiple_of(64));
    println!("mimalloc owner: live bytes {}", a.stats().live_bytes);
    assert!(a.stats().live_bytes >= 4096);
    // SAFETY: as above.
    unsafe { free(table.context(), p) };
    assert_eq!(a.stats().live_bytes, 0);
    println!("freed: live bytes {}", a.stats().live_bytes);
}
