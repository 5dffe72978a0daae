//! What this CPU is: the instruction sets it runs (for the f32 kernels, [`Isa`]; for the
//! bf16 and int8 ones, [`DotIsa`]), whether the OS lets this process use AMX, and its caches
//! and vendor as the tuning rules need them. Read from CPUID once; nothing here chooses.

use core::fmt;

/// An instruction set with its own microkernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Portable Rust, any target.
    Scalar,
    /// x86-64 AVX2 + FMA (6x16 tiles).
    Avx2,
    /// x86-64 AVX-512F (up to 8x32 tiles, masked edges).
    Avx512,
    /// aarch64 NEON (8x8 tiles).
    Neon,
}

impl Isa {
    /// Every instruction set, best first.
    pub const ALL: [Isa; 4] = [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar];

    /// The lower-case name `KEEPALLOC_KERNELS_ISA` accepts.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a name as `KEEPALLOC_KERNELS_ISA` spells it (case-insensitive).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }

    /// True when this CPU can run the kernels of `self`.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The best instruction set this CPU supports (ignoring the environment).
    pub fn detect() -> Isa {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// Every instruction set this CPU supports, best first.
    pub fn available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.is_supported())
    }

    pub(crate) fn to_code(self) -> u8 {
        match self {
            Isa::Scalar => 1,
            Isa::Avx2 => 2,
            Isa::Avx512 => 3,
            Isa::Neon => 4,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.to_code() == code)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An instruction set with low-precision (bf16 / int8) microkernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DotIsa {
    /// Portable Rust: the reference kernels (8 columns, one row at a time).
    Scalar,
    /// AVX2 + FMA: bf16 widened to f32 with shifts; int8 sign/zero-extended to i16 and
    /// multiplied with `vpmaddwd`; int8 weights widened with `vpmovsxbd`.
    Avx2,
    /// AVX-VNNI (VEX `vpdpbusd` on ymm), with AVX2 + FMA.
    AvxVnni,
    /// AVX-512F/BW/DQ/VL without the dot-product extensions: the f32 × int8 kernel, and bf16
    /// widened to f32 for FMA (faster than `vdpbf16ps` on Intel cores).
    Avx512,
    /// AVX512-VNNI (`vpdpbusd` on zmm).
    Avx512Vnni,
    /// AVX512-BF16 (`vdpbf16ps` on zmm).
    Avx512Bf16,
    /// AMX (`tdpbusd` for int8, `tdpbf16ps` for bf16, on tiles), with AVX512-VNNI and
    /// AVX-512F for the edges and the epilogues: Intel Xeons from Sapphire Rapids on, where
    /// the kernel grants the tile state (Linux).
    Amx,
}

impl DotIsa {
    /// Every dot-product instruction set, best first.
    pub const ALL: [DotIsa; 7] = [
        DotIsa::Amx,
        DotIsa::Avx512Bf16,
        DotIsa::Avx512Vnni,
        DotIsa::Avx512,
        DotIsa::AvxVnni,
        DotIsa::Avx2,
        DotIsa::Scalar,
    ];

    /// The lower-case name `KEEPALLOC_KERNELS_DOT_ISA` accepts.
    pub const fn name(self) -> &'static str {
        match self {
            DotIsa::Scalar => "scalar",
            DotIsa::Avx2 => "avx2",
            DotIsa::AvxVnni => "avxvnni",
            DotIsa::Avx512 => "avx512",
            DotIsa::Avx512Vnni => "avx512vnni",
            DotIsa::Avx512Bf16 => "avx512bf16",
            DotIsa::Amx => "amx",
        }
    }

    /// Parses a name as `KEEPALLOC_KERNELS_DOT_ISA` spells it (case-insensitive).
    pub fn from_name(name: &str) -> Option<DotIsa> {
        DotIsa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }

    /// True when this CPU can run the kernels of `self`.
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = || has!("avx2") && has!("fma");
            let avx512 =
                || has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq");
            match self {
                DotIsa::Scalar => true,
                DotIsa::Avx2 => avx2(),
                DotIsa::AvxVnni => avx2() && has!("avxvnni"),
                DotIsa::Avx512 => avx512(),
                DotIsa::Avx512Vnni => avx512() && has!("avx512vnni"),
                DotIsa::Avx512Bf16 => avx512() && has!("avx512bf16"),
                DotIsa::Amx => avx512() && has!("avx512vnni") && amx::supported(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == DotIsa::Scalar
        }
    }

    /// Every dot-product instruction set this CPU supports, best first.
    pub fn available() -> impl Iterator<Item = DotIsa> {
        DotIsa::ALL.into_iter().filter(|isa| isa.is_supported())
    }

    pub(crate) fn to_code(self) -> u8 {
        match self {
            DotIsa::Scalar => 2,
            DotIsa::Avx2 => 3,
            DotIsa::AvxVnni => 4,
            DotIsa::Avx512 => 5,
            DotIsa::Avx512Vnni => 6,
            DotIsa::Avx512Bf16 => 7,
            DotIsa::Amx => 8,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<DotIsa> {
        DotIsa::ALL.into_iter().find(|isa| isa.to_code() == code)
    }
}

impl fmt::Display for DotIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// AMX's tile state: CPUID, XCR0 and (Linux) the kernel's permission for this process.
#[cfg(target_arch = "x86_64")]
mod amx {
    use core::sync::atomic::{AtomicU8, Ordering};

    /// 0: not checked yet; 1: not supported; 2: supported.
    static STATE: AtomicU8 = AtomicU8::new(0);

    /// True when this thread may run the AMX blocks: the CPU has AMX-TILE, AMX-INT8 and AMX-BF16
    /// (every AMX CPU so far has all three), the OS
    /// enables their register state, and (Linux) the kernel granted this process the tile
    /// data permission (asked for on the first call).
    pub(crate) fn supported() -> bool {
        match STATE.load(Ordering::Acquire) {
            1 => false,
            2 => true,
            _ => {
                let ok = detect();
                STATE.store(if ok { 2 } else { 1 }, Ordering::Release);
                ok
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[allow(unused_unsafe)]
    fn detect() -> bool {
        use core::arch::x86_64::{__cpuid, __cpuid_count};
        // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
        let max = unsafe { __cpuid(0) }.eax;
        if max < 7 {
            return false;
        }
        // SAFETY: leaf 1 and leaf 7 exist (max >= 7).
        let (l1, l7) = unsafe { (__cpuid(1), __cpuid_count(7, 0)) };
        let osxsave = l1.ecx & (1 << 27) != 0;
        let amx_tile = l7.edx & (1 << 24) != 0;
        let amx_int8 = l7.edx & (1 << 25) != 0;
        let amx_bf16 = l7.edx & (1 << 22) != 0;
        if !(osxsave && amx_tile && amx_int8 && amx_bf16) {
            return false;
        }
        // SAFETY: OSXSAVE is set, so XGETBV is enabled; XCR0 is register 0.
        let xcr0 = unsafe { xgetbv0() };
        // XTILECFG (bit 17) and XTILEDATA (bit 18).
        if xcr0 & (0b11 << 17) != 0b11 << 17 {
            return false;
        }
        // From <asm/prctl.h> and the kernel's XSAVE feature numbers (not in the libc crate).
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // arch_prctl(ARCH_REQ_XCOMP_PERM, 18) only changes which XSAVE features this process may
        // use.
        // SAFETY: a syscall that reads and writes no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn detect() -> bool {
        false
    }

    /// XCR0.
    ///
    /// # Safety
    /// The CPU has OSXSAVE set.
    #[cfg(target_os = "linux")]
    #[target_feature(enable = "xsave")]
    unsafe fn xgetbv0() -> u64 {
        // SAFETY: forwarded (caller).
        unsafe { core::arch::x86_64::_xgetbv(0) }
    }
}

/// What the cache rules know of this CPU (see [`cache`]).
#[derive(Clone, Copy)]
pub(crate) struct Caches {
    /// L1 data cache bytes per core, 0 when unknown.
    pub(crate) l1: usize,
    /// L2 bytes per core, 0 when unknown.
    pub(crate) l2: usize,
    /// An Intel CPU.
    pub(crate) intel: bool,
    /// An AMD CPU (any family).
    pub(crate) amd: bool,
    /// An AMD CPU of family 0x1A (Zen 5) or later.
    pub(crate) zen5: bool,
}

/// This CPU's [`Caches`].
pub(crate) fn caches() -> Caches {
    cache::all()
}

/// The data caches, from CPUID (x86-64; elsewhere nothing is known).
pub(crate) mod cache {
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// 0: not read yet; else 1 + (L2 bytes << 3 | amd << 2 | zen5 << 1 | intel).
    static INFO: AtomicUsize = AtomicUsize::new(0);
    /// L1 data cache bytes, stored before `INFO` (0: unknown).
    static L1D: AtomicUsize = AtomicUsize::new(0);

    #[inline]
    fn info() -> usize {
        let v = INFO.load(Ordering::Acquire);
        if v != 0 {
            return v - 1;
        }
        first()
    }

    /// Reads the caches the first time.
    #[cold]
    #[inline(never)]
    fn first() -> usize {
        let (v, l1) = read();
        L1D.store(l1, Ordering::Relaxed);
        INFO.store(v + 1, Ordering::Release);
        v
    }

    /// All of it, from one load of `INFO` (and `L1D`).
    pub(crate) fn all() -> super::Caches {
        let v = info();
        super::Caches {
            l1: L1D.load(Ordering::Relaxed),
            l2: v >> 3,
            intel: v & 1 == 1,
            amd: v & 4 == 4,
            zen5: v & 2 == 2,
        }
    }

    /// Per-core L2 bytes, 0 when unknown.
    pub(crate) fn l2_bytes() -> usize {
        info() >> 3
    }

    /// Per-core L1 data cache bytes, 0 when unknown.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn l1d_bytes() -> usize {
        info();
        L1D.load(Ordering::Relaxed)
    }

    /// The CPU is an Intel one.
    pub(crate) fn is_intel() -> bool {
        info() & 1 == 1
    }

    // `__cpuid` is a safe function on recent toolchains and an unsafe one on older ones.
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)]
    fn read() -> (usize, usize) {
        use core::arch::x86_64::{__cpuid, __cpuid_count};
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 is always valid.
        let leaf0 = unsafe { __cpuid(0) };
        // "GenuineIntel": ebx "Genu", edx "ineI", ecx "ntel".
        let intel =
            leaf0.ebx == 0x756e_6547 && leaf0.edx == 0x4965_6e69 && leaf0.ecx == 0x6c65_746e;
        // "AuthenticAMD": ebx "Auth", edx "enti", ecx "cAMD".
        let amd = leaf0.ebx == 0x6874_7541 && leaf0.edx == 0x6974_6e65 && leaf0.ecx == 0x444d_4163;
        let (mut l1, mut l2) = (0usize, 0usize);
        let mut zen5 = false;
        if amd && leaf0.eax >= 1 {
            // SAFETY: leaf 1 is supported (max leaf >= 1, checked above).
            zen5 = family(unsafe { __cpuid(1) }.eax) >= 0x1a;
            // Leaf 0x8000_0000 gives the highest extended leaf.
            // SAFETY: leaf 0x8000_0000 exists on every x86-64 CPU.
            let max_ext = unsafe { __cpuid(0x8000_0000) }.eax;
            if max_ext >= 0x8000_0006 {
                // Leaf 0x8000_0005, ECX bits 24..32: L1 data cache KiB per core; leaf
                // 0x8000_0006, ECX bits 16..32: L2 KiB per core.
                // SAFETY: both leaves are supported (checked just above).
                let (l1c, l2c) = unsafe { (__cpuid(0x8000_0005).ecx, __cpuid(0x8000_0006).ecx) };
                l1 = (l1c >> 24) as usize * 1024;
                l2 = (l2c >> 16) as usize * 1024;
            }
        }
        if intel && leaf0.eax >= 4 {
            // Leaf 4: deterministic cache parameters, one sub-leaf per cache until type 0.
            for sub in 0..16 {
                // SAFETY: leaf 4 is supported (max leaf >= 4, checked above).
                let r = unsafe { __cpuid_count(4, sub) };
                let kind = r.eax & 0x1f;
                if kind == 0 {
                    break;
                }
                let level = (r.eax >> 5) & 7;
                let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
                let parts = ((r.ebx >> 12) & 0x3ff) as usize + 1;
                let line = (r.ebx & 0xfff) as usize + 1;
                let sets = r.ecx as usize + 1;
                // Data (1) or unified (3) caches of levels 1 and 2.
                match (level, kind) {
                    (1, 1 | 3) => l1 = ways * parts * line * sets,
                    (2, 1 | 3) => l2 = ways * parts * line * sets,
                    _ => {}
                }
            }
        }
        (
            (l2 << 3) | (usize::from(amd) << 2) | (usize::from(zen5) << 1) | usize::from(intel),
            l1,
        )
    }

    /// The family of a CPUID leaf 1 EAX signature: the base family (bits 8..12), plus the
    /// extended family (bits 20..28) when the base is 0xF.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn family(sig: u32) -> u32 {
        let base = (sig >> 8) & 0xf;
        if base == 0xf {
            base + ((sig >> 20) & 0xff)
        } else {
            base
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn read() -> (usize, usize) {
        (0, 0)
    }
}

/// The CPUs the cache rules were measured on, as [`Caches`] values for unit tests.
#[cfg(test)]
pub(crate) mod test_cpus {
    use super::Caches;

    const MIB: usize = 1 << 20;
    /// Zen 5 (AMD family 0x1A).
    pub(crate) const ZEN5: Caches = Caches {
        l1: 48 << 10,
        l2: MIB,
        intel: false,
        amd: true,
        zen5: true,
    };
    /// The 2 MiB-L2 Xeon.
    pub(crate) const XEON: Caches = Caches {
        l1: 48 << 10,
        l2: 2 * MIB,
        intel: true,
        amd: false,
        zen5: false,
    };
    /// Zen 4 (AMD family 0x19): its sizes read from CPUID as Zen 5's are, without Zen 5's
    /// rules.
    pub(crate) const ZEN4: Caches = Caches {
        l1: 32 << 10,
        l2: MIB,
        intel: false,
        amd: true,
        zen5: false,
    };
}

#[cfg(test)]
mod tests {
    use super::cache;

    #[test]
    fn cpu_family_from_the_leaf_1_signature() {
        // EPYC 9004 (Zen 4), EPYC 9005 (Zen 5), a Xeon (Sapphire Rapids), a Zen 2.
        assert_eq!(cache::family(0x00a1_0f11), 0x19);
        assert_eq!(cache::family(0x00b0_0f21), 0x1a);
        assert_eq!(cache::family(0x0008_06f8), 6);
        assert_eq!(cache::family(0x0083_0f10), 0x17);
    }

    /// What `cache` reads from CPUID against the kernel's own view of the CPU: the vendor and
    /// family in `/proc/cpuinfo`, the L1 data and L2 sizes in sysfs (which Linux reads from
    /// other CPUID leaves: 4 on Intel, 0x8000_001D on AMD). A packing slip in `cache::INFO`
    /// (a flag bit read as part of the L2 size, say) fails here on any Intel or AMD machine.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn cpuid_agrees_with_the_kernel_about_this_cpu() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
                .unwrap_or_else(|| panic!("no {name:?} in /proc/cpuinfo"))
        };
        let vendor = field("vendor_id");
        let family: u32 = field("cpu family").parse().expect("cpu family");
        let (intel, amd) = (vendor == "GenuineIntel", vendor == "AuthenticAMD");
        let c = super::caches();
        assert_eq!(cache::is_intel(), intel, "{vendor}");
        assert_eq!(c.intel, intel, "{vendor}");
        assert_eq!(c.amd, amd, "{vendor}");
        assert_eq!(c.zen5, amd && family >= 0x1a, "{vendor} family {family}");
        if !(intel || amd) {
            return;
        }
        // cpu0's data or unified caches by level, from sysfs.
        let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let mut sizes = [0usize; 3];
        for entry in std::fs::read_dir(dir).expect("sysfs cache directory") {
            let path = entry.expect("sysfs entry").path();
            let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
            let (level, kind, size) = (read("level"), read("type"), read("size"));
            let level: usize = match level.trim().parse() {
                Ok(l @ 1..=2) => l,
                _ => continue,
            };
            if matches!(kind.trim(), "Data" | "Unified") {
                let kib: usize = size.trim().trim_end_matches('K').parse().expect("size");
                sizes[level] = kib * 1024;
            }
        }
        assert_eq!(cache::l1d_bytes(), sizes[1], "L1d against sysfs");
        assert_eq!(cache::l2_bytes(), sizes[2], "L2 against sysfs");
        assert_eq!((c.l1, c.l2), (sizes[1], sizes[2]), "caches() against sysfs");
    }
}
