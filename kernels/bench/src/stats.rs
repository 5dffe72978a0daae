//! Paired statistics: the median of the rounds' own ratios, the rounds a slow core spoiled
//! left out, and the verdict from the ratios' quartiles.

/// Fewest steady pairs of rounds a ratio is taken over; with fewer, every round is used and
/// the ratio is marked unsteady.
pub(crate) const MIN_STEADY: usize = 3;

/// The median of `xs` (the upper middle of an even count); NaN for none.
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One runner's figures: the median GFLOPS of all its samples, and each round's own median.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// The median of every sample.
    pub median: f64,
    /// Per round, the median of that round's samples.
    pub rounds: Vec<f64>,
    /// Per round, the slowest core's GFLOPS in the probes just before and after the batch.
    pub floors: Vec<f64>,
    /// Per round, whether the process was idle before the batch ([`crate::probe::quiesce`]; always
    /// true where the runners take no pause).
    pub idle: Vec<bool>,
    /// Per round, how long the pause before the batch lasted, in ms (0 without one).
    pub pause_ms: Vec<f64>,
    /// Per round, whether the batch was steady: its floor at least [`crate::timing::STEADY`] of the best
    /// one-core probe of the run, and the process idle before it.
    pub steady: Vec<bool>,
}

/// A ratio paired by round, and how many rounds it was taken over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// The median of the rounds' own ratios.
    pub ratio: f64,
    /// The lower quartile of the rounds' own ratios (over the same rounds): with `q3`, the
    /// spread the median comes from.
    pub q1: f64,
    /// The upper quartile of the rounds' own ratios.
    pub q3: f64,
    /// The rounds in which both batches were steady.
    pub steady_rounds: usize,
    /// The rounds the ratio was taken over: the steady ones when there are at least
    /// [`MIN_STEADY`], else all.
    pub used: usize,
}

impl Paired {
    /// Taken over steady rounds only.
    pub fn steady(&self) -> bool {
        self.steady_rounds >= MIN_STEADY
    }

    /// `1.23x`, or `1.23x~` when it is not [`steady`](Self::steady).
    pub fn show(&self) -> String {
        format!("{:.2}x{}", self.ratio, if self.steady() { "" } else { "~" })
    }

    /// Ahead when even the lower quartile of the rounds' ratios is above 1, behind when even
    /// the upper one is below 1, else within the spread of the rounds: a tie that this run
    /// cannot decide.
    pub fn verdict(&self) -> Verdict {
        if self.q1 > 1.0 {
            Verdict::Ahead
        } else if self.q3 < 1.0 {
            Verdict::Behind
        } else {
            Verdict::Within
        }
    }
}

/// What a [`Paired`] ratio says about keepalloc against the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The lower quartile is above 1.
    Ahead,
    /// The quartiles are on both sides of 1 (or on it).
    Within,
    /// The upper quartile is below 1.
    Behind,
}

/// One line per verdict for `ratios` (`(shape, against, ratio)`): how many cells are ahead,
/// and each cell within the spread or behind with its median and quartiles.
pub(crate) fn verdict_lines(ratios: &[(String, String, Paired)]) -> Vec<String> {
    let ahead = ratios
        .iter()
        .filter(|r| r.2.verdict() == Verdict::Ahead)
        .count();
    let mut lines = vec![format!(
        "ahead in {ahead} of {} cells (the lower quartile of the rounds' own ratios above 1)",
        ratios.len()
    )];
    for (verdict, what) in [
        (
            Verdict::Within,
            "within the rounds' spread (quartiles around 1)",
        ),
        (Verdict::Behind, "behind (the upper quartile below 1)"),
    ] {
        let cells: Vec<String> = ratios
            .iter()
            .filter(|r| r.2.verdict() == verdict)
            .map(|(shape, against, p)| {
                format!(
                    "{shape} vs {against} {} [{:.3}-{:.3}]",
                    p.show(),
                    p.q1,
                    p.q3
                )
            })
            .collect();
        if !cells.is_empty() {
            lines.push(format!("{what}: {}", cells.join(", ")));
        }
    }
    lines
}

/// `a / b` as the median of the rounds' own ratios, `a.rounds[r] / b.rounds[r]`. The runners
/// of a round run back to back, so a slow phase of this shared machine slows both sides of a
/// round's ratio and divides out; the ratio of the two overall medians does not pair them (a
/// slow phase over some rounds can drag one median and not the other).
///
/// Only rounds in which both batches were steady count, when there are at least
/// [`MIN_STEADY`] of them: on this VM one core can run at half speed while the other runs at
/// full, so a one-thread batch on the slow core against a two-thread batch on both reads
/// above the machine's own two-core scaling. The probes that decide it are the witness, not
/// the timings being compared.
pub fn paired_ratio(a: &Measured, b: &Measured) -> Option<Paired> {
    if a.rounds.is_empty() || a.rounds.len() != b.rounds.len() {
        return None;
    }
    let pairs = || a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y);
    let steady: Vec<f64> = pairs()
        .zip(a.steady.iter().zip(&b.steady))
        .filter(|(_, (sa, sb))| **sa && **sb)
        .map(|(r, _)| r)
        .collect();
    let used: Vec<f64> = if steady.len() >= MIN_STEADY {
        steady.clone()
    } else {
        pairs().collect()
    };
    let mut sorted = used.clone();
    sorted.sort_by(f64::total_cmp);
    Some(Paired {
        ratio: median(&used),
        q1: sorted[(sorted.len() - 1) / 4],
        q3: sorted[(3 * (sorted.len() - 1)).div_ceil(4)],
        steady_rounds: steady.len(),
        used: used.len(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn paired_ratio_divides_out_a_slow_phase() {
        // The machine slows to half speed from round 4 on, both cores alike (every batch
        // still steady by the rule: no witness flagged it); keepalloc is 10% ahead in every
        // round. The medians fall on different sides of the slow phase (10 against 4.5), so
        // their ratio reads 2.22x; the rounds' own ratios all read 1.11x.
        let ours = measured(&[10.0, 10.0, 10.0, 10.0, 5.0, 5.0, 5.0], &[true; 7]);
        let peer = measured(&[9.0, 9.0, 9.0, 4.5, 4.5, 4.5, 4.5], &[true; 7]);
        let r = paired_ratio(&ours, &peer).unwrap();
        assert!((r.ratio - 10.0 / 9.0).abs() < 1e-12, "{r:?}");
        assert!((ours.median / peer.median - 10.0 / 9.0).abs() > 1.0);
        assert_eq!((r.steady_rounds, r.used, r.steady()), (7, 7, true));
        // Unpaired inputs have no paired ratio.
        assert_eq!(paired_ratio(&ours, &Measured::default()), None);
    }

    #[test]
    fn the_verdict_comes_from_the_quartiles_of_the_rounds_ratios() {
        use super::{Verdict, verdict_lines};
        let ours = measured(&[10.0; 5], &[true; 5]);
        // Ratios 1.11, 1.00, 0.95, 0.91, 1.25: median 1.00, quartiles 0.95 and 1.11.
        let tie = measured(&[9.0, 10.0, 10.5, 11.0, 8.0], &[true; 5]);
        let r = paired_ratio(&ours, &tie).unwrap();
        assert!((r.ratio - 1.0).abs() < 1e-12, "{r:?}");
        assert!((r.q1 - 10.0 / 10.5).abs() < 1e-12 && (r.q3 - 10.0 / 9.0).abs() < 1e-12);
        assert_eq!(r.verdict(), Verdict::Within);
        // A median above 1 is not enough: ahead needs the lower quartile above 1.
        let mostly = measured(&[9.0, 9.0, 9.0, 11.0, 11.0], &[true; 5]);
        let m = paired_ratio(&ours, &mostly).unwrap();
        assert!(m.ratio > 1.0);
        assert_eq!(m.verdict(), Verdict::Within);
        let ahead = paired_ratio(&ours, &measured(&[9.5, 9.0, 9.8, 9.9, 8.0], &[true; 5]));
        assert_eq!(ahead.unwrap().verdict(), Verdict::Ahead);
        let behind = paired_ratio(
            &ours,
            &measured(&[10.5, 11.0, 10.2, 10.1, 12.0], &[true; 5]),
        );
        assert_eq!(behind.unwrap().verdict(), Verdict::Behind);
        let lines = verdict_lines(&[
            ("1x2x3".into(), "X".into(), r),
            ("4x5x6".into(), "Y".into(), ahead.unwrap()),
            ("7x8x9".into(), "Z".into(), behind.unwrap()),
        ]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("ahead in 1 of 3 cells"), "{lines:?}");
        assert!(
            lines[1].contains("1x2x3 vs X 1.00x [0.952-1.111]"),
            "{lines:?}"
        );
        assert!(lines[2].starts_with("behind") && lines[2].contains("7x8x9 vs Z"));
    }

    /// Rounds with GFLOPS `rounds`, each batch steady or not as `steady` says (also used by
    /// the `--threads` tests).
    pub(crate) fn measured(rounds: &[f64], steady: &[bool]) -> Measured {
        Measured {
            median: median(rounds),
            rounds: rounds.to_vec(),
            floors: steady
                .iter()
                .map(|&s| if s { 150.0 } else { 70.0 })
                .collect(),
            idle: vec![true; rounds.len()],
            pause_ms: vec![0.0; rounds.len()],
            steady: steady.to_vec(),
        }
    }

    #[test]
    fn paired_ratio_leaves_out_rounds_a_slow_core_spoiled() {
        // Two threads against one: 2.0x while both cores run at full speed. In four of the
        // seven rounds the one-thread batch ran on a core at half speed (its witness says
        // so) and read 4.0x, so the median of all seven rounds would be 4.0x. Only the
        // steady rounds count.
        let two = measured(&[200.0; 7], &[true; 7]);
        let one = measured(
            &[100.0, 50.0, 100.0, 50.0, 50.0, 100.0, 50.0],
            &[true, false, true, false, false, true, false],
        );
        let r = paired_ratio(&two, &one).unwrap();
        assert_eq!(
            (r.ratio, r.steady_rounds, r.used, r.steady()),
            (2.0, 3, 3, true)
        );
        // All seven rounds would read 4.0x.
        assert_eq!(median(&[2.0, 4.0, 2.0, 4.0, 4.0, 2.0, 4.0]), 4.0);
        // Fewer than MIN_STEADY steady rounds: every round is used, and the ratio says so.
        let one = measured(
            &[100.0, 50.0, 100.0, 50.0, 50.0, 50.0, 50.0],
            &[true, false, true, false, false, false, false],
        );
        let r = paired_ratio(&two, &one).unwrap();
        assert_eq!(
            (r.ratio, r.steady_rounds, r.used, r.steady()),
            (4.0, 2, 7, false)
        );
        assert_eq!(r.show(), "4.00x~");
    }
}
