//! The bf16 and int8 operators against f64 references of their own dequantized arithmetic
//! (tolerance rules in `common/lowp.rs`), on every dot-product ISA this CPU has a kernel
//! for, with explicit tables (no process-wide state).

mod common;

use common::lowp::{Kind, LCase};
use common::{Rng, RuntimePool};
use keepalloc_allocators::{AllocatorTable, Counting, Limited, System};
use keepalloc_kernels::{
    DotIsa, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedF32Qc8w,
    FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w, FullyConnectedQd8F32Qc8wDesc, KernelError,
    Parallel, bf16_from_f32, bf16_to_f32, quantize_qd8,
};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

#[test]
fn every_kind_has_a_kernel_on_this_cpu_and_the_best_is_chosen() {
    for kind in Kind::ALL {
        let isas = kind.isas();
        assert!(isas.contains(&DotIsa::Scalar), "{}", kind.name());
        let case = LCase::random(&mut Rng::new(1), 3, 10, 10);
        // With no ISA forced (and the environment unset in a plain test run), the first
        // supported kernel is chosen.
        if std::env::var_os(keepalloc_kernels::DOT_ISA_ENV).is_none() {
            case.run(&TABLE, kind, None, kind.name());
        }
    }
}

#[test]
fn random_shapes_match_their_reference_on_every_isa() {
    let mut rng = Rng::new(21);
    for kind in Kind::ALL {
        for isa in kind.isas() {
            for i in 0..60 {
                let m = if i % 4 == 0 { 1 } else { rng.range(1, 40) };
                let k = rng.range(1, 300);
                let n = rng.range(1, 100);
                let case = LCase::random(&mut rng, m, k, n);
                case.run_and_check(&TABLE, kind, isa, &format!("{} {isa} #{i}", kind.name()));
            }
        }
    }
}

#[test]
fn whole_tile_blocks_match_with_and_without_a_clamp_on_every_isa() {
    // Rows in AMX blocks of 32 and 16 (and leftovers), K a whole number of tile steps or
    // not, whole and partial panels: with no clamp and K a multiple of 32 the AMX bf16
    // blocks write C's final values themselves.
    let mut rng = Rng::new(43);
    for (m, k, n) in [
        (32, 64, 32),
        (48, 96, 50),
        (80, 100, 64),
        (64, 128, 130),
        (300, 64, 40),
    ] {
        for (min, max) in [(f32::NEG_INFINITY, f32::INFINITY), (-0.25, 0.25)] {
            let mut case = LCase::random(&mut rng, m, k, n);
            (case.min, case.max) = (min, max);
            for kind in Kind::ALL {
                for isa in kind.isas() {
                    let what = format!("{} {isa} {m}x{k}x{n} [{min}, {max}]", kind.name());
                    case.run_and_check(&TABLE, kind, isa, &what);
                }
            }
        }
    }
}

#[test]
fn tile_edges_match_their_reference_on_every_isa() {
    let mut rng = Rng::new(22);
    let ms = [1, 2, 3, 4, 5, 7, 8, 9, 17];
    let ks = [1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 64, 65, 255];
    let ns = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 65];
    for kind in Kind::ALL {
        for isa in kind.isas() {
            for (i, &m) in ms.iter().enumerate() {
                for (j, &k) in ks.iter().enumerate() {
                    let n = ns[(i + j) % ns.len()];
                    let case = LCase::random(&mut rng, m, k, n);
                    case.run_and_check(
                        &TABLE,
                        kind,
                        isa,
                        &format!("{} {isa} {m}x{k}x{n}", kind.name()),
                    );
                }
            }
        }
    }
}

#[test]
fn many_n_blocks_match_their_reference() {
    // More than 1 MiB of packed weights: several N blocks, each passed by every row tile.
    let mut rng = Rng::new(23);
    let case = LCase::random(&mut rng, 19, 700, 1500);
    for kind in Kind::ALL {
        for isa in kind.isas() {
            case.run_and_check(
                &TABLE,
                kind,
                isa,
                &format!("{} {isa} N blocks", kind.name()),
            );
        }
    }
}

#[test]
fn batch_one_past_the_l3_budget_takes_the_prefetching_path() {
    // Above 16 MiB of packed weights, batch 1 prefetches ahead; an N edge in the last panel.
    let mut rng = Rng::new(24);
    for (kind, k) in [
        (Kind::Bf16F32, 2050),
        (Kind::Qd8F32Qc8w, 4100),
        (Kind::F32Qc8w, 4100),
    ] {
        let case = LCase::random(&mut rng, 1, k, 4210);
        for isa in kind.isas() {
            case.run_and_check(
                &TABLE,
                kind,
                isa,
                &format!("{} {isa} DRAM GEMV", kind.name()),
            );
        }
    }
}

#[test]
fn batch_one_runs_fit_in_a_small_stack_on_every_isa() {
    // Inlined into `lowp::run`, the blocked drivers' buffers (64 KiB) would be probed by every
    // call and overflow this stack; only release inlines enough (CI runs it there). bf16 on
    // AVX-512F and AMX own such buffers at batch 1 by design.
    const STACK: usize = 16 << 10;
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(|| {
            let mut rng = Rng::new(71);
            for kind in Kind::ALL {
                let case = LCase::random(&mut rng, 1, 96, 64);
                for isa in kind.isas() {
                    if kind == Kind::Bf16F32 && matches!(isa, DotIsa::Avx512 | DotIsa::Amx) {
                        continue;
                    }
                    case.run_and_check(&TABLE, kind, isa, &format!("{} {isa}", kind.name()));
                }
            }
        })
        .expect("spawn a thread")
        .join()
        .expect("batch-1 runs on a small stack");
}

#[test]
fn qd8_is_within_half_a_quantization_step_of_the_f32_math() {
    let mut rng = Rng::new(25);
    for isa in Kind::Qd8F32Qc8w.isas() {
        for (m, k, n) in [(1, 100, 40), (9, 257, 33), (16, 64, 64)] {
            let case = LCase::random(&mut rng, m, k, n);
            let out = case.run(&TABLE, Kind::Qd8F32Qc8w, Some(isa), "qd8");
            case.check_against(
                &out,
                &case.unquantized_reference(),
                &format!("qd8 {isa} vs f32 math"),
            );
        }
    }
}

#[test]
fn qd8_isas_are_bit_identical() {
    // Same quantization bits (the SIMD quantizer is the scalar rule), exact integer sums,
    // the same three f32 roundings: every ISA gives the same bits.
    let mut rng = Rng::new(26);
    for (m, k, n) in [(1, 333, 70), (13, 100, 50), (40, 64, 129)] {
        let case = LCase::random(&mut rng, m, k, n);
        let scalar = case.run(&TABLE, Kind::Qd8F32Qc8w, Some(DotIsa::Scalar), "scalar");
        for isa in Kind::Qd8F32Qc8w.isas() {
            let out = case.run(&TABLE, Kind::Qd8F32Qc8w, Some(isa), "isa");
            assert!(
                scalar
                    .iter()
                    .zip(&out)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa} differs from scalar at {m}x{k}x{n}"
            );
        }
    }
}

#[test]
fn runs_on_a_pool_are_bit_identical_to_one_thread_on_every_isa() {
    // Shapes cut by panels (n ≥ m), by row units of 32 (tall, few panels, a remainder
    // past the last unit), and too small to cut; batch 1 too small and cut by panels at
    // an odd panel (AVX2's f32_qc8w pairs the panels of each task). qd8 on VNNI weighs its
    // rows (`QD8_ROW_WEIGHT`): 64x256x100 and 97x200x333 are cut by rows for it, and the
    // last two by panels after a quantizing pass cut over both threads.
    let pool = RuntimePool(2);
    let mut rng = Rng::new(41);
    for (m, k, n) in [
        (1, 300, 200),
        (1, 700, 300),
        (64, 256, 100),
        (150, 96, 40),
        (70, 130, 16),
        (40, 64, 20),
        (97, 200, 333),
        (40, 512, 300),
        (64, 256, 1100),
    ] {
        let case = LCase::random(&mut rng, m, k, n);
        for kind in Kind::ALL {
            for isa in kind.isas() {
                let what = format!("{} {isa} {m}x{k}x{n}", kind.name());
                let one = case.run(&TABLE, kind, Some(isa), &what);
                let two = case
                    .try_run_on(&TABLE, kind, Some(isa), Some(&pool), &what)
                    .unwrap_or_else(|e| panic!("{what} on the pool: {e}"));
                case.check_against(&two, &case.reference(kind), &what);
                assert!(
                    one.iter()
                        .zip(&two)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: the pool's output differs from one thread's"
                );
            }
        }
    }
}

/// A two-thread pool that runs every task on the caller and records how many tasks each
/// job it was handed had.
#[derive(Default)]
struct Jobs(std::sync::Mutex<Vec<usize>>);

impl Parallel for Jobs {
    fn threads(&self) -> usize {
        2
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.0.lock().unwrap().push(tasks);
        (0..tasks).for_each(task);
    }
}

#[test]
fn a_qd8_run_quantizing_before_a_panel_cut_shares_the_pass_and_vnni_weighs_its_rows() {
    // The jobs a two-thread pool is handed, per shape: [quantizing pass, panel tasks] for a
    // panel cut, [row tasks] for a row cut (each row task quantizes its own rows).
    // 64x256x1100: panels on every ISA, its 16 K input values quantized by two tasks.
    // 512x64x512: rows on VNNI (a quantized row weighs QD8_ROW_WEIGHT columns), panels on
    // AMX (weight 1 until measured there).
    let mut rng = Rng::new(43);
    let mut checked = 0;
    for (m, k, n) in [(64, 256, 1100), (512, 64, 512)] {
        let case = LCase::random(&mut rng, m, k, n);
        let kind = Kind::Qd8F32Qc8w;
        for isa in kind.isas() {
            let want: &[usize] = match (isa, m) {
                (DotIsa::Avx512Vnni, 512) => &[4],
                (DotIsa::Avx512Vnni | DotIsa::Amx, 64) => &[2, 4],
                (DotIsa::Amx, _) => &[4, 4],
                // The other ISAs quantize before the cut, not in the driver.
                _ => continue,
            };
            let what = format!("{} {isa} {m}x{k}x{n}", kind.name());
            let pool = Jobs::default();
            let out = case
                .try_run_on(&TABLE, kind, Some(isa), Some(&pool), &what)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            case.check_against(&out, &case.reference(kind), &what);
            assert_eq!(
                *pool.0.lock().unwrap(),
                want,
                "{what}: the jobs handed to the pool"
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked > 0,
        DotIsa::Avx512Vnni.is_supported() || DotIsa::Amx.is_supported(),
        "every qd8 ISA that quantizes in its driver is checked"
    );
}

/// A pool that forgets the last task it is given.
struct Skips;

impl Parallel for Skips {
    fn threads(&self) -> usize {
        2
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks.saturating_sub(1)).for_each(task);
    }
}

#[test]
fn a_pool_that_skips_a_task_is_an_error() {
    let case = LCase::random(&mut Rng::new(42), 64, 128, 256);
    for kind in Kind::ALL {
        let err = case
            .try_run_on(&TABLE, kind, None, Some(&Skips), kind.name())
            .unwrap_err();
        assert!(
            matches!(err, KernelError::ParallelIncomplete { ran, tasks } if ran + 1 == tasks),
            "{}: {err:?}",
            kind.name()
        );
    }
}

#[test]
fn quantize_qd8_follows_the_rule() {
    let mut q = [0i8; 5];
    // All non-negative: zero maps to -128, the maximum to 127.
    let p = quantize_qd8(&[0.0, 1.0, 2.55, 0.5, 2.0], &mut q);
    assert_eq!(p.zero_point, -128);
    assert_eq!(q[0], -128);
    assert_eq!(q[2], 127);
    assert!((p.scale - 0.01).abs() < 1e-8);
    // All non-positive: the maximum (zero) maps to 127.
    let p = quantize_qd8(&[-2.55, -1.0, 0.0, -0.5, -2.0], &mut q);
    assert_eq!((p.zero_point, q[2], q[0]), (127, 127, -128));
    // All zero: scale 1, everything at the zero point.
    let p = quantize_qd8(&[0.0; 5], &mut q);
    assert_eq!(p.scale, 1.0);
    assert!(q.iter().all(|&v| i32::from(v) == p.zero_point));
    // Random rows: every value within half a step (plus rounding) of its dequantization.
    let mut rng = Rng::new(27);
    for _ in 0..200 {
        let len = rng.range(1, 300);
        let scale = [0.001f32, 1.0, 300.0][rng.range(0, 2)];
        let shift = rng.f32();
        let row: Vec<f32> = (0..len).map(|_| (rng.f32() + shift) * scale).collect();
        let mut q = vec![0i8; len];
        let p = quantize_qd8(&row, &mut q);
        assert!((-128..=127).contains(&p.zero_point));
        for (&x, &v) in row.iter().zip(&q) {
            let back = p.scale as f64 * (v as f64 - p.zero_point as f64);
            assert!(
                (x as f64 - back).abs() <= p.scale as f64 * 0.5 * (1.0 + 1.0 / 1024.0),
                "{x} -> {v} (scale {}, zero point {})",
                p.scale,
                p.zero_point
            );
        }
    }
}

#[test]
fn bf16_conversion_rounds_to_nearest_even() {
    assert_eq!(bf16_from_f32(1.0), 0x3f80);
    assert_eq!(bf16_to_f32(0x3f80), 1.0);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
    assert_eq!(bf16_from_f32(1.0 + 1.0 / 256.0), 0x3f80);
    // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
    assert_eq!(bf16_from_f32(1.0 + 3.0 / 256.0), 0x3f82);
    assert_eq!(bf16_from_f32(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
    assert!(bf16_to_f32(bf16_from_f32(f32::NAN)).is_nan());
    assert_eq!(bf16_from_f32(f32::INFINITY), 0x7f80);
    assert_eq!(bf16_from_f32(-0.0), 0x8000);
}

#[test]
fn batch_zero_does_nothing_and_short_buffers_are_errors() {
    let case = LCase::random(&mut Rng::new(28), 3, 20, 10);
    let mut out = case.output();
    let w8 = &case.weights_i8;
    let op = FullyConnectedQd8F32Qc8w::create_with_table(
        &TABLE,
        &FullyConnectedQd8F32Qc8wDesc::new(20, 10, w8, &case.scales),
    )
    .unwrap();
    op.run(0, &[], &mut [], &mut []).unwrap();
    let size = op.workspace_size(3).unwrap();
    let mut ws = vec![0u8; size];
    assert_eq!(
        op.run(3, &case.input[..59], &mut out, &mut ws),
        Err(KernelError::BufferTooShort {
            which: "input",
            needed: 60,
            actual: 59
        })
    );
    assert_eq!(
        op.run(3, &[0.0; 60], &mut out[..29], &mut ws),
        Err(KernelError::BufferTooShort {
            which: "output",
            needed: 30,
            actual: 29
        })
    );
    assert_eq!(
        op.run(3, &[0.0; 60], &mut [0.0; 30], &mut ws[..size - 1]),
        Err(KernelError::BufferTooShort {
            which: "workspace",
            needed: size,
            actual: size - 1
        })
    );
    assert!(matches!(
        op.workspace_size(usize::MAX),
        Err(KernelError::BatchOverflow { .. })
    ));
    let bf = FullyConnectedBf16F32::create_with_table(
        &TABLE,
        &FullyConnectedBf16F32Desc::new(20, 10, &case.weights_bf16),
    )
    .unwrap();
    bf.run(0, &[], &mut []).unwrap();
    assert!(matches!(
        bf.run(2, &[0; 39], &mut [0.0; 20]),
        Err(KernelError::BufferTooShort { which: "input", .. })
    ));
    let qc = FullyConnectedF32Qc8w::create_with_table(
        &TABLE,
        &FullyConnectedF32Qc8wDesc::new(20, 10, w8, &case.scales),
    )
    .unwrap();
    qc.run(0, &[], &mut []).unwrap();
    assert!(matches!(
        qc.run(2, &[0.0; 40], &mut [0.0; 19]),
        Err(KernelError::BufferTooShort {
            which: "output",
            ..
        })
    ));
}

#[test]
fn bad_descriptors_are_typed_errors_and_allocate_nothing() {
    static COUNTED: Counting<System> = Counting::new(System);
    static COUNTED_TABLE: AllocatorTable = AllocatorTable::for_allocator(&COUNTED);
    let w8 = [1i8; 12];
    let wb = [0x3f80u16; 12];
    let s = [0.5f32; 3];
    let qd8 = |d: FullyConnectedQd8F32Qc8wDesc<'_>| {
        FullyConnectedQd8F32Qc8w::create_with_table(&COUNTED_TABLE, &d).map(drop)
    };
    let qc8w = |d: FullyConnectedF32Qc8wDesc<'_>| {
        FullyConnectedF32Qc8w::create_with_table(&COUNTED_TABLE, &d).map(drop)
    };
    let bf16 = |d: FullyConnectedBf16F32Desc<'_>| {
        FullyConnectedBf16F32::create_with_table(&COUNTED_TABLE, &d).map(drop)
    };
    let channels = |k, n| {
        Err(KernelError::InvalidChannels {
            input_channels: k,
            output_channels: n,
        })
    };
    assert_eq!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(0, 3, &[], &s)),
        channels(0, 3)
    );
    assert_eq!(
        qc8w(FullyConnectedF32Qc8wDesc::new(4, 0, &[], &[])),
        channels(4, 0)
    );
    assert_eq!(
        bf16(FullyConnectedBf16F32Desc::new(0, 0, &[])),
        channels(0, 0)
    );
    // qd8's exact i32 accumulation bounds K.
    assert_eq!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(65_537, 1, &[], &[1.0])),
        channels(65_537, 1)
    );
    assert_eq!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(4, 3, &w8[..11], &s)),
        Err(KernelError::WeightsLength {
            expected: 12,
            actual: 11
        })
    );
    assert_eq!(
        bf16(FullyConnectedBf16F32Desc::new(4, 3, &wb[..10])),
        Err(KernelError::WeightsLength {
            expected: 12,
            actual: 10
        })
    );
    assert_eq!(
        qc8w(FullyConnectedF32Qc8wDesc::new(4, 3, &w8, &s[..2])),
        Err(KernelError::ScalesLength {
            expected: 3,
            actual: 2
        })
    );
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let scales = [0.5, bad, 0.5];
        let err = qd8(FullyConnectedQd8F32Qc8wDesc::new(4, 3, &w8, &scales)).unwrap_err();
        assert!(
            matches!(err, KernelError::InvalidScale { channel: 1, .. }),
            "{err:?}"
        );
        let err = qc8w(FullyConnectedF32Qc8wDesc::new(4, 3, &w8, &scales)).unwrap_err();
        assert!(
            matches!(err, KernelError::InvalidScale { channel: 1, .. }),
            "{err:?}"
        );
    }
    assert_eq!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(4, 3, &w8, &s).with_bias(&[0.0; 2])),
        Err(KernelError::BiasLength {
            expected: 3,
            actual: 2
        })
    );
    assert_eq!(
        bf16(FullyConnectedBf16F32Desc::new(4, 3, &wb).with_strides(3, 3)),
        Err(KernelError::InvalidStride {
            which: "input",
            stride: 3,
            channels: 4
        })
    );
    assert_eq!(
        qc8w(FullyConnectedF32Qc8wDesc::new(4, 3, &w8, &s).with_strides(4, 2)),
        Err(KernelError::InvalidStride {
            which: "output",
            stride: 2,
            channels: 3
        })
    );
    assert!(matches!(
        bf16(FullyConnectedBf16F32Desc::new(4, 3, &wb).with_range(1.0, 0.0)),
        Err(KernelError::InvalidRange { .. })
    ));
    assert!(matches!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(4, 3, &w8, &s).with_range(f32::NAN, 0.0)),
        Err(KernelError::InvalidRange { .. })
    ));
    // An ISA with no kernel for the kind is refused as such on every CPU, before this CPU's
    // support is asked; an ISA this CPU lacks (where it lacks one) is refused as unsupported.
    assert_eq!(
        qd8(FullyConnectedQd8F32Qc8wDesc::new(4, 3, &w8, &s).with_isa(DotIsa::Avx512Bf16)),
        Err(KernelError::NoKernel {
            isa: DotIsa::Avx512Bf16,
            op: "qd8_f32_qc8w"
        })
    );
    assert_eq!(
        bf16(FullyConnectedBf16F32Desc::new(4, 3, &wb).with_isa(DotIsa::Avx512Vnni)),
        Err(KernelError::NoKernel {
            isa: DotIsa::Avx512Vnni,
            op: "bf16_f32"
        })
    );
    // AMX has int8 and bf16 kernels, no f32 × int8 one.
    for isa in [DotIsa::Amx, DotIsa::Avx512Bf16] {
        assert_eq!(
            qc8w(FullyConnectedF32Qc8wDesc::new(4, 3, &w8, &s).with_isa(isa)).err(),
            Some(KernelError::NoKernel {
                isa,
                op: "f32_qc8w"
            })
        );
    }
    if let Some(missing) = DotIsa::ALL.into_iter().find(|i| !i.is_supported()) {
        assert_eq!(
            bf16(FullyConnectedBf16F32Desc::new(4, 3, &wb).with_isa(missing)),
            Err(KernelError::UnsupportedDotIsa { isa: missing })
        );
    }
    let stats = COUNTED.stats();
    assert_eq!(
        (stats.allocations, stats.live_bytes),
        (0, 0),
        "an error allocated"
    );
}

#[test]
fn every_allocation_goes_through_the_table_and_comes_back() {
    static COUNTED: Counting<System> = Counting::new(System);
    static COUNTED_TABLE: AllocatorTable = AllocatorTable::for_allocator(&COUNTED);
    let case = LCase::random(&mut Rng::new(29), 5, 70, 45);
    for kind in Kind::ALL {
        for isa in kind.isas() {
            let before = COUNTED.stats();
            case.run_and_check(&COUNTED_TABLE, kind, isa, "counted");
            let after = COUNTED.stats();
            assert_eq!(
                after.allocations - before.allocations,
                1,
                "{} {isa}",
                kind.name()
            );
            assert_eq!(
                after.live_bytes,
                0,
                "{} {isa}: packed block not freed",
                kind.name()
            );
        }
    }
}

#[test]
fn a_capped_allocator_gives_out_of_memory_then_recovers() {
    static CAPPED: Counting<Limited<System>> = Counting::new(Limited::new(System, 64 * 1024));
    static CAPPED_TABLE: AllocatorTable = AllocatorTable::for_allocator(&CAPPED);
    let mut rng = Rng::new(30);
    let big = LCase::random(&mut rng, 2, 600, 600);
    let small = LCase::random(&mut rng, 2, 16, 16);
    for kind in Kind::ALL {
        let before = CAPPED.stats();
        let err = big.try_create(&CAPPED_TABLE, kind).unwrap_err();
        assert!(
            matches!(err, KernelError::OutOfMemory { bytes } if bytes >= 600 * 600),
            "{}: {err:?}",
            kind.name()
        );
        assert_eq!(CAPPED.stats().live_bytes, before.live_bytes);
        for isa in kind.isas() {
            small.run_and_check(&CAPPED_TABLE, kind, isa, "capped");
        }
        assert_eq!(CAPPED.stats().live_bytes, before.live_bytes);
    }
}
