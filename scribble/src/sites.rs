//! Allocation sites, and [`SiteFailing`], an allocator that fails them on purpose: the
//! machinery of `cargo xtask fault-explore` and of `KEEPALLOC_FAIL` in the C library.
//!
//! A site is where a library asked the table for memory: the hash of the first
//! [`SITE_DEPTH`] return addresses above keepalloc's own frames (the table's entry, the
//! wrappers, the unwinder), each taken as (module file name, offset in the module), so that
//! one binary gives the same site in every process whatever its load address. Stacks are
//! captured unsymbolized; a return address is symbolized once, the first time it is seen,
//! only to tell keepalloc's own frames from the caller's, and again when a site is reported.
//! Nothing here runs unless a `SiteFailing` is the backend: the plain table is unchanged.

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{Request, RequestAllocator};

pub use crate::frame_class::{Class, caller_start, class_of_frame, class_of_name, is_own_name};
use crate::stack::{Stack, capture_into};

/// Return addresses above keepalloc's frames that make up a site.
pub const SITE_DEPTH: usize = 6;

/// Frames captured per allocation: keepalloc's own (the unwinder, this module, the
/// wrappers, the table's entry, `catch_unwind`) and then the caller's.
const CAPTURE: usize = 32;

/// An allocation site: the hash of its caller frames (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(pub u64);

impl fmt::Display for SiteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Which allocation calls fail: `KEEPALLOC_FAIL`'s grammar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FailSpec {
    /// `list`: none; every site is recorded and listed.
    List,
    /// `site:HEX` (its first hit) or `site:HEX,hits:all` (every hit).
    Site {
        /// The site.
        site: SiteId,
        /// Every hit, not only the first.
        every_hit: bool,
    },
    /// `nth:N`: the Nth allocation call of the process (from 1).
    Nth(u64),
    /// `p:P,seed:S`: each call with probability P, decided by call number and seed.
    Random {
        /// The probability, in `[0, 1]`.
        p: f64,
        /// The seed.
        seed: u64,
    },
}

/// A `KEEPALLOC_FAIL` spec that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailSpecError {
    /// The spec as given.
    pub spec: String,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for FailSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KEEPALLOC_FAIL={:?}: {} (want list, site:HEX[,hits:all], nth:N or p:P,seed:S)",
            self.spec, self.why
        )
    }
}

impl std::error::Error for FailSpecError {}

impl FailSpec {
    /// Parses `list`, `site:HEX[,hits:all|first]`, `nth:N` or `p:P,seed:S`.
    pub fn parse(spec: &str) -> Result<FailSpec, FailSpecError> {
        let bad = |why: &str| FailSpecError {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let mut fields = spec.trim().split(',').map(str::trim);
        let first = fields.next().unwrap_or_default();
        let rest: Vec<&str> = fields.collect();
        let value = |field: &str, key: &str| field.strip_prefix(key).map(str::to_owned);
        let parsed = if first == "list" {
            FailSpec::List
        } else if let Some(hex) = value(first, "site:") {
            let site = u64::from_str_radix(hex.trim_start_matches("0x"), 16)
                .map_err(|_| bad("the site is not a hexadecimal number"))?;
            let every_hit = match rest.as_slice() {
                [] | ["hits:first"] => false,
                ["hits:all"] => true,
                _ => return Err(bad("after site:HEX only hits:all or hits:first")),
            };
            return Ok(FailSpec::Site {
                site: SiteId(site),
                every_hit,
            });
        } else if let Some(n) = value(first, "nth:") {
            match n.parse::<u64>() {
                Ok(n) if n >= 1 => FailSpec::Nth(n),
                _ => return Err(bad("nth wants a call number from 1")),
            }
        } else if let Some(p) = value(first, "p:") {
            let p: f64 = p.parse().map_err(|_| bad("p is not a number"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad("p must lie in [0, 1]"));
            }
            let seed = match rest.as_slice() {
                [s] => value(s, "seed:")
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| bad("p:P wants seed:S"))?,
                _ => return Err(bad("p:P wants seed:S")),
            };
            return Ok(FailSpec::Random { p, seed });
        } else {
            return Err(bad("unknown plan"));
        };
        if rest.is_empty() {
            Ok(parsed)
        } else {
            Err(bad("unexpected settings after the plan"))
        }
    }
}

/// What one site saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteRecord {
    /// The site.
    pub site: SiteId,
    /// Allocation calls from it.
    pub hits: u64,
    /// Of those, the ones failed on purpose.
    pub failed: u64,
    /// The first call's stack (raw, keepalloc's frames included).
    pub stack: Stack,
}

impl SiteRecord {
    /// The caller's frames, symbolized, innermost first: `name at file:line`.
    pub fn caller_frames(&self) -> Vec<String> {
        caller_frames(&self.stack)
    }
}

/// Blocks a site took that are still live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSite {
    /// The site.
    pub site: SiteId,
    /// Live blocks.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
}

#[derive(Default)]
struct State {
    calls: u64,
    sites: HashMap<SiteId, SiteRecord>,
    live: HashMap<usize, (SiteId, usize)>,
}

/// Wraps an allocator: records every allocation call's site and fails the calls its
/// [`FailSpec`] names; tracks the live blocks by site. A refused call never reaches the
/// wrapped allocator. Until [`arm`](Self::arm)ed it only records (`list`).
pub struct SiteFailing<A> {
    inner: A,
    spec: OnceLock<FailSpec>,
    state: Mutex<Option<State>>,
}

impl<A> fmt::Debug for SiteFailing<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SiteFailing")
            .field("spec", &self.spec.get())
            .finish_non_exhaustive()
    }
}

impl<A> SiteFailing<A> {
    /// Wraps `inner`, recording only.
    pub const fn new(inner: A) -> Self {
        SiteFailing {
            inner,
            spec: OnceLock::new(),
            state: Mutex::new(None),
        }
    }

    /// Sets the plan, once; false when one was already set (it stays).
    pub fn arm(&self, spec: FailSpec) -> bool {
        self.spec.set(spec).is_ok()
    }

    /// The plan in effect.
    pub fn spec(&self) -> FailSpec {
        self.spec.get().copied().unwrap_or(FailSpec::List)
    }

    fn state(&self) -> MutexGuard<'_, Option<State>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every site seen so far, by hash.
    pub fn sites(&self) -> Vec<SiteRecord> {
        let mut v: Vec<SiteRecord> = self
            .state()
            .as_ref()
            .map(|s| s.sites.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|r| r.site);
        v
    }

    /// Calls failed on purpose so far.
    pub fn failed(&self) -> u64 {
        self.state()
            .as_ref()
            .map_or(0, |s| s.sites.values().map(|r| r.failed).sum())
    }

    /// The live blocks, grouped by the site that took them.
    pub fn live(&self) -> Vec<LiveSite> {
        let state = self.state();
        let mut by: HashMap<SiteId, LiveSite> = HashMap::new();
        for &(site, size) in state.iter().flat_map(|s| s.live.values()) {
            let e = by.entry(site).or_insert(LiveSite {
                site,
                blocks: 0,
                bytes: 0,
            });
            e.blocks += 1;
            e.bytes += size as u64;
        }
        let mut v: Vec<LiveSite> = by.into_values().collect();
        v.sort_by_key(|l| l.site);
        v
    }

    /// Records a call from the caller's stack; true when it must fail.
    #[inline(never)]
    fn call(&self) -> (SiteId, bool) {
        let mut frames = [0usize; CAPTURE];
        let n = capture_into(&mut frames);
        let frames = &frames[..n];
        let site = site_of(frames);
        let spec = self.spec();
        let mut guard = self.state();
        let state = guard.get_or_insert_with(State::default);
        state.calls += 1;
        let call = state.calls;
        let record = state.sites.entry(site).or_insert_with(|| SiteRecord {
            site,
            hits: 0,
            failed: 0,
            stack: Stack::from_frames(crate::stack::thread_id(), frames, CAPTURE),
        });
        record.hits += 1;
        let fail = match spec {
            FailSpec::List => false,
            FailSpec::Site { site: s, every_hit } => s == site && (every_hit || record.hits == 1),
            FailSpec::Nth(n) => call == n,
            FailSpec::Random { p, seed } => unit(seed, call) < p,
        };
        if fail {
            record.failed += 1;
        }
        (site, fail)
    }

    fn track(&self, ptr: NonNull<[u8]>, site: SiteId, size: usize) {
        let mut guard = self.state();
        let state = guard.get_or_insert_with(State::default);
        state
            .live
            .insert(ptr.cast::<u8>().as_ptr() as usize, (site, size));
    }

    /// One allocation call of `size` bytes (replacing `old`, for a grow): recorded, refused
    /// when the plan says so (without calling `inner`), else made by `make` and tracked.
    fn attempt(
        &self,
        size: usize,
        old: Option<NonNull<u8>>,
        make: impl FnOnce() -> Result<NonNull<[u8]>, AllocError>,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let (site, fail) = self.call();
        if fail {
            return Err(AllocError);
        }
        let p = make()?;
        if let Some(old) = old {
            self.untrack(old);
        }
        self.track(p, site, size);
        Ok(p)
    }

    fn untrack(&self, ptr: NonNull<u8>) -> Option<(SiteId, usize)> {
        self.state()
            .as_mut()
            .and_then(|s| s.live.remove(&(ptr.as_ptr() as usize)))
    }
}

/// A uniform number in `[0, 1)` for call `call` of `seed` (splitmix64).
fn unit(seed: u64, call: u64) -> f64 {
    let mut z = seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

// SAFETY: every block comes from `inner`, whose contract this forwards; a refused call
// returns an error without touching `inner`.
unsafe impl<A: Allocator> RequestAllocator for SiteFailing<A> {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded (caller).
        let forward = || unsafe { request.forward_to(&self.inner) };
        match request {
            // A shrink is no allocation call: never refused, and its block keeps its site.
            Request::Shrink { ptr, new, .. } => {
                let p = forward()?;
                if let Some((site, _)) = self.untrack(ptr) {
                    self.track(p, site, new.size());
                }
                Ok(p)
            }
            _ => {
                let old = request.resized().map(|(ptr, _)| ptr);
                self.attempt(request.layout().size(), old, forward)
            }
        }
    }

    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        self.untrack(ptr);
        // SAFETY: forwarded (caller): `ptr` came from `inner` with `layout`.
        unsafe { self.inner.deallocate(ptr, layout) }
    }
}
keepalloc_allocators::allocator_from_requests!([A: Allocator] SiteFailing<A>);

/// What a return address is, found once per address.
#[derive(Clone, Copy)]
struct FrameInfo {
    /// What the frame is.
    class: Class,
    /// FNV-1a of the module's file name.
    module: u64,
    /// The address's offset in its module.
    offset: u64,
}

fn frame_cache() -> MutexGuard<'static, HashMap<usize, FrameInfo>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, FrameInfo>>> = OnceLock::new();
    CACHE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn frame_info(ip: usize) -> FrameInfo {
    if let Some(info) = frame_cache().get(&ip) {
        return *info;
    }
    let mut names: Vec<Option<String>> = Vec::new();
    backtrace::resolve(ip as *mut core::ffi::c_void, |symbol| {
        names.push(symbol.name().map(|n| format!("{n:#}")));
    });
    if names.is_empty() {
        names.push(None);
    }
    let class = class_of_frame(names.iter().map(Option::as_deref));
    // SAFETY: dladdr only reads the loader's tables; `info` is a plain C struct it fills.
    let (module, offset) = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(ip as *const libc::c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            let name = core::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
            let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
            (
                fnv(base, FNV_START),
                (ip as u64).wrapping_sub(info.dli_fbase as u64),
            )
        } else {
            (0, ip as u64)
        }
    };
    let info = FrameInfo {
        class,
        module,
        offset,
    };
    frame_cache().insert(ip, info);
    info
}

/// The site of a stack (innermost first): its frames after the innermost run of
/// keepalloc's own, [`SITE_DEPTH`] of them.
pub fn site_of(frames: &[usize]) -> SiteId {
    // A return address points after the call: step back into the call instruction.
    let infos: Vec<FrameInfo> = frames
        .iter()
        .map(|&ip| frame_info(ip.saturating_sub(1)))
        .collect();
    let classes: Vec<Class> = infos.iter().map(|i| i.class).collect();
    let mut h = FNV_START;
    for info in infos.iter().skip(caller_start(&classes)).take(SITE_DEPTH) {
        h = fnv(&info.module.to_le_bytes(), h);
        h = fnv(&info.offset.to_le_bytes(), h);
    }
    SiteId(h)
}

/// `module+0xoffset` for an address (`0x… in ??` when no module is known).
fn module_offset(ip: usize) -> String {
    // SAFETY: dladdr only reads the loader's tables; `info` is a plain C struct it fills.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(ip as *const libc::c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            let name = core::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy();
            let base = name.rsplit('/').next().unwrap_or(&name).to_owned();
            format!("{base}+{:#x}", ip - info.dli_fbase as usize)
        } else {
            format!("{ip:#x} in ??")
        }
    }
}

/// The caller's frames of `stack`, symbolized, innermost first (keepalloc's own dropped):
/// `name at file:line`.
pub fn caller_frames(stack: &Stack) -> Vec<String> {
    let frames: Vec<Vec<(Option<String>, Option<String>)>> = stack
        .frames()
        .iter()
        .take_while(|&&ip| ip != 0)
        .map(|&ip| {
            let mut names = Vec::new();
            backtrace::resolve(ip.saturating_sub(1) as *mut core::ffi::c_void, |symbol| {
                names.push((
                    symbol.name().map(|n| format!("{n:#}")),
                    match (symbol.filename(), symbol.lineno()) {
                        (Some(f), Some(l)) => Some(format!("{}:{l}", f.display())),
                        _ => None,
                    },
                ));
            });
            if names.is_empty() {
                // No symbol (a stripped library's internal function): where it is, so that
                // `addr2line -e MODULE OFFSET` or a disassembler can find it.
                names.push((Some(module_offset(ip)), None));
            }
            names
        })
        .collect();
    let classes: Vec<Class> = frames
        .iter()
        .map(|names| class_of_frame(names.iter().map(|n| n.0.as_deref())))
        .collect();
    let start = caller_start(&classes);
    let mut out = Vec::new();
    for (i, names) in frames.into_iter().enumerate().skip(start) {
        let mut names = names;
        if i == start
            && let Some(last) = names
                .iter()
                .rposition(|n| class_of_name(n.0.as_deref()) != Class::Caller)
            && names[last + 1..]
                .iter()
                .any(|n| class_of_name(n.0.as_deref()) == Class::Caller)
        {
            // keepalloc's functions inlined into the caller's come first: drop them.
            names.drain(..=last);
        }
        for (name, at) in names {
            let mut line = name.unwrap_or_else(|| "??".into());
            if let Some(at) = at {
                line.push_str(" at ");
                line.push_str(&at);
            }
            out.push(line);
        }
        if out.len() >= SITE_DEPTH + 4 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        assert_eq!(FailSpec::parse("list"), Ok(FailSpec::List));
        assert_eq!(
            FailSpec::parse("site:00ff"),
            Ok(FailSpec::Site {
                site: SiteId(0xff),
                every_hit: false
            })
        );
        assert_eq!(
            FailSpec::parse("site:0xAB,hits:all"),
            Ok(FailSpec::Site {
                site: SiteId(0xab),
                every_hit: true
            })
        );
        assert_eq!(FailSpec::parse("nth:3"), Ok(FailSpec::Nth(3)));
        assert_eq!(
            FailSpec::parse("p:0.25,seed:7"),
            Ok(FailSpec::Random { p: 0.25, seed: 7 })
        );
        for bad in [
            "",
            "nth:0",
            "nth:x",
            "site:zz",
            "site:1,hits:some",
            "p:2,seed:1",
            "p:0.5",
            "list,extra",
            "fail",
        ] {
            let e = FailSpec::parse(bad).unwrap_err();
            assert!(e.to_string().contains("KEEPALLOC_FAIL="), "{bad}: {e}");
        }
    }

    #[test]
    fn stacks_start_at_the_first_caller_frame_after_keepalloc() {
        use Class::*;
        assert_eq!(caller_start(&[Own, Own, Glue, Caller, Glue]), 3);
        // A stack that does not start in keepalloc (a crash in the caller) starts at 0.
        assert_eq!(caller_start(&[Caller, Own, Caller]), 0);
        assert_eq!(caller_start(&[Glue, Caller]), 0);
        assert_eq!(caller_start(&[Own, Own]), 2);
        let frame = |names: &[Option<&str>]| class_of_frame(names.iter().copied());
        // keepalloc's table call inlined into the caller's function: the caller's frame.
        assert_eq!(
            frame(&[
                Some("keepalloc_allocators::table::AllocatorTable::aligned_alloc"),
                Some("kernels::make")
            ]),
            Caller
        );
        assert_eq!(
            frame(&[Some(
                "<keepalloc_scribble::Scribble<A> as allocator_api2::alloc::Allocator>::allocate"
            )]),
            Own
        );
        assert_eq!(
            frame(&[Some("core::ops::function::FnOnce::call_once")]),
            Glue
        );
        // The caller's function inlined into a closure call: still the caller's.
        assert_eq!(
            frame(&[
                Some("app::run"),
                Some("core::ops::function::FnOnce::call_once")
            ]),
            Caller
        );
        assert_eq!(frame(&[None]), Caller);
    }

    #[test]
    fn random_plans_are_a_function_of_seed_and_call() {
        let a: Vec<bool> = (1..200).map(|c| unit(5, c) < 0.3).collect();
        let b: Vec<bool> = (1..200).map(|c| unit(5, c) < 0.3).collect();
        assert_eq!(a, b);
        let share = a.iter().filter(|&&x| x).count() as f64 / a.len() as f64;
        assert!((0.15..0.45).contains(&share), "{share}");
    }
}
