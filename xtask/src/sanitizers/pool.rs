//! The kernels pool's witnesses, shared by Miri and ThreadSanitizer: the tests each pool
//! mutant must fail and how such a mutant is built.

/// The kernels test file whose `what_tasks_write_is_the_callers_after_run` carries the
/// pool's signature (its `task_writes` and `caller_reads`).
pub(super) const POOL_TEST: &str = "kernels/tests/pool.rs:";

/// The pool's own source, a directory: an access in a file under it is in the pool (both
/// sides of the `job_before_claim` mutant's race, and of Miri's reports of both mutants).
pub(super) const POOL_SOURCE: &str = "kernels/src/pool/";

/// The pool's worker loop, where the `job_before_claim` mutant's early read of the job slot
/// is.
pub(super) const POOL_WORKER_SOURCE: &str = "kernels/src/pool/worker.rs";

/// The pool test that the `done_relaxed` mutant must fail under ThreadSanitizer.
pub(super) const POOL_WITNESS_TEST: &str = "what_tasks_write_is_the_callers_after_run";

/// The pool test that the `job_before_claim` mutant must fail under ThreadSanitizer.
pub(super) const POOL_SLOT_WITNESS_TEST: &str = "a_worker_that_claims_nothing_leaves_the_job_alone";

/// Cargo `--config` (with `-Zprofile-rustflags`) that builds keepalloc-kernels alone as the
/// pool mutant `mutant` (`done_relaxed`, `job_before_claim`) in `profile`: the standard
/// library and every other crate keep the build they already have, and the mutant's
/// artifacts get their own hashes.
pub(super) fn pool_mutant_config(profile: &str, mutant: &str) -> String {
    format!(
        r#"profile.{profile}.package.keepalloc-kernels.rustflags=["--cfg", "keepalloc_pool_mutant=\"{mutant}\""]"#
    )
}
