//! `KEEPALLOC_KERNELS_DOT_ISA` really selects the bf16 / int8 kernels: when the variable is
//! set, the test fails unless every operator kind with a kernel for that ISA runs it (and
//! matches its reference) and every kind without one refuses to be created. Without it, the
//! test re-runs itself once per dot-product ISA this CPU has (plus one it lacks, if any,
//! which must be refused, and an unknown name), each in a fresh process, and fails if a
//! child did not report the marker of the ISA it was given.

mod common;

use common::Rng;
use common::lowp::{Kind, LCase};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{DOT_ISA_ENV, DotIsa, KernelError, initialize};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

#[test]
fn forced_dot_isa_is_the_one_used() {
    match std::env::var(DOT_ISA_ENV) {
        Ok(name) if !name.is_empty() => check_forced(&name),
        _ => spawn_children(),
    }
}

fn check_forced(name: &str) {
    let case = LCase::random(&mut Rng::new(31), 11, 70, 45);
    match DotIsa::from_name(name) {
        Some(isa) if isa.is_supported() => {
            initialize(&TABLE).unwrap();
            let mut ran = Vec::new();
            for kind in Kind::ALL {
                let has_kernel = DotIsa::kernels_for(kind.name()).contains(&isa);
                if has_kernel {
                    // No ISA in the descriptor: the environment's choice must be `isa`
                    // (`run` asserts nothing about it, so check the output and the ISA).
                    for m in [1, 11] {
                        let mut c = case.clone();
                        c.m = m;
                        let out = c.run(&TABLE, kind, None, name);
                        c.check_against(
                            &out,
                            &c.reference(kind),
                            &format!("{} {name}", kind.name()),
                        );
                    }
                    assert_eq!(used_isa(&case, kind), isa, "{DOT_ISA_ENV}={name}");
                    ran.push(kind.name());
                } else {
                    assert_eq!(
                        case.try_create(&TABLE, kind),
                        Err(KernelError::NoKernel {
                            isa,
                            op: kind.name()
                        })
                    );
                }
            }
            assert!(!ran.is_empty(), "no operator kind has a {isa} kernel");
            println!("dot-isa-used={isa} by {}", ran.join(","));
        }
        Some(isa) => {
            assert_eq!(
                initialize(&TABLE),
                Err(KernelError::UnsupportedDotIsa { isa })
            );
            assert_eq!(
                case.try_create(&TABLE, Kind::Bf16F32),
                Err(KernelError::UnsupportedDotIsa { isa })
            );
            println!("dot-isa-refused={isa}");
        }
        None => {
            assert_eq!(initialize(&TABLE), Err(KernelError::UnknownDotIsa));
            assert_eq!(
                case.try_create(&TABLE, Kind::F32Qc8w),
                Err(KernelError::UnknownDotIsa)
            );
            println!("dot-isa-unknown={name}");
        }
    }
}

/// The ISA an operator of `kind` created with no ISA in its descriptor runs.
fn used_isa(case: &LCase, kind: Kind) -> DotIsa {
    use keepalloc_kernels::*;
    fn isa_of<K: kinds::LowpKind>(d: FcDesc<'_, K>) -> DotIsa {
        FcLowp::create(&d).unwrap().isa()
    }
    let (k, n) = (case.k, case.n);
    match kind {
        Kind::Bf16F32 => isa_of(FullyConnectedBf16F32Desc::new(k, n, &case.weights_bf16)),
        Kind::Qd8F32Qc8w => isa_of(FullyConnectedQd8F32Qc8wDesc::new(
            k,
            n,
            &case.weights_i8,
            &case.scales,
        )),
        Kind::F32Qc8w => isa_of(FullyConnectedF32Qc8wDesc::new(
            k,
            n,
            &case.weights_i8,
            &case.scales,
        )),
    }
}

fn spawn_children() {
    let mut runs: Vec<(String, String)> = DotIsa::available()
        .map(|isa| (isa.name().to_string(), format!("dot-isa-used={isa}")))
        .collect();
    if let Some(isa) = DotIsa::ALL.into_iter().find(|isa| !isa.is_supported()) {
        runs.push((isa.name().to_string(), format!("dot-isa-refused={isa}")));
    }
    runs.push(("sse9".to_string(), "dot-isa-unknown=sse9".to_string()));
    for (value, marker) in runs {
        let out = common::this_test_binary()
            .args([
                "forced_dot_isa_is_the_one_used",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DOT_ISA_ENV, &value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&marker),
            "{DOT_ISA_ENV}={value}: status {}, expected `{marker}`\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{DOT_ISA_ENV}={value}: {marker}");
    }
}
