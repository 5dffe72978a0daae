//! The bf16 and int8 operators against current XNNPACK (the executorch 1.5.1 wheel's, from
//! `cargo xtask runtimes`) on the same inputs: the same bf16 values; for qd8 the same f32
//! rows, quantized by XNNPACK's convert operator into exactly the bytes and parameters of our
//! `quantize_qd8` (asserted row by row); the same int8 weights, scales and bias. Both outputs must be within their rounding tolerance of
//! the f64 reference (rules in `common/lowp.rs`), so within the sum of both of each other.
//!
//! Runs when the runtimes are present; without them it says "skipped", and under `CI=true`
//! their absence is a failure. x86-64 only: the pinned wheel is an x86-64 build.
#![cfg(target_arch = "x86_64")]

mod common;

use common::Rng;
use common::lowp::{Kind, LCase};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::quantize_qd8;
use keepalloc_xnnpack::current::{Bf16Fc, F32Qc8wFc, Geometry, Library, Qd8Fc};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

fn library() -> Option<&'static Library> {
    match keepalloc_testkit::runtimes::executorch_xnnpack() {
        // SAFETY: the pinned executorch 1.5.1 wheel's XNNPACK backend, a 2026 XNNPACK whose constructors only initialize it; or the file KEEPALLOC_XNNPACK_CURRENT names, which whoever sets it vouches for.
        Some(path) => Some(unsafe { Library::load(&path) }.unwrap_or_else(|e| panic!("{e}"))),
        None => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but the executorch XNNPACK is missing: run `cargo xtask runtimes`"
            );
            println!("skipped: current XNNPACK not found (run `cargo xtask runtimes`)");
            None
        }
    }
}

/// A dense, untransposed, biased, unclamped case (XNNPACK's operators get the same).
fn case(rng: &mut Rng, m: usize, k: usize, n: usize) -> LCase {
    let mut c = LCase::random(rng, m, k, n);
    c.input_stride = k;
    c.output_stride = n;
    c.transposed = false;
    c.min = f32::NEG_INFINITY;
    c.max = f32::INFINITY;
    c.input.truncate(m * k);
    c.input_bf16.truncate(m * k);
    c.bias = Some(rng.vec(n));
    c
}

/// The CPU feature XNNPACK's x86 bf16_f32 operator needs: without it, and only then, its
/// refusal with `xnn_status_unsupported_hardware` is expected.
fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512bf16");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Our kernels of `kind` against the f64 reference, for a kind XNNPACK cannot run here.
fn check_ours_only(c: &LCase, kind: Kind) {
    for isa in kind.isas() {
        c.run_and_check(
            &TABLE,
            kind,
            isa,
            &format!("keepalloc {} {isa}", kind.name()),
        );
    }
}

#[test]
fn outputs_match_current_xnnpack_within_rounding() {
    let Some(xnn) = library() else { return };
    let mut rng = Rng::new(41);
    for (m, k, n) in [(1, 100, 70), (5, 257, 33), (33, 64, 129), (16, 1024, 256)] {
        let c = case(&mut rng, m, k, n);
        let g = Geometry { k, n, m };
        let bias = c.bias.clone().unwrap();
        for kind in Kind::ALL {
            let reference = c.reference(kind);
            let mut theirs = vec![f32::NAN; m * n];
            match kind {
                Kind::Bf16F32 => {
                    let mut x = c.input_bf16.clone();
                    x.extend([0; 8]);
                    match Bf16Fc::new(xnn, g, &c.weights_bf16, &bias) {
                        Ok(mut op) => op.run(&x, &mut theirs).unwrap(),
                        // This XNNPACK refuses bf16_f32 without AVX512-BF16 (seen on an
                        // AVX2-only EPYC); ours still runs against the reference.
                        Err(e) if e.is_unsupported_hardware() && !has_avx512_bf16() => {
                            println!("XNNPACK has no bf16_f32 kernel on this CPU ({e})");
                            check_ours_only(&c, kind);
                            continue;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Kind::Qd8F32Qc8w => {
                    // XNNPACK's own convert, then its FC; its quantized rows and parameters
                    // must be ours exactly (so both FCs see the same quantized inputs).
                    let mut x = c.input.clone();
                    x.extend([0.0; 4]);
                    let mut op = Qd8Fc::new(xnn, g, &c.weights_i8, &c.scales, &bias).unwrap();
                    op.run(&x, &mut theirs).unwrap();
                    let mut q = vec![0i8; k];
                    for r in 0..m {
                        let p = quantize_qd8(&c.input[r * k..(r + 1) * k], &mut q);
                        let xp = op.last_params()[r];
                        assert_eq!(
                            (xp.zero_point, xp.scale),
                            (p.zero_point, p.scale),
                            "row {r}"
                        );
                        assert_eq!(&op.last_quantized()[r * k..(r + 1) * k], &q[..], "row {r}");
                    }
                }
                Kind::F32Qc8w => {
                    let mut x = c.input.clone();
                    x.extend([0.0; 4]);
                    F32Qc8wFc::new(xnn, g, &c.weights_i8, &c.scales, &bias)
                        .and_then(|mut op| op.run(&x, &mut theirs))
                        .unwrap();
                }
            }
            c.check_against(
                &theirs,
                &reference,
                &format!("XNNPACK {} {m}x{k}x{n}", kind.name()),
            );
            for isa in kind.isas() {
                let ours = c.run_and_check(
                    &TABLE,
                    kind,
                    isa,
                    &format!("keepalloc {} {isa}", kind.name()),
                );
                for (i, (&a, &b)) in ours.iter().zip(&theirs).enumerate() {
                    let tol = 2.0 * reference[i].1;
                    assert!(
                        (a as f64 - b as f64).abs() <= tol,
                        "{} {isa} {m}x{k}x{n} output {i}: keepalloc {a}, XNNPACK {b} (tolerance {tol:e})",
                        kind.name()
                    );
                }
            }
        }
    }
}

#[test]
fn xnnpack_quantizes_rows_as_quantize_qd8_does() {
    // XNNPACK's own f32 → qd8 convert against ours, row by row: the same rule, so the same
    // zero point, scale and int8 values (this is what makes the qd8 comparison above a
    // comparison of the same quantized inputs, and keeps the bench's XNNPACK column honest).
    let Some(xnn) = library() else { return };
    let mut rng = Rng::new(42);
    for (m, k) in [(1, 100), (7, 257), (16, 1024)] {
        let c = case(&mut rng, m, k, 8);
        let g = Geometry { k, n: 8, m };
        let mut op =
            Qd8Fc::new(xnn, g, &c.weights_i8, &c.scales, c.bias.as_ref().unwrap()).unwrap();
        let mut x = c.input.clone();
        x.extend([0.0; 4]);
        let mut y = vec![0.0f32; m * 8];
        op.run(&x, &mut y).unwrap();
        let mut q = vec![0i8; k];
        for r in 0..m {
            let p = quantize_qd8(&c.input[r * k..(r + 1) * k], &mut q);
            let theirs = op.last_params()[r];
            assert_eq!(
                (theirs.zero_point, theirs.scale),
                (p.zero_point, p.scale),
                "row {r} of {m}x{k}"
            );
        }
        // And the whole XNNPACK path is within the quantization bound of the f32 math.
        c.check_against(
            &y,
            &c.unquantized_reference(),
            &format!("XNNPACK qd8 path {m}x{k}"),
        );
    }
}
