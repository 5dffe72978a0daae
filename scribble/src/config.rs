//! How a [`Scribble`](crate::Scribble) fills, quarantines, records stacks and samples blocks
//! into guard pages, and the `KEEPALLOC_SCRIBBLE` setting language that chooses it at run time.

use core::fmt;

use crate::violation::Policy;

/// The most frames a recorded stack keeps ([`ScribbleConfig::stack_depth`] is capped here).
pub const MAX_STACK_DEPTH: usize = 64;

/// Which stacks a [`Scribble`](crate::Scribble) records per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackMode {
    /// No stacks (the fastest; reports say what and where, not who).
    None,
    /// The stack of each free only (enough to tell who freed a block that is then used).
    Free,
    /// The stacks of each allocation and each free, as ASan and GWP-ASan print them.
    Both,
}

impl StackMode {
    /// `none`, `free` or `both`.
    pub const fn name(self) -> &'static str {
        match self {
            StackMode::None => "none",
            StackMode::Free => "free",
            StackMode::Both => "both",
        }
    }
}

/// Where a guarded block sits on its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardAlign {
    /// Against the guard page after it (GWP-ASan's default): an overflow past the slack
    /// faults at the first byte. The block keeps its alignment, so between its end and the
    /// guard page there are `slack` to `slack + align - 1` readable bytes.
    Right,
    /// At the start of its first page, against the guard page before it: an underflow faults
    /// at the first byte; an overflow is found when the block is freed (the tail is filled
    /// and checked) or when it runs off the last page.
    Left,
}

/// Guard-page mode (GWP-ASan's design): sampled blocks each sit alone on their own pages
/// between two `PROT_NONE` guard pages, and become `PROT_NONE` themselves when freed, so
/// any read or write after free, and any overflow past the slack, faults at the faulting
/// instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// One allocation in `sample_every` is guarded (1 = every one); 0 turns the mode off.
    /// The choice is deterministic, per allocator: its allocations number 0, N, 2N, … (so a
    /// rerun guards the same blocks, and the first block of every allocator is guarded).
    pub sample_every: u32,
    /// The most guarded blocks live at once per allocator; sampled allocations beyond it
    /// take the ordinary scribble path.
    pub max_live: usize,
    /// The most freed guarded blocks kept `PROT_NONE` per allocator (their pages hold no
    /// memory, only address space); the oldest is unmapped beyond it.
    pub quarantine: usize,
    /// Right- or left-aligned.
    pub align: GuardAlign,
    /// Readable bytes always left between a right-aligned block's end and the guard page.
    /// 16 by default: XNNPACK reads (never writes) up to `XNN_EXTRA_BYTES` = 16 bytes past
    /// the end of its arrays, and such reads must neither fault nor report. The slack is
    /// filled and checked at free, so a *write* into it is still reported (at free).
    pub slack: usize,
}

impl GuardConfig {
    /// Guard-page mode off (the limits are those used when it is turned on).
    pub const OFF: GuardConfig = GuardConfig {
        sample_every: 0,
        max_live: 1024,
        quarantine: 1024,
        align: GuardAlign::Right,
        slack: XNN_EXTRA_BYTES,
    };

    /// True when some allocations are guarded.
    pub const fn enabled(&self) -> bool {
        self.sample_every != 0
    }
}

/// XNNPACK's `XNN_EXTRA_BYTES`: how far past an array's end it may read.
pub const XNN_EXTRA_BYTES: usize = 16;

/// How a [`Scribble`](crate::Scribble) fills, guards, quarantines and records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScribbleConfig {
    /// Written over every new block (macOS MallocScribble: 0xAA).
    pub alloc_fill: u8,
    /// Written over every freed block, and checked when it leaves quarantine (0x55).
    pub free_fill: u8,
    /// Written into the red zones and checked when the block is freed and when it leaves
    /// quarantine.
    pub red_zone_fill: u8,
    /// Bytes of red zone before and after each block (raised to
    /// [`MIN_RED_ZONE`](crate::MIN_RED_ZONE)); the one before is rounded up to the block's
    /// alignment.
    pub red_zone: usize,
    /// The most bytes (whole blocks, red zones included) kept in quarantine.
    pub quarantine_bytes: usize,
    /// The most blocks kept in quarantine.
    pub quarantine_count: usize,
    /// What to do with a violation found by a check (a guard-page fault always ends the
    /// process: the faulting access cannot be completed).
    pub policy: Policy,
    /// Which stacks are recorded per block.
    pub stacks: StackMode,
    /// The most frames kept per stack (1 to [`MAX_STACK_DEPTH`]).
    pub stack_depth: usize,
    /// Guard-page sampling.
    pub guard: GuardConfig,
    /// Reports print keepalloc's own frames (the table's entry, the wrappers, Scribble) too;
    /// by default each stack starts at the first frame outside keepalloc.
    pub own_frames: bool,
}

impl ScribbleConfig {
    /// MallocScribble's fills (0xAA new, 0x55 freed), 0xFB red zones of 32 bytes, a
    /// quarantine of 64 MiB or 4096 blocks, [`Policy::Abort`], no stacks (depth 24 when
    /// turned on), guard pages off.
    pub const DEFAULT: ScribbleConfig = ScribbleConfig {
        alloc_fill: 0xAA,
        free_fill: 0x55,
        red_zone_fill: 0xFB,
        red_zone: 32,
        quarantine_bytes: 64 << 20,
        quarantine_count: 4096,
        policy: Policy::Abort,
        stacks: StackMode::None,
        stack_depth: 24,
        guard: GuardConfig::OFF,
        own_frames: false,
    };

    /// The same configuration with another policy.
    pub const fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The same configuration with another quarantine bound.
    pub const fn with_quarantine(mut self, bytes: usize, count: usize) -> Self {
        self.quarantine_bytes = bytes;
        self.quarantine_count = count;
        self
    }

    /// The same configuration recording `stacks`.
    pub const fn with_stacks(mut self, stacks: StackMode) -> Self {
        self.stacks = stacks;
        self
    }

    /// The same configuration guarding one allocation in `sample_every` (0: off).
    pub const fn with_guard(mut self, sample_every: u32) -> Self {
        self.guard.sample_every = sample_every;
        self
    }

    /// [`DEFAULT`](Self::DEFAULT) with the settings of `spec` applied: what
    /// `KEEPALLOC_SCRIBBLE` means.
    ///
    /// ```
    /// use keepalloc_scribble::{ScribbleConfig, StackMode};
    /// let c = ScribbleConfig::from_env_spec("guard:1/64,stacks:both,quarantine:8MiB").unwrap();
    /// assert_eq!((c.guard.sample_every, c.stacks, c.quarantine_bytes), (64, StackMode::Both, 8 << 20));
    /// assert!(ScribbleConfig::from_env_spec("guard:1/0").is_err());
    /// ```
    pub fn from_env_spec(spec: &str) -> Result<Self, ConfigError> {
        Self::DEFAULT.apply_spec(spec)
    }

    /// This configuration with the settings of `spec` applied (settings not named keep their
    /// value). `spec` is a comma-separated list of `key:value` items; an empty `spec` changes
    /// nothing. Keys:
    ///
    /// | key | value | meaning |
    /// | --- | --- | --- |
    /// | `guard` | `1/N` (N ≥ 1) or `off` | guard one allocation in N |
    /// | `guard-max` | count ≥ 1 | most guarded blocks live at once |
    /// | `guard-quarantine` | count | most freed guarded blocks kept `PROT_NONE` |
    /// | `guard-align` | `right` or `left` | where a guarded block sits on its pages |
    /// | `guard-slack` | bytes | readable slack after a right-aligned block (default 16) |
    /// | `stacks` | `none`, `free` or `both` | stacks recorded per block |
    /// | `depth` | 1 to 64 | frames per stack |
    /// | `quarantine` | size (`8MiB`, `512KiB`, `1GiB`, `4096`) | quarantine bound in bytes |
    /// | `quarantine-blocks` | count | quarantine bound in blocks |
    /// | `red-zone` | bytes | red zone size (raised to 16) |
    /// | `frames` | `caller` or `all` | reports start at the caller's frame, or show keepalloc's too |
    ///
    /// Anything else, a repeated key, an empty item or a bad value is a [`ConfigError`].
    pub fn apply_spec(mut self, spec: &str) -> Result<Self, ConfigError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(self);
        }
        let mut seen: Vec<&str> = Vec::new();
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(ConfigError::EmptyItem);
            }
            let Some((key, value)) = item.split_once(':') else {
                return Err(ConfigError::MissingValue { key: item.into() });
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(ConfigError::Repeated { key: key.into() });
            }
            let bad = |expected: &'static str| ConfigError::BadValue {
                key: key.into(),
                value: value.into(),
                expected,
            };
            match key {
                "guard" => {
                    self.guard.sample_every = if value == "off" {
                        0
                    } else {
                        value
                            .strip_prefix("1/")
                            .and_then(|n| n.parse::<u32>().ok())
                            .filter(|&n| n >= 1)
                            .ok_or_else(|| bad("1/N with N a whole number from 1, or off"))?
                    }
                }
                "guard-max" => {
                    self.guard.max_live = parse_count(value)
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| bad("a whole number from 1"))?
                }
                "guard-quarantine" => {
                    self.guard.quarantine =
                        parse_count(value).ok_or_else(|| bad("a whole number"))?
                }
                "guard-align" => {
                    self.guard.align = match value {
                        "right" => GuardAlign::Right,
                        "left" => GuardAlign::Left,
                        _ => return Err(bad("right or left")),
                    }
                }
                "guard-slack" => {
                    self.guard.slack = parse_count(value)
                        .filter(|&n| n <= 4096)
                        .ok_or_else(|| bad("a number of bytes from 0 to 4096"))?
                }
                "stacks" => {
                    self.stacks = match value {
                        "none" => StackMode::None,
                        "free" => StackMode::Free,
                        "both" => StackMode::Both,
                        _ => return Err(bad("none, free or both")),
                    }
                }
                "frames" => {
                    self.own_frames = match value {
                        "caller" => false,
                        "all" => true,
                        _ => return Err(bad("caller or all")),
                    }
                }
                "depth" => {
                    self.stack_depth = parse_count(value)
                        .filter(|n| (1..=MAX_STACK_DEPTH).contains(n))
                        .ok_or_else(|| bad("a whole number from 1 to 64"))?
                }
                "quarantine" => {
                    self.quarantine_bytes = parse_size(value)
                        .ok_or_else(|| bad("a size such as 8MiB, 512KiB, 1GiB or 4096"))?
                }
                "quarantine-blocks" => {
                    self.quarantine_count =
                        parse_count(value).ok_or_else(|| bad("a whole number"))?
                }
                "red-zone" => {
                    self.red_zone = parse_count(value)
                        .filter(|&n| n <= 1 << 20)
                        .ok_or_else(|| bad("a number of bytes up to 1MiB"))?
                }
                _ => return Err(ConfigError::UnknownKey { key: key.into() }),
            }
            seen.push(key);
        }
        Ok(self)
    }
}

impl Default for ScribbleConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The keys [`ScribbleConfig::apply_spec`] understands.
pub const SPEC_KEYS: &str = "guard, guard-max, guard-quarantine, guard-align, guard-slack, \
                             stacks, depth, quarantine, quarantine-blocks, red-zone";

fn parse_count(value: &str) -> Option<usize> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

fn parse_size(value: &str) -> Option<usize> {
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = value.split_at(digits);
    let number = parse_count(number)?;
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return None,
    };
    number.checked_mul(1usize << shift)
}

/// A `KEEPALLOC_SCRIBBLE` setting that could not be understood. Nothing is applied when a
/// spec has an error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Two commas in a row, or a trailing comma.
    EmptyItem,
    /// An item without `:value`.
    MissingValue {
        /// The item.
        key: String,
    },
    /// A key that is not one of [`SPEC_KEYS`].
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A key given twice.
    Repeated {
        /// The key.
        key: String,
    },
    /// A value the key does not accept.
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What the key accepts.
        expected: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::EmptyItem => write!(f, "empty setting (two commas in a row?)"),
            ConfigError::MissingValue { key } => {
                write!(f, "setting \"{key}\" has no value (write key:value)")
            }
            ConfigError::UnknownKey { key } => {
                write!(f, "unknown setting \"{key}\" (known: {SPEC_KEYS})")
            }
            ConfigError::Repeated { key } => write!(f, "setting \"{key}\" is given twice"),
            ConfigError::BadValue {
                key,
                value,
                expected,
            } => write!(
                f,
                "bad value \"{value}\" for \"{key}\": expected {expected}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses() {
        let c = ScribbleConfig::from_env_spec("guard:1/64,stacks:both,quarantine:8MiB").unwrap();
        assert_eq!(c.guard.sample_every, 64);
        assert_eq!(c.stacks, StackMode::Both);
        assert_eq!(c.quarantine_bytes, 8 << 20);
        assert_eq!(c.policy, Policy::Abort);
    }

    #[test]
    fn every_key_parses() {
        let c = ScribbleConfig::from_env_spec(
            " guard:1/1 , guard-max:3,guard-quarantine:0,guard-align:left,guard-slack:0,\
             stacks:free,depth:64,quarantine:4096,quarantine-blocks:7,red-zone:64",
        )
        .unwrap();
        assert_eq!(c.guard.sample_every, 1);
        assert_eq!(c.guard.max_live, 3);
        assert_eq!(c.guard.quarantine, 0);
        assert_eq!(c.guard.align, GuardAlign::Left);
        assert_eq!(c.guard.slack, 0);
        assert_eq!(c.stacks, StackMode::Free);
        assert_eq!(c.stack_depth, 64);
        assert_eq!(c.quarantine_bytes, 4096);
        assert_eq!(c.quarantine_count, 7);
        assert_eq!(c.red_zone, 64);
        assert_eq!(
            ScribbleConfig::from_env_spec("").unwrap(),
            ScribbleConfig::DEFAULT
        );
        assert_eq!(
            ScribbleConfig::from_env_spec("guard:off")
                .unwrap()
                .guard
                .sample_every,
            0
        );
        assert_eq!(
            ScribbleConfig::from_env_spec("quarantine:1GiB")
                .unwrap()
                .quarantine_bytes,
            1 << 30
        );
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        let bad = |s: &str| ScribbleConfig::from_env_spec(s).unwrap_err();
        assert!(matches!(bad("guard:1/0"), ConfigError::BadValue { .. }));
        assert!(matches!(bad("guard:64"), ConfigError::BadValue { .. }));
        assert!(matches!(bad("guard:1/x"), ConfigError::BadValue { .. }));
        assert!(matches!(bad("stacks:all"), ConfigError::BadValue { .. }));
        assert!(matches!(bad("depth:0"), ConfigError::BadValue { .. }));
        assert!(matches!(bad("depth:65"), ConfigError::BadValue { .. }));
        assert!(matches!(
            bad("quarantine:8MB"),
            ConfigError::BadValue { .. }
        ));
        assert!(matches!(bad("quarantine:-1"), ConfigError::BadValue { .. }));
        assert!(matches!(
            bad("quarantine:99999999999999999999G"),
            ConfigError::BadValue { .. }
        ));
        assert!(matches!(bad("gaurd:1/2"), ConfigError::UnknownKey { .. }));
        assert!(matches!(bad("guard"), ConfigError::MissingValue { .. }));
        assert!(matches!(bad("guard:1/2,"), ConfigError::EmptyItem));
        assert!(matches!(
            bad("stacks:free,stacks:both"),
            ConfigError::Repeated { .. }
        ));
        assert_eq!(
            bad("stacks:all").to_string(),
            "bad value \"all\" for \"stacks\": expected none, free or both"
        );
    }
}
