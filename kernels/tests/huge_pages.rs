//! The packed weights are advised onto transparent huge pages, and only when asked: the
//! witness is the kernel's own record of each mapping (`VmFlags` in `/proc/self/smaps`,
//! `hg` = `MADV_HUGEPAGE`), over blocks from a test allocator that maps every block fresh,
//! so no flag can come from an earlier block or from the allocator. One test in its own
//! process: nothing else maps or advises memory meanwhile.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Mutex;

use keepalloc_allocators::AllocatorTable;
use keepalloc_allocators::allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_kernels::{
    FullyConnected, FullyConnectedDesc, FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc,
};

/// One fresh anonymous mapping per block; remembers each live mapping as `(base, len)`.
struct FreshMaps;
static LIVE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
static MAPS: FreshMaps = FreshMaps;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&MAPS);

// SAFETY: each block is its own page-aligned private mapping of at least `layout.size()`
// bytes (page alignment covers every alignment the kernels ask for, 64), unmapped once on
// deallocate with the same length.
unsafe impl Allocator for FreshMaps {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        assert!(layout.align() <= 4096);
        let len = layout.size().max(1);
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AllocError);
        }
        LIVE.lock().unwrap().push((p as usize, len));
        let p = NonNull::new(p.cast::<u8>()).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, len))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let len = layout.size().max(1);
        LIVE.lock()
            .unwrap()
            .retain(|&(base, _)| base != ptr.as_ptr() as usize);
        // SAFETY: `ptr` is a mapping of `len` bytes made by `allocate` above.
        assert_eq!(unsafe { libc::munmap(ptr.as_ptr().cast(), len) }, 0);
    }
}

/// The one live mapping (each operator holds one block).
fn only_mapping() -> (usize, usize) {
    let live = LIVE.lock().unwrap();
    assert_eq!(live.len(), 1, "one live block expected: {live:x?}");
    live[0]
}

/// Bytes of the mapping `[base, base + len)` that the kernel marks `hg`, and the
/// `AnonHugePages` (kB) of the areas overlapping it, read from `/proc/self/smaps`. The kernel
/// may have merged the mapping with a neighbour, so every area overlapping it counts for
/// its overlap; the overlaps must cover the whole mapping (the witness saw all of it).
fn advised_bytes(base: usize, len: usize) -> (usize, usize) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut seen, mut advised, mut huge_kb) = (0, 0, 0);
    let mut overlap = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            overlap = hi.min(base + len).saturating_sub(lo.max(base));
            seen += overlap;
        } else if overlap > 0 {
            if let Some(flags) = line.strip_prefix("VmFlags:")
                && flags.split_whitespace().any(|f| f == "hg")
            {
                advised += overlap;
            } else if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                huge_kb += kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<usize>()
                    .unwrap();
            }
        }
    }
    assert_eq!(
        seen, len,
        "smaps does not show all of the mapping {base:#x}+{len:#x}"
    );
    (advised, huge_kb)
}

const HUGE: usize = 2 << 20;

/// The advised bytes must be every whole 2 MiB page of the block: at least the mapping's
/// whole pages less the one the block's header can take a piece of, and never more.
///
/// A kernel built without transparent huge pages (no `/sys/kernel/mm/transparent_hugepage`)
/// refuses the advice: there nothing may be marked, and the block works the same.
fn assert_advised(what: &str, base: usize, len: usize) {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        println!("{what}: this kernel has no transparent huge pages; checking nothing is marked");
        return assert_not_advised(what, base, len);
    }
    let (advised, huge_kb) = advised_bytes(base, len);
    let whole = ((base + len) / HUGE).saturating_sub(base.div_ceil(HUGE)) * HUGE;
    assert!(
        advised % HUGE == 0 && advised + HUGE >= whole && advised <= whole && advised > 0,
        "{what}: {advised} bytes advised of a {len}-byte mapping holding {whole} bytes of whole huge pages"
    );
    println!("{what}: {advised} of {len} bytes advised, {huge_kb} kB on huge pages");
}

fn assert_not_advised(what: &str, base: usize, len: usize) {
    let (advised, _) = advised_bytes(base, len);
    assert_eq!(advised, 0, "{what}: advised without being asked");
}

#[test]
fn packed_weights_are_advised_onto_huge_pages_only_when_asked() {
    // 8 MiB of packed f32 weights, and a K × N whose int8 block is 8 MiB too.
    let (k, n) = (1024, 2048);
    let w: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
    let x: Vec<f32> = (0..k).map(|i| (i % 7) as f32 / 7.0 - 0.5).collect();
    let (mut off_out, mut on_out) = (vec![0.0; n], vec![0.0; n]);

    // Off first, while no mapping of this process carries the flag.
    let desc = FullyConnectedDesc::new(k, n, &w);
    let off = FullyConnected::create_with_table(&TABLE, &desc.with_huge_pages(false)).unwrap();
    let (base, len) = only_mapping();
    assert!(len >= 8 << 20);
    assert_not_advised("f32, off", base, len);
    off.run(1, &x, &mut off_out).unwrap();
    drop(off);

    let on = FullyConnected::create_with_table(&TABLE, &desc).unwrap();
    let (base, len) = only_mapping();
    assert_advised("f32, default", base, len);
    on.run(1, &x, &mut on_out).unwrap();
    drop(on);
    assert_eq!(off_out, on_out, "the advice changed the result");

    // A block smaller than a huge page holds no whole one: nothing to advise.
    let small =
        FullyConnected::create_with_table(&TABLE, &FullyConnectedDesc::new(64, 64, &w[..64 * 64]))
            .unwrap();
    let (base, len) = only_mapping();
    assert!(len < HUGE);
    assert_not_advised("f32, 16 KiB", base, len);
    drop(small);

    // The low-precision operators share the path: int8 weights, 8 MiB.
    let (k, n) = (2048, 4096);
    let w8: Vec<i8> = (0..k * n).map(|i| (i % 255) as i8).collect();
    let scales = vec![0.01f32; n];
    let desc = FullyConnectedF32Qc8wDesc::new(k, n, &w8, &scales);
    let off =
        FullyConnectedF32Qc8w::create_with_table(&TABLE, &desc.with_huge_pages(false)).unwrap();
    let (base, len) = only_mapping();
    assert_not_advised("qc8w, off", base, len);
    drop(off);
    let on = FullyConnectedF32Qc8w::create_with_table(&TABLE, &desc).unwrap();
    let (base, len) = only_mapping();
    assert_advised("qc8w, default", base, len);
    drop(on);
    assert!(LIVE.lock().unwrap().is_empty());
}
