//! AMX blocks: AMX-INT8 (`tdpbusd`) for `qd8_f32_qc8w` and AMX-BF16 (`tdpbf16ps`) for
//! `bf16_f32`, on the matrix unit of Intel's Sapphire Rapids and later Xeons (eight times the
//! int8 multiply-adds per cycle of AVX512-VNNI, sixteen times the bf16 ones of `vdpbf16ps`).
//!
//! The int8 blocks:
//!
//! The blocks reuse everything the AVX512-VNNI driver already has (`blocked::qd8`): the same
//! quantized activations (`q + 128`, unsigned, as `vpdpbusd` wants; `tdpbusd` multiplies the
//! same unsigned bytes by the same signed weights), the same packed panels (64 columns, each
//! 4-byte word row 256 bytes long: a 16-column slice of 16 word rows is one B tile, loaded
//! with a 256-byte stride), and the same i32 partial sums on the driver's stack. A block
//! computes 32 rows × 64 columns over the whole K rounded up to 64, as two 32 × 32 halves
//! of four C tiles (two A tiles, two B tiles): the activation bytes past K are zeroed, so
//! whatever the panel holds past its K (the next panel, or the zeroed slack after the last
//! one) adds nothing. The AVX512-VNNI microkernel then applies the epilogue. Every sum is an
//! exact i32, so the output is bit-identical to the AVX512-VNNI and scalar kernels.
//!
//! Linux gives a thread the AMX tile state only after the process asked for it
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); `DotIsa::Amx.is_supported()` asks once, and the
//! instruction set counts as supported only if the CPU has AMX-TILE and AMX-INT8, the OS
//! enables their state in XCR0 and the kernel grants the permission.
//!
//! Rust's AMX intrinsics are unstable, so the instructions are written with `asm!` (the
//! assembler knows them); the compiler never uses the tile registers itself, so they are
//! ours between `ldtilecfg` and `tilerelease`.

use core::arch::asm;

/// Rows of one AMX block (two A tiles of 16 rows).
pub(super) const BLOCK_ROWS: usize = 32;

/// `(first row, height)` of the blocks that cover `rows` (a multiple of 16): blocks of
/// [`BLOCK_ROWS`] while they fit, then one of 16.
pub(super) fn row_blocks(rows: usize) -> impl Iterator<Item = (usize, usize)> {
    debug_assert!(rows.is_multiple_of(16));
    (0..rows)
        .step_by(BLOCK_ROWS)
        .map(move |m0| (m0, BLOCK_ROWS.min(rows - m0)))
}
/// 4-byte words of K per tile step (a tile row is 64 bytes).
pub(super) const STEP_WORDS: usize = 16;

/// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
#[repr(C, align(64))]
pub(super) struct Config([u8; 64]);

impl Config {
    pub(super) const fn new() -> Config {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            // colsb[t] (u16, little-endian) at 16 + 2t, rows[t] at 48 + t.
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
            t += 1;
        }
        Config(c)
    }
}

/// Loads `cfg` into the tile configuration of this thread.
///
/// # Safety
/// `DotIsa::Amx.is_supported()` returned true.
#[inline]
pub(super) unsafe fn load(cfg: &Config) {
    // `cfg` is 64 readable bytes of a valid palette-1 configuration.
    // SAFETY: AMX is enabled and permitted (caller); `cfg` is valid (above).
    unsafe { asm!("ldtilecfg [{}]", in(reg) cfg, options(nostack, readonly, preserves_flags)) }
}

/// Releases this thread's tile state (so it is not saved and restored at every context
/// switch).
///
/// # Safety
/// `DotIsa::Amx.is_supported()` returned true.
#[inline]
pub(super) unsafe fn release() {
    // SAFETY: AMX is enabled and permitted (caller).
    unsafe { asm!("tilerelease", options(nostack, nomem, preserves_flags)) }
}

/// `part[r][c] = Σ_k a[r][k] · w[k][c]` for 32 rows and 64 columns over `groups` steps of
/// 16 words: `a` is 32 rows of `64 · groups` unsigned bytes, `lda` apart; `w` is `16 ·
/// groups` readable word rows of 256 bytes (64 columns × 4 signed bytes; rows past the
/// panel's K may hold anything, their activation bytes being zero); `part` is 32 rows of 64
/// i32, 256 bytes apart (overwritten, not accumulated).
///
/// # Safety
/// The configuration of [`Config::new`] is loaded on this thread; the buffers are as
/// described; `groups >= 1`.
#[inline]
pub(super) unsafe fn block(a: *const u8, lda: usize, w: *const u8, groups: usize, part: *mut i32) {
    const LDW: usize = 256;
    for half in 0..2 {
        // The loads read 16-row × 64-byte tiles inside A (rows 0..32, bytes 0..64·groups) and
        // the packed rows (columns 32·half .. 32·half + 32 of word rows 0..16·groups); the
        // stores write 16-row × 64-byte tiles inside `part` (rows 0..32, columns 32·half ..
        // 32·half + 32).
        // SAFETY: every tile access stays inside the buffers the caller vouches for (above).
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "2:",
                "tileloadd tmm4, [{a0} + {lda} * 1]",
                "tileloadd tmm6, [{b} + {ldw} * 1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b} + {ldw} * 1 + 64]",
                "tdpbusd tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {lda} * 1]",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                "add {a0}, 64",
                "add {a1}, 64",
                "add {b}, {bstep}",
                "dec {n}",
                "jnz 2b",
                "tilestored [{c0} + {ldw} * 1], tmm0",
                "tilestored [{c0} + {ldw} * 1 + 64], tmm1",
                "tilestored [{c1} + {ldw} * 1], tmm2",
                "tilestored [{c1} + {ldw} * 1 + 64], tmm3",
                a0 = inout(reg) a => _,
                a1 = inout(reg) a.wrapping_add(16 * lda) => _,
                lda = in(reg) lda,
                b = inout(reg) w.wrapping_add(128 * half) => _,
                ldw = in(reg) LDW,
                bstep = in(reg) STEP_WORDS * LDW,
                n = inout(reg) groups => _,
                c0 = in(reg) part.wrapping_add(32 * half),
                c1 = in(reg) part.wrapping_add(16 * 64 + 32 * half),
                options(nostack),
            );
        }
    }
}

/// [`block`] for 16 rows: four C tiles across the 64 columns, one A tile, the four B
/// tiles of a step through three registers.
///
/// # Safety
/// As [`block`], with 16 rows of A and of `part`.
#[inline]
pub(super) unsafe fn block16(
    a: *const u8,
    lda: usize,
    w: *const u8,
    groups: usize,
    part: *mut i32,
) {
    const LDW: usize = 256;
    // The loads read 16-row × 64-byte tiles inside A (rows 0..16, bytes 0..64·groups) and the
    // packed rows (word rows 0..16·groups, all 64 columns); the stores write the four 16-row
    // × 64-byte tiles of `part`.
    // SAFETY: every tile access stays inside the buffers the caller vouches for (above).
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a0} + {lda} * 1]",
            "tileloadd tmm5, [{b} + {ldw} * 1]",
            "tileloadd tmm6, [{b} + {ldw} * 1 + 64]",
            "tileloadd tmm7, [{b} + {ldw} * 1 + 128]",
            "tdpbusd tmm0, tmm4, tmm5",
            "tileloadd tmm5, [{b} + {ldw} * 1 + 192]",
            "tdpbusd tmm1, tmm4, tmm6",
            "tdpbusd tmm2, tmm4, tmm7",
            "tdpbusd tmm3, tmm4, tmm5",
            "add {a0}, 64",
            "add {b}, {bstep}",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c0} + {ldw} * 1], tmm0",
            "tilestored [{c0} + {ldw} * 1 + 64], tmm1",
            "tilestored [{c0} + {ldw} * 1 + 128], tmm2",
            "tilestored [{c0} + {ldw} * 1 + 192], tmm3",
            a0 = inout(reg) a => _,
            lda = in(reg) lda,
            b = inout(reg) w => _,
            ldw = in(reg) LDW,
            bstep = in(reg) STEP_WORDS * LDW,
            n = inout(reg) groups => _,
            c0 = in(reg) part,
            options(nostack),
        );
    }
}

/// bf16: `c[r][j] = bias[j] + Σ_k a[r][k] · w[k][j]` for 32 rows and 32 columns over
/// `groups` steps of 16 pairs (32 values of K): `a` is 32 rows of `32 · groups` bf16 values,
/// `lda` bytes apart; `w` is `16 · groups` packed pair rows of 128 bytes (32 columns × 2
/// bf16); `bias` is 32 floats; `c` is 32 rows of 32 floats, `ldc` bytes apart (written).
/// Each element starts from its bias and adds the pairs in K order, the even value of a pair
/// before the odd one (`tdpbf16ps`: round to nearest even, denormal inputs and results
/// flushed to zero).
///
/// # Safety
/// The configuration of [`Config::new`] is loaded on this thread; the buffers are as
/// described; `groups >= 1`; the CPU has AMX-BF16.
#[inline]
pub(super) unsafe fn block_bf16(
    a: *const u8,
    lda: usize,
    w: *const u8,
    groups: usize,
    bias: *const f32,
    c: *mut f32,
    ldc: usize,
) {
    const LDW: usize = 128;
    // The loads read 16-row × 64-byte tiles inside A (rows 0..32, bytes 0..64·groups), the
    // packed pair rows (0..16·groups, all 32 columns) and the bias (64 bytes each, stride 0);
    // the stores write 16-row × 64-byte tiles inside C (rows 0..32, columns 0..32).
    // SAFETY: every tile access stays inside the buffers the caller vouches for (above).
    unsafe {
        asm!(
            "tileloadd tmm0, [{bias} + {zero} * 1]",
            "tileloadd tmm1, [{bias} + {zero} * 1 + 64]",
            "tileloadd tmm2, [{bias} + {zero} * 1]",
            "tileloadd tmm3, [{bias} + {zero} * 1 + 64]",
            "2:",
            "tileloadd tmm4, [{a0} + {lda} * 1]",
            "tileloadd tmm6, [{b} + {ldw} * 1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b} + {ldw} * 1 + 64]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a1} + {lda} * 1]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a0}, 64",
            "add {a1}, 64",
            "add {b}, {bstep}",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c0} + {ldc} * 1], tmm0",
            "tilestored [{c0} + {ldc} * 1 + 64], tmm1",
            "tilestored [{c1} + {ldc} * 1], tmm2",
            "tilestored [{c1} + {ldc} * 1 + 64], tmm3",
            bias = in(reg) bias,
            zero = in(reg) 0usize,
            a0 = inout(reg) a => _,
            a1 = inout(reg) a.wrapping_add(16 * lda) => _,
            lda = in(reg) lda,
            b = inout(reg) w => _,
            ldw = in(reg) LDW,
            bstep = in(reg) STEP_WORDS * LDW,
            n = inout(reg) groups => _,
            c0 = in(reg) c,
            c1 = in(reg) c.wrapping_byte_add(16 * ldc),
            ldc = in(reg) ldc,
            options(nostack),
        );
    }
}

/// [`block_bf16`] for 16 rows (the C tiles of the second half of the rows unused).
///
/// # Safety
/// As [`block_bf16`], with 16 rows of A and of C.
#[inline]
pub(super) unsafe fn block_bf16_16(
    a: *const u8,
    lda: usize,
    w: *const u8,
    groups: usize,
    bias: *const f32,
    c: *mut f32,
    ldc: usize,
) {
    const LDW: usize = 128;
    // SAFETY: as `block_bf16`, over rows 0..16.
    unsafe {
        asm!(
            "tileloadd tmm0, [{bias} + {zero} * 1]",
            "tileloadd tmm1, [{bias} + {zero} * 1 + 64]",
            "2:",
            "tileloadd tmm4, [{a0} + {lda} * 1]",
            "tileloadd tmm6, [{b} + {ldw} * 1]",
            "tileloadd tmm7, [{b} + {ldw} * 1 + 64]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "add {a0}, 64",
            "add {b}, {bstep}",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c0} + {ldc} * 1], tmm0",
            "tilestored [{c0} + {ldc} * 1 + 64], tmm1",
            bias = in(reg) bias,
            zero = in(reg) 0usize,
            a0 = inout(reg) a => _,
            lda = in(reg) lda,
            b = inout(reg) w => _,
            ldw = in(reg) LDW,
            bstep = in(reg) STEP_WORDS * LDW,
            n = inout(reg) groups => _,
            c0 = in(reg) c,
            ldc = in(reg) ldc,
            options(nostack),
        );
    }
}
