//! Timing: rounds of interleaved runs, each timed for a budget after a warm-up, and the
//! median of each round.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::peers;
use crate::probe;
use crate::stats::{Measured, median};

/// Rounds per shape: the libraries take turns (each round times every library), so a
/// neighbour's load on this shared machine slows all of them alike instead of one.
pub(crate) const ROUNDS: usize = 11;

/// How long a runner runs untimed after a pause, before its batch (see `median_gflops`).
pub(crate) const WARM_UP: Duration = Duration::from_millis(8);

/// The least pause before each library's samples in every round of a multi-threaded
/// comparison; the pause then lasts until every other thread of the process sleeps
/// (`probe::quiesce`): a pool's worker still spinning after the previous library's batch
/// (GNU OpenMP's, oneDNN's, spins for milliseconds) would take a core from the next one.
pub(crate) const QUIESCE: Duration = Duration::from_millis(2);

/// The pause before each batch of a comparison on `threads` threads: [`QUIESCE`] on more
/// than one (each library's pool then has its own workers), none on one.
pub(crate) fn pause_for(threads: usize) -> Duration {
    if threads > 1 { QUIESCE } else { Duration::ZERO }
}

/// The line that reports `pauses`, the pauses before some batches in ms (NaN: the process
/// never went idle), `None` without any.
pub(crate) fn pause_report(pauses: impl IntoIterator<Item = f64>) -> Option<String> {
    let mut pauses: Vec<f64> = pauses.into_iter().collect();
    let busy = pauses.iter().filter(|p| p.is_nan()).count();
    pauses.retain(|p| !p.is_nan());
    pauses.sort_by(f64::total_cmp);
    let (mid, max) = (pauses.get(pauses.len() / 2)?, pauses.last()?);
    Some(format!(
        "pause before each batch, until no other thread of the process was runnable: median \
         {mid:.1} ms, longest {max:.1} ms; {busy} batches after a pause that never got there \
         (not steady)"
    ))
}

/// A batch of samples is steady when every core's probe, just before and just after it,
/// read at least this share of the best one-core probe of the run ([`probe::core_speeds`]).
/// On this VM a core in a slow phase reads 60-100 GFLOPS against 130-155 in a normal one.
pub(crate) const STEADY: f64 = 0.8;

/// A runner being timed: runs per sample (so each sample lasts at least ~50 µs) and the
/// GFLOPS of every sample so far.
pub(crate) struct Timing {
    pub(crate) inner: u32,
    pub(crate) samples: Vec<f64>,
}

impl Timing {
    /// Warms `run` up and sizes its samples.
    fn calibrate(run: &mut dyn FnMut(&mut [f32]), out: &mut [f32]) -> (Timing, Duration) {
        for _ in 0..3 {
            run(out);
        }
        let t = Instant::now();
        run(out);
        let one = t.elapsed().max(Duration::from_nanos(50));
        let inner = (Duration::from_micros(50).as_nanos() / one.as_nanos()).max(1) as u32;
        (
            Timing {
                inner,
                samples: Vec::new(),
            },
            one * inner,
        )
    }

    /// Takes `count` samples.
    fn sample(
        &mut self,
        run: &mut dyn FnMut(&mut [f32]),
        out: &mut [f32],
        flops: f64,
        count: usize,
    ) {
        for _ in 0..count {
            let t = Instant::now();
            for _ in 0..self.inner {
                run(black_box(&mut *out));
            }
            self.samples
                .push(flops * self.inner as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }

    fn median(&self) -> f64 {
        median(&self.samples)
    }
}

/// Times every runner that was built, in [`ROUNDS`] rounds in which each takes its turn
/// (after sleeping `pause`), about `budget` in all per runner; returns each runner's median
/// GFLOPS and per-round medians, `None` for a runner that could not be built.
pub(crate) fn median_gflops<L>(
    runners: &mut [(L, Result<peers::Runner<'_>, String>)],
    out: &mut [f32],
    flops: f64,
    budget: Duration,
    pause: Duration,
    pin: impl Fn(&L) -> Option<usize>,
) -> Vec<Option<Measured>> {
    let floor = || probe::core_speeds().into_iter().fold(f64::MAX, f64::min);
    // Each runner's timing, samples per batch, and per round its median, witness floor and
    // the pause before it (its length in ms, or None when the process never went idle).
    type Batches = (Timing, usize, Vec<f64>, Vec<f64>, Vec<Option<f64>>);
    let mut timings: Vec<Option<Batches>> = runners
        .iter_mut()
        .map(|(_, r)| {
            let run = r.as_mut().ok()?;
            let (t, sample) = Timing::calibrate(run, out);
            let per_round =
                (budget.as_nanos() / ROUNDS as u128 / sample.as_nanos()).clamp(3, 300) as usize;
            Some((t, per_round, Vec::new(), Vec::new(), Vec::new()))
        })
        .collect();
    for round in 0..ROUNDS {
        for i in round_order(round, runners.len()) {
            let ((lib, r), t) = (&mut runners[i], &mut timings[i]);
            if let (Ok(run), Some((t, per_round, rounds, floors, pauses))) =
                (r.as_mut(), t.as_mut())
            {
                let pinned = pin(lib);
                if let Some(cpu) = pinned {
                    // A column labelled with its CPU must run there: no silent fallback.
                    probe::pin_to(cpu)
                        .unwrap_or_else(|e| panic!("pinning the bench to CPU {cpu}: {e}"));
                }
                // With a pause, also until every other thread of the process sleeps: a worker
                // still spinning after the previous library's batch takes a core from this one.
                pauses.push(if pause.is_zero() {
                    Some(0.0)
                } else {
                    probe::quiesce(pause).map(|d| d.as_secs_f64() * 1e3)
                });
                // The witness: every core's speed just before and just after the batch.
                let before = floor();
                if !pause.is_zero() {
                    // The pause put every pool's workers to sleep; woken, one can land on the
                    // caller's core until the scheduler moves it (up to a 4 ms tick here), so
                    // the batch starts once the runner has run that long untimed.
                    let warm = Instant::now();
                    while warm.elapsed() < WARM_UP {
                        run(black_box(&mut *out));
                    }
                }
                let first = t.samples.len();
                t.sample(run, out, flops, *per_round);
                rounds.push(median(&t.samples[first..]));
                floors.push(before.min(floor()));
                if pinned.is_some() {
                    probe::unpin().unwrap_or_else(|e| panic!("unpinning the bench: {e}"));
                }
            }
        }
    }
    let best = probe::best_core_speed();
    timings
        .into_iter()
        .map(|t| {
            t.map(|(t, _, rounds, floors, pauses)| Measured {
                median: t.median(),
                steady: floors
                    .iter()
                    .zip(&pauses)
                    .map(|(&f, p)| p.is_some() && f >= STEADY * best)
                    .collect(),
                rounds,
                floors,
                idle: pauses.iter().map(Option::is_some).collect(),
                pause_ms: pauses.iter().map(|p| p.unwrap_or(f64::NAN)).collect(),
            })
        })
        .collect()
}

/// The order in which the `n` runners take their turns in round `round`: reversed every
/// other round, and one place later every two rounds. A fixed order ran keepalloc first in every
/// round, always after the same library, whose data then filled the caches (at 1×4096×4096
/// every library's 64 MiB of weights is partly in the L3 or not depending on what ran
/// before); now each runner takes different places and follows different neighbours.
pub(crate) fn round_order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    let shift = round / 2;
    (0..n).map(move |j| {
        let j = if round % 2 == 1 { n - 1 - j } else { j };
        (j + shift) % n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_multi_threaded_comparisons_wait_for_other_pools() {
        // The rule only; that every two-thread batch really paused is read from the run's
        // JSON by `.ci/bench-pauses.py`.
        assert_eq!(pause_for(1), Duration::ZERO);
        assert!(pause_for(2) >= QUIESCE && !QUIESCE.is_zero());
    }
    use crate::peers::Lib;

    #[test]
    fn runners_change_place_and_neighbour_from_round_to_round() {
        for n in [2, 6, 7] {
            let orders: Vec<Vec<usize>> =
                (0..ROUNDS).map(|r| round_order(r, n).collect()).collect();
            for order in &orders {
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(
                    sorted,
                    (0..n).collect::<Vec<_>>(),
                    "each runner once a round"
                );
            }
            for runner in 0..n {
                let places: std::collections::BTreeSet<usize> = orders
                    .iter()
                    .map(|o| o.iter().position(|&i| i == runner).unwrap())
                    .collect();
                // Every place when there are at most six (the rounds reach six shifts).
                assert!(
                    places.len() >= n.min(6),
                    "runner {runner} of {n} takes only places {places:?}"
                );
                let before: std::collections::BTreeSet<Option<usize>> = orders
                    .iter()
                    .map(|o| {
                        let p = o.iter().position(|&i| i == runner).unwrap();
                        p.checked_sub(1).map(|q| o[q])
                    })
                    .collect();
                assert!(
                    before.len() >= 2.min(n),
                    "runner {runner} of {n} always follows the same one: {before:?}"
                );
            }
        }
    }

    #[test]
    fn median_gflops_records_every_round() {
        let mut runners: Vec<(Lib, Result<peers::Runner<'_>, String>)> = vec![
            (Lib::ALL[0], Ok(Box::new(|out: &mut [f32]| out[0] += 1.0))),
            (Lib::ALL[1], Err("not built".into())),
        ];
        let mut out = [0.0f32];
        let m = median_gflops(
            &mut runners,
            &mut out,
            1.0,
            Duration::from_millis(7),
            Duration::ZERO,
            |_| None,
        );
        let first = m[0].as_ref().unwrap();
        assert_eq!(first.rounds.len(), ROUNDS);
        assert!(first.rounds.iter().all(|g| g.is_finite() && *g > 0.0));
        // The witness probed around every batch.
        assert_eq!(first.floors.len(), ROUNDS);
        assert_eq!(first.steady.len(), ROUNDS);
        assert!(first.floors.iter().all(|f| f.is_finite() && *f > 0.0));
        assert!(probe::best_core_speed() >= first.floors.iter().copied().fold(0.0, f64::max));
        assert!(m[1].is_none());
    }

    #[test]
    fn median_gflops_runs_a_pinned_runner_on_its_cpu_only() {
        let allowed = probe::allowed_cpus();
        let cpu = *allowed.last().unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let mut runners: Vec<(Lib, Result<peers::Runner<'_>, String>)> = vec![
            (
                Lib::ALL[0],
                Ok(Box::new(|out: &mut [f32]| {
                    // SAFETY: sched_getcpu takes no arguments and only reads.
                    let cpu = unsafe { libc::sched_getcpu() };
                    seen.borrow_mut().push(cpu as usize);
                    out[0] += 1.0;
                })),
            ),
            (Lib::ALL[1], Ok(Box::new(|out: &mut [f32]| out[0] += 1.0))),
        ];
        let mut out = [0.0f32];
        // Start on another CPU, so that a runner left unpinned would be seen there.
        probe::pin_to(allowed[0]).unwrap();
        median_gflops(
            &mut runners,
            &mut out,
            1.0,
            Duration::from_millis(7),
            Duration::ZERO,
            |&lib| (lib == Lib::ALL[0]).then_some(cpu),
        );
        drop(runners);
        // The first four calls are the unpinned calibration; every timed one ran on `cpu`.
        let seen = seen.into_inner();
        assert!(seen.len() > 4 + ROUNDS);
        assert!(seen[4..].iter().all(|&c| c == cpu), "{seen:?}");
        // The thread may run anywhere again afterwards.
        assert_eq!(probe::affinity_now(), allowed);
    }
}
