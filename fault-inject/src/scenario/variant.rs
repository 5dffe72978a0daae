//! What a scenario runs against: keepalloc or a negative control, the finding kinds, and
//! the signature that counts as catching each control (and each cell mutant).

use super::Scenario;

/// What is being tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// keepalloc's real provider (`GlobalProvider` over a witnessed, scribbling backend).
    Keepalloc,
    /// Negative control: the original racy provider (feature `controls`).
    Racy,
    /// Negative control: a correct once that builds the owner inside the fallible closure
    /// (feature `controls`).
    NaiveRetry,
    /// Negative control: the hand-off inside a `std::sync::Once`, which never retries
    /// (feature `controls`).
    PoisoningOnce,
    /// Negative control: every racer builds an owner, one wins a compare-and-swap
    /// (feature `controls`).
    BuildRace,
    /// Negative control: a provider that replaces (and frees) its owner when the backend
    /// runs out of memory (feature `controls`).
    DropOnOom,
}

/// Finding kinds, as they appear in result lines.
pub mod kind {
    /// More owners were constructed than one (counted by the constructor).
    pub const SECOND_OWNER: &str = "second-owner";
    /// Callers got different owners, or the library captured another one.
    pub const IDENTITY_MISMATCH: &str = "identity-mismatch";
    /// The library's owner was dropped or freed: its witness reads as the free fill.
    pub const USE_AFTER_FREE: &str = "use-after-free";
    /// The same, seen first by guard-page mode (`KEEPALLOC_SCRIBBLE=guard:1/N`): the read
    /// of the freed owner's witness faulted on its `PROT_NONE` page.
    pub const GUARD_USE_AFTER_FREE: &str = "guard-use-after-free";
    /// The library's context holds a live owner that is not the one it captured.
    pub const OWNER_REBUILT: &str = "owner-rebuilt";
    /// A caller failed without any attempt being made for it: the once will not retry.
    pub const NO_RETRY: &str = "no-retry";
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 6] = [
        Variant::Keepalloc,
        Variant::Racy,
        Variant::NaiveRetry,
        Variant::PoisoningOnce,
        Variant::BuildRace,
        Variant::DropOnOom,
    ];

    /// The variant's name (`keepalloc`, `racy`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Keepalloc => "keepalloc",
            Variant::Racy => "racy",
            Variant::NaiveRetry => "naive-retry",
            Variant::PoisoningOnce => "poisoning-once",
            Variant::BuildRace => "build-race",
            Variant::DropOnOom => "drop-on-oom",
        }
    }

    /// One line on what the variant is.
    pub const fn summary(self) -> &'static str {
        match self {
            Variant::Keepalloc => "keepalloc's GlobalProvider, the subject",
            Variant::Racy => {
                "ONNX Runtime's original provider: unsynchronised check-then-act, every \
                 caller rewrites the shared table"
            }
            Variant::NaiveRetry => {
                "a correct once whose owner is built inside the fallible closure and dropped \
                 when init fails (once_cell's get_or_try_init)"
            }
            Variant::PoisoningOnce => {
                "the hand-off inside std::sync::Once: a failure is final, a panic poisons"
            }
            Variant::BuildRace => {
                "every racer builds an owner, a compare-and-swap installs one, losers drop \
                 theirs (once_cell::race::OnceBox)"
            }
            Variant::DropOnOom => {
                "a correct once, but the owner is replaced and freed when the backend runs \
                 out of memory"
            }
        }
    }

    /// The variant with this name.
    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// True for the negative controls.
    pub const fn is_control(self) -> bool {
        !matches!(self, Variant::Keepalloc)
    }

    /// True when this build contains the variant (the controls need feature `controls`).
    pub const fn is_built(self) -> bool {
        !self.is_control() || cfg!(feature = "controls")
    }

    /// True when the variant applies to `scenario` (see the table in the module docs).
    pub const fn applies_to(self, scenario: Scenario) -> bool {
        !self.signature(scenario).is_empty() || matches!(self, Variant::Keepalloc)
    }

    /// The finding kinds that are the signature of this control's bug in `scenario`: a run
    /// catches the control only if it shows one of them. Empty for keepalloc (any finding
    /// fails it) and for pairs that do not apply.
    pub const fn signature(self, scenario: Scenario) -> &'static [&'static str] {
        use Scenario as S;
        use kind::*;
        match (self, scenario) {
            (Variant::Racy, S::ColdStart | S::RetryUnderRace | S::OwnerBuildFailure) => &[
                SECOND_OWNER,
                IDENTITY_MISMATCH,
                USE_AFTER_FREE,
                GUARD_USE_AFTER_FREE,
            ],
            (Variant::NaiveRetry, S::RetryAfterCapture | S::RetryUnderRace | S::PanicInInit) => {
                &[SECOND_OWNER, USE_AFTER_FREE, GUARD_USE_AFTER_FREE]
            }
            (
                Variant::PoisoningOnce,
                S::RetryAfterCapture | S::PanicInInit | S::OwnerBuildFailure,
            ) => &[NO_RETRY],
            (Variant::BuildRace, S::ColdStart | S::OwnerBuildFailure) => &[SECOND_OWNER],
            (Variant::DropOnOom, S::OutOfMemory) => {
                &[USE_AFTER_FREE, GUARD_USE_AFTER_FREE, SECOND_OWNER]
            }
            _ => &[],
        }
    }
}

/// A deliberately broken `KeepCell` this build was compiled with
/// (`--cfg keepalloc_cell_mutant="..."`), if any: the keepalloc variant must then FAIL.
pub const CELL_MUTANT: Option<&str> = if cfg!(keepalloc_cell_mutant = "rebuild_in_place") {
    Some("rebuild_in_place")
} else if cfg!(keepalloc_cell_mutant = "drop_on_failure") {
    Some("drop_on_failure")
} else {
    None
};

/// The scenarios where an attempt fails after the owner exists: where a cell mutant's bug
/// can show (in the others the first attempt succeeds, and both mutants behave).
const AFTER_FAILED_ATTEMPTS: &[&str] =
    &["retry-after-capture", "retry-under-race", "panic-in-init"];

/// Every cell mutant, the finding kinds that must catch it in the keepalloc variant, and
/// the scenarios where it can show.
pub const CELL_MUTANTS: [(&str, &[&str], &[&str]); 2] = [
    // Each attempt writes a new owner over the old one, counted once by the cell.
    (
        "rebuild_in_place",
        &[kind::OWNER_REBUILT],
        AFTER_FAILED_ATTEMPTS,
    ),
    // A failed attempt drops the owner in place; the next builds another in the same slot.
    // When the library uses its capture between the two it is a use after free (one thread:
    // retry-after-capture, panic-in-init); under a race another thread often rebuilds the
    // slot first, and the library then finds a stranger where its owner was.
    (
        "drop_on_failure",
        &[kind::USE_AFTER_FREE, kind::OWNER_REBUILT],
        AFTER_FAILED_ATTEMPTS,
    ),
];
