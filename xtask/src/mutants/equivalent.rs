//! The documented equivalent mutants: changes no test can catch, each with the reason.

/// Mutants that no test can catch because they do not change what the code does, each with
/// the reason. Matched on the mutant's name without its line and column (`file: description`).
///
/// `<impl Drop for Attempt<'_, T>>::drop with ()` (a failed attempt leaves the cell
/// RUNNING, so the next caller waits for ever) hangs stage 1 and is caught by loom as a
/// deadlock, so it is not listed. (Most of the unviable mutants are replacements that do not
/// type-check, such as `Ok(NonNull::new())` or `Box::leak(Box::new(Owner::new()))`.)
///
/// The pool's entries marked *performance only* change when a thread
/// spins, sleeps or is notified, never which tasks run or what a run returns, so a test
/// could only tell them apart by a timing threshold, which the project's tests do not have.
/// The ones that would make an idle pool spin for ever are caught, by the kernel's view of
/// the worker thread (`an_idle_worker_goes_to_sleep` in kernels/tests/pool.rs).
pub(super) const EQUIVALENT: &[(&str, &str)] = &[
    (
        "allocators/src/table.rs: replace | with ^ in tag",
        "the cookie's low byte is always 0 (`& !0xff`) and the alignment's log2 is < 64, so \
         `cookie | log2` and `cookie ^ log2` are the same number for every input",
    ),
    (
        "kernels/src/pool/state.rs: replace | with ^ in state_of",
        "`front << 16` and `back` are disjoint bit fields (both are at most 0xffff), so `|` \
         and `^` give the same state",
    ),
    (
        "kernels/src/pool/state.rs: replace | with ^ in tagged",
        "`tag << 32` and the low half (claim indices, a seat count, CLOSED: all below 2^32) \
         are disjoint bit fields, so `|` and `^` give the same word",
    ),
    (
        "kernels/src/pool/shared.rs: replace > with >= in Shared::publish",
        "performance only: with no sleeper the notify_all under the lock wakes nobody, so \
         notifying always costs a lock and changes nothing else",
    ),
    (
        "kernels/src/pool/work.rs: replace && with || in Shared::work",
        "performance only: a thread whose count is not the last notifies the caller's condvar \
         too; a notified caller re-checks done == tasks and waits again",
    ),
    (
        "kernels/src/pool/wait.rs: replace && with || in wait_until",
        "performance only: the spin gives up after 64 pauses instead of about 1 ms, and the \
         blocking wait that follows is woken by the same protocol",
    ),
    (
        "kernels/src/pool/wait.rs: replace > with < in wait_until",
        "performance only: the spin gives up at its first clock check (64 pauses) instead of \
         after 1 ms; the blocking wait that follows is woken by the same protocol",
    ),
    (
        "kernels/src/pool/wait.rs: replace > with >= in wait_until",
        "the spin ends when the elapsed time reaches 1 ms instead of passing it: the two differ \
         only at an elapsed time of exactly 1 ms, by one clock check",
    ),
];

#[cfg(test)]
mod tests {
    use super::super::mutant::strip_line_col;
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn equivalents_are_unique_and_explained() {
        let mut seen = BTreeSet::new();
        for (key, reason) in EQUIVALENT {
            assert!(seen.insert(*key), "listed twice: {key}");
            assert!(reason.len() > 20, "explain why {key} is equivalent");
            assert_eq!(strip_line_col(key), *key, "list {key} without line:col");
        }
    }
}
