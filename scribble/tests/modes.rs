//! In-process behaviour of every mode: the conformance suite in guard-page mode (every block
//! guarded, and one in three), sampling and its bounds, alignment and slack of right-aligned
//! blocks, findings at free in guard-page mode, and which stacks each `stacks:` setting
//! records.

use core::alloc::Layout;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{System, conformance};
use keepalloc_scribble::{
    BlockState, Policy, Scribble, ScribbleConfig, StackMode, ViolationKind, XNN_EXTRA_BYTES,
};

fn heap(spec: &str) -> Scribble<System> {
    let config = ScribbleConfig::from_env_spec(spec)
        .unwrap()
        .with_policy(Policy::Record);
    Scribble::new(System, config)
}

#[test]
fn guard_mode_passes_the_conformance_suite() {
    for spec in ["guard:1/1,guard-max:100000", "guard:1/3,stacks:both"] {
        let heap = heap(spec);
        conformance::check_allocator(&heap, conformance::Options::QUICK);
        let stats = heap.stats();
        assert!(stats.guarded_allocations > 0, "{spec}: {stats:?}");
        assert!(
            heap.violations().is_empty(),
            "{spec}: {:?}",
            heap.violations()
        );
        assert_eq!(heap.flush_quarantine(), 0);
    }
}

#[test]
fn one_allocation_in_n_is_guarded_within_the_bounds() {
    let heap = heap("guard:1/4");
    let layout = Layout::from_size_align(48, 8).unwrap();
    let blocks: Vec<_> = (0..100).map(|_| heap.allocate(layout).unwrap()).collect();
    let stats = heap.stats();
    assert_eq!((stats.allocations, stats.guarded_allocations), (100, 25));
    assert_eq!(stats.guarded_live, 25);
    for b in blocks {
        // SAFETY: each block is live with `layout`, freed once.
        unsafe { heap.deallocate(b.cast(), layout) };
    }
    assert_eq!(heap.stats().guarded_quarantined, 25);

    // At most `guard-max` live at once, at most `guard-quarantine` kept after free: the
    // rest take the ordinary path.
    let heap = heap_bounded();
    let blocks: Vec<_> = (0..10).map(|_| heap.allocate(layout).unwrap()).collect();
    let stats = heap.stats();
    assert_eq!((stats.allocations, stats.guarded_live), (10, 3));
    for b in blocks {
        // SAFETY: as above.
        unsafe { heap.deallocate(b.cast(), layout) };
    }
    assert_eq!(heap.stats().guarded_quarantined, 2);
    assert!(heap.violations().is_empty());
}

fn heap_bounded() -> Scribble<System> {
    heap("guard:1/1,guard-max:3,guard-quarantine:2")
}

#[test]
fn right_aligned_blocks_keep_their_alignment_and_the_slack() {
    let heap = heap("guard:1/1,guard-max:100000");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
        for size in [0, 1, 7, 100, 1000, 4095, 4096, 5000] {
            let layout = Layout::from_size_align(size, align).unwrap();
            let p = heap.allocate(layout).unwrap().cast::<u8>().as_ptr() as usize;
            assert_eq!(p % align, 0, "size {size} align {align}");
            let end = p + size;
            let guard_page = (end + XNN_EXTRA_BYTES).next_multiple_of(page);
            let slack = guard_page - end;
            assert!(
                (XNN_EXTRA_BYTES..XNN_EXTRA_BYTES + align).contains(&slack),
                "size {size} align {align}: slack {slack}"
            );
            // SAFETY: `p` is live with `layout`.
            unsafe { heap.deallocate(core::ptr::NonNull::new(p as *mut u8).unwrap(), layout) };
        }
    }
    assert_eq!(heap.stats().guarded_allocations, 9 * 8);
    assert!(heap.violations().is_empty());
}

#[test]
fn guarded_blocks_report_writes_into_the_slack_and_double_frees_at_free() {
    let heap = heap("guard:1/1,stacks:both");
    let layout = Layout::from_size_align(32, 16).unwrap();
    let p = heap.allocate(layout).unwrap().cast::<u8>();
    // SAFETY: the slack after a live right-aligned block is readable and writable (the write is the bug); then the block is freed twice (the second free is the bug).
    unsafe {
        p.as_ptr().add(32 + 3).write(7);
        heap.deallocate(p, layout);
        heap.deallocate(p, layout);
    }
    let reports = heap.reports();
    let kinds: Vec<&str> = reports.iter().map(|r| r.violation.kind.name()).collect();
    assert_eq!(kinds, ["red-zone-after", "double-free"]);
    assert_eq!(
        reports[0].violation.kind,
        ViolationKind::RedZoneOverwrite {
            side: keepalloc_scribble::Side::After,
            offset: 3,
            found: 7
        }
    );
    let block = reports[1].block.as_ref().unwrap();
    assert!(block.guarded && block.state == BlockState::Freed);
    let freed = block.freed.as_ref().unwrap().to_string();
    let allocated = block.allocated.as_ref().unwrap().to_string();
    let bad_free = reports[1].access.as_ref().unwrap().to_string();
    let me = "guarded_blocks_report_writes_into_the_slack_and_double_frees_at_free";
    assert!(freed.contains(me) && allocated.contains(me) && bad_free.contains(me));
    assert!(
        !freed.contains("keepalloc_scribble::"),
        "own frames dropped: {freed}"
    );
}

#[inline(never)]
fn free_it(heap: &Scribble<System>, p: core::ptr::NonNull<u8>, layout: Layout) {
    // SAFETY: `p` is live with `layout` (the callers' promise), freed once.
    unsafe { heap.deallocate(p, layout) }
    // Not a tail call, so that this frame is on the free's stack.
    std::hint::black_box(());
}

#[test]
fn each_stack_mode_records_what_it_says() {
    for (mode, spec) in [
        (StackMode::None, "stacks:none"),
        (StackMode::Free, "stacks:free"),
        (StackMode::Both, "stacks:both,depth:8"),
    ] {
        let heap = heap(spec);
        let layout = Layout::from_size_align(16, 8).unwrap();
        let p = heap.allocate(layout).unwrap().cast::<u8>();
        free_it(&heap, p, layout);
        // SAFETY: none: the write after free under test (the block is in quarantine).
        unsafe { p.as_ptr().write(1) };
        assert_eq!(heap.flush_quarantine(), 1);
        let report = &heap.reports()[0];
        assert_eq!(report.violation.kind.name(), "write-after-free");
        let block = report.block.as_ref().unwrap();
        assert_eq!(block.freed.is_some(), mode != StackMode::None, "{spec}");
        assert_eq!(block.allocated.is_some(), mode == StackMode::Both, "{spec}");
        if let Some(freed) = &block.freed {
            let frames = freed.symbolized();
            let top = frames[0].name.as_deref().unwrap_or("");
            assert!(top.contains("free_it"), "{spec}: innermost frame {top}");
        }
        if let Some(allocated) = &block.allocated {
            assert!(allocated.symbolized().len() <= 8, "depth bound");
        }
        let text = report.to_string();
        assert!(
            text.contains("ERROR: keepalloc-scribble: write-after-free"),
            "{text}"
        );
    }
}
