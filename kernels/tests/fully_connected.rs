//! The operator against an f64 reference, on every ISA this CPU has, with explicit tables
//! (no process-wide state).

mod common;

use std::sync::atomic::Ordering;

use common::fail_nth::{CALLS, FAIL_AT, FailNth};
use common::{Case, Rng};
use keepalloc_allocators::{AllocatorTable, Counting, Limited, System};
use keepalloc_kernels::{FullyConnected, FullyConnectedDesc, Isa, KernelError};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

#[test]
fn random_shapes_match_the_reference_on_every_isa() {
    let mut rng = Rng::new(1);
    for isa in Isa::available() {
        for i in 0..120 {
            let m = if i % 4 == 0 { 1 } else { rng.range(1, 300) };
            let k = rng.range(1, 300);
            let n = rng.range(1, 200);
            let case = Case::random(&mut rng, m, k, n);
            case.run_and_check(&TABLE, isa, &format!("{isa} #{i}"));
        }
    }
}

#[test]
fn tile_and_block_edges_match_the_reference() {
    let mut rng = Rng::new(2);
    let ms = [1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 16, 17, 28, 29, 33];
    let ks = [1, 3, 4, 5, 17, 255, 256, 257, 513, 1025];
    let ns = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 65, 257, 520];
    for isa in Isa::available() {
        for (i, &m) in ms.iter().enumerate() {
            for (j, &k) in ks.iter().enumerate() {
                let n = ns[(i + j) % ns.len()];
                let case = Case::random(&mut rng, m, k, n);
                case.run_and_check(&TABLE, isa, &format!("{isa} m={m} k={k} n={n}"));
            }
        }
    }
}

#[test]
fn large_blocked_shape_matches_the_reference() {
    let mut rng = Rng::new(3);
    for isa in Isa::available() {
        let case = Case::random(&mut rng, 40, 1100, 600);
        case.run_and_check(&TABLE, isa, &format!("{isa} large"));
    }
}

#[test]
fn weights_past_the_l3_budget_take_the_n_blocked_path() {
    // 63 panels of 32 × 1101 floats: 8.9 MB packed, above the 8 MiB up to which AVX-512
    // runs all panels per row tile, so this takes the L2-sized N blocks (with K blocks and
    // an N edge), on one thread and on two.
    let mut rng = Rng::new(5);
    let (m, k, n) = (30, 1100, 2000);
    let case = Case::random(&mut rng, m, k, n);
    for isa in Isa::available() {
        let one = case.run_and_check(&TABLE, isa, &format!("{isa} past L3 budget"));
        let op = FullyConnected::create_with_table(&TABLE, &case.desc().with_isa(isa)).unwrap();
        let mut out = case.output();
        op.run_with_threads(m, &case.input, &mut out, 2).unwrap();
        assert!(
            one.iter()
                .zip(&out)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{isa}: 2 threads differ from one"
        );
    }
}

#[test]
fn batch_one_past_the_l3_budget_takes_the_prefetching_gemv() {
    // 63 panels of 32 × 2101 floats: 16.9 MB packed, above the 16 MiB past which the
    // AVX-512 GEMV prefetches ahead; an N edge in the last panel.
    let mut rng = Rng::new(6);
    let (k, n) = (2100, 2010);
    let case = Case::random(&mut rng, 1, k, n);
    for isa in Isa::available() {
        case.run_and_check(&TABLE, isa, &format!("{isa} GEMV past L3 budget"));
    }
}

#[test]
fn isas_agree_within_rounding_and_threads_are_bit_identical() {
    let mut rng = Rng::new(4);
    for (m, k, n) in [(1, 300, 333), (37, 300, 333), (100, 64, 1000)] {
        let case = Case::random(&mut rng, m, k, n);
        for isa in Isa::available() {
            let one = case.run_and_check(&TABLE, isa, "threads=1");
            let op = FullyConnected::create_with_table(&TABLE, &case.desc().with_isa(isa)).unwrap();
            for threads in [2, 3, 5, 64] {
                let mut out = case.output();
                op.run_with_threads(m, &case.input, &mut out, threads)
                    .unwrap();
                let same = one
                    .iter()
                    .zip(&out)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{isa}: {threads} threads differ from one at {m}x{k}x{n}"
                );
            }
            let op = FullyConnected::create_with_table(
                &TABLE,
                &case.desc().with_isa(isa).with_threads(3),
            )
            .unwrap();
            assert_eq!(op.threads(), 3);
            let mut out = case.output();
            op.run(m, &case.input, &mut out).unwrap();
            assert!(
                one.iter()
                    .zip(&out)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
    }
}

#[test]
fn many_threads_run_one_operator_at_once() {
    let mut rng = Rng::new(5);
    let case = Case::random(&mut rng, 20, 200, 150);
    let op = FullyConnected::create_with_table(&TABLE, &case.desc()).unwrap();
    let mut expected = case.output();
    op.run(case.m, &case.input, &mut expected).unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    let mut out = case.output();
                    op.run(case.m, &case.input, &mut out).unwrap();
                    assert!(
                        expected
                            .iter()
                            .zip(&out)
                            .all(|(a, b)| a.to_bits() == b.to_bits())
                    );
                }
            });
        }
    });
}

#[test]
fn nan_propagates_through_the_clamp() {
    let mut rng = Rng::new(6);
    for isa in Isa::available() {
        for m in [1, 5, 20] {
            let mut case = Case::random(&mut rng, m, 40, 50);
            case.min = -0.5;
            case.max = 0.5;
            case.bias = Some(rng.vec(50));
            // NaN in input row 0, in weight column 3 and in bias 7.
            case.input[2] = f32::NAN;
            let w = if case.transposed {
                5 * case.n + 3
            } else {
                3 * case.k + 5
            };
            case.weights[w] = f32::NAN;
            case.bias.as_mut().unwrap()[7] = f32::NAN;
            let out = case.run_and_check(&TABLE, isa, &format!("{isa} NaN m={m}"));
            for (n, v) in out[..case.n].iter().enumerate() {
                assert!(v.is_nan(), "{isa}: row 0 col {n} should be NaN");
            }
            for r in 0..m {
                assert!(out[r * case.output_stride + 3].is_nan());
                assert!(out[r * case.output_stride + 7].is_nan());
            }
            if m > 1 {
                assert!(!out[case.output_stride].is_nan());
            }
        }
    }
}

#[test]
fn clamp_is_applied() {
    for isa in Isa::available() {
        let w = [1.0f32; 4 * 3];
        let op = FullyConnected::create_with_table(
            &TABLE,
            &FullyConnectedDesc::new(4, 3, &w)
                .with_bias(&[0.0, -10.0, 10.0])
                .with_range(-1.0, 2.0)
                .with_isa(isa),
        )
        .unwrap();
        let mut y = [0.0f32; 6];
        op.run(2, &[0.25, 0.25, 0.25, 0.0, 1.0, 1.0, 1.0, 1.0], &mut y)
            .unwrap();
        assert_eq!(y, [0.75, -1.0, 2.0, 2.0, -1.0, 2.0], "{isa}");
    }
}

#[test]
fn batch_zero_does_nothing() {
    let w = [1.0f32; 4];
    let op = FullyConnected::create_with_table(&TABLE, &FullyConnectedDesc::new(2, 2, &w)).unwrap();
    op.run(0, &[], &mut []).unwrap();
}

#[test]
fn bad_inputs_are_errors() {
    let w = vec![0.5f32; 12];
    let ok = FullyConnectedDesc::new(4, 3, &w);
    let create =
        |d: FullyConnectedDesc<'_>| FullyConnected::create_with_table(&TABLE, &d).map(drop);
    assert!(create(ok).is_ok());
    let channels = |k, n| KernelError::InvalidChannels {
        input_channels: k,
        output_channels: n,
    };
    assert_eq!(
        create(FullyConnectedDesc::new(0, 3, &[])),
        Err(channels(0, 3))
    );
    assert_eq!(
        create(FullyConnectedDesc::new(4, 0, &[])),
        Err(channels(4, 0))
    );
    assert_eq!(
        create(FullyConnectedDesc::new(usize::MAX / 2, 3, &w)),
        Err(channels(usize::MAX / 2, 3))
    );
    assert_eq!(
        create(FullyConnectedDesc::new(1 << 31, 1 << 31, &w)),
        Err(channels(1 << 31, 1 << 31))
    );
    assert_eq!(
        create(ok.with_strides(3, 3)),
        Err(KernelError::InvalidStride {
            which: "input",
            stride: 3,
            channels: 4
        })
    );
    assert_eq!(
        create(ok.with_strides(4, 2)),
        Err(KernelError::InvalidStride {
            which: "output",
            stride: 2,
            channels: 3
        })
    );
    assert_eq!(
        create(FullyConnectedDesc::new(4, 3, &w[..11])),
        Err(KernelError::WeightsLength {
            expected: 12,
            actual: 11
        })
    );
    assert_eq!(
        create(FullyConnectedDesc::new(
            4,
            3,
            &[w.clone(), vec![0.0]].concat()
        )),
        Err(KernelError::WeightsLength {
            expected: 12,
            actual: 13
        })
    );
    assert_eq!(
        create(ok.with_bias(&[1.0, 2.0])),
        Err(KernelError::BiasLength {
            expected: 3,
            actual: 2
        })
    );
    assert_eq!(
        create(ok.with_range(1.0, 0.0)),
        Err(KernelError::InvalidRange { min: 1.0, max: 0.0 })
    );
    assert!(matches!(
        create(ok.with_range(f32::NAN, 0.0)),
        Err(KernelError::InvalidRange { .. })
    ));
    assert!(matches!(
        create(ok.with_range(0.0, f32::NAN)),
        Err(KernelError::InvalidRange { .. })
    ));
    assert_eq!(create(ok.with_threads(0)), Err(KernelError::InvalidThreads));
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        create(ok.with_isa(Isa::Neon)),
        Err(KernelError::UnsupportedIsa { isa: Isa::Neon })
    );
    static EMPTY: AllocatorTable = {
        let p = AllocatorTable::for_allocator(&BACKEND).raw_parts();
        // SAFETY: `for_allocator`'s parts with one slot emptied keep the contract.
        unsafe { AllocatorTable::from_raw_parts(p.0, p.1, p.2, p.3, None, p.5) }
    };
    assert_eq!(
        FullyConnected::create_with_table(&EMPTY, &ok).map(drop),
        Err(KernelError::InvalidTable)
    );

    let op = FullyConnected::create_with_table(&TABLE, &ok.with_strides(6, 5)).unwrap();
    let x = vec![1.0f32; 6 * 2 + 4];
    let mut y = vec![0.0f32; 5 * 2 + 3];
    assert!(op.run(3, &x, &mut y).is_ok());
    assert_eq!(
        op.run(3, &x[..15], &mut y),
        Err(KernelError::BufferTooShort {
            which: "input",
            needed: 16,
            actual: 15
        })
    );
    assert_eq!(
        op.run(3, &x, &mut y[..12]),
        Err(KernelError::BufferTooShort {
            which: "output",
            needed: 13,
            actual: 12
        })
    );
    assert_eq!(
        op.run(usize::MAX, &x, &mut y),
        Err(KernelError::BatchOverflow { batch: usize::MAX })
    );
    assert_eq!(
        op.run_with_threads(1, &x, &mut y, 0),
        Err(KernelError::InvalidThreads)
    );
    // Every error has a message a user can act on.
    assert!(
        KernelError::Uninitialized
            .to_string()
            .contains("initialize")
    );
}

#[test]
fn every_allocation_goes_through_the_table_and_comes_back() {
    static COUNTED: Counting<System> = Counting::new(System);
    static COUNTED_TABLE: AllocatorTable = AllocatorTable::for_allocator(&COUNTED);
    let mut rng = Rng::new(7);
    for isa in Isa::available() {
        for (m, k, n) in [(1, 33, 17), (9, 300, 70)] {
            let case = Case::random(&mut rng, m, k, n);
            let before = COUNTED.stats();
            let op = FullyConnected::create_with_table(&COUNTED_TABLE, &case.desc().with_isa(isa))
                .unwrap();
            let created = COUNTED.stats();
            assert_eq!(
                created.allocations - before.allocations,
                FullyConnected::CREATE_ALLOCATIONS as u64
            );
            assert!(created.live_bytes - before.live_bytes >= op.packed_bytes());
            let mut out = case.output();
            op.run(m, &case.input, &mut out).unwrap();
            op.run_with_threads(m, &case.input, &mut out, 2).unwrap();
            let ran = COUNTED.stats();
            assert_eq!(
                ran.allocations, created.allocations,
                "run must not allocate"
            );
            drop(op);
            let dropped = COUNTED.stats();
            assert_eq!(
                dropped.deallocations - before.deallocations,
                FullyConnected::CREATE_ALLOCATIONS as u64
            );
            assert_eq!(dropped.live_bytes, before.live_bytes);
        }
    }
}

static FAIL_COUNTED: Counting<FailNth> = Counting::new(FailNth);
static FAIL_TABLE: AllocatorTable = AllocatorTable::for_allocator(&FAIL_COUNTED);

#[test]
fn each_allocation_site_failing_in_turn_is_a_clean_out_of_memory() {
    let mut rng = Rng::new(8);
    let case = Case::random(&mut rng, 3, 50, 40);
    for site in 0..FullyConnected::CREATE_ALLOCATIONS {
        let before = FAIL_COUNTED.stats();
        CALLS.store(0, Ordering::SeqCst);
        FAIL_AT.store(site, Ordering::SeqCst);
        let err = FullyConnected::create_with_table(&FAIL_TABLE, &case.desc()).unwrap_err();
        assert!(
            matches!(err, KernelError::OutOfMemory { .. }),
            "site {site}: {err:?}"
        );
        assert_eq!(
            FAIL_COUNTED.stats().live_bytes,
            before.live_bytes,
            "site {site} leaked"
        );
        FAIL_AT.store(usize::MAX, Ordering::SeqCst);
        // The next call succeeds and works.
        let op = FullyConnected::create_with_table(&FAIL_TABLE, &case.desc()).unwrap();
        let mut out = case.output();
        op.run(case.m, &case.input, &mut out).unwrap();
        case.check(&out, "after OOM");
        drop(op);
        assert_eq!(FAIL_COUNTED.stats().live_bytes, before.live_bytes);
    }
    // And one past the last site: no failure is injected, create does exactly that many.
    CALLS.store(0, Ordering::SeqCst);
    FAIL_AT.store(FullyConnected::CREATE_ALLOCATIONS, Ordering::SeqCst);
    drop(FullyConnected::create_with_table(&FAIL_TABLE, &case.desc()).unwrap());
    assert_eq!(
        CALLS.load(Ordering::SeqCst),
        FullyConnected::CREATE_ALLOCATIONS
    );
    FAIL_AT.store(usize::MAX, Ordering::SeqCst);
}

#[test]
fn a_capped_allocator_gives_out_of_memory_then_recovers() {
    static CAPPED: Counting<Limited<System>> = Counting::new(Limited::new(System, 64 * 1024));
    static CAPPED_TABLE: AllocatorTable = AllocatorTable::for_allocator(&CAPPED);
    let mut rng = Rng::new(9);
    let big = Case::random(&mut rng, 2, 256, 256); // 256 KiB of packed weights
    let small = Case::random(&mut rng, 2, 16, 16);
    let before = CAPPED.stats();
    let err = FullyConnected::create_with_table(&CAPPED_TABLE, &big.desc()).unwrap_err();
    assert!(
        matches!(err, KernelError::OutOfMemory { bytes } if bytes >= 256 * 256 * 4),
        "{err:?}"
    );
    assert_eq!(CAPPED.stats().live_bytes, before.live_bytes);
    let op = FullyConnected::create_with_table(&CAPPED_TABLE, &small.desc()).unwrap();
    let mut out = small.output();
    op.run(small.m, &small.input, &mut out).unwrap();
    small.check(&out, "capped");
    drop(op);
    assert_eq!(CAPPED.stats().live_bytes, before.live_bytes);
}
