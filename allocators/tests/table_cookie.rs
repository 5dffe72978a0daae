//! A block carries its owner's cookie in its header: a block reallocated or freed through a
//! table of ANOTHER owner is detected instead of corrupting two heaps. Blocks of two tables of
//! the same allocator stay interchangeable (they are the same owner).

use std::process::Command;

use keepalloc_allocators::{AllocatorTable, Counting, System};

static A: Counting<System> = Counting::new(System);
static B: Counting<System> = Counting::new(System);
static C: Counting<System> = Counting::new(System);

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
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "freeing_another_owners_block_aborts_with_a_message",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
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
