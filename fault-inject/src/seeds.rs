//! Seeded randomness for the failure plans: ChaCha8 (`rand_chacha`), whose output for a
//! given seed is fixed across versions and platforms, so a printed seed replays exactly.
//!
//! Every decision draws from its own stream, derived from the plan's seed and the index of
//! what it decides (the attempt number of an init plan, the call number of an allocation
//! plan). A decision therefore does not depend on which thread asked first or how many
//! draws other threads made: attempt 3 of seed 42 fails the same way in every replay.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator of decision `index` under `seed`: ChaCha8 keyed by `seed`, on stream
/// `index`.
pub fn stream(seed: u64, index: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    rng
}

/// The seed of sub-plan `index` of a plan seeded with `seed` (e.g. the probability plans of
/// one out-of-memory run).
pub fn derive(seed: u64, index: u64) -> u64 {
    use rand::RngCore;
    stream(seed, index).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_are_fixed_and_distinct() {
        let a: Vec<u64> = (0..4).map(|i| stream(42, i).random()).collect();
        let b: Vec<u64> = (0..4).map(|i| stream(42, i).random()).collect();
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{a:?}");
        assert_ne!(stream(43, 0).random::<u64>(), a[0]);
        assert_ne!(derive(42, 0), derive(42, 1));
    }

    /// ChaCha8's output for a seed is part of the replay contract: a new rand_chacha that
    /// changed it would silently change every printed seed's meaning.
    #[test]
    fn output_is_stable() {
        assert_eq!(stream(0, 0).random::<u64>(), stream(0, 0).random::<u64>());
        let first = derive(1, 0);
        assert_eq!(
            first, STABLE_DERIVE_1_0,
            "ChaCha8's output changed: {first:#x}"
        );
    }

    const STABLE_DERIVE_1_0: u64 = 0x6709_4cea_8ca4_0db1;
}
