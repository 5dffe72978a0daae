//! The pool's tagged words, bit by bit: the state, `(tag << 32) | (front << 16) | back` (the
//! current round's tag and its unclaimed tasks `front .. back`), and the seats,
//! `(tag << 32) | seats`. The protocol that reads and writes them is on
//! [`Shared`](super::shared::Shared).

/// The low half of [`Shared::state`](super::shared::Shared::state) when it is closed
/// (front = back = `0xffff`), before the first job and after drop: no claim can succeed.
pub(super) const CLOSED: u64 = u32::MAX as u64;

/// The low half of [`Shared::seats`](super::shared::Shared::seats) when every worker may
/// join a job.
pub(super) const ALL_SEATS: u64 = u32::MAX as u64;

/// Most tasks one `run` hands out at once (larger counts run in several rounds): the front
/// and back claim indices are 16 bits each, and `0xffff` is reserved for [`CLOSED`].
pub(super) const MAX_ROUND: usize = 0xfffe;

/// The front and back claim indices of a state.
#[inline]
pub(super) fn ends(state: u64) -> (usize, usize) {
    (((state >> 16) & 0xffff) as usize, (state & 0xffff) as usize)
}

/// `tag` in the high half of a word whose low half is `low` (a state's claim indices, or a
/// seat count).
#[inline]
pub(super) fn tagged(tag: u64, low: u64) -> u64 {
    (tag << 32) | low
}

/// A state of `tag` with claim indices `front` and `back`.
#[inline]
pub(super) fn state_of(tag: u64, front: usize, back: usize) -> u64 {
    tagged(tag, ((front as u64) << 16) | back as u64)
}

/// The tag after the one of `state`: tags count up by one per job round (and once more at
/// drop), modulo 2^32, so a worker's stale read of a job is told apart for 2^32 rounds.
#[inline]
pub(super) fn next_tag(state: u64) -> u64 {
    ((state >> 32) + 1) & CLOSED
}
