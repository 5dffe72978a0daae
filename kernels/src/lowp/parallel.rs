//! A low-precision run cut over a pool's threads: by output panels (each task every row
//! against a slice of the weights) when the weights are the larger operand (a row of a qd8
//! input quantized in the run on VNNI counting as [`tuning::QD8_ROW_WEIGHT`] columns), else
//! by rows in multiples of [`ROW_UNIT`]. Either cut leaves every output row on the kernel path a
//! one-thread run gives it, so the result is bit-identical.
//!
//! A qd8 job whose driver quantizes its own rows (`quantizes_in_driver`) cut by panels has
//! every task read all rows: they are quantized first, cut by rows, in a pass of their own.

use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering};

use super::{DotIsa, Job, Kind, shape};
use crate::error::KernelError;
use crate::pool::Parallel;
use crate::tuning::{self, LOWP_MIN_PARALLEL_MACS};

/// Rows per row unit: an AMX block (32 rows) and more than the one- and two-row kernels of
/// batch 1 and 2, so every row of a cut falls in the same kind of tile as in a one-thread
/// run.
pub(crate) const ROW_UNIT: usize = 32;

/// Most tasks of one run (the mask of claimed tasks is one `u64`).
const MAX_TASKS: usize = 64;

/// Tasks per thread when there is work enough: a slower core takes fewer.
const TASKS_PER_THREAD: usize = 2;

/// How a run is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// One task: the calling thread runs the job.
    Whole,
    /// `tasks` chunks of panels.
    Panels { tasks: usize, panels: usize },
    /// `tasks` chunks of whole row units.
    Rows { tasks: usize, units: usize },
}

impl Cut {
    /// The cut of an `m × k × n` job with panels of `nr` columns for `threads` threads, not
    /// cut under `min_macs` multiply-adds (see [`min_parallel_macs`]), reading a row of input
    /// costing `row_weight` times a column of weights ([`tuning::QD8_ROW_WEIGHT`] for a qd8
    /// job on VNNI that quantizes its input, else 1).
    pub(crate) fn new(
        m: usize,
        k: usize,
        n: usize,
        nr: usize,
        threads: usize,
        min_macs: usize,
        row_weight: usize,
    ) -> Cut {
        let panels = n.div_ceil(nr);
        let units = m / ROW_UNIT;
        let want = (threads * TASKS_PER_THREAD).min(MAX_TASKS);
        if threads <= 1 || m.saturating_mul(k).saturating_mul(n) < min_macs {
            return Cut::Whole;
        }
        // Each row chunk reads all the weights (k·n), each panel chunk all the rows (m·k):
        // cut the larger operand.
        if (n >= m.saturating_mul(row_weight) || units < 2) && panels >= 2 {
            Cut::Panels {
                tasks: want.min(panels),
                panels,
            }
        } else if units >= 2 {
            Cut::Rows {
                tasks: want.min(units),
                units,
            }
        } else {
            Cut::Whole
        }
    }
}

/// Multiply-adds below which a `kind` job of `m` rows stays on the calling thread.
fn min_parallel_macs(kind: Kind, m: usize) -> usize {
    match kind {
        Kind::Qd8F32Qc8w if m > 1 => tuning::QD8_BATCH_MIN_PARALLEL_MACS,
        Kind::F32Qc8w => tuning::F32_QC8W_MIN_PARALLEL_MACS,
        _ => LOWP_MIN_PARALLEL_MACS,
    }
}

/// Input values below which quantizing a share of them is not worth a hand-off to another
/// thread (about a microsecond): one core quantizes 8 K values from L3 in about two (a
/// 512×512 input in about 63 µs on the Xeon).
const QUANT_MIN_VALUES: usize = 1 << 13;

/// Tasks of the pass that quantizes an `m × k` input before a cut by panels: up to
/// [`TASKS_PER_THREAD`] per thread, none under [`QUANT_MIN_VALUES`] values, at least one row
/// each.
fn quant_tasks(m: usize, k: usize, threads: usize) -> usize {
    let most = (threads.saturating_mul(TASKS_PER_THREAD))
        .min(MAX_TASKS)
        .min(m)
        .max(1);
    (m.saturating_mul(k) / QUANT_MIN_VALUES).clamp(1, most)
}

/// Task `i` of `tasks` over `units` units: a balanced contiguous range.
fn share(i: usize, tasks: usize, units: usize) -> Range<usize> {
    (i * units / tasks)..((i + 1) * units / tasks)
}

/// Runs `job` on `pool` with at most `threads` threads.
///
/// # Safety
/// As [`super::run`].
pub(crate) unsafe fn run_in(
    job: &Job,
    pool: &dyn Parallel,
    threads: usize,
) -> Result<(), KernelError> {
    let nr = shape(job.kind, job.isa).nr;
    let job = Shared(Job { ..*job });
    let job = &job;
    // Measured on VNNI only; AMX keeps the plain rule until it is measured on an AMX CPU.
    let row_weight =
        if job.kind == Kind::Qd8F32Qc8w && !job.x.is_null() && job.isa == DotIsa::Avx512Vnni {
            tuning::QD8_ROW_WEIGHT
        } else {
            1
        };
    let min_macs = min_parallel_macs(job.kind, job.m);
    match Cut::new(job.m, job.k, job.n, nr, threads, min_macs, row_weight) {
        // SAFETY: forwarded (caller).
        Cut::Whole => unsafe { super::run(job) },
        Cut::Rows { tasks, units } => {
            let sub = |i: usize| {
                let r = share(i, tasks, units);
                let r0 = r.start * ROW_UNIT;
                // The last chunk takes the rows past the last whole unit.
                let r1 = if i + 1 == tasks {
                    job.m
                } else {
                    r.end * ROW_UNIT
                };
                // SAFETY: rows r0..r1 < m of every per-row buffer (caller).
                let job = unsafe { rows_of(&job.0, r0, r1) };
                // SAFETY: disjoint rows of the caller's job, each task once (`each_once`).
                unsafe { super::run(&job) };
            };
            each_once(pool, tasks, &sub)?;
        }
        Cut::Panels { tasks, panels } => {
            let mut job = Shared(Job { ..job.0 });
            if job.kind == Kind::Qd8F32Qc8w && !job.x.is_null() {
                // Quantize every row first (each panel task reads them all), cut by rows:
                // each row is quantized alone, so any cut gives the same bytes.
                let qt = quant_tasks(job.m, job.k, threads);
                let prepare = |i: usize| {
                    let rows = share(i, qt, job.m);
                    // Only x86-64 drivers quantize in the driver (`quantizes_in_driver`).
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: rows `rows` of the input, A and the row parameters (caller: `x` set, so A and the parameters are writable), disjoint per task.
                    unsafe {
                        super::blocked::qd8_prepare(&job.0, rows)
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    unreachable!("rows {rows:?}: no driver quantizes here");
                };
                each_once(pool, qt, &prepare)?;
                job.0.x = core::ptr::null();
            }
            let job = &job;
            let panel = super::panel_bytes(job.kind, nr, job.k);
            let sub = |i: usize| {
                let p = share(i, tasks, panels);
                let c0 = p.start * nr;
                let sub = Job {
                    n: (p.end * nr).min(job.n) - c0,
                    // SAFETY: panel p.start < panels of the packed block, column c0 < n of C.
                    packed: unsafe { job.packed.add(p.start * panel) },
                    // SAFETY: as above.
                    c: unsafe { job.c.add(c0) },
                    ..job.0
                };
                // SAFETY: disjoint columns of C, the rows already quantized (x NULL) or read only; each task once (`each_once`).
                unsafe { super::run(&sub) };
            };
            each_once(pool, tasks, &sub)?;
        }
    }
    Ok(())
}

/// A job the tasks share: its pointers are only read, and each task writes a part of the
/// buffers no other task touches.
struct Shared(Job);

// SAFETY: see above; the caller of `run_in` vouches for the buffers for the whole run.
unsafe impl Sync for Shared {}

impl core::ops::Deref for Shared {
    type Target = Job;
    fn deref(&self) -> &Job {
        &self.0
    }
}

/// The rows `r0..r1` of `job`.
///
/// # Safety
/// `r0 < r1 <= job.m`.
unsafe fn rows_of(job: &Job, r0: usize, r1: usize) -> Job {
    // SAFETY: row r0 < m of each buffer (caller); NULL pointers stay NULL.
    unsafe {
        Job {
            m: r1 - r0,
            a: job.a.add(r0 * job.lda),
            c: job.c.add(r0 * job.ldc),
            rows: if job.rows.is_null() {
                job.rows
            } else {
                job.rows.add(r0)
            },
            x: if job.x.is_null() {
                job.x
            } else {
                job.x.add(r0 * job.ldx)
            },
            ..*job
        }
    }
}

/// Runs `task(0..tasks)` on `pool`, each index at most once whatever the pool delivers;
/// an error when the pool skipped some.
fn each_once(
    pool: &dyn Parallel,
    tasks: usize,
    task: &(dyn Fn(usize) + Sync),
) -> Result<(), KernelError> {
    debug_assert!((1..=MAX_TASKS).contains(&tasks));
    let claimed = AtomicU64::new(0);
    pool.run_ranges(tasks, &|range: Range<usize>| {
        for i in range.start..range.end.min(tasks) {
            if claimed.fetch_or(1 << i, Ordering::AcqRel) & (1 << i) == 0 {
                task(i);
            }
        }
    });
    let ran = claimed.load(Ordering::Acquire).count_ones() as usize;
    if ran == tasks {
        Ok(())
    } else {
        Err(KernelError::ParallelIncomplete { ran, tasks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The threshold of bf16 and qd8 at batch 1.
    const MIN: usize = LOWP_MIN_PARALLEL_MACS;

    #[test]
    fn weights_heavy_jobs_are_cut_by_panels_and_tall_ones_by_row_units() {
        assert_eq!(Cut::new(512, 512, 512, 32, 1, MIN, 1), Cut::Whole);
        assert_eq!(
            Cut::new(64, 512, 1024, 32, 2, MIN, 1),
            Cut::Panels {
                tasks: 4,
                panels: 32
            }
        );
        assert_eq!(
            Cut::new(1024, 512, 64, 32, 2, MIN, 1),
            Cut::Rows {
                tasks: 4,
                units: 32
            }
        );
        // One panel and under two row units: nothing to share.
        assert_eq!(Cut::new(40, 4096, 16, 32, 2, MIN, 1), Cut::Whole);
        // Tall but a single panel: rows.
        assert_eq!(
            Cut::new(100, 4096, 16, 32, 2, MIN, 1),
            Cut::Rows { tasks: 3, units: 3 }
        );
        // Too little work to hand over.
        assert_eq!(Cut::new(1, 256, 256, 32, 2, MIN, 1), Cut::Whole);
        assert_eq!(
            Cut::new(1, 1536, 1536, 32, 2, MIN, 1),
            Cut::Panels {
                tasks: 4,
                panels: 48
            }
        );
    }

    #[test]
    fn small_runs_stay_on_one_thread_by_their_kinds_measure() {
        let parallel =
            |kind, m, k, n| Cut::new(m, k, n, 32, 2, min_parallel_macs(kind, m), 1) != Cut::Whole;
        let (qd8, bf16, qc8w) = (Kind::Qd8F32Qc8w, Kind::Bf16F32, Kind::F32Qc8w);
        // The shapes measured (see `tuning`): qd8 batches cut from 8x256x256, its batch 1 at
        // bf16's threshold (from 1x384x384); f32_qc8w from 1x256x256.
        assert!(!parallel(qd8, 2, 256, 256));
        assert!(!parallel(qd8, 6, 256, 256));
        assert!(parallel(qd8, 8, 256, 256));
        assert!(!parallel(qd8, 1, 256, 256));
        assert!(parallel(qd8, 1, 384, 384));
        assert!(!parallel(bf16, 1, 256, 256));
        assert!(parallel(bf16, 2, 256, 256));
        assert!(!parallel(qc8w, 1, 128, 256));
        assert!(parallel(qc8w, 1, 256, 256));
    }

    #[test]
    fn a_qd8_job_that_quantizes_weighs_its_rows() {
        // 512x512x512 and 256x512x2048: panels when rows weigh as columns, rows when a row
        // counts as QD8_ROW_WEIGHT columns; 128x2048x2048 stays cut by panels.
        let w = tuning::QD8_ROW_WEIGHT;
        assert!(matches!(
            Cut::new(512, 512, 512, 32, 2, MIN, 1),
            Cut::Panels { .. }
        ));
        assert_eq!(
            Cut::new(512, 512, 512, 32, 2, MIN, w),
            Cut::Rows {
                tasks: 4,
                units: 16
            }
        );
        assert!(matches!(
            Cut::new(256, 512, 2048, 32, 2, MIN, 1),
            Cut::Panels { .. }
        ));
        assert!(matches!(
            Cut::new(256, 512, 2048, 32, 2, MIN, w),
            Cut::Rows { .. }
        ));
        assert!(matches!(
            Cut::new(128, 2048, 2048, 32, 2, MIN, w),
            Cut::Panels { .. }
        ));
        // Under two row units, rows cannot be cut: panels whatever the weight.
        assert!(matches!(
            Cut::new(32, 96, 1536, 32, 2, MIN, w),
            Cut::Panels { .. }
        ));
    }

    #[test]
    fn the_quantizing_pass_is_cut_over_the_threads_when_it_is_worth_it() {
        // The bench's M >= 16 shapes on two threads: every thread quantizes a share.
        assert_eq!(quant_tasks(16, 1024, 2), 2);
        assert_eq!(quant_tasks(64, 1024, 2), 4);
        assert_eq!(quant_tasks(512, 512, 2), 4);
        // Too few values for a hand-off, or one row: one task.
        assert_eq!(quant_tasks(4, 512, 2), 1);
        assert_eq!(quant_tasks(1, 1 << 20, 2), 1);
        // Never more tasks than rows, nor than the claim mask holds.
        assert_eq!(quant_tasks(3, 1 << 20, 8), 3);
        assert_eq!(quant_tasks(1 << 20, 1 << 20, 1000), MAX_TASKS);
        assert_eq!(quant_tasks(0, 0, 2), 1);
    }

    #[test]
    fn shares_cover_every_unit_once() {
        for (tasks, units) in [(1, 1), (2, 3), (4, 32), (64, 64), (3, 100)] {
            let mut next = 0;
            for i in 0..tasks {
                let r = share(i, tasks, units);
                assert_eq!(r.start, next);
                assert!(r.end > r.start);
                next = r.end;
            }
            assert_eq!(next, units);
        }
    }
}
