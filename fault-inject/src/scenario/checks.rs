//! The judgements the scenarios share: one owner, the same owner for every caller, the one
//! the library captured, and a library that still works through it.

use super::acquire::{Outcome, record_refused, try_acquire};
use super::{Identity, MAX_ATTEMPTS, Subject, kind};
use crate::consumer;
use crate::report::{self, Finding};
use crate::violation::{Violation, ViolationKind};
use crate::witness;

/// Records one finding per distinct allocator beyond the first among `ids`: a different
/// owner is an identity mismatch, the same owner with another serial was rebuilt in place.
pub(super) fn check_all_equal(ids: &[Identity], what: &str) {
    let Some(first) = ids.first() else { return };
    let mut distinct: Vec<Identity> = vec![*first];
    for id in ids {
        if !distinct.contains(id) {
            distinct.push(*id);
        }
    }
    let freed = u64::from_ne_bytes([witness::DROPPED_FILL; 8]);
    for other in &distinct[1..] {
        if other.owner == first.owner && other.context == first.context {
            // The same owner read with two serials: rebuilt in place, unless one of the
            // reads found the free fill (the owner was freed under that caller).
            let kind = if other.serial == freed || first.serial == freed {
                ViolationKind::UseAfterFree { found: freed }
            } else {
                ViolationKind::OwnerRebuilt {
                    captured: first.serial,
                    found: other.serial,
                }
            };
            report::record(Finding::Violation(Violation {
                kind,
                address: first.owner,
                size: 0,
            }));
        }
    }
    if distinct
        .iter()
        .any(|d| d.owner != first.owner || d.context != first.context)
    {
        report::record(Finding::IdentityMismatch(format!(
            "{what}: {} callers got {} different allocators (owners {})",
            ids.len(),
            distinct.len(),
            distinct
                .iter()
                .map(|d| format!("{:#x} #{}", d.owner, d.serial))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}

/// Exactly one owner was constructed: counted by the owner's constructor
/// ([`witness::constructed`]), not by the provider.
pub(super) fn check_one_owner() {
    if let Some(finding) = owner_count_finding(witness::constructed()) {
        report::record(finding);
    }
}

/// The finding for `constructed` owner constructions, if it is not exactly one.
fn owner_count_finding(constructed: u64) -> Option<Finding> {
    match constructed {
        1 => None,
        0 => Some(Finding::invariant(
            "no-owner",
            "no owner was constructed, yet callers succeeded",
        )),
        n => Some(Finding::invariant(
            kind::SECOND_OWNER,
            format!("{n} owners were constructed; exactly 1 must be"),
        )),
    }
}

/// The library's captured context must be `id`'s.
fn check_captured(id: &Identity) {
    match keepalloc_kernels::captured_table() {
        None => report::record(Finding::invariant(
            "not-captured",
            "the library never captured a table",
        )),
        Some(t) if t.context() as usize != id.context => {
            report::record(Finding::IdentityMismatch(format!(
                "the library captured context {:p}, but the published owner's is {:#x}",
                t.context(),
                id.context
            )))
        }
        Some(_) if witness::captured_serial() != id.serial => {
            report::record(Finding::Violation(Violation {
                kind: ViolationKind::OwnerRebuilt {
                    captured: witness::captured_serial(),
                    found: id.serial,
                },
                address: id.owner,
                size: 0,
            }))
        }
        Some(_) => {}
    }
}

fn check_library() {
    if let Err(e) = consumer::library_works() {
        report::record(Finding::invariant("library-broken", e));
    }
}

/// A 64-byte allocation through `id`'s C table: written, read back, freed.
fn check_alloc_64(id: &Identity) {
    let t = id.table;
    let (Some(allocate), Some(deallocate)) = (t.allocate(), t.deallocate()) else {
        report::record(Finding::invariant("table-incomplete", "a NULL slot"));
        return;
    };
    // The table follows the xnn_allocator contract (built by `for_allocator` or by a
    // control's canary functions); the 64 bytes are used inside the block and freed once.
    // SAFETY: the table keeps the xnn_allocator contract; the block is used in bounds and freed once.
    unsafe {
        let p = allocate(t.context(), 64).cast::<u8>();
        if p.is_null() {
            report::record(Finding::invariant("alloc-64", "allocate(64) returned NULL"));
            return;
        }
        for i in 0..64 {
            p.add(i).write(i as u8 ^ 0x5A);
        }
        let intact = (0..64).all(|i| p.add(i).read() == i as u8 ^ 0x5A);
        deallocate(t.context(), p.cast());
        if !intact {
            report::record(Finding::invariant(
                "alloc-64",
                "the block lost its contents",
            ));
        }
    }
}

/// After a scenario: the library works through the context it captured, which is the
/// published owner's, a new session gets `expected`, and a 64-byte allocation through it
/// works.
pub(super) fn check_after<S: Subject>(subject: &'static S, expected: &Identity) {
    check_library();
    check_captured(expected);
    let session = subject.session();
    let mut again = try_acquire(subject, &session);
    for _ in 1..MAX_ATTEMPTS {
        // A provider that runs the library's init on every call may hit a planned failure;
        // a session retries it, as in the race.
        if !matches!(again, Outcome::Failed(_) | Outcome::PlannedPanic) {
            break;
        }
        again = try_acquire(subject, &session);
    }
    match again {
        Outcome::Got(again) if again == *expected => {}
        Outcome::Got(again) => check_all_equal(&[*expected, again], "a new session"),
        Outcome::Failed(e) => report::record(Finding::invariant("acquire-failed", e)),
        Outcome::Refused(e) => record_refused("a new session", e),
        Outcome::PlannedPanic => report::record(Finding::invariant(
            "acquire-panicked",
            "a planned panic after the cell was published",
        )),
        Outcome::Panicked(m) => report::record(Finding::invariant("acquire-panicked", m)),
    }
    check_alloc_64(expected);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_count_names_none_one_and_many() {
        let kind = |n| owner_count_finding(n).map(|f| f.kind());
        assert_eq!(kind(0), Some("no-owner"));
        assert_eq!(kind(1), None);
        assert_eq!(kind(2), Some(kind::SECOND_OWNER));
    }
}
