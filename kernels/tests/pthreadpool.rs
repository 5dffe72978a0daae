//! `Pthreadpool`, the adapter that runs operators on a runtime's own pthreadpool, against the
//! real library (Debian's `libpthreadpool.so.0`, loaded at run time): every task once, on
//! several threads, outputs bit-identical to one thread, and a panicking task resumed on the
//! caller with its own payload while the pool stays usable. Without the library the tests
//! say so and pass, except under `CI=true`, where a missing library is a failure.

mod common;

use core::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Case, Rng};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{
    FullyConnected, Isa, Parallel, Pthreadpool, PthreadpoolGetThreadsCount,
    PthreadpoolParallelize1d,
};

static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;

/// Debian's pthreadpool: `pthreadpool_create`, `pthreadpool_destroy`,
/// `pthreadpool_parallelize_1d`, `pthreadpool_get_threads_count`.
struct Lib {
    create: unsafe extern "C" fn(usize) -> *mut c_void,
    destroy: unsafe extern "C" fn(*mut c_void),
    parallelize_1d: PthreadpoolParallelize1d,
    threads_count: PthreadpoolGetThreadsCount,
}

fn lib() -> Option<Lib> {
    // SAFETY: a NUL-terminated name; the handle is never closed.
    let h = unsafe { dlopen(c"libpthreadpool.so.0".as_ptr(), RTLD_NOW) };
    if h.is_null() {
        let why = "libpthreadpool.so.0 not found (Debian's libpthreadpool0)";
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true: {why}"
        );
        eprintln!("{why}: skipped");
        return None;
    }
    let sym = |name: &core::ffi::CStr| {
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { dlsym(h, name.as_ptr()) };
        assert!(!p.is_null(), "{name:?} missing from libpthreadpool.so.0");
        p
    };
    // SAFETY: the symbols are pthreadpool's functions with these signatures (pthreadpool.h).
    unsafe {
        Some(Lib {
            create: core::mem::transmute::<*mut c_void, unsafe extern "C" fn(usize) -> *mut c_void>(
                sym(c"pthreadpool_create"),
            ),
            destroy: core::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void)>(sym(
                c"pthreadpool_destroy",
            )),
            parallelize_1d: core::mem::transmute::<*mut c_void, PthreadpoolParallelize1d>(sym(
                c"pthreadpool_parallelize_1d",
            )),
            threads_count: core::mem::transmute::<*mut c_void, PthreadpoolGetThreadsCount>(sym(
                c"pthreadpool_get_threads_count",
            )),
        })
    }
}

/// Runs `f` on a `threads`-thread pthreadpool, destroyed afterwards.
fn with_pool(threads: usize, f: impl FnOnce(&Pthreadpool)) {
    let Some(lib) = lib() else { return };
    // SAFETY: a plain constructor.
    let raw = unsafe { (lib.create)(threads) };
    assert!(!raw.is_null());
    // SAFETY: a live pool of this library, destroyed only after `f` returns.
    let pool = unsafe { Pthreadpool::from_raw(raw, lib.parallelize_1d, lib.threads_count) };
    let r = catch_unwind(AssertUnwindSafe(|| f(&pool)));
    // SAFETY: created above, no call in flight.
    unsafe { (lib.destroy)(raw) };
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn every_task_runs_once_on_several_threads() {
    with_pool(3, |pool| {
        assert_eq!(pool.threads(), 3);
        for tasks in [0, 1, 2, 7, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{tasks}"
            );
        }
        // Three tasks that wait for each other finish only on three threads at once.
        let barrier = Barrier::new(3);
        pool.run(3, &|_| {
            barrier.wait();
        });
    });
}

#[test]
fn operators_on_it_are_bit_identical_to_one_thread() {
    with_pool(2, |pool| {
        keepalloc_kernels::initialize(&TABLE).unwrap();
        let mut rng = Rng::new(5);
        for (m, k, n) in [(1, 300, 333), (17, 33, 16), (100, 64, 1000), (130, 257, 40)] {
            let case = Case::random(&mut rng, m, k, n);
            for isa in Isa::available() {
                let op = FullyConnected::create(&case.desc().with_isa(isa)).unwrap();
                let mut one = case.output();
                op.run(m, &case.input, &mut one).unwrap();
                let mut many = case.output();
                op.run_in(pool, m, &case.input, &mut many).unwrap();
                case.check(&many, "on pthreadpool");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&one), bits(&many), "{isa} {m}x{k}x{n}");
            }
        }
    });
}

#[test]
fn a_panicking_task_is_resumed_on_the_caller_and_the_pool_stays_usable() {
    with_pool(2, |pool| {
        let ran = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(100, &|i| {
                if i == 3 {
                    panic!("task {i} failed");
                }
                ran.fetch_add(1, Ordering::Relaxed);
            })
        }));
        let payload = r.expect_err("the task's panic reaches the caller");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("task 3 failed")
        );
        assert!(ran.load(Ordering::Relaxed) < 100);
        let hits = AtomicUsize::new(0);
        pool.run(50, &|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.into_inner(), 50);
    });
}
