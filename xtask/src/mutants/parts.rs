//! What is mutated, and by whose tests stage 1 judges it: the three parts.

/// One cargo-mutants run of stage 1: which mutants, and whose tests.
pub(super) struct Part {
    pub(super) name: &'static str,
    /// cargo-mutants' selection of mutants.
    pub(super) select: &'static [&'static str],
    /// The packages whose tests make up stage 1's test command.
    pub(super) test_packages: &'static [&'static str],
    /// Arguments for that `cargo test` (which of the packages' test targets run).
    pub(super) test_args: &'static [&'static str],
    /// Whether stage 2 (loom, the campaign) sees this part's code at all: its survivors go
    /// there only if it does.
    pub(super) stage2: bool,
}

/// The table part is what `table.rs` held before it was split: the header table
/// (`table.rs`), the headerless one (`headerless.rs`), `TableAllocator`
/// (`table_allocator.rs`) and the entry points' panic guards (`no_unwind.rs`). `allocators/src/raw.rs` and `request.rs` are not here: they are the
/// backends' shape (`RawBackend`, `resize`, the blanket `RequestAllocator` impl), not the
/// table. cargo-mutants does not mutate the bodies of `unsafe fn`s, so of the header code
/// only `block_layout` and `no_unwind` get mutants.
pub(super) const PARTS: [Part; 3] = [
    Part {
        name: "table",
        select: &[
            "--package",
            "keepalloc-allocators",
            "--file",
            "allocators/src/table.rs",
            "--file",
            "allocators/src/headerless.rs",
            "--file",
            "allocators/src/table_allocator.rs",
            "--file",
            "allocators/src/no_unwind.rs",
        ],
        test_packages: &["keepalloc-allocators", "keepalloc-provider"],
        test_args: &[],
        stage2: true,
    },
    Part {
        name: "provider",
        select: &["--package", "keepalloc-provider"],
        test_packages: &["keepalloc-provider"],
        test_args: &[],
        stage2: true,
    },
    // The kernels' worker pool, with its own tests (tests/pool.rs and the lib's, which include
    // the capped pool's; the operators' tests would add minutes per mutant and see the pool
    // only through `run`). Its tests carry a watchdog (testkit/src/watchdog.rs), so
    // a mutant that loses a wake-up or a task fails in 10 s instead of timing out. Neither
    // loom (the provider's cell only) nor the campaign (one thread) runs the pool.
    Part {
        name: "pool",
        select: &[
            "--package",
            "keepalloc-kernels",
            "--file",
            "kernels/src/pool/*.rs",
        ],
        test_packages: &["keepalloc-kernels"],
        test_args: &["--lib", "--test", "pool"],
        stage2: false,
    },
];

/// The files whose code the loom models see (under `--cfg loom` only the cell and its
/// primitives are compiled; `provider.rs` is not).
pub(super) const LOOM_FILES: [&str; 2] = ["provider/src/cell.rs", "provider/src/sync.rs"];
