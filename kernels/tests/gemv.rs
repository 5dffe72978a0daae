//! Batch 1 (the GEMV path): K and N tails, the alternating panel order (every other run on
//! a thread reads the panels last to first) and the weights sizes at which the AVX-512 GEMV
//! starts prefetching, on every ISA this CPU has, against the f64 reference.

mod common;

use common::{Case, Rng};
use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{FullyConnected, Isa};

static BACKEND: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs `case` (batch 1) `runs` times on one operator, on this thread, checking every
/// output against the reference and all of them bit-identical (so both panel orders give
/// the same result).
fn runs_agree(case: &Case, isa: Isa, runs: usize, what: &str) -> Vec<f32> {
    assert_eq!(case.m, 1);
    let op = FullyConnected::create_with_table(&TABLE, &case.desc().with_isa(isa)).unwrap();
    let mut first: Option<Vec<f32>> = None;
    for r in 0..runs {
        let mut out = case.output();
        op.run(1, &case.input, &mut out).unwrap();
        case.check(&out, &format!("{what} run {r}"));
        match &first {
            None => first = Some(out),
            Some(f) => assert_eq!(bits(f), bits(&out), "{what}: run {r} differs from run 0"),
        }
    }
    first.unwrap()
}

#[test]
fn k_and_n_tails_in_both_panel_orders() {
    let mut rng = Rng::new(21);
    // K around the 4-step unroll and its remainder; N around the 16-lane halves and the
    // 8/16/32-column panels of the ISAs (a panel with 1..NR-1 valid columns last).
    let ks = [
        1, 2, 3, 4, 5, 6, 7, 9, 31, 33, 63, 65, 127, 255, 257, 1023, 1537,
    ];
    let ns = [
        1, 2, 5, 15, 16, 17, 31, 32, 33, 47, 48, 63, 65, 97, 255, 257,
    ];
    for isa in Isa::available() {
        for (i, &k) in ks.iter().enumerate() {
            for &n in ns.iter().skip(i % 3).step_by(3) {
                let case = Case::random(&mut rng, 1, k, n);
                // Three runs: forward, backward, forward (on this test's thread).
                runs_agree(&case, isa, 3, &format!("{isa} 1x{k}x{n}"));
            }
        }
    }
}

#[test]
fn weights_around_the_l2_take_the_prefetching_gemv_in_both_orders() {
    // 1x1537x1537 (9.5 MB packed, past a 2 MiB L2, where the AVX-512 GEMV prefetches on
    // Intel) and 1x300x1700 (2.1 MB, either side of it depending on the CPU), with K and N
    // tails; one thread and two agree bit for bit, whatever order each thread's run takes.
    let mut rng = Rng::new(22);
    for (k, n) in [(1537, 1537), (300, 1700)] {
        let case = Case::random(&mut rng, 1, k, n);
        for isa in Isa::available() {
            let one = runs_agree(&case, isa, 2, &format!("{isa} 1x{k}x{n}"));
            let op = FullyConnected::create_with_table(&TABLE, &case.desc().with_isa(isa)).unwrap();
            for threads in [2, 3] {
                for _ in 0..2 {
                    let mut out = case.output();
                    op.run_with_threads(1, &case.input, &mut out, threads)
                        .unwrap();
                    assert_eq!(
                        bits(&one),
                        bits(&out),
                        "{isa} 1x{k}x{n}: {threads} threads differ from one"
                    );
                }
            }
        }
    }
}

#[test]
fn interleaved_operators_each_stay_correct() {
    // The panel order alternates per thread, not per operator: two operators run in turn
    // see every order combination; each must match the reference every time.
    let mut rng = Rng::new(23);
    let a = Case::random(&mut rng, 1, 200, 77);
    let b = Case::random(&mut rng, 1, 77, 200);
    for isa in Isa::available() {
        let op_a = FullyConnected::create_with_table(&TABLE, &a.desc().with_isa(isa)).unwrap();
        let op_b = FullyConnected::create_with_table(&TABLE, &b.desc().with_isa(isa)).unwrap();
        for r in 0..5 {
            let mut out = a.output();
            op_a.run(1, &a.input, &mut out).unwrap();
            a.check(&out, &format!("{isa} a run {r}"));
            for _ in 0..r % 2 + 1 {
                let mut out = b.output();
                op_b.run(1, &b.input, &mut out).unwrap();
                b.check(&out, &format!("{isa} b run {r}"));
            }
        }
    }
}
