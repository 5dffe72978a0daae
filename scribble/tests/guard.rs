//! Guard-page mode, each fault in a child process (it ends the process): a read after free is
//! caught at the faulting instruction in guard-page mode and goes unseen in scribble mode
//! (the difference is the feature); an overflow past the slack faults at the first byte past
//! it while reads within the slack do not; an underflow of a left-aligned block faults; each
//! report names the block and carries the faulting, free and allocation stacks.

use core::alloc::Layout;
use std::process::Output;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::System;
use keepalloc_scribble::{Scribble, ScribbleConfig, exit};
use keepalloc_testkit::child::{assert_exit, report_section as section};
use keepalloc_testkit::{describe, rerun};

const CHILD: &str = "KEEPALLOC_SCRIBBLE_TEST_CHILD";

/// Runs the ignored test `name` of this binary in a child process with `spec`.
fn child(name: &str, spec: &str) -> Output {
    rerun(name, &[(CHILD, spec)])
}

/// Runs the child `name` with `spec`, asserts that it ended with exit status `code` (a
/// guard-page fault's) before its bad access could print "unseen", and returns its stderr:
/// the report.
fn fault_report(name: &str, spec: &str, code: i32) -> String {
    let out = child(name, spec);
    assert_exit(&out, code);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("unseen"),
        "{}",
        describe(&out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The child's allocator, configured by the parent.
fn child_heap() -> Scribble<System> {
    let spec = std::env::var(CHILD).expect("run as a child of another test");
    Scribble::new(
        System,
        ScribbleConfig::from_env_spec(&spec).expect("valid spec"),
    )
}

#[inline(never)]
fn read_freed_byte(p: *const u8) -> u8 {
    // SAFETY: none: this is the bug under test (a read of a freed block). In scribble mode the block is still mapped (in quarantine); in guard-page mode the read faults.
    unsafe { p.read_volatile() }
}

#[inline(never)]
fn read_past(p: *const u8, offset: usize) -> u8 {
    // SAFETY: none for offsets past the slack: the overflow under test.
    unsafe { p.wrapping_add(offset).read_volatile() }
}

#[inline(never)]
fn read_before(p: *const u8, back: usize) -> u8 {
    // SAFETY: none: the underflow under test.
    unsafe { p.wrapping_sub(back).read_volatile() }
}

#[test]
#[ignore = "child process of read_after_free_is_caught_in_guard_mode_only"]
fn child_read_after_free() {
    let heap = child_heap();
    let layout = Layout::from_size_align(64, 8).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>();
    // Never written: only a read can find the use after free.
    // SAFETY: `p` is live with `layout`, freed once.
    unsafe { heap.deallocate(p, layout) };
    let value = read_freed_byte(p.as_ptr());
    heap.flush_quarantine();
    println!("read after free unseen: {value:#04x}");
}

#[test]
fn read_after_free_is_caught_in_guard_mode_only() {
    // The control: the ordinary scribble path keeps the freed block mapped and filled with
    // 0x55, and a read changes nothing a quarantine check could see.
    let out = child("child_read_after_free", "stacks:both");
    assert_exit(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("read after free unseen: 0x55"),
        "{}",
        describe(&out)
    );

    let stderr = fault_report(
        "child_read_after_free",
        "guard:1/1,stacks:both",
        exit::GUARD_USE_AFTER_FREE,
    );
    assert!(
        stderr.contains("guard-use-after-free")
            && stderr.contains("READ of a freed guarded block at offset 0"),
        "{stderr}"
    );
    // The faulting instruction's stack starts in the function that read.
    let faulting = section(&stderr, "faulting access by thread");
    assert!(
        first_frame(faulting).contains("read_freed_byte"),
        "{stderr}"
    );
    assert!(section(&stderr, "freed by thread").contains("child_read_after_free"));
    assert!(section(&stderr, "previously allocated by thread").contains("child_read_after_free"));
}

#[test]
#[ignore = "child process of write_after_free_is_a_write_in_guard_mode"]
fn child_write_after_free() {
    let heap = child_heap();
    let layout = Layout::from_size_align(24, 8).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>();
    // SAFETY: `p` is live with `layout`, freed once; the write is the bug under test.
    unsafe {
        heap.deallocate(p, layout);
        p.as_ptr().add(8).write_volatile(1);
    }
    println!("write after free unseen");
}

#[test]
fn write_after_free_is_a_write_in_guard_mode() {
    let stderr = fault_report(
        "child_write_after_free",
        "guard:1/1,stacks:free",
        exit::GUARD_USE_AFTER_FREE,
    );
    assert!(
        stderr.contains("WRITE of a freed guarded block at offset 8"),
        "{stderr}"
    );
    // stacks:free records the free, not the allocation.
    assert!(section(&stderr, "freed by thread").contains("child_write_after_free"));
    assert!(stderr.contains("allocation stack not recorded"), "{stderr}");
}

#[test]
#[ignore = "child process of an_overflow_past_the_slack_faults_at_the_first_byte"]
fn child_overflow() {
    let heap = child_heap();
    // 100 bytes, alignment 4: right-aligned, the block ends exactly 16 bytes (the slack)
    // before the guard page.
    let layout = Layout::from_size_align(100, 4).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>().as_ptr();
    let mut sum = 0u32;
    for offset in 100..116 {
        // XNNPACK-style over-reads within XNN_EXTRA_BYTES: readable, never reported.
        sum += u32::from(read_past(p, offset));
    }
    println!("slack readable: {sum}");
    let value = read_past(p, 116);
    println!("overflow unseen: {value}");
}

#[test]
fn an_overflow_past_the_slack_faults_at_the_first_byte() {
    let out = child("child_overflow", "guard:1/1,stacks:both");
    assert_exit(&out, exit::GUARD_OUT_OF_BOUNDS);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("slack readable: {}", 16 * 0xFB)),
        "{stdout}"
    );
    assert!(!stdout.contains("overflow unseen"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("guard-out-of-bounds")
            && stderr.contains("READ 16 bytes past the end of a guarded block")
            && stderr.contains("of 100 bytes; the address is 16 bytes after it"),
        "{stderr}"
    );
    assert!(first_frame(section(&stderr, "faulting access by thread")).contains("read_past"));
    assert!(section(&stderr, "previously allocated by thread").contains("child_overflow"));

    // The control: the same reads on the ordinary path land in the red zone, unseen.
    let out = child("child_overflow", "stacks:both");
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("overflow unseen"));
}

#[test]
#[ignore = "child process of an_underflow_of_a_left_aligned_block_faults"]
fn child_underflow() {
    let heap = child_heap();
    let layout = Layout::from_size_align(40, 8).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>().as_ptr();
    let value = read_before(p, 1);
    println!("underflow unseen: {value}");
}

#[test]
fn an_underflow_of_a_left_aligned_block_faults() {
    let stderr = fault_report(
        "child_underflow",
        "guard:1/1,guard-align:left,stacks:both",
        exit::GUARD_OUT_OF_BOUNDS,
    );
    assert!(stderr.contains("READ 1 bytes before the start"), "{stderr}");
    // Right-aligned (the default), the byte before the block is fill, readable: no fault.
    let out = child("child_underflow", "guard:1/1,stacks:both");
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("underflow unseen: 251"));
}

/// The frames of the section's first address (a function and the ones inlined into it).
fn first_frame(section: &str) -> String {
    let frames: Vec<&str> = section.lines().skip(1).collect();
    let address = |line: &str| line.split_whitespace().nth(1).unwrap_or("").to_string();
    let first = frames.first().map(|l| address(l)).unwrap_or_default();
    frames
        .iter()
        .take_while(|l| address(l) == first)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "child process of a_thread_that_never_allocated_gets_a_full_report"]
fn child_read_on_another_thread() {
    let heap = child_heap();
    let layout = Layout::from_size_align(64, 8).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>();
    // SAFETY: `p` is live with `layout`, freed once.
    unsafe { heap.deallocate(p, layout) };
    let address = p.as_ptr() as usize;
    // A fresh Rust thread (std gives it an 8 KiB alternate signal stack) that never touched
    // the heap reads the freed block.
    let value = std::thread::spawn(move || read_freed_byte(address as *const u8))
        .join()
        .unwrap();
    println!("read after free unseen: {value:#04x}");
}

#[test]
fn a_thread_that_never_allocated_gets_a_full_report() {
    let stderr = fault_report(
        "child_read_on_another_thread",
        "guard:1/1,stacks:both",
        exit::GUARD_USE_AFTER_FREE,
    );
    assert!(first_frame(section(&stderr, "faulting access by thread")).contains("read_freed_byte"));
    assert!(section(&stderr, "freed by thread").contains("child_read_on_another_thread"));
}
