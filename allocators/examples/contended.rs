//! Alloc + free of 64 bytes through an owner's C table (`Counting<backend>`, the provider's
//! owner, and `AllocatorTable::for_allocator` of it) against the backend called directly
//! (`Allocator::allocate`/`deallocate`, no counting), with 1, 2, 8 and 32 threads. The other
//! columns:
//! - `counted`: the same `Counting` wrapper called directly through its Rust face, so that
//!   table/counted shows what the table adds and counted/direct what exact counting costs;
//! - `uncounted`: the table of an owner of `GlobalProvider::new_uncounted`, built as
//!   `Owner::table` builds it: `Counting::uncounted(backend)` is the owner, and its table is
//!   `for_allocator` of the backend inside it (no `Counting` call at all), for a runtime that
//!   needs no per-owner statistics;
//! - `floor`: a table whose entries do the least the table's contract allows (16-aligned
//!   blocks, NULL freed as a no-op): a Rust shim per entry that jumps on to `malloc`/`free`,
//!   or to `mi_heap_malloc` of mimalloc's main heap (the context; at least 16 bytes) and
//!   `mi_free`. Any `xnn_allocator` pays this much over a direct call: a call through a
//!   function pointer, and an entry point whose signature is not the backend's.
//!   uncounted/floor is what keepalloc's entry points add to that;
//! - `again`: the direct calls again, as a control (below).
//!
//! One cell alone, for callgrind or perf:
//! `contended <system|mimalloc> <direct|counted|table|uncounted|floor|again> <threads>
//! [placement 0-7]`.
//!
//! `cargo run --release -p keepalloc-allocators --features mimalloc --example contended`
//! (`-- --machine` adds a tab-separated line per ratio, for `cargo xtask alloc-bench`, which
//! runs this binary in several link layouts: see there).
//!
//! Every thread does `TOTAL / threads` alloc + free pairs (the same total work at every thread
//! count), all released at once by a barrier; the figure is wall time per pair over all
//! threads, from the first worker's start to the last worker's end (read by the workers).
//!
//! **Placements.** Where a loop's code sits moves its speed on this core by as much as the
//! table costs: two byte-identical copies of the direct loop (the same instructions, only
//! their addresses differ) read 0.93× of each other, steadily, on Zen 4. So each column's
//! loop exists in `PLACEMENTS` copies, each its own function, the n-th starting with n × 16
//! bytes of `nop` (run once per call, outside the timed loop) so that the loop sits at a
//! different offset in its cache lines and at a different address. And each thread of a run
//! starts its work 0 to 255 frames of 48 bytes further down its stack (a hash of the run and
//! the thread; the same for every column of a run), so that the stack's offset in a page,
//! which decides which loads a store can alias, is not one fixed value either. A figure from
//! one copy at one depth would be the figure of one layout (Mytkowicz et al., "Producing
//! Wrong Data Without Doing Anything Obviously Wrong!", ASPLOS 2009). This moves only the
//! loops; the table's entry points and the backends' code move between builds, which is what
//! `cargo xtask alloc-bench` does.
//!
//! **Runs.** Each cell is `RUNS` runs; in a run the columns run back to back, in the order of
//! one row of a Williams design (`ORDER`): over every six runs each column holds every
//! position once and follows every other column once. All columns of run `r` use placement
//! `r % PLACEMENTS` (the control: another, below). Each ratio is the median of the runs' own
//! ratios (paired: a slow phase of the machine divides out), with their quartiles, not the
//! ratio of two medians.
//!
//! **Controls.** The `again` column runs the direct loop again, in the placement half-way
//! round from the direct column's in the same run: its ratio to direct is what two identical
//! loops read apart, in different places, in this harness (1.00× when placements, stack
//! depths and positions average out). And for each cell, the direct loop's median in each
//! placement over the median of all of them: how far placement alone moves the same code.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;
use std::sync::Barrier;
use std::time::Instant;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::{AllocatorTable, Counting, Mimalloc, System};

const TOTAL: usize = 8_000_000;
const SIZE: usize = 64;
const COLUMNS: usize = 6;
/// The columns, in their index order.
const NAMES: [&str; COLUMNS] = ["direct", "counted", "table", "uncounted", "floor", "again"];
/// Copies of each column's loop, each placed differently.
const PLACEMENTS: usize = 8;
/// Every placement six times and every order of the columns (below) eight times per cell.
const RUNS: usize = COLUMNS * PLACEMENTS;

/// Run `r` runs the columns in the order `ORDER[r % COLUMNS]`: a Williams design, in which
/// every column runs in every position once and follows every other column once (a cyclic
/// rotation would always run each column right after the same one).
const ORDER: [[usize; COLUMNS]; COLUMNS] = {
    let first = [0, 1, 5, 2, 4, 3];
    let mut rows = [[0; COLUMNS]; COLUMNS];
    let mut r = 0;
    while r < COLUMNS {
        let mut j = 0;
        while j < COLUMNS {
            rows[r][j] = (first[j] + r) % COLUMNS;
            j += 1;
        }
        r += 1;
    }
    rows
};

// `ORDER` is a Williams design: every column once in every position, and every ordered pair
// of columns adjacent in exactly one row.
const _: () = {
    let mut seen_at = [[false; COLUMNS]; COLUMNS];
    let mut follows = [[false; COLUMNS]; COLUMNS];
    let mut r = 0;
    while r < COLUMNS {
        let mut j = 0;
        while j < COLUMNS {
            let c = ORDER[r][j];
            assert!(!seen_at[j][c], "a column twice in one position");
            seen_at[j][c] = true;
            if j + 1 < COLUMNS {
                let next = ORDER[r][j + 1];
                assert!(c != next && !follows[c][next], "a pair adjacent twice");
                follows[c][next] = true;
            }
            j += 1;
        }
        r += 1;
    }
};

static SYSTEM: System = System;
static MIMALLOC: Mimalloc = Mimalloc;
static SYSTEM_OWNER: Counting<System> = Counting::new(System);
static MIMALLOC_OWNER: Counting<Mimalloc> = Counting::new(Mimalloc);
// The same counting wrapper called through its Rust face (no table), for the third column.
static SYSTEM_COUNTED: Counting<System> = Counting::new(System);
static MIMALLOC_COUNTED: Counting<Mimalloc> = Counting::new(Mimalloc);
// The owner of `GlobalProvider::new_uncounted`.
static SYSTEM_UNCOUNTED: Counting<System> = Counting::uncounted(System);
static MIMALLOC_UNCOUNTED: Counting<Mimalloc> = Counting::uncounted(Mimalloc);

/// Nanoseconds of wall time per alloc + free, `threads` threads at once: from the first
/// thread's start to the last thread's end, each read by the workers themselves (the main
/// thread's own clock, read after it leaves the barrier, can start after the workers have run
/// when there are more threads than cores).
fn run(threads: usize, work: &(dyn Fn(usize) + Sync), stack: u64) -> f64 {
    let per_thread = TOTAL / threads;
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, depth) = (&barrier, stack_depth(stack, i));
                s.spawn(move || {
                    let mut span = None;
                    descend(depth, &mut || {
                        barrier.wait();
                        let start = Instant::now();
                        work(per_thread);
                        span = Some((start, Instant::now()));
                    });
                    span.expect("the work ran")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("a thread");
    let end = spans.iter().map(|s| s.1).max().expect("a thread");
    (end - start).as_nanos() as f64 / (per_thread * threads) as f64
}

/// How many frames of `descend` thread `thread` of a run stands on: 0 to 255, from a
/// splitmix64 hash of the run's `stack` seed and the thread.
fn stack_depth(stack: u64, thread: usize) -> usize {
    let mut z = stack
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(thread as u64 + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % 256) as usize
}

/// Runs `f` `depth` frames further down the stack.
#[inline(never)]
fn descend(depth: usize, f: &mut dyn FnMut()) {
    let frame = [0u8; 16];
    black_box(&frame);
    if depth == 0 {
        f();
    } else {
        descend(depth - 1, f);
    }
    black_box(&frame);
}

/// `16 × P` bytes of single-byte `nop`s: run once as a loop function starts, they move the
/// loop after them (and every later instruction of the function) by that much.
#[inline(always)]
fn placement<const P: usize>() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the assembly is only `nop`s: it reads and writes nothing and keeps the flags.
    unsafe {
        core::arch::asm!(".fill {n}, 1, 0x90", n = const P * 16, options(nomem, nostack, preserves_flags));
    }
}

#[inline(never)]
fn direct_loop<A: Allocator, const P: usize>(a: &A, n: usize) {
    placement::<P>();
    let layout = core::alloc::Layout::from_size_align(SIZE, 16).expect("layout");
    for _ in 0..n {
        let p = a.allocate(black_box(layout)).expect("allocation");
        // SAFETY: `p` is live with `layout`.
        unsafe { a.deallocate(black_box(p).cast(), layout) }
    }
}

#[inline(never)]
fn table_loop<const P: usize>(t: &AllocatorTable, n: usize) {
    placement::<P>();
    let (alloc, free) = (t.allocate().expect("slot"), t.deallocate().expect("slot"));
    for _ in 0..n {
        // SAFETY: a `for_allocator` table; each block is freed once, through it.
        unsafe {
            let p = alloc(t.context(), black_box(SIZE));
            assert!(!p.is_null());
            free(t.context(), black_box(p));
        }
    }
}

type Work = Box<dyn Fn(usize) + Sync>;

/// `$f::<P>` for every placement, each a closure over `$x`.
macro_rules! placements {
    ($x:expr, $f:ident $(, $t:ty)?) => {{
        let x = $x;
        let v: [Work; PLACEMENTS] = [
            Box::new(move |n| $f::<$($t,)? 0>(x, n)),
            Box::new(move |n| $f::<$($t,)? 1>(x, n)),
            Box::new(move |n| $f::<$($t,)? 2>(x, n)),
            Box::new(move |n| $f::<$($t,)? 3>(x, n)),
            Box::new(move |n| $f::<$($t,)? 4>(x, n)),
            Box::new(move |n| $f::<$($t,)? 5>(x, n)),
            Box::new(move |n| $f::<$($t,)? 6>(x, n)),
            Box::new(move |n| $f::<$($t,)? 7>(x, n)),
        ];
        v
    }};
}

fn direct<A: Allocator + Sync>(a: &'static A) -> [Work; PLACEMENTS] {
    placements!(a, direct_loop, A)
}

fn table(t: &'static AllocatorTable) -> [Work; PLACEMENTS] {
    placements!(t, table_loop)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median and the quartiles of `v`.
fn quartiles(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    [at(0.5), at(0.25), at(0.75)]
}

static SYSTEM_TABLE: AllocatorTable = AllocatorTable::for_allocator(&SYSTEM_OWNER);
static MIMALLOC_TABLE: AllocatorTable = AllocatorTable::for_allocator(&MIMALLOC_OWNER);
// What `Owner::table` builds for an uncounted owner: the table of the backend inside it.
static SYSTEM_UNCOUNTED_TABLE: AllocatorTable =
    AllocatorTable::for_allocator(SYSTEM_UNCOUNTED.inner());
static MIMALLOC_UNCOUNTED_TABLE: AllocatorTable =
    AllocatorTable::for_allocator(MIMALLOC_UNCOUNTED.inner());

// The floor: the least a table's entries can do and keep the table's contract (16-byte
// aligned blocks, NULL freed as a no-op), each a Rust shim that jumps on to the backend.
unsafe extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(pointer: *mut c_void);
    fn mi_heap_main() -> *mut c_void;
    fn mi_heap_malloc(heap: *mut c_void, size: usize) -> *mut c_void;
}

unsafe extern "C" fn floor_malloc(_: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: glibc's malloc takes any size; its blocks are 16-aligned.
    unsafe { malloc(size) }
}

unsafe extern "C" fn floor_free(_: *mut c_void, pointer: *mut c_void) {
    // SAFETY: `pointer` is NULL or a live glibc block (the table's contract).
    unsafe { free(pointer) }
}

unsafe extern "C" fn floor_mi_malloc(heap: *mut c_void, size: usize) -> *mut c_void {
    // From 16 bytes up a mimalloc block is 16-aligned.
    // SAFETY: `heap` is mimalloc's main heap (the table's context), valid on every thread.
    unsafe { mi_heap_malloc(heap, size.max(16)) }
}

unsafe extern "C" fn floor_mi_free(_: *mut c_void, pointer: *mut c_void) {
    // SAFETY: `pointer` is NULL or a live mimalloc block (the table's contract).
    unsafe { libmimalloc_sys::mi_free(pointer) }
}

/// The floor table of `backend`, for the process.
fn floor(backend: &str) -> &'static AllocatorTable {
    // Each allocate returns NULL or a 16-aligned block of the backend, each free takes NULL
    // or one of its blocks, from any thread; the context is NULL (glibc) or mimalloc's main
    // heap, which lives as long as the process. The slots the benchmark does not use are
    // empty.
    // SAFETY: the functions keep the table's contract with this context, as above.
    let t = unsafe {
        if backend == "system" {
            AllocatorTable::from_raw_parts(
                ptr::null_mut(),
                Some(floor_malloc),
                None,
                Some(floor_free),
                None,
                None,
            )
        } else {
            AllocatorTable::from_raw_parts(
                mi_heap_main(),
                Some(floor_mi_malloc),
                None,
                Some(floor_mi_free),
                None,
                None,
            )
        }
    };
    Box::leak(Box::new(t))
}

/// The columns of `backend`, in `NAMES` order: direct, counted, owner table, uncounted
/// table, floor table, direct again.
fn columns(backend: &str) -> [[Work; PLACEMENTS]; COLUMNS] {
    match backend {
        "system" => [
            direct(&SYSTEM),
            direct(&SYSTEM_COUNTED),
            table(&SYSTEM_TABLE),
            table(&SYSTEM_UNCOUNTED_TABLE),
            table(floor("system")),
            direct(&SYSTEM),
        ],
        _ => [
            direct(&MIMALLOC),
            direct(&MIMALLOC_COUNTED),
            table(&MIMALLOC_TABLE),
            table(&MIMALLOC_UNCOUNTED_TABLE),
            table(floor("mimalloc")),
            direct(&MIMALLOC),
        ],
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let machine = args.iter().any(|a| a == "--machine");
    args.retain(|a| a != "--machine");
    if let [backend, mode, threads, rest @ ..] = args.as_slice() {
        // One run, for callgrind or perf: `contended mimalloc uncounted 1 [placement]`.
        assert!(
            ["system", "mimalloc"].contains(&backend.as_str()),
            "backend: system or mimalloc, not {backend:?}"
        );
        let threads: usize = threads.parse().expect("threads");
        let p: usize = rest.first().map_or(0, |p| p.parse().expect("placement"));
        assert!(p < PLACEMENTS, "placements are 0 to {}", PLACEMENTS - 1);
        let column = NAMES
            .iter()
            .position(|m| m == mode)
            .expect("mode: direct, counted, table, uncounted, floor or again");
        let work = &columns(backend)[column][p];
        println!(
            "{backend} {mode} {threads} (placement {p}): {:.2} ns",
            run(threads, &**work, 0)
        );
        return;
    }
    println!(
        "alloc+free of {SIZE} B, {TOTAL} pairs split over the threads; ns of wall time per \
         pair, median of {RUNS} runs over {PLACEMENTS} placements of each loop; each ratio the \
         median of the runs' own ratios (quartiles)"
    );
    println!(
        "backend  threads | ns: direct counted  table uncounted  floor | over direct: table           \
         uncounted       floor           again (control) | uncounted/floor | direct by placement"
    );
    let mut machine_lines = Vec::new();
    for backend in ["system", "mimalloc"] {
        let modes = columns(backend);
        for threads in [1usize, 2, 8, 32] {
            let mut v: [Vec<f64>; COLUMNS] = Default::default();
            // The direct column's runs by placement.
            let mut by_placement: [Vec<f64>; PLACEMENTS] = Default::default();
            for r in 0..RUNS {
                let p = r % PLACEMENTS;
                for &i in &ORDER[r % COLUMNS] {
                    // The control runs the direct loop in the placement half-way round.
                    let q = if NAMES[i] == "again" {
                        (p + PLACEMENTS / 2) % PLACEMENTS
                    } else {
                        p
                    };
                    let ns = run(threads, &*modes[i][q], r as u64);
                    if i == 0 {
                        by_placement[p].push(ns);
                    }
                    v[i].push(ns);
                }
            }
            // Each ratio is the median of the runs' own ratios: a run's columns ran back to
            // back, so a slow phase of the machine divides out.
            let mut ratio = |name: &str, col: &[f64], base: &[f64]| {
                let [m, lo, hi] = quartiles(col.iter().zip(base).map(|(x, d)| x / d).collect());
                if machine {
                    machine_lines.push(format!(
                        "cell\tcontended\t{backend}\t{threads}\t{name}\t{m:.4}\t{lo:.4}\t{hi:.4}"
                    ));
                }
                format!("{m:.3}x ({lo:.2}-{hi:.2})")
            };
            let rt = ratio("owner-table", &v[2], &v[0]);
            let ru = ratio("uncounted", &v[3], &v[0]);
            let rf = ratio("floor", &v[4], &v[0]);
            let ra = ratio("control", &v[5], &v[0]);
            let uf = ratio("uncounted-over-floor", &v[3], &v[4]);
            let d_all = median(v[0].clone());
            let by: Vec<f64> = by_placement.map(median).iter().map(|m| m / d_all).collect();
            let (lo, hi) = by
                .iter()
                .fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
            let [d, c, t, u, f, _] = v.map(median);
            println!(
                "{backend:8} {threads:<7} |   {d:6.2}  {c:6.2} {t:6.2}    {u:6.2} {f:6.2} | \
                 {rt} {ru} {rf} {ra} | {uf} | {lo:.3}-{hi:.3}x"
            );
        }
    }
    assert!(!SYSTEM_UNCOUNTED.is_counted() && !MIMALLOC_UNCOUNTED.is_counted());
    assert_eq!(
        SYSTEM_UNCOUNTED.stats().allocations,
        0,
        "uncounted reads zero"
    );
    let (s, m) = (SYSTEM_OWNER.stats(), MIMALLOC_OWNER.stats());
    assert_eq!(s.allocations, s.deallocations);
    assert_eq!(
        (s.live_bytes, m.live_bytes),
        (0, 0),
        "the owners' counts balance"
    );
    println!(
        "owner counts: system {} allocations, mimalloc {} allocations, live bytes 0",
        s.allocations, m.allocations
    );
    for line in machine_lines {
        println!("{line}");
    }
}
