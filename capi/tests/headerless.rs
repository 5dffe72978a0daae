//! The C library's table over the built-in glibc backend, with nothing plugged and no
//! Scribble, is headerless: its blocks are glibc's own, a 64-byte-aligned request costs
//! exactly its size, and the owner counts the usable sizes. The witness is glibc, not
//! keepalloc's counters: the table's block for a 100-byte request is the very chunk that
//! glibc's `malloc(100)` just gave back with `free` (its per-thread cache is last in, first
//! out). A table that put a header before the pointer asks glibc for more bytes, gets another
//! chunk, and hands out an interior pointer: that assertion fails first, before anything
//! reads a size word glibc would not recognise.
//!
//! One test in its own binary: the counters are the process's one owner, and no other test
//! allocates through it meanwhile.

use core::ffi::{CStr, c_void};

use keepalloc_capi::{KeepallocStats, KeepallocStatus, KeepallocTable, keepalloc_acquire};

unsafe extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(ptr: *mut c_void);
    fn malloc_usable_size(ptr: *mut c_void) -> usize;
}

fn stats() -> KeepallocStats {
    let mut s = KeepallocStats::default();
    // SAFETY: `s` is a writable `keepalloc_stats`.
    unsafe { keepalloc_capi::keepalloc_get_stats(&mut s) };
    s
}

#[test]
fn the_default_c_table_hands_out_the_backends_own_blocks() {
    // SAFETY: the function returns a static NUL-terminated string.
    let backend = unsafe { CStr::from_ptr(keepalloc_capi::keepalloc_backend_name()) };
    if backend.to_bytes() != b"system" || !cfg!(all(target_os = "linux", target_env = "gnu")) {
        eprintln!("skipped: the witness is glibc's malloc_usable_size; backend {backend:?}");
        return;
    }
    let mut t: *const KeepallocTable = core::ptr::null();
    // SAFETY: a valid out-pointer and no hook.
    let status = unsafe { keepalloc_acquire(None, core::ptr::null_mut(), &mut t) };
    assert_eq!(status, KeepallocStatus::Ok);
    // SAFETY: a published table lives for the process.
    let t = unsafe { &*t };
    let base = stats();
    // `p` is freed once, through the table.
    // SAFETY: plain glibc calls; the table keeps the C contract.
    unsafe {
        let q = malloc(100);
        assert!(!q.is_null());
        free(q);
        let p = t.allocate().expect("slot")(t.context(), 100);
        assert_eq!(
            p as usize, q as usize,
            "the table's block is not the chunk glibc just freed for the same request: \
             not glibc's own block (a header before the pointer?)"
        );
        t.deallocate().expect("slot")(t.context(), p);
    }
    for (align, size) in [(16usize, 100usize), (64, 256), (64, 4096), (4096, 10_000)] {
        let before = stats();
        // SAFETY: the table keeps the C contract; the block is freed below, through it.
        let p = unsafe { t.aligned_alloc(align, size) };
        assert!(!p.is_null() && (p as usize).is_multiple_of(align));
        // SAFETY: `p` is live.
        unsafe { p.write_bytes(0x5a, size) };
        // SAFETY: a headerless block is glibc's own, so glibc can read its size word.
        let usable = unsafe { malloc_usable_size(p.cast()) };
        assert!(
            usable >= size && usable < size + 64,
            "align {align}, size {size}: malloc_usable_size {usable}: not glibc's own block"
        );
        let after = stats();
        assert_eq!(
            after.live_bytes - before.live_bytes,
            usable as u64,
            "the owner counts the usable size"
        );
        // SAFETY: `p` came from this table and is freed once.
        unsafe { t.aligned_free(p) };
    }
    // `allocate` (16-byte alignment) and `reallocate` are glibc's blocks too.
    // SAFETY: as above; each block is freed once, through the table.
    unsafe {
        let a = t.allocate().expect("slot")(t.context(), 24).cast::<u8>();
        assert!(!a.is_null());
        assert!(malloc_usable_size(a.cast()) >= 24);
        let b = t.reallocate().expect("slot")(t.context(), a.cast(), 5000).cast::<u8>();
        assert!(!b.is_null());
        let usable = malloc_usable_size(b.cast());
        assert!((5000..5000 + 64).contains(&usable), "{usable}");
        t.deallocate().expect("slot")(t.context(), b.cast());
    }
    let end = stats();
    assert_eq!(end.live_bytes, base.live_bytes, "everything given back");
    assert_eq!(end.owners_constructed, 1);
}
