use keepalloc_allocators::{AllocatorTable, System};

use crate::selftest::values;
use crate::{
    DotIsa, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedF32Qc8w,
    FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w, FullyConnectedQd8F32Qc8wDesc,
    bf16_from_f32, bf16_to_f32,
};

static SYSTEM: System = System;
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&SYSTEM);

#[test]
fn only_enough_rows_over_a_mebibyte_of_weights_prefetch() {
    // The rule only changes speed (prefetches never change a result), so the rule
    // itself is what is pinned.
    use super::qd8::MR_QD8;
    use crate::tuning::blocked_prefetches;
    assert!(!blocked_prefetches(1, 2, 64 << 20), "bf16 batch 1 streams");
    assert!(blocked_prefetches(2, 2, (1 << 20) + 1));
    assert!(
        !blocked_prefetches(2, 2, 1 << 20),
        "weights that stay in L2"
    );
    assert!(
        !blocked_prefetches(5, MR_QD8, 64 << 20),
        "qd8 below a full tile streams"
    );
    assert!(blocked_prefetches(6, MR_QD8, 2 << 20));
    assert!(blocked_prefetches(128, MR_QD8, 16 << 20));
}

#[test]
fn bf16_tiles_keep_to_8_rows_only_at_4_kib_strides() {
    // The rule only changes speed (a row's chains are the same in 6- to 12-row tiles), so
    // the rule itself is what is pinned.
    use crate::tuning::bf16_tile_rows;
    assert_eq!(bf16_tile_rows(12, 2 * 1000), 12);
    assert_eq!(bf16_tile_rows(12, 2 * 2048), 8);
    assert_eq!(bf16_tile_rows(12, 3 * 4096), 8);
    assert_eq!(bf16_tile_rows(6, 4096), 6);
}

#[test]
fn bf16_row_chunks_and_k_blocks_match_the_f64_reference() {
    // 100 rows: three chunks of widened A (48, 48, 4); K = 601: three K blocks, the
    // last with an odd tail; N = 70: an N edge; strided rows.
    if !DotIsa::Avx512.is_supported() {
        return;
    }
    check_bf16(DotIsa::Avx512, 100, 601, 70, 605, 73);
}

#[test]
fn bf16_amx_blocks_edges_and_k_tails_match_the_f64_reference() {
    // Rows: under one 16-row block, exact 16/32-row blocks, blocks plus AVX-512 rows;
    // K: under one 32-value step (no AMX), exact steps, steps plus an odd tail; N: full
    // panels (stored straight to C) and partial ones (through the scratch block);
    // strided rows.
    if !DotIsa::Amx.is_supported() {
        eprintln!("AMX not available here: test skipped");
        return;
    }
    for &(m, k, n, lda, ldc) in &[
        (15, 100, 70, 100, 70),
        (16, 32, 32, 32, 32),
        (17, 64, 40, 70, 41),
        (32, 31, 64, 31, 64),
        (32, 601, 70, 605, 73),
        (50, 1000, 33, 1000, 33),
        (100, 601, 70, 605, 73),
    ] {
        check_bf16(DotIsa::Amx, m, k, n, lda, ldc);
    }
}

/// Runs a bf16 operator on `isa` and checks every output against the f64 sum with the
/// rounding rule's bound: `(K + 2) · ε · Σ|terms|`.
fn check_bf16(isa: DotIsa, m: usize, k: usize, n: usize, lda: usize, ldc: usize) {
    let x: Vec<u16> = values(1, m * lda)
        .iter()
        .map(|&v| bf16_from_f32(v))
        .collect();
    let w: Vec<u16> = values(2, n * k).iter().map(|&v| bf16_from_f32(v)).collect();
    let bias = values(3, n);
    let op = FullyConnectedBf16F32::create_with_table(
        &TABLE,
        &FullyConnectedBf16F32Desc::new(k, n, &w)
            .with_bias(&bias)
            .with_strides(lda, ldc)
            .with_range(-30.0, 30.0)
            .with_isa(isa),
    )
    .unwrap();
    let mut y = vec![f32::NAN; (m - 1) * ldc + n];
    op.run(m, &x, &mut y).unwrap();
    let eps = f64::from(f32::EPSILON);
    for r in 0..m {
        for j in 0..n {
            let (mut s, mut t) = (f64::from(bias[j]), f64::from(bias[j].abs()));
            for kk in 0..k {
                let p =
                    f64::from(bf16_to_f32(x[r * lda + kk])) * f64::from(bf16_to_f32(w[j * k + kk]));
                s += p;
                t += p.abs();
            }
            let want = s.clamp(-30.0, 30.0);
            let got = f64::from(y[r * ldc + j]);
            assert!(
                (got - want).abs() <= (k as f64 + 2.0) * eps * t,
                "{isa} {m}x{k}x{n} row {r} column {j}: {got} against {want}"
            );
        }
    }
}

#[test]
fn qd8_k_blocks_and_row_chunks_are_bit_identical_to_scalar() {
    // K = 4500: two K blocks with partial sums on the stack; 140 rows: two row chunks
    // of at most 128 (the stack partial sums); N = 130: an N edge in the third panel.
    if !DotIsa::Avx512Vnni.is_supported() {
        return;
    }
    qd8_matches_scalar(DotIsa::Avx512Vnni, 140, 4500, 130);
}

#[test]
fn qd8_amx_blocks_edges_and_k_tails_are_bit_identical_to_scalar() {
    // Rows: under one 16-row block, exact 16/32-row blocks, blocks plus VNNI rows, and
    // two row chunks (140); K: under one 64-value step (no AMX), exact steps, and steps
    // whose last one reaches past K (into the next panel, or the slack after the last
    // one, against zeroed activation bytes: the workspace starts full of garbage); N:
    // one full panel and an edge.
    if !DotIsa::Amx.is_supported() {
        eprintln!("AMX-INT8 not available here: test skipped");
        return;
    }
    for &(m, k, n) in &[
        (15, 256, 64),
        (16, 256, 64),
        (17, 100, 130),
        (32, 64, 64),
        (33, 1000, 130),
        (48, 60, 64),
        (50, 4500, 130),
        (140, 257, 70),
    ] {
        qd8_matches_scalar(DotIsa::Amx, m, k, n);
    }
}

#[test]
fn qd8_avx2_row_chunks_and_k_blocks_equal_the_scalar_kernel_bit_for_bit() {
    // From QD8_AVX2_BLOCKED_FROM rows the AVX2 path widens A and the weights per K block.
    // Rows: the threshold, below it (the tile kernel), tiles of every height, two full
    // chunks and a rest; K: one block, a block and a tail past a multiple of 4, three blocks;
    // N: full panels and edges (partial sums stored for the valid columns only). Weights
    // include -128 and 127, where a wrong sign extension shows.
    use crate::tuning::{QD8_AVX2_BLOCKED_FROM, QD8_AVX2_KC, QD8_AVX2_MC};
    if !DotIsa::Avx2.is_supported() {
        return;
    }
    const { assert!(QD8_AVX2_BLOCKED_FROM <= 6 && 1101 > 2 * QD8_AVX2_KC && 100 > 2 * QD8_AVX2_MC) };
    for &(m, k, n) in &[
        (5, 100, 33),
        (6, 100, 33),
        (7, 513, 16),
        (11, 1101, 70),
        (29, 64, 130),
        (100, 1101, 70),
    ] {
        qd8_matches_scalar(DotIsa::Avx2, m, k, n);
    }
}

/// Runs a qd8 operator on `isa` and on the scalar kernels, each with a workspace full
/// of garbage, and requires bit-identical outputs. Every 7th weight is -128 and every
/// 11th 127.
fn qd8_matches_scalar(isa: DotIsa, m: usize, k: usize, n: usize) {
    let x = values(8 + m as u64, m * k);
    let w: Vec<i8> = values(9 + k as u64, n * k)
        .iter()
        .enumerate()
        .map(|(i, &v)| match (i % 7, i % 11) {
            (0, _) => i8::MIN,
            (_, 0) => i8::MAX,
            _ => (v * 127.0) as i8,
        })
        .collect();
    let scales: Vec<f32> = values(6, n).iter().map(|v| v.abs() / 64.0 + 1e-3).collect();
    let bias = values(7, n);
    let run = |isa: DotIsa| {
        let op = FullyConnectedQd8F32Qc8w::create_with_table(
            &TABLE,
            &FullyConnectedQd8F32Qc8wDesc::new(k, n, &w, &scales)
                .with_bias(&bias)
                .with_range(-2.0, 3.0)
                .with_isa(isa),
        )
        .unwrap();
        let mut ws = vec![0xab_u8; op.workspace_size(m).unwrap()];
        let mut y = vec![f32::NAN; m * n];
        op.run(m, &x, &mut y, &mut ws).unwrap();
        y
    };
    let (got, scalar) = (run(isa), run(DotIsa::Scalar));
    for (i, (a, b)) in got.iter().zip(&scalar).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{isa} {m}x{k}x{n} output {i}: {a} against {b}"
        );
    }
}

#[test]
fn f32_qc8w_row_chunks_and_k_blocks_equal_the_tile_kernel_bit_for_bit() {
    // A batch from F32_QC8W_BLOCKED_FROM rows takes the driver the CPU's rule picks, here
    // each of them in turn; the same rows run ten at a time take the tile kernel (one chain
    // per output, as the others). 100 rows: two row chunks (96, 4), nine row tiles; K =
    // 1100: five sliced K blocks (256 × 4, 76), three copied ones (512, 512, 76); N = 600:
    // two N blocks of the copying driver (16 panels, 3) and an N edge; rows 2048 floats
    // apart (the stride that copies on AMD) and strided ones; clamped and unbounded.
    use crate::tuning::{
        F32_QC8W_BLOCKED_FROM, F32_QC8W_DRIVER, F32_QC8W_KC, F32_QC8W_MC, F32_QC8W_TILE_KC,
        F32Qc8wDriver, LOWP_N_BLOCK_BYTES,
    };
    if !DotIsa::Avx512.is_supported() {
        return;
    }
    let (m, k, n) = (100, 1100, 600);
    assert!(m > F32_QC8W_MC && k > 4 * F32_QC8W_KC && k > 2 * F32_QC8W_TILE_KC);
    assert!(10 < F32_QC8W_BLOCKED_FROM && n > LOWP_N_BLOCK_BYTES / F32_QC8W_TILE_KC);
    for driver in [
        None,
        Some(F32Qc8wDriver::Sliced),
        Some(F32Qc8wDriver::TilesCopied),
        Some(F32Qc8wDriver::Tiles),
    ] {
        F32_QC8W_DRIVER.set(driver);
        for (lda, ldc) in [(2048, 600), (1103, 605)] {
            f32_qc8w_whole_equals_pieces(m, k, n, lda, ldc, &format!("{driver:?}"));
        }
    }
    F32_QC8W_DRIVER.set(None);
}

#[test]
fn f32_qc8w_slices_on_intel_and_widens_in_the_tiles_on_amd() {
    // Measured on Zen 4 and Zen 5 (tiles ahead from K = 1024) and the Xeon (the slice).
    use crate::cpu::test_cpus::{XEON, ZEN4, ZEN5};
    use crate::tuning::{F32_QC8W_BLOCKED_FROM, F32Qc8wDriver::*, f32_qc8w_driver};
    let (few, many) = (F32_QC8W_BLOCKED_FROM - 1, F32_QC8W_BLOCKED_FROM);
    for (lda, amd) in [(4096 * 2, TilesCopied), (4096, TilesCopied), (4000, Tiles)] {
        assert_eq!(f32_qc8w_driver(many, lda, XEON), Sliced, "lda {lda}");
        assert_eq!(f32_qc8w_driver(many, lda, ZEN4), amd, "lda {lda}");
        assert_eq!(f32_qc8w_driver(many, lda, ZEN5), amd, "lda {lda}");
        for cpu in [XEON, ZEN4, ZEN5] {
            assert_eq!(f32_qc8w_driver(few, lda, cpu), Tiles, "lda {lda}");
        }
    }
}

/// `m` rows of f32_qc8w at once and ten at a time, bit for bit (see the caller).
fn f32_qc8w_whole_equals_pieces(m: usize, k: usize, n: usize, lda: usize, ldc: usize, what: &str) {
    let x = values(11, m * lda);
    let w: Vec<i8> = values(12, n * k)
        .iter()
        .map(|&v| (v * 127.0) as i8)
        .collect();
    let scales: Vec<f32> = values(13, n)
        .iter()
        .map(|v| v.abs() / 64.0 + 1e-3)
        .collect();
    let bias = values(14, n);
    for (lo, hi) in [(-2.0, 3.0), (f32::NEG_INFINITY, f32::INFINITY)] {
        let op = FullyConnectedF32Qc8w::create_with_table(
            &TABLE,
            &FullyConnectedF32Qc8wDesc::new(k, n, &w, &scales)
                .with_bias(&bias)
                .with_strides(lda, ldc)
                .with_range(lo, hi)
                .with_isa(DotIsa::Avx512),
        )
        .unwrap();
        let run = |rows, x: &[f32], y: &mut [f32]| op.run(rows, x, y).unwrap();
        let what = format!("{what} lda {lda} [{lo}, {hi}]");
        whole_equals_pieces((m, n, lda, ldc), 10, &x, run, &what);
    }
}

/// Runs `m` rows (`lda` apart) at once and then `piece` at a time through `run(rows, x, y)`
/// (`n` outputs a row, `ldc` apart), and requires bit-identical outputs.
fn whole_equals_pieces<T>(
    (m, n, lda, ldc): (usize, usize, usize, usize),
    piece: usize,
    x: &[T],
    run: impl Fn(usize, &[T], &mut [f32]),
    what: &str,
) {
    let mut whole = vec![f32::NAN; (m - 1) * ldc + n];
    run(m, x, &mut whole);
    let mut pieces = vec![f32::NAN; (m - 1) * ldc + n];
    for r0 in (0..m).step_by(piece) {
        run(piece.min(m - r0), &x[r0 * lda..], &mut pieces[r0 * ldc..]);
    }
    for (i, (a, b)) in whole.iter().zip(&pieces).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what} output {i} (row {}, column {}): {a} against {b}",
            i / ldc,
            i % ldc
        );
    }
}

#[test]
fn bf16_avx2_row_chunks_and_k_blocks_equal_the_tile_kernel_bit_for_bit() {
    // From BF16_AVX2_BLOCKED_FROM rows AVX2 widens A and the weights per K block for the
    // f32 kernel; the same rows run five at a time take the bf16 tile kernel (the same FMA
    // chain per output). 100 rows: three chunks (48, 48, 4); K = 601: three K blocks, the
    // last with an odd tail; N = 70: an N edge; strided rows; clamped and unbounded. Then
    // against the f64 reference, as the other bf16 paths.
    use crate::tuning::{BF16_AVX2_BLOCKED_FROM, BF16_AVX2_KC, BF16_AVX2_MC};
    if !DotIsa::Avx2.is_supported() {
        return;
    }
    let (m, k, n, lda, ldc) = (100, 601, 70, 605, 73);
    const { assert!(100 > 2 * BF16_AVX2_MC && 601 > 2 * BF16_AVX2_KC && 5 < BF16_AVX2_BLOCKED_FROM) };
    let x: Vec<u16> = values(21, m * lda)
        .iter()
        .map(|&v| bf16_from_f32(v))
        .collect();
    let w: Vec<u16> = values(22, n * k)
        .iter()
        .map(|&v| bf16_from_f32(v))
        .collect();
    let bias = values(23, n);
    for (lo, hi) in [(-2.0, 3.0), (f32::NEG_INFINITY, f32::INFINITY)] {
        let op = FullyConnectedBf16F32::create_with_table(
            &TABLE,
            &FullyConnectedBf16F32Desc::new(k, n, &w)
                .with_bias(&bias)
                .with_strides(lda, ldc)
                .with_range(lo, hi)
                .with_isa(DotIsa::Avx2),
        )
        .unwrap();
        let run = |rows, x: &[u16], y: &mut [f32]| op.run(rows, x, y).unwrap();
        whole_equals_pieces((m, n, lda, ldc), 5, &x, run, &format!("[{lo}, {hi}]"));
    }
    check_bf16(DotIsa::Avx2, m, k, n, lda, ldc);
}
