//! The bench's low-precision operator kinds, shared by the run, its options and the
//! peak each is measured against.

/// A low-precision operator kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bf16F32,
    Qd8F32Qc8w,
    F32Qc8w,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Bf16F32, Kind::Qd8F32Qc8w, Kind::F32Qc8w];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Bf16F32 => "bf16_f32",
            Kind::Qd8F32Qc8w => "qd8_f32_qc8w",
            Kind::F32Qc8w => "f32_qc8w",
        }
    }
}
