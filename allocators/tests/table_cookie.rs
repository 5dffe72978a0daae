//! In a header table a block carries its owner's cookie in its header: a block reallocated
//! or freed through a table of ANOTHER owner is detected instead of corrupting two heaps.
//! Blocks of two tables of the same allocator stay interchangeable (they are the same owner).
//!
//! The owners here are header owners (`Counting` over an allocator that needs a size to free:
//! any allocator-api2 `Allocator`, here `Plain<System>`). Owners over a backend that frees
//! without a size (`Counting<System>`, `Counting<Mimalloc>`) get a headerless table with no
//! cookie: for them a misrouted block is freed correctly in the shared heap and only the
//! accounting moves (`headerless_owners_share_the_heap_and_move_the_count`, below; the
//! decision is in `AllocatorTable`'s docs).

#[path = "common/plain.rs"]
mod plain;

use keepalloc_allocators::{AllocatorTable, Counting, System};
use plain::Plain;

static A: Counting<Plain<System>> = Counting::new(Plain(System));
static B: Counting<Plain<System>> = Counting::new(Plain(System));
static C: Counting<Plain<System>> = Counting::new(Plain(System));

/// Set in the child process that frees a block through the wrong table.
const CHILD: &str = "KEEPALLOC_TABLE_COOKIE_CHILD";

#[test]
fn reallocating_another_owners_block_fails_and_keeps_it() {
    let (a, b) = (
        AllocatorTable::for_allocator(&A),
        AllocatorTable::for_allocator(&B),
    );
    // SAFETY: tables from `for_allocator` keep the contract; every block is freed through the table of its own owner.
    unsafe {
        let p = a.allocate().unwrap()(a.context(), 100).cast::<u8>();
        assert!(!p.is_null());
        p.write_bytes(7, 100);
        let moved = b.reallocate().unwrap()(b.context(), p.cast(), 200);
        assert!(moved.is_null(), "another owner's block is refused");
        assert_eq!(*p.add(99), 7, "and left alone");
        // A second table of the SAME allocator is the same owner: its blocks are accepted.
        let a2 = AllocatorTable::for_allocator(&A);
        let grown = a2.reallocate().unwrap()(a2.context(), p.cast(), 200).cast::<u8>();
        assert!(!grown.is_null());
        assert_eq!(*grown.add(99), 7);
        a.deallocate().unwrap()(a.context(), grown.cast());
    }
    assert_eq!(A.stats().live_bytes, 0);
    assert_eq!(B.stats().allocations, 0);
}

#[test]
#[cfg_attr(miri, ignore = "spawns a child process, which Miri cannot do")]
fn freeing_another_owners_block_aborts_with_a_message() {
    if std::env::var_os(CHILD).is_some() {
        let (a, c) = (
            AllocatorTable::for_allocator(&A),
            AllocatorTable::for_allocator(&C),
        );
        // SAFETY: deliberately wrong: the block is A's and is freed through C's table, which must detect it (the test is that it aborts before touching C's heap).
        unsafe {
            let p = a.allocate().unwrap()(a.context(), 64);
            c.deallocate().unwrap()(c.context(), p);
        }
        println!("not detected");
        return;
    }
    let out = keepalloc_testkit::rerun(
        "freeing_another_owners_block_aborts_with_a_message",
        &[(CHILD, "1")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the wrong free went unnoticed: {stderr}"
    );
    assert!(
        stderr.contains("was freed through a table that did not allocate it"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not detected"));
}

/// Headerless owners (glibc or mimalloc underneath, `Counting` on top) keep no cookie: the
/// block is the backend's own, so a block of owner X freed through owner Y's table goes back
/// to the one process heap they share (no abort, no corruption), and the free is counted by
/// Y: X's live bytes stay up by the block's usable size, Y's drop by as much (below zero).
#[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
#[test]
fn headerless_owners_share_the_heap_and_move_the_count() {
    use keepalloc_allocators::SizelessFree;
    static X: Counting<System> = Counting::new(System);
    static Y: Counting<System> = Counting::new(System);
    let (x, y) = (
        AllocatorTable::for_allocator(&X),
        AllocatorTable::for_allocator(&Y),
    );
    // SAFETY: tables from `for_allocator`; the block is freed once (through the other owner's table, which a headerless table allows: both are glibc underneath).
    unsafe {
        let p = x.aligned_allocate().unwrap()(x.context(), 64, 64);
        assert!(!p.is_null() && (p as usize).is_multiple_of(64));
        // No header: the owner counted the backend's usable size of the very pointer C got
        // (a header table counts 64 bytes of header and padding on top, 128 in all).
        let usable = X.usable_size(p.cast());
        assert!(usable >= 64);
        assert_eq!(X.stats().live_bytes, usable);
        assert!(
            usable < 128,
            "the block carries no 64-byte header ({usable})"
        );
        y.deallocate().unwrap()(y.context(), p);
        assert_eq!(
            X.stats().live_bytes,
            usable,
            "the allocating owner still counts it"
        );
        assert_eq!(Y.stats().deallocations, 1);
        assert_eq!(
            Y.stats().live_bytes,
            usable.wrapping_neg(),
            "the freeing owner counted the free"
        );
    }
}
