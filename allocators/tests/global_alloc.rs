//! `harness = false`: a whole test binary whose `#[global_allocator]` is a keepalloc backend
//! behind the `AsGlobal` adapter, with counting, so we can see every allocation go through it.

#[cfg(not(all(feature = "bumpalo", not(feature = "mimalloc"))))]
use keepalloc_allocators::DefaultBackend;
use keepalloc_allocators::{AsGlobal, Counting};

#[cfg(not(any(feature = "mimalloc", feature = "bumpalo")))]
#[global_allocator]
static GLOBAL: AsGlobal<Counting<DefaultBackend>> =
    AsGlobal(Counting::new(keepalloc_allocators::System));

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: AsGlobal<Counting<DefaultBackend>> =
    AsGlobal(Counting::new(keepalloc_allocators::Mimalloc));

// The arena is not const-constructible, and an arena never frees: run the global-allocator
// check on System when only `bumpalo` is on.
#[cfg(all(feature = "bumpalo", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: AsGlobal<Counting<keepalloc_allocators::System>> =
    AsGlobal(Counting::new(keepalloc_allocators::System));

fn main() {
    let before = GLOBAL.0.stats();
    let mut v: Vec<String> = Vec::new();
    for i in 0..1000 {
        v.push(format!("string number {i}"));
    }
    let mid = GLOBAL.0.stats();
    assert!(
        mid.allocations >= before.allocations + 1000,
        "{before:?} {mid:?}"
    );
    assert!(mid.live_bytes > before.live_bytes + 1000 * 16);
    v.shrink_to(10);
    drop(v);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                (0..1000usize)
                    .map(|i| vec![t as u8; i])
                    .map(|v| v.len())
                    .sum::<usize>()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 999 * 1000 / 2);
    }
    let after = GLOBAL.0.stats();
    assert!(after.reallocations > before.reallocations);
    assert!(after.deallocations >= mid.deallocations + 1000);
    println!("global_alloc: 1 passed, 0 failed ({after:?})");
}
