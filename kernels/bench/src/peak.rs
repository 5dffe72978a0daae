//! Which probe bounds a low-precision path, so that the bench's "% peak" divides by the
//! instruction the path runs.

use keepalloc_kernels::DotIsa;

use crate::lowp_kind::Kind;

/// One core's probe figures of the run (GOPS), each the best it read.
pub struct Probes {
    pub bf16: f64,
    pub vnni: f64,
    /// AVX2 `vpmaddwd` + `vpaddd`, the int8 kernels' instructions without VNNI.
    pub madd: f64,
    pub fma: f64,
    pub amx_bf16: Option<f64>,
    pub amx_int8: Option<f64>,
}

impl Probes {
    /// The dot-product instruction of `kind` and its probe (FMA for f32_qc8w).
    pub fn dot(&self, kind: Kind) -> (&'static str, f64) {
        match kind {
            Kind::Bf16F32 => ("vdpbf16ps", self.bf16),
            Kind::Qd8F32Qc8w => ("vpdpbusd", self.vnni),
            Kind::F32Qc8w => ("FMA", self.fma),
        }
    }

    /// The AMX probe of `kind`, where the CPU has AMX.
    pub fn amx(&self, kind: Kind) -> Option<f64> {
        match kind {
            Kind::Bf16F32 => self.amx_bf16,
            Kind::Qd8F32Qc8w => self.amx_int8,
            Kind::F32Qc8w => None,
        }
    }
}

/// The AMX tile multiply of `kind`.
pub fn amx_name(kind: Kind) -> &'static str {
    if kind == Kind::Bf16F32 {
        "tdpbf16ps"
    } else {
        "tdpbusd"
    }
}

/// The instruction whose probe bounds keepalloc's `kind` on `isa`, and that probe: the tile
/// multiply on AMX, the FMA where bf16 runs widened on FMAs (`DotIsa::Avx512`, chosen on
/// Intel, where `vdpbf16ps` runs at half their rate, and AVX2, which has no bf16
/// arithmetic), `vpmaddwd` for int8 on AVX2 (no VNNI), else the dot product.
pub fn bounding_probe(kind: Kind, isa: Option<DotIsa>, p: &Probes) -> (&'static str, f64) {
    let widened = matches!(isa, Some(DotIsa::Avx512 | DotIsa::Avx2));
    match (isa, p.amx(kind)) {
        (Some(DotIsa::Amx), Some(amx)) => (amx_name(kind), amx),
        _ if kind == Kind::Bf16F32 && widened => ("FMA", p.fma),
        _ if kind == Kind::Qd8F32Qc8w && isa == Some(DotIsa::Avx2) => ("vpmaddwd", p.madd),
        _ => p.dot(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percent_of_peak_divides_by_the_probe_of_the_instruction_the_path_runs() {
        let p = Probes {
            bf16: 87.0,
            vnni: 759.0,
            madd: 190.0,
            fma: 176.0,
            amx_bf16: Some(3296.0),
            amx_int8: Some(6203.0),
        };
        let bf16 = Kind::Bf16F32;
        // bf16 widened on FMAs (Intel without AMX): the FMA, not `vdpbf16ps`.
        assert_eq!(
            bounding_probe(bf16, Some(DotIsa::Avx512), &p),
            ("FMA", 176.0)
        );
        assert_eq!(
            bounding_probe(bf16, Some(DotIsa::Avx512Bf16), &p),
            ("vdpbf16ps", 87.0)
        );
        assert_eq!(
            bounding_probe(bf16, Some(DotIsa::Amx), &p),
            ("tdpbf16ps", 3296.0)
        );
        let qd8 = Kind::Qd8F32Qc8w;
        assert_eq!(
            bounding_probe(qd8, Some(DotIsa::Avx512Vnni), &p),
            ("vpdpbusd", 759.0)
        );
        assert_eq!(
            bounding_probe(qd8, Some(DotIsa::Amx), &p),
            ("tdpbusd", 6203.0)
        );
        assert_eq!(
            bounding_probe(Kind::F32Qc8w, Some(DotIsa::Avx512), &p),
            ("FMA", 176.0)
        );
        // AVX2 (no bf16 arithmetic, no VNNI): the FMA for bf16, vpmaddwd for int8.
        assert_eq!(bounding_probe(bf16, Some(DotIsa::Avx2), &p), ("FMA", 176.0));
        assert_eq!(
            bounding_probe(qd8, Some(DotIsa::Avx2), &p),
            ("vpmaddwd", 190.0)
        );
        // No AMX probe (a CPU without AMX): the dot product.
        let no_amx = Probes {
            amx_bf16: None,
            amx_int8: None,
            ..p
        };
        assert_eq!(
            bounding_probe(qd8, Some(DotIsa::Amx), &no_amx),
            ("vpdpbusd", 759.0)
        );
    }
}
