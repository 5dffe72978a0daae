//! Scribble catching a double free: `cargo run -p keepalloc --features scribble --example scribble`.
//!
//! With `Policy::Record` the violation is kept for the program to inspect; the default policy
//! (`Abort`) prints a report with the block's stacks and ends the process. A C library reaches
//! the same checks through `AllocatorTable::for_allocator(&DEBUG_HEAP)`, or from C with
//! `KEEPALLOC_SCRIBBLE=guard:1/64,stacks:both`.

use core::alloc::Layout;

use keepalloc::System;
use keepalloc::allocator_api2::alloc::Allocator;
use keepalloc::scribble::{Policy, Scribble, ScribbleConfig, ViolationKind};

static DEBUG_HEAP: Scribble<System> =
    Scribble::new(System, ScribbleConfig::DEFAULT.with_policy(Policy::Record));

fn main() {
    let layout = Layout::from_size_align(256, 16).expect("layout");
    let block = DEBUG_HEAP.allocate(layout).expect("256 bytes");
    let p = block.cast::<u8>();
    // SAFETY: a fresh block of 256 bytes.
    assert_eq!(unsafe { *p.as_ptr() }, 0xAA, "new blocks are scribbled");
    // SAFETY: the first free is the block's own. The second is the bug being demonstrated:
    // the block waits in quarantine, so Scribble recognises it instead of corrupting a heap.
    unsafe {
        DEBUG_HEAP.deallocate(p, layout);
        DEBUG_HEAP.deallocate(p, layout);
    }
    let found = DEBUG_HEAP.violations();
    for v in &found {
        println!("scribble found: {v}");
    }
    assert!(found.iter().any(|v| v.kind == ViolationKind::DoubleFree));
}
