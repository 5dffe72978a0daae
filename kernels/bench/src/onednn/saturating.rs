//! oneDNN's u8 × s8 products on a CPU without VNNI: its int8 GEMM adds each pair of
//! consecutive products with `vpmaddubsw`, which saturates the pair's sum to i16 (oneDNN's
//! documented int8 limitation on AVX2 and AVX-512 without VNNI). This is that arithmetic,
//! so the bench can tell the documented saturation from a wrong result.

/// Whether this CPU's oneDNN int8 GEMM has a VNNI path (`vpdpbusd` sums in i32, exactly).
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512vnni") || has!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `Σ_k q[k]·w[k]` with each pair `(2i, 2i+1)` summed in i16 with saturation, as
/// `vpmaddubsw` does; an odd K's last product stands alone (padded with zero).
pub fn dot_u8s8_pairs_saturating(q: &[u8], w: &[i8]) -> i64 {
    q.chunks(2)
        .zip(w.chunks(2))
        .map(|(a, b)| {
            let pair: i32 = a.iter().zip(b).map(|(&a, &b)| a as i32 * b as i32).sum();
            pair.clamp(i16::MIN.into(), i16::MAX.into()) as i64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_past_i16_saturates_and_the_rest_is_exact() {
        // 255·127 + 255·127 = 64770 saturates to 32767; 255·(-128)·2 to -32768.
        assert_eq!(dot_u8s8_pairs_saturating(&[255, 255], &[127, 127]), 32767);
        assert_eq!(
            dot_u8s8_pairs_saturating(&[255, 255], &[-128, -128]),
            -32768
        );
        // Pairs within i16 and an odd tail are exact.
        assert_eq!(
            dot_u8s8_pairs_saturating(&[1, 2, 3, 4, 5], &[-1, 2, -3, 4, -5]),
            -1 + 4 - 9 + 16 - 25
        );
        // Saturation is per pair, not of the total.
        assert_eq!(
            dot_u8s8_pairs_saturating(&[255, 255, 255, 255], &[127, 127, 127, 127]),
            2 * 32767
        );
    }
}
