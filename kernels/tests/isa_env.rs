//! `KEEPALLOC_KERNELS_ISA` really selects the kernels, in the style of matrixmultiply's
//! `MMTEST_ENSURE_KERNEL`: when the variable is set, a test fails unless the operators use
//! exactly that ISA. Without it, the test re-runs itself once per ISA this CPU has (and once
//! with an ISA it lacks, which must be an error), each in a fresh process.

mod common;

use common::{Case, Rng};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{FullyConnected, ISA_ENV, Isa, KernelError, selected_isa};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

/// The child-side check, or the parent that spawns one child per ISA.
#[test]
fn forced_isa_is_the_one_used() {
    match std::env::var(ISA_ENV) {
        Ok(name) if !name.is_empty() => check_forced(&name),
        _ => spawn_children(),
    }
}

fn check_forced(name: &str) {
    let forced = Isa::from_name(name);
    match forced {
        Some(isa) if isa.is_supported() => {
            assert_eq!(selected_isa(), Ok(isa));
            let mut rng = Rng::new(11);
            for (m, k, n) in [(1, 70, 45), (23, 70, 45)] {
                let case = Case::random(&mut rng, m, k, n);
                let op = FullyConnected::create_with_table(&TABLE, &case.desc()).unwrap();
                assert_eq!(
                    op.isa(),
                    isa,
                    "{ISA_ENV}={name} but the operator runs {}",
                    op.isa()
                );
                let mut out = case.output();
                op.run(m, &case.input, &mut out).unwrap();
                case.check(&out, name);
            }
            println!("isa-used={isa}");
        }
        Some(isa) => {
            assert_eq!(selected_isa(), Err(KernelError::UnsupportedIsa { isa }));
            let w = [1.0f32; 4];
            let desc = keepalloc_kernels::FullyConnectedDesc::new(2, 2, &w);
            assert_eq!(
                FullyConnected::create_with_table(&TABLE, &desc).map(drop),
                Err(KernelError::UnsupportedIsa { isa })
            );
            println!("isa-refused={isa}");
        }
        None => {
            assert_eq!(selected_isa(), Err(KernelError::UnknownIsa));
            println!("isa-unknown={name}");
        }
    }
}

fn spawn_children() {
    let missing = Isa::ALL.into_iter().find(|isa| !isa.is_supported());
    let mut runs: Vec<(String, String)> = Isa::available()
        .map(|isa| (isa.name().to_string(), format!("isa-used={isa}")))
        .collect();
    if let Some(isa) = missing {
        runs.push((isa.name().to_string(), format!("isa-refused={isa}")));
    }
    runs.push(("sse9".to_string(), "isa-unknown=sse9".to_string()));
    for (value, marker) in runs {
        let out = common::this_test_binary()
            .args([
                "forced_isa_is_the_one_used",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ISA_ENV, &value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&marker),
            "{ISA_ENV}={value}: status {}, expected `{marker}`\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{ISA_ENV}={value}: {marker}");
    }
}
