//! How one f32 run is cut over threads: the grid of M-row × N-panel tasks, chosen per
//! batch and thread count (and cached), and the run over a [`Parallel`] pool.

use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::error::KernelError;
use crate::gemm::{self, Problem};
use crate::pool::Parallel;
use crate::tuning;

/// Most tasks one run is cut into (the mask of claimed tasks is one `u64`).
const MAX_TASKS: usize = 64;

/// Most tasks per thread a run of [`STATIC_BELOW_ROWS`] rows or more is cut into (see
/// [`Grid::new`]).
const TASKS_PER_THREAD: usize = 12;

/// Rows below which a run is cut into at most one task per thread (see [`Grid::new`]).
const STATIC_BELOW_ROWS: usize = 16;

/// Floating-point operations below which a piece of work is not worth handing to another
/// thread (a wake-up and a hand-back cost about a microsecond; 32 Kflop is about half a
/// microsecond of one core).
const MIN_TASK_FLOPS: usize = 1 << 15;

/// How one run is cut: `mt` row chunks × `nt` panel chunks, task `i` being row chunk
/// `i / nt` and panel chunk `i % nt`.
///
/// Rows are cut at multiples of MR (the last chunk takes the remainder), so every chunk of
/// a batch > 1 has at least MR ≥ 2 rows and stays on the GEMM path (a batch of 1 is never
/// cut by rows: it runs the GEMV kernel, whose summation order differs). Each output
/// element is then computed by the same kernel, over the same K blocks, in the same
/// order, whichever chunk it falls in: the result is bit-identical to a one-thread run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    /// Row chunks.
    pub mt: usize,
    /// Panel chunks.
    pub nt: usize,
    /// Rows per row unit (MR).
    pub mr: usize,
    /// Row units (`m / mr`, at least 1).
    pub units: usize,
    /// Rows.
    pub m: usize,
    /// Panels.
    pub panels: usize,
}

impl Grid {
    /// The cut for `threads` threads: among the cuts into at most [`TASKS_PER_THREAD`] ×
    /// `threads` (and [`MAX_TASKS`]) tasks of at least [`MIN_TASK_FLOPS`] each, the one
    /// whose slowest
    /// thread has the least work (tasks claimed in turn, `ceil(tasks / threads)` rounds of
    /// the largest task); ties go to more tasks, then to the cut that reads the fewest
    /// floats in all (every row chunk reads all `K × N` weights, every panel chunk all
    /// `M × K` inputs).
    ///
    /// More tasks, because the cores a run gets are often not equally fast: another thread
    /// or another tenant shares one of them, and a descheduled worker stalls its share. The
    /// pool hands tasks out from both ends (the caller from the front, the workers from the
    /// back), so the faster thread takes more of them, and with equal cores each thread
    /// keeps the same half run after run.
    ///
    /// Twelve tasks per thread, since the pool delivers each claimed run of tasks as one
    /// range (`Parallel::run_ranges`) and the operator computes the tasks of a range that
    /// share a row chunk in one kernel call: the first claims of a job still take large
    /// runs at the cost of one call each, and the last tasks are small enough that a
    /// faster core is not left waiting for a large one.
    ///
    /// Fewer than [`STATIC_BELOW_ROWS`] rows are cut into at most one task per thread
    /// instead: there a task computes less than it costs to fetch its weights from the
    /// other core's cache, so a thread must find its weights in its own L2 run after run,
    /// which only a fixed split does.
    ///
    /// A batch of 1 (the GEMV) is the extreme case: one panel chunk per thread. Each thread
    /// then runs one GEMV call per run, so the direction it takes the panels in alternates
    /// run by run (see `gemm::run`; on Zen 4 only for a share that fits in L2, see
    /// `gemm::gemv_alternates`) and it starts on the weights it read last, still in its
    /// L2, as one thread does: the pool hands each thread the same chunk run after run (the
    /// caller the first, the workers from the last).
    ///
    /// The measurements behind each of these rules are in docs/bench-history.md, "Task
    /// counts of the two-thread grid".
    pub(crate) fn new(m: usize, k: usize, n: usize, nr: usize, mr: usize, threads: usize) -> Grid {
        Grid::with_min_flops(
            m,
            k,
            n,
            nr,
            mr,
            threads,
            tuning::min_parallel_flops(crate::cpu::caches()),
        )
    }

    /// [`Grid::new`] with runs below `min_flops` kept on one thread.
    fn with_min_flops(
        m: usize,
        k: usize,
        n: usize,
        nr: usize,
        mr: usize,
        threads: usize,
        min_flops: usize,
    ) -> Grid {
        let mut best = Grid::cut(m, n, nr, mr, 1, 1);
        let (units, panels) = (best.units, best.panels);
        let flops = m.saturating_mul(k).saturating_mul(n).saturating_mul(2);
        let per_thread = if m < STATIC_BELOW_ROWS {
            1
        } else {
            TASKS_PER_THREAD
        };
        let max_tasks = if flops < min_flops {
            1
        } else {
            (flops / MIN_TASK_FLOPS)
                .min(threads.saturating_mul(per_thread))
                .clamp(1, MAX_TASKS)
        };
        let threads = threads.clamp(1, max_tasks);
        if threads == 1 {
            return best;
        }
        let mut best_key = (usize::MAX, core::cmp::Reverse(0), usize::MAX);
        for mt in 1..=units.min(max_tasks) {
            for nt in 1..=panels.min(max_tasks / mt) {
                let g = Grid { mt, nt, ..best };
                let tasks = mt * nt;
                let work = tasks.div_ceil(threads) * g.max_rows() * panels.div_ceil(nt);
                let reads = (mt.saturating_mul(k).saturating_mul(n))
                    .saturating_add(nt.saturating_mul(m).saturating_mul(k));
                let key = (work, core::cmp::Reverse(tasks), reads);
                if key < best_key {
                    best_key = key;
                    best = g;
                }
            }
        }
        best
    }

    /// The cut of `m` rows and `n` columns (panels of `nr`, row units of `mr`) into `mt` row
    /// chunks × `nt` panel chunks; `1 <= mt <= units` and `1 <= nt <= panels`, as
    /// [`Grid::new`] chooses them.
    fn cut(m: usize, n: usize, nr: usize, mr: usize, mt: usize, nt: usize) -> Grid {
        Grid {
            mt,
            nt,
            mr,
            units: if m == 1 { 1 } else { (m / mr).max(1) },
            m,
            panels: n.div_ceil(nr),
        }
    }

    /// Tasks.
    pub(crate) fn tasks(&self) -> usize {
        self.mt * self.nt
    }

    /// Rows of the largest row chunk.
    fn max_rows(&self) -> usize {
        let last = self.rows(self.mt - 1);
        (self.units.div_ceil(self.mt) * self.mr).max(last.end - last.start)
    }

    /// Row chunk `i`.
    pub(crate) fn rows(&self, i: usize) -> Range<usize> {
        let start = i * self.units / self.mt * self.mr;
        let end = if i + 1 == self.mt {
            self.m
        } else {
            (i + 1) * self.units / self.mt * self.mr
        };
        start.min(self.m)..end
    }

    /// Panel chunk `j`.
    pub(crate) fn panels(&self, j: usize) -> Range<usize> {
        j * self.panels / self.nt..(j + 1) * self.panels / self.nt
    }
}

/// The [`Grid`] of an operator's last parallel run, keyed by its batch and thread count (K,
/// N, NR and MR are the operator's own): [`Grid::new`] searches every cut of up to
/// [`MAX_TASKS`] tasks, 0.3-0.7 µs on this machine for the bench's M ≥ 16 shapes, and it runs
/// on the caller before the job is published, while every other thread waits (32×96×1536 at
/// two threads is a 40 µs run). A runtime runs a layer with the same batch and pool run
/// after run, so the cut is found once. One atomic word, `m << 32 | threads << 16 | mt << 8
/// | nt` (0 when empty; `mt, nt >= 1`): operators are shared by threads, and a stale or
/// concurrently replaced entry only means one more search. Batches of 2^32 rows or more and
/// more than 65,535 threads are not cached.
pub(crate) struct GridCache(AtomicU64);

impl GridCache {
    pub(crate) const fn new() -> GridCache {
        GridCache(AtomicU64::new(0))
    }

    /// [`Grid::new`] for these arguments, from the cache when the last run had the same `m`
    /// and `threads`.
    pub(crate) fn get_or_new(
        &self,
        m: usize,
        k: usize,
        n: usize,
        nr: usize,
        mr: usize,
        threads: usize,
    ) -> Grid {
        let key = match (u32::try_from(m), u16::try_from(threads)) {
            (Ok(m), Ok(t)) => (u64::from(m) << 32) | (u64::from(t) << 16),
            _ => return Grid::new(m, k, n, nr, mr, threads),
        };
        let entry = self.0.load(Ordering::Relaxed);
        if entry != 0 && entry & !0xffff == key {
            let (mt, nt) = ((entry >> 8) & 0xff, entry & 0xff);
            return Grid::cut(m, n, nr, mr, mt as usize, nt as usize);
        }
        let grid = Grid::new(m, k, n, nr, mr, threads);
        const _: () = assert!(MAX_TASKS < 256);
        // mt, nt <= MAX_TASKS < 256: each fits in its byte.
        self.0.store(
            key | ((grid.mt as u64) << 8) | grid.nt as u64,
            Ordering::Relaxed,
        );
        grid
    }
}

/// Runs `problem` cut by [`Grid`] for `threads` threads on `pool`.
pub(super) fn run_parallel(
    problem: &Problem,
    pool: &dyn Parallel,
    threads: usize,
    cache: &GridCache,
) -> Result<(), KernelError> {
    let s = gemm::shape(problem.isa);
    let grid = cache.get_or_new(problem.m, problem.k, problem.n, s.nr, s.mr, threads);
    let tasks = grid.tasks();
    if tasks == 1 {
        // SAFETY: the caller checked the slices, the packing and the ISA.
        unsafe { gemm::run(problem, 0..grid.panels) };
        return Ok(());
    }
    // One bit per task: a task runs at most once even if the pool delivers it twice.
    let claimed = AtomicU64::new(0);
    // Tasks `range` of one row chunk: one kernel call over the union of their panel chunks
    // (consecutive tasks of a row chunk are consecutive panel chunks).
    let chunk = |range: Range<usize>| {
        let rows = grid.rows(range.start / grid.nt);
        let panels =
            grid.panels(range.start % grid.nt).start..grid.panels((range.end - 1) % grid.nt).end;
        let sub = Problem {
            m: rows.end - rows.start,
            // SAFETY: row `rows.start` < m is inside both checked buffers.
            a: unsafe { problem.a.add(rows.start * problem.lda) },
            // SAFETY: as above.
            c: unsafe { problem.c.add(rows.start * problem.ldc) },
            shared: true,
            ..*problem
        };
        // The chunks of `grid` are disjoint, so no two tasks write the same output element,
        // and each task runs once (the mask); the buffers outlive `pool.run_ranges`, which
        // returns only after every range has (the `Parallel` contract).
        // SAFETY: `sub` covers rows of the checked buffers; panels are in range.
        unsafe { gemm::run(&sub, panels) };
    };
    let task = |range: Range<usize>| {
        // Indices past the job (a wrong pool) are ignored, and so are tasks already run.
        let (start, end) = (range.start, range.end.min(tasks));
        if start >= end {
            return;
        }
        let len = end - start;
        let bits = (u64::MAX >> (64 - len)) << start;
        let fresh = bits & !claimed.fetch_or(bits, Ordering::AcqRel);
        // Each maximal run of fresh tasks within one row chunk is one call.
        let mut i = start;
        while i < end {
            if fresh & (1u64 << i) == 0 {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < end && fresh & (1u64 << j) != 0 && j / grid.nt == i / grid.nt {
                j += 1;
            }
            chunk(i..j);
            i = j;
        }
    };
    pool.run_ranges(tasks, &task);
    let ran = claimed.load(Ordering::Acquire).count_ones() as usize;
    if ran == tasks {
        Ok(())
    } else {
        Err(KernelError::ParallelIncomplete { ran, tasks })
    }
}

#[cfg(test)]
mod tests {
    use super::{Grid, GridCache, MAX_TASKS};
    use crate::tuning::{MIN_PARALLEL_FLOPS, MIN_PARALLEL_FLOPS_ZEN4, min_parallel_flops};

    #[test]
    fn the_grid_cache_gives_what_grid_new_gives_for_every_batch_and_thread_count() {
        // Keys that share a batch or a thread count, alternating (each replaces the entry),
        // repeated (each hits it), and keys too large to cache.
        let cache = GridCache::new();
        let keys = [
            (32, 2),
            (32, 2),
            (512, 2),
            (32, 2),
            (32, 3),
            (32, 3),
            (1, 2),
            (16, 2),
            (16, 1),
            (1 << 32, 2),
            (32, 1 << 16),
            (32, 2),
        ];
        for &(m, threads) in keys.iter().chain(keys.iter().rev()) {
            for &(k, n) in &[(96, 1536), (512, 512)] {
                let want = Grid::new(m, k, n, 32, 8, threads);
                let got = GridCache::new().get_or_new(m, k, n, 32, 8, threads);
                assert_eq!(got, want, "fresh cache, {m}x{k}x{n} t={threads}");
                // One cache per operator: K and N never change under one cache.
                if (k, n) == (96, 1536) {
                    let got = cache.get_or_new(m, k, n, 32, 8, threads);
                    assert_eq!(got, want, "{m}x{k}x{n} t={threads}");
                }
            }
        }
    }

    #[test]
    fn grids_cover_every_row_and_panel_once() {
        for &(mr, nr) in &[(8, 32), (6, 16), (4, 8)] {
            for m in [1, 2, 3, 7, 8, 9, 16, 17, 33, 64, 100, 512] {
                for n in [1, 8, 31, 32, 33, 64, 100, 520, 2048] {
                    for threads in [1, 2, 3, 4, 8, 64, 1000] {
                        let g = Grid::new(m, 256, n, nr, mr, threads);
                        assert!(g.tasks() >= 1 && g.tasks() <= MAX_TASKS);
                        let panels = n.div_ceil(nr);
                        let mut seen = vec![0u8; m * panels];
                        for t in 0..g.tasks() {
                            let rows = g.rows(t / g.nt);
                            assert!(!rows.is_empty());
                            // A batch > 1 never gets a one-row chunk (it would take the GEMV).
                            assert!(m == 1 || rows.len() >= 2, "{m}x{n} t={threads} {g:?}");
                            for r in rows {
                                for p in g.panels(t % g.nt) {
                                    seen[r * panels + p] += 1;
                                }
                            }
                        }
                        assert!(seen.iter().all(|&c| c == 1), "{m}x{n} t={threads} {g:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn grids_use_every_thread_on_narrow_and_on_wide_layers() {
        // Tall and narrow (one panel): rows are cut.
        let g = Grid::new(1024, 256, 32, 32, 8, 2);
        assert!(g.nt == 1 && g.mt >= 2 && g.mt.is_multiple_of(2), "{g:?}");
        // Wide, few rows: panels are cut (each weight read once in all).
        let g = Grid::new(16, 1024, 1024, 32, 8, 2);
        assert!(g.mt == 1 && g.nt >= 2 && g.nt.is_multiple_of(2), "{g:?}");
        // Batch 1: panels only, one chunk per thread (each thread keeps its weights).
        for threads in [2, 3, 4, 8] {
            let g = Grid::new(1, 4096, 4096, 32, 8, threads);
            assert_eq!((g.mt, g.nt), (1, threads), "{g:?}");
        }
        assert_eq!(Grid::new(1, 1024, 1024, 32, 8, 2).tasks(), 2);
        // Too small to be worth a second thread.
        assert_eq!(Grid::new(1, 96, 64, 32, 8, 2).tasks(), 1);
    }

    #[test]
    fn runs_below_min_parallel_flops_stay_on_the_calling_thread() {
        let grid = |m, k, n, threads, min| Grid::with_min_flops(m, k, n, 32, 8, threads, min);
        for threads in [2, 4, 64] {
            // The Xeon's threshold: 262 Kflop and 131 Kflop, one task whatever the threads.
            assert_eq!(grid(16, 32, 256, threads, MIN_PARALLEL_FLOPS).tasks(), 1);
            assert_eq!(grid(1, 256, 256, threads, MIN_PARALLEL_FLOPS).tasks(), 1);
            // Zen 4's: both cut, and 65 Kflop (1×128×256) stays whole.
            assert!(grid(16, 32, 256, threads, MIN_PARALLEL_FLOPS_ZEN4).tasks() > 1);
            assert!(grid(1, 256, 256, threads, MIN_PARALLEL_FLOPS_ZEN4).tasks() > 1);
            assert_eq!(
                grid(1, 128, 256, threads, MIN_PARALLEL_FLOPS_ZEN4).tasks(),
                1
            );
        }
        // 524 Kflop (the Xeon's threshold) and 1 Mflop: cut.
        assert!(grid(16, 64, 256, 2, MIN_PARALLEL_FLOPS).tasks() > 1);
        assert!(grid(16, 64, 512, 2, MIN_PARALLEL_FLOPS).tasks() > 1);
    }

    #[test]
    fn the_threshold_follows_the_cpu() {
        use crate::cpu::test_cpus::{XEON, ZEN4, ZEN5};
        assert_eq!(min_parallel_flops(ZEN4), MIN_PARALLEL_FLOPS_ZEN4);
        assert_eq!(min_parallel_flops(XEON), MIN_PARALLEL_FLOPS);
        assert_eq!(min_parallel_flops(ZEN5), MIN_PARALLEL_FLOPS);
        let unknown = crate::cpu::Caches { amd: false, ..ZEN4 };
        assert_eq!(min_parallel_flops(unknown), MIN_PARALLEL_FLOPS);
    }

    /// The floats a cut reads in all: every row chunk all the weights, every panel chunk
    /// all the inputs.
    fn reads(g: &Grid, k: usize, n: usize) -> usize {
        g.mt * k * n + g.nt * g.m * k
    }

    #[test]
    fn among_equal_work_cuts_the_most_tasks_then_the_fewest_reads_win() {
        // 512x512x512 at two threads: sixteen tasks (no cut into more gives the slowest
        // thread less work), so that a faster core takes more of them (two equal halves
        // finish at the pace of the slower core); of the sixteen-task cuts, four row chunks
        // by four panel chunks read least (the weights and the input four times each).
        let g = Grid::new(512, 512, 512, 32, 8, 2);
        assert_eq!((g.mt, g.nt), (4, 4), "{g:?}");
        // 32x96x1536: 48 panels, the most tasks allowed (24), in one row chunk.
        let g = Grid::new(32, 96, 1536, 32, 8, 2);
        assert_eq!((g.mt, g.nt), (1, 24), "{g:?}");
        // Fewer than STATIC_BELOW_ROWS rows: one chunk per thread, each thread's weights
        // staying in its own L2 run after run.
        assert_eq!(Grid::new(4, 512, 512, 32, 8, 2).tasks(), 2);
        assert_eq!(Grid::new(15, 512, 512, 32, 8, 2).tasks(), 2);
        assert_eq!(Grid::new(16, 512, 512, 32, 8, 2).tasks(), 16);
        // Whatever the shape, no cut with the same slowest-thread work has more tasks, and
        // none with as many tasks reads less.
        for &(m, k, n) in &[
            (512, 512, 512),
            (64, 1024, 1024),
            (32, 96, 1536),
            (100, 256, 520),
            (4, 512, 512),
        ] {
            for threads in [2, 3, 4] {
                let g = Grid::new(m, k, n, 32, 8, threads);
                let cap = if m < super::STATIC_BELOW_ROWS {
                    threads
                } else {
                    super::TASKS_PER_THREAD * threads
                };
                let work = |c: &Grid| {
                    c.tasks().div_ceil(threads.min(c.tasks()))
                        * c.max_rows()
                        * g.panels.div_ceil(c.nt)
                };
                for mt in 1..=g.units.min(MAX_TASKS) {
                    for nt in 1..=g.panels.min(MAX_TASKS / mt) {
                        let c = Grid { mt, nt, ..g };
                        if c.tasks() > cap || work(&c) != work(&g) {
                            continue;
                        }
                        assert!(
                            c.tasks() <= g.tasks(),
                            "{m}x{k}x{n} t={threads}: {c:?} has more tasks than {g:?}"
                        );
                        if c.tasks() == g.tasks() {
                            assert!(
                                reads(&c, k, n) >= reads(&g, k, n),
                                "{m}x{k}x{n} t={threads}: {c:?} reads less than {g:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
