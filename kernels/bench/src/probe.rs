//! The machine's limits, measured in the same run: the FMA peak of one core (and of T
//! cores at once, for `--threads T`) and the streaming read bandwidth for a buffer the size
//! of the weights.

use std::hint::black_box;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Single-core f32 FMA peak in GFLOPS: a tight loop of independent FMA chains (enough of
/// them to cover the latency), widest vectors the CPU has. Best of several runs: on a
/// shared machine a probe can only come out low, never high.
pub fn fma_peak() -> f64 {
    (0..5).map(|_| fma_once()).fold(0.0, f64::max)
}

/// FMA peak of `threads` cores at once, in GFLOPS summed over them: every thread runs the
/// one-core probe loop, released together by a barrier, and the figure is all their FLOPs
/// over the wall time from the first thread's start to the last one's end. Best of several
/// runs, as [`fma_peak`].
pub fn fma_peak_threads(threads: usize) -> f64 {
    (0..5)
        .map(|_| fma_once_threads(threads))
        .fold(0.0, f64::max)
}

fn fma_once_threads(threads: usize) -> f64 {
    let barrier = std::sync::Barrier::new(threads);
    let runs: Vec<(Instant, Instant, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    let flops = fma_flops(ITERS);
                    (start, Instant::now(), flops)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });
    let start = runs.iter().map(|r| r.0).min().expect("a thread");
    let end = runs.iter().map(|r| r.1).max().expect("a thread");
    runs.iter().map(|r| r.2).sum::<f64>() / (end - start).as_secs_f64() / 1e9
}

const ITERS: u64 = 10_000_000;

/// Steps of the short probe [`core_speeds`]: about 0.3 ms on one core of this machine at
/// full speed (77 MFLOP at ~150 GFLOPS).
const SHORT_ITERS: u64 = 200_000;

/// The best one-core figure any [`core_speeds`] probe has read in this run (f64 bits).
static BEST_CORE: AtomicU64 = AtomicU64::new(0);

/// A short FMA probe on every core this process may run on, one thread pinned to each,
/// released together by a barrier: each core's own GFLOPS, measured by its thread. On this
/// VM each core's speed changes on its own, between about 60 and 155 GFLOPS within a second,
/// as the host schedules other work beside it; the bench takes this probe before and after
/// every batch of samples, as a witness of the machine's state that is independent of the
/// code being timed (see `median_gflops`). A thread still spinning on a core (a pool's
/// worker) shares it with the probe and reads as a slow core, which it is for the batch.
/// Pinned, because two unpinned threads started together can land on one core for longer
/// than the probe lasts.
pub fn core_speeds() -> Vec<f64> {
    let cpus = allowed_cpus();
    let barrier = std::sync::Barrier::new(cpus.len());
    let speeds: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let barrier = &barrier;
                s.spawn(move || {
                    pin_to(cpu).unwrap_or_else(|e| panic!("pinning a probe to CPU {cpu}: {e}"));
                    barrier.wait();
                    let start = Instant::now();
                    let flops = fma_flops(SHORT_ITERS);
                    flops / start.elapsed().as_secs_f64() / 1e9
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });
    let top = speeds.iter().copied().fold(0.0, f64::max);
    BEST_CORE.fetch_max(top.to_bits(), Relaxed);
    speeds
}

/// The CPUs this process may run on: its affinity mask as it was at the first call (before
/// any pinning), kept for the process.
pub fn allowed_cpus() -> Vec<usize> {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(affinity_now).clone()
}

/// How many threads of this process other than the calling one are running or runnable
/// (state `R` in `/proc/self/task/*/stat`): the kernel's own view of each thread, not
/// anything a library says about its workers. A pool's idle worker that spins is `R`; one
/// that sleeps on a futex is `S`. Panics if `/proc/self/task` cannot be read: a pause that
/// could not look would otherwise pass for an idle process.
pub fn other_runnable_threads() -> usize {
    // SAFETY: gettid takes no arguments and only returns the caller's id.
    let me = unsafe { libc::gettid() }.to_string();
    let tasks = std::fs::read_dir("/proc/self/task")
        .unwrap_or_else(|e| panic!("reading /proc/self/task (the pause's witness): {e}"));
    tasks
        .filter_map(Result::ok)
        .filter(|t| t.file_name().to_str() != Some(me.as_str()))
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        // The state follows the command name, which is in parentheses and may hold spaces.
        .filter(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        })
        .count()
}

/// Sleeps `at_least`, then until no other thread of this process is running (a pool's idle
/// worker spinning): until [`IDLE_CHECKS`] checks in a row, [`IDLE_CHECK_EVERY`] apart, see
/// none runnable ([`other_runnable_threads`]). Returns how long it waited in all, or `None`
/// when some thread was still runnable after [`IDLE_WAIT_MAX`]. Debian's pthreadpool, for
/// one, spins about 25 ms after a job here (a million pauses,
/// `PTHREADPOOL_SPIN_WAIT_ITERATIONS`), where a fixed 10 ms pause assumed a few. (The
/// process's CPU clock is no witness for this: it adds a thread's time on another CPU only
/// when that CPU accounts it, at a tick, and a 2 ms and once even a 5 ms window read a
/// thread spinning there as idle.)
pub fn quiesce(at_least: Duration) -> Option<Duration> {
    let start = Instant::now();
    std::thread::sleep(at_least);
    let mut idle = 0;
    loop {
        if other_runnable_threads() == 0 {
            idle += 1;
            if idle == IDLE_CHECKS {
                return Some(start.elapsed());
            }
        } else {
            idle = 0;
        }
        if start.elapsed() > at_least + IDLE_WAIT_MAX {
            return None;
        }
        std::thread::sleep(IDLE_CHECK_EVERY);
    }
}

/// Checks in a row that [`quiesce`] needs to see no other thread runnable (a worker passing
/// through `R` as it wakes for a moment is not a spinning one).
const IDLE_CHECKS: usize = 3;

/// How far apart [`quiesce`]'s checks are.
const IDLE_CHECK_EVERY: Duration = Duration::from_millis(1);

/// The longest [`quiesce`] waits for the process to go idle.
const IDLE_WAIT_MAX: Duration = Duration::from_millis(250);

/// Restores the calling thread's affinity to every CPU of [`allowed_cpus`].
pub fn unpin() -> std::io::Result<()> {
    set_affinity(&allowed_cpus())
}

/// Pins the calling thread to `cpu`. An error (the kernel refused) leaves it as it was.
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    set_affinity(&[cpu])
}

fn set_affinity(cpus: &[usize]) -> std::io::Result<()> {
    // A zeroed cpu_set_t is a valid empty set; CPU_SET sets bits below CPU_SETSIZE (the CPUs
    // came from the kernel's own mask, and the libc crate checks the index).
    // SAFETY: the set is a valid cpu_set_t, and sched_setaffinity only reads it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's affinity mask now (CPU 0 alone if the kernel will not say).
pub(crate) fn affinity_now() -> Vec<usize> {
    // A zeroed cpu_set_t is a valid empty set.
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into `set`.
    let set = unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        set
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `set` is an initialised cpu_set_t; CPU_ISSET reads bit `i` of it.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// The best one-core figure of every [`core_speeds`] probe so far (0 before the first).
/// Positive f64s order as their bits do, so the maximum is kept with `fetch_max`.
pub fn best_core_speed() -> f64 {
    f64::from_bits(BEST_CORE.load(Relaxed))
}

fn fma_once() -> f64 {
    let start = Instant::now();
    let flops = fma_flops(ITERS);
    flops / start.elapsed().as_secs_f64() / 1e9
}

/// Runs the FMA loop for `iters` steps on this thread; returns the FLOPs it did.
fn fma_flops(iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    let flops = {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { x86::fma_avx512(iters) }
        } else if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 + FMA (checked above).
            unsafe { x86::fma_avx2(iters) }
        } else {
            scalar_fma(iters)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let flops = scalar_fma(iters);
    flops
}

fn scalar_fma(iters: u64) -> f64 {
    let mut acc = [0.0f32; 8];
    let (a, b) = (black_box(0.999f32), black_box(1e-3f32));
    for _ in 0..iters / 8 {
        for v in acc.iter_mut() {
            *v = v.mul_add(a, b);
        }
    }
    black_box(acc);
    (iters / 8 * 8 * 2) as f64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;
    use std::hint::black_box;

    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma_avx512(iters: u64) -> f64 {
        let a = _mm512_set1_ps(black_box(0.999));
        let b = _mm512_set1_ps(black_box(1e-3));
        let mut acc = [_mm512_setzero_ps(); 12];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, a, b);
            }
        }
        black_box(acc);
        (iters * 12 * 16 * 2) as f64
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_avx2(iters: u64) -> f64 {
        let a = _mm256_set1_ps(black_box(0.999));
        let b = _mm256_set1_ps(black_box(1e-3));
        let mut acc = [_mm256_setzero_ps(); 12];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, a, b);
            }
        }
        black_box(acc);
        (iters * 12 * 8 * 2) as f64
    }

    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn sum_avx512(data: &[f32]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 8];
        let chunks = data.chunks_exact(128);
        let rest: f32 = chunks.remainder().iter().sum();
        for c in chunks {
            for (i, v) in acc.iter_mut().enumerate() {
                // SAFETY: the chunk has 128 floats.
                *v = _mm512_add_ps(*v, unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * i)) });
            }
        }
        let mut total = _mm512_setzero_ps();
        for v in acc {
            total = _mm512_add_ps(total, v);
        }
        _mm512_reduce_add_ps(total) + rest
    }
}

fn sum(data: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { x86::sum_avx512(data) };
    }
    let mut acc = [0.0f32; 16];
    for c in data.chunks_exact(16) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum()
}

/// This core's L2 size in bytes, from sysfs (`None` when it cannot be read).
pub fn l2_bytes() -> Option<usize> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8).find_map(|i| {
        let index = dir.join(format!("index{i}"));
        let level = std::fs::read_to_string(index.join("level")).ok()?;
        let kind = std::fs::read_to_string(index.join("type")).ok()?;
        if level.trim() != "2" || kind.trim() == "Instruction" {
            return None;
        }
        let size = std::fs::read_to_string(index.join("size")).ok()?;
        let size = size.trim();
        let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
        let scale = match unit {
            "K" => 1 << 10,
            "M" => 1 << 20,
            _ => return None,
        };
        Some(digits.parse::<usize>().ok()? * scale)
    })
}

/// Streaming read bandwidth (GB/s, median) of a buffer of `bytes` bytes read repeatedly, as
/// a batch-1 run reads its weights: small buffers measure the cache they fit in, large ones
/// DRAM.
pub fn read_bandwidth(bytes: usize) -> f64 {
    let data = vec![1.0f32; bytes / 4];
    // Each sample reads at least 4 MiB (several passes over a small buffer).
    let inner = ((4 << 20) / bytes.max(1)).max(1);
    let reps = ((256 << 20) / (bytes * inner)).clamp(5, 101);
    black_box(sum(&data));
    let mut samples: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..inner {
                black_box(sum(black_box(&data)));
            }
            (bytes * inner) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Peak of the low-precision dot-product instructions on one core, in GOPS counted as the
/// benchmark counts them (2 per multiply-add): `vdpbf16ps` zmm = 16 lanes × 2 products × 2
/// = 64, `vpdpbusd` zmm = 16 lanes × 4 products × 2 = 128 per instruction, `vpmaddwd` ymm
/// (with the `vpaddd` that accumulates it) = 8 lanes × 2 products × 2 = 32. 24 independent
/// accumulators (12 on AVX2's 16 registers) cover the latency; best of five runs. `None`
/// when the CPU lacks the extension.
pub fn dot_peak(which: DotPeak) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let ok = match which {
            DotPeak::Bf16 => has!("avx512f") && has!("avx512bf16"),
            DotPeak::Vnni => has!("avx512f") && has!("avx512vnni"),
            DotPeak::Madd => has!("avx2"),
            // Also asks Linux for this process's tile state, once.
            DotPeak::AmxBf16 | DotPeak::AmxInt8 => keepalloc_kernels::DotIsa::Amx.is_supported(),
        };
        if !ok {
            return None;
        }
        let iters = match which {
            DotPeak::Bf16 | DotPeak::Vnni | DotPeak::Madd => 5_000_000u64,
            // About 16 cycles per tile multiply: a similar few milliseconds.
            DotPeak::AmxBf16 | DotPeak::AmxInt8 => 200_000,
        };
        Some(
            (0..5)
                .map(|_| {
                    let start = Instant::now();
                    // SAFETY: the CPU has the extension (checked above).
                    let ops = unsafe {
                        match which {
                            DotPeak::Bf16 => x86_dot::dpbf16_avx512(iters),
                            DotPeak::Vnni => x86_dot::dpbusd_avx512(iters),
                            DotPeak::Madd => x86_dot::madd_avx2(iters),
                            DotPeak::AmxBf16 => x86_amx::tiles(iters, false),
                            DotPeak::AmxInt8 => x86_amx::tiles(iters, true),
                        }
                    };
                    ops / start.elapsed().as_secs_f64() / 1e9
                })
                .fold(0.0, f64::max),
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = which;
        None
    }
}

/// Which dot-product instruction [`dot_peak`] measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotPeak {
    /// AVX512-BF16 `vdpbf16ps`.
    Bf16,
    /// AVX512-VNNI `vpdpbusd`.
    Vnni,
    /// AVX2 `vpmaddwd` + `vpaddd` (i16 pairs summed into i32), the int8 dot product of CPUs
    /// without VNNI.
    Madd,
    /// AMX-BF16 `tdpbf16ps` (16 × 16 × 32 multiply-adds per instruction).
    AmxBf16,
    /// AMX-INT8 `tdpbusd` (16 × 16 × 64 multiply-adds per instruction).
    AmxInt8,
}

/// The AMX peak: tile multiplies on tiles held in registers, as the FMA probe measures
/// FMAs (no loads in the loop), so a kernel's "% of AMX peak" is against the matrix unit
/// alone.
#[cfg(target_arch = "x86_64")]
mod x86_amx {
    use core::arch::asm;

    /// Palette 1, tiles 0..8 each 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    /// Four independent accumulators (tmm0-3) over two A (tmm4, 5) and two B (tmm6, 7)
    /// tiles, `iters` rounds of four tile multiplies; returns the operations done
    /// (2 per multiply-add).
    ///
    /// # Safety
    /// `DotIsa::Amx.is_supported()` returned true (AMX-TILE, -INT8 and -BF16, the OS's
    /// state and this process's permission).
    pub unsafe fn tiles(iters: u64, int8: bool) -> f64 {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
        }
        let cfg = Config(c);
        // Small values (bf16 1.0 and 2^-8; int8 1 and 2): no overflow or denormal on any path.
        let data: Vec<u32> = (0..16 * 16 * 4)
            .map(|i| match (int8, i % 2) {
                (true, _) => 0x0102_0101,
                (false, 0) => 0x3f80_3f80,
                (false, _) => 0x3b80_3b80,
            })
            .collect();
        let src = data.as_ptr();
        let n = iters.max(1);
        // SAFETY: AMX is usable (caller); the configuration is valid; each tile load reads 16 rows of 64 bytes at a 64-byte stride inside `data` (4 KiB); the tile state is released before returning.
        unsafe {
            asm!(
                "ldtilecfg [{cfg}]",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "tileloadd tmm4, [{src} + {stride} * 1]",
                "tileloadd tmm5, [{src} + {stride} * 1 + 1024]",
                "tileloadd tmm6, [{src} + {stride} * 1 + 2048]",
                "tileloadd tmm7, [{src} + {stride} * 1 + 3072]",
                "test {int8}, {int8}",
                "jz 3f",
                "2:",
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm1, tmm4, tmm7",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                "jmp 4f",
                "3:",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 3b",
                "4:",
                "tilerelease",
                cfg = in(reg) &cfg,
                src = in(reg) src,
                stride = in(reg) 64usize,
                int8 = in(reg) int8 as u64,
                n = inout(reg) n => _,
                options(nostack),
            );
        }
        // Per tile multiply: 16 × 16 outputs × (64 int8 | 32 bf16) products × 2.
        let per = if int8 {
            16 * 16 * 64 * 2
        } else {
            16 * 16 * 32 * 2
        };
        (n * 4 * per) as f64
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_dot {
    use core::arch::x86_64::*;
    use std::hint::black_box;

    /// Independent accumulators: 24 of the 32 zmm registers. With 12 the `vdpbf16ps` probe
    /// measured 56-65 GOPS on this CPU while the 16-accumulator kernel reached 85: its
    /// latency needs more chains than the FMA's.
    const CHAINS: usize = 24;

    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dpbf16_avx512(iters: u64) -> f64 {
        // SAFETY: same-size SIMD reinterpretations.
        let (a, b): (__m512bh, __m512bh) = unsafe {
            (
                core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(black_box(
                    0x3f80_3f80,
                ))),
                core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(black_box(
                    0x3a83_3a83,
                ))),
            )
        };
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_dpbf16_ps(*v, a, b);
            }
        }
        black_box(acc);
        (iters * CHAINS as u64 * 64) as f64
    }

    /// # Safety
    /// The CPU has AVX-512F and AVX512-VNNI.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn dpbusd_avx512(iters: u64) -> f64 {
        let a = _mm512_set1_epi32(black_box(0x0101_0101));
        let b = _mm512_set1_epi32(black_box(0x0102_0301));
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_dpbusd_epi32(*v, a, b);
            }
        }
        black_box(acc);
        (iters * CHAINS as u64 * 128) as f64
    }

    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn madd_avx2(iters: u64) -> f64 {
        // 12 accumulators and the operand fit AVX2's 16 ymm registers. Each multiply reads
        // its own accumulator, so it cannot be hoisted out of the loop (the values wrap).
        const YMM_CHAINS: usize = 12;
        let b = _mm256_set1_epi16(black_box(-5));
        let mut acc = [_mm256_set1_epi16(black_box(3)); YMM_CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_add_epi32(*v, _mm256_madd_epi16(*v, b));
            }
        }
        black_box(acc);
        (iters * YMM_CHAINS as u64 * 32) as f64
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Spins (a pool's idle worker, as the kernel sees it) until `stop` or `for_at_most`.
    fn spin(stop: &AtomicBool, for_at_most: Duration) -> Instant {
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) && start.elapsed() < for_at_most {
            std::hint::spin_loop();
        }
        Instant::now()
    }

    #[test]
    fn quiesce_waits_for_a_spinning_thread_and_gives_up_on_one_that_never_stops() {
        // One test, so the two spinners never overlap (each would keep the other's quiesce
        // waiting).
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            // A worker that spins 40 ms after its job, longer than the 2 ms asked for: the
            // pause must outlast it, by the spinner's own clock.
            let spinner = s.spawn(|| spin(&stop, Duration::from_millis(40)));
            let waited = super::quiesce(Duration::from_millis(2));
            let returned = Instant::now();
            let stopped = spinner.join().unwrap();
            assert!(
                waited.is_some(),
                "the process went idle once the spinner stopped"
            );
            assert!(
                stopped <= returned,
                "quiesce returned {:?} before the spinner stopped",
                stopped - returned
            );
            assert!(waited.unwrap() >= Duration::from_millis(2));
        });
        std::thread::scope(|s| {
            // One that never stops on its own: quiesce gives up and says so.
            let spinner = s.spawn(|| spin(&stop, Duration::from_secs(60)));
            let waited = super::quiesce(Duration::from_millis(2));
            stop.store(true, Ordering::Relaxed);
            spinner.join().unwrap();
            assert_eq!(waited, None);
        });
    }
}
