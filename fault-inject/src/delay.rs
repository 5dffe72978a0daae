//! Delays at named points, to hold a race window open.
//!
//! Code under test calls [`delay`] at a [`Point`]; a harness decides with [`set_delay`] what
//! happens there. On a 2-core machine a bare check-then-act race shows up in about 1 run in
//! 100; a busy spin or `yield_now` inside the window levels off at 60–90%, because the
//! spinning thread keeps the core the others need. A *blocking* sleep parks the thread, so
//! the other threads run into the window. Measured with 32 threads on 2 cores: a 1 µs sleep
//! (about 60–80 µs real) catches the racy control in 99% of runs on an idle machine but only
//! 95–96% with two runs in parallel; 500 µs catches it in ≥ 99.8% at load average 5, and
//! misses only when no second thread was scheduled at all within the sleep. [`Delay::Gather`]
//! closes that gap: after its sleep it keeps the window open (bounded) until a second thread
//! has reached the same point, so the race has two participants whatever the load.
//! Hence [`Delay::HOLD_RACE`] for the check-then-act window and [`Delay::HOLD`] elsewhere.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A named place where a delay can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// Between the racy control's check (`stored` is empty) and its store (the race window
    /// of the original bug).
    CheckToStore,
    /// In the library init hook, before the library is called (nothing captured yet).
    BeforeCapture,
    /// In the library init hook, after the library captured the table and before the hook
    /// returns (the window in which a failure strands a captured owner).
    AfterCapture,
    /// After the start gate opens, before a thread makes its call.
    AfterGate,
}

impl Point {
    /// Every point, in a fixed order.
    pub const ALL: [Point; 4] = [
        Point::CheckToStore,
        Point::BeforeCapture,
        Point::AfterCapture,
        Point::AfterGate,
    ];

    /// The point's name (`check-to-store`, `before-capture`, `after-capture`, `after-gate`).
    pub const fn name(self) -> &'static str {
        match self {
            Point::CheckToStore => "check-to-store",
            Point::BeforeCapture => "before-capture",
            Point::AfterCapture => "after-capture",
            Point::AfterGate => "after-gate",
        }
    }

    /// The point with this name.
    pub fn parse(name: &str) -> Option<Point> {
        Point::ALL.into_iter().find(|p| p.name() == name)
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// What happens at a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// Nothing.
    None,
    /// `std::thread::yield_now()`, this many times.
    Yield(u32),
    /// `core::hint::spin_loop()`, this many times.
    Spin(u32),
    /// `std::thread::sleep` for this many microseconds (blocks: the thread is parked).
    SleepMicros(u32),
    /// Sleeps this many microseconds, then keeps sleeping in steps of that length until a
    /// second thread has reached the same point (or [`GATHER_LIMIT`] has passed): holds a
    /// race window open until the race has two participants. Use it only where several
    /// threads are expected (a lone thread waits the whole limit).
    Gather(u32),
}

/// The longest a [`Delay::Gather`] waits for a second thread.
pub const GATHER_LIMIT: Duration = Duration::from_millis(20);

impl Delay {
    /// The delay that holds a window open: a blocking 500 µs sleep.
    pub const HOLD: Delay = Delay::SleepMicros(500);

    /// The delay that holds a check-then-act race window open: 500 µs, and until a second
    /// thread is in the window.
    pub const HOLD_RACE: Delay = Delay::Gather(500);

    /// Parses `none`, `yield:N`, `spin:N`, `sleep:Nus` or `gather:Nus`.
    pub fn parse(spec: &str) -> Option<Delay> {
        if spec == "none" {
            return Some(Delay::None);
        }
        let (kind, n) = spec.split_once(':')?;
        match kind {
            "yield" => n.parse().ok().map(Delay::Yield),
            "spin" => n.parse().ok().map(Delay::Spin),
            "sleep" => n
                .strip_suffix("us")
                .unwrap_or(n)
                .parse()
                .ok()
                .map(Delay::SleepMicros),
            "gather" => n
                .strip_suffix("us")
                .unwrap_or(n)
                .parse()
                .ok()
                .map(Delay::Gather),
            _ => None,
        }
    }

    const fn encode(self) -> u64 {
        match self {
            Delay::None => 0,
            Delay::Yield(n) => 1 << 32 | n as u64,
            Delay::Spin(n) => 2 << 32 | n as u64,
            Delay::SleepMicros(n) => 3 << 32 | n as u64,
            Delay::Gather(n) => 4 << 32 | n as u64,
        }
    }

    const fn decode(bits: u64) -> Delay {
        let n = bits as u32;
        match bits >> 32 {
            1 => Delay::Yield(n),
            2 => Delay::Spin(n),
            3 => Delay::SleepMicros(n),
            4 => Delay::Gather(n),
            _ => Delay::None,
        }
    }
}

impl core::fmt::Display for Delay {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Delay::None => write!(f, "none"),
            Delay::Yield(n) => write!(f, "yield:{n}"),
            Delay::Spin(n) => write!(f, "spin:{n}"),
            Delay::SleepMicros(n) => write!(f, "sleep:{n}us"),
            Delay::Gather(n) => write!(f, "gather:{n}us"),
        }
    }
}

/// How a run treats the race windows: the named delay settings of the campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// Held open: [`Delay::HOLD_RACE`] (a sleep, then wait for a second thread) in the
    /// check-then-act window, [`Delay::HOLD`] after the library captured the table. The race
    /// has two participants by construction: the gate the controls must pass.
    Held,
    /// Nudged: one `yield_now` at the same points, no sleep and no gathering. Shows how much
    /// a slight perturbation exposes, between the two.
    Yield,
    /// Bare: no delay anywhere; what a 2-core machine exposes on its own.
    Bare,
}

impl Window {
    /// Every window, from the strongest hold to none.
    pub const ALL: [Window; 3] = [Window::Held, Window::Yield, Window::Bare];

    /// The window's name (`held`, `yield`, `bare`).
    pub const fn name(self) -> &'static str {
        match self {
            Window::Held => "held",
            Window::Yield => "yield",
            Window::Bare => "bare",
        }
    }

    /// One line on what the window does.
    pub const fn summary(self) -> &'static str {
        match self {
            Window::Held => {
                "race windows held open: gather:500us at check-to-store (until a second \
                 thread is in the window), sleep:500us after capture"
            }
            Window::Yield => "one yield_now at check-to-store and after capture",
            Window::Bare => "no delay at any point",
        }
    }

    /// The window with this name.
    pub fn parse(name: &str) -> Option<Window> {
        Window::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Sets the delays of this window (process-wide).
    pub fn install(self) {
        let (race, capture) = match self {
            Window::Held => (Delay::HOLD_RACE, Delay::HOLD),
            Window::Yield => (Delay::Yield(1), Delay::Yield(1)),
            Window::Bare => (Delay::None, Delay::None),
        };
        set_delay(Point::CheckToStore, race);
        set_delay(Point::AfterCapture, capture);
    }
}

static DELAYS: [AtomicU64; Point::ALL.len()] = [const { AtomicU64::new(0) }; Point::ALL.len()];
static ARRIVALS: [AtomicU64; Point::ALL.len()] = [const { AtomicU64::new(0) }; Point::ALL.len()];

/// Sets what happens at `point` from now on (process-wide).
pub fn set_delay(point: Point, delay: Delay) {
    DELAYS[point.index()].store(delay.encode(), Relaxed);
}

/// Sets every point to `delay`.
pub fn set_all(delay: Delay) {
    for p in Point::ALL {
        set_delay(p, delay);
    }
}

/// What happens at `point`.
pub fn delay_at(point: Point) -> Delay {
    Delay::decode(DELAYS[point.index()].load(Relaxed))
}

/// Runs the delay set for `point` (one relaxed load when none is set).
#[inline]
pub fn delay(point: Point) {
    match delay_at(point) {
        Delay::None => {}
        Delay::Yield(n) => (0..n).for_each(|_| std::thread::yield_now()),
        Delay::Spin(n) => (0..n).for_each(|_| core::hint::spin_loop()),
        Delay::SleepMicros(n) => std::thread::sleep(Duration::from_micros(n.into())),
        Delay::Gather(n) => {
            let arrivals = &ARRIVALS[point.index()];
            let first = arrivals.fetch_add(1, Relaxed) == 0;
            let step = Duration::from_micros(n.max(1).into());
            let start = Instant::now();
            std::thread::sleep(step);
            // Only the first thread in can be alone in the window; it waits for company.
            while first && arrivals.load(Relaxed) < 2 && start.elapsed() < GATHER_LIMIT {
                std::thread::sleep(step);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips() {
        for d in [
            Delay::None,
            Delay::Yield(3),
            Delay::Spin(1000),
            Delay::SleepMicros(1),
            Delay::Gather(500),
        ] {
            assert_eq!(Delay::parse(&d.to_string()), Some(d));
            assert_eq!(Delay::decode(d.encode()), d);
        }
        assert_eq!(Delay::parse("sleep:5"), Some(Delay::SleepMicros(5)));
        assert_eq!(Delay::parse("nap:5"), None);
        assert_eq!(Delay::parse("gather:7us"), Some(Delay::Gather(7)));
        for p in Point::ALL {
            assert_eq!(Point::parse(p.name()), Some(p));
        }
    }
}
