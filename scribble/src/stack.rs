//! Stacks: captured unsymbolized at allocation and free (return addresses only, through the
//! `backtrace` crate's `trace_unsynchronized`, which on Linux is libgcc's DWARF unwinder),
//! symbolized only when a report is printed.
//!
//! Why not frame pointers: a frame-pointer walk is cheaper per frame, but it is right only
//! when every frame on the stack keeps a frame pointer, and neither Rust's release profile
//! nor Debian's C libraries (XNNPACK, OpenBLAS, glibc) are built that way: the walk would
//! stop or wander at the first frame without one, which is exactly the library code whose
//! use of freed memory a report must show. The figures are in the crate's benchmark
//! (`cargo bench -p keepalloc-scribble`, group `capture`).

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::config::MAX_STACK_DEPTH;

/// Reports print keepalloc's own frames too (`frames:all`); set by a Scribble whose
/// configuration asks for it, for the whole process.
static SHOW_OWN: AtomicBool = AtomicBool::new(false);

/// Makes every report print keepalloc's own frames.
pub(crate) fn show_own_frames() {
    SHOW_OWN.store(true, Ordering::Relaxed);
}

/// Frames captured beyond the configured depth, to make room for the capture's own frames
/// (the unwinder and this crate), which are dropped when the stack is printed.
pub(crate) const OWN_FRAMES: usize = 6;

/// The largest capture: the configured depth plus [`OWN_FRAMES`].
pub(crate) const MAX_FRAMES: usize = MAX_STACK_DEPTH + OWN_FRAMES;

/// Captures the calling thread's return addresses, innermost first, into `out`; returns how
/// many were written (at most `out.len()`).
///
/// It allocates nothing, so it may run inside the allocator and (as GWP-ASan does) inside
/// the fault handler.
#[inline(never)]
pub(crate) fn capture_into(out: &mut [usize]) -> usize {
    let mut n = 0;
    if out.is_empty() {
        return 0;
    }
    // SAFETY: `trace_unsynchronized` is unsafe only because, on some platforms (Windows' dbghelp), unwinding is not thread-safe; on the Unix targets this crate builds for it is libgcc's `_Unwind_Backtrace`, which is. The callback only writes into `out`.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            out[n] = frame.ip() as usize;
            n += 1;
            n < out.len()
        })
    };
    n
}

/// The calling thread's kernel thread id.
pub(crate) fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// A recorded stack: the thread that ran it and its return addresses, innermost first.
#[derive(Clone, PartialEq, Eq)]
pub struct Stack {
    /// The kernel thread id (`gettid`) of the thread.
    pub thread: u32,
    frames: Box<[usize]>,
    depth: usize,
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("thread", &self.thread)
            .field("frames", &self.frames.len())
            .finish()
    }
}

impl Stack {
    /// Captures the calling thread's stack, keeping at most `depth` frames of the caller's
    /// (plus the capture's own, dropped when printed).
    #[inline(never)]
    pub fn capture(depth: usize) -> Stack {
        let depth = depth.clamp(1, MAX_STACK_DEPTH);
        let mut buf = [0usize; MAX_FRAMES];
        let n = capture_into(&mut buf[..depth + OWN_FRAMES]);
        Stack::from_frames(thread_id(), &buf[..n], depth)
    }

    /// A stack from raw return addresses (innermost first), printed at most `depth` frames
    /// deep.
    pub fn from_frames(thread: u32, frames: &[usize], depth: usize) -> Stack {
        Stack {
            thread,
            frames: frames.into(),
            depth,
        }
    }

    /// The raw return addresses, innermost first (the capture's own frames included).
    pub fn frames(&self) -> &[usize] {
        &self.frames
    }

    /// The frames symbolized, innermost first, starting at the first frame outside
    /// keepalloc (the capture, the unwinder, the signal trampoline, the table's entry and
    /// the allocator wrappers are dropped from the top, as ASan starts at the caller; with
    /// `frames:all` only the capture's own are): one line per function (inlined ones
    /// included), `name at file:line`, or the bare address when no symbol is known. The
    /// tail of unknown frames past the program's entry (`0x0 in ??`) is dropped.
    pub fn symbolized(&self) -> Vec<SymbolizedFrame> {
        use crate::frame_class::{Class, caller_start, class_of_frame, class_of_name};
        let frames: Vec<Vec<SymbolizedFrame>> = self
            .frames
            .iter()
            .take_while(|&&ip| ip != 0)
            .map(|&ip| {
                let mut names: Vec<SymbolizedFrame> = Vec::new();
                backtrace::resolve(ip as *mut core::ffi::c_void, |symbol| {
                    names.push(SymbolizedFrame {
                        ip,
                        name: symbol.name().map(|n| format!("{n:#}")),
                        location: match (symbol.filename(), symbol.lineno()) {
                            (Some(file), Some(line)) => Some(format!("{}:{line}", file.display())),
                            (Some(file), None) => Some(file.display().to_string()),
                            _ => None,
                        },
                    });
                });
                if names.is_empty() {
                    names.push(SymbolizedFrame {
                        ip,
                        name: None,
                        location: None,
                    });
                }
                names
            })
            .collect();
        // With `frames:all`, only the capture's own frames are dropped; otherwise the
        // stack starts at the caller's first frame.
        let classes: Vec<Class> = frames
            .iter()
            .map(|names| {
                if SHOW_OWN.load(Ordering::Relaxed) {
                    if names.iter().all(SymbolizedFrame::is_own) {
                        Class::Own
                    } else {
                        Class::Caller
                    }
                } else {
                    class_of_frame(names.iter().map(|f| f.name.as_deref()))
                }
            })
            .collect();
        let start = caller_start(&classes);
        let mut out: Vec<SymbolizedFrame> = Vec::new();
        for (i, mut names) in frames.into_iter().enumerate().skip(start) {
            if i == start
                && let Some(last) = names
                    .iter()
                    .rposition(|f| f.is_own() || class_of_name(f.name.as_deref()) == Class::Own)
            {
                // Inlined functions come innermost first: keepalloc's (or the capture's)
                // inlined into the caller's first frame are dropped.
                names.drain(..=last);
            }
            out.extend(names);
            if out.len() >= self.depth {
                out.truncate(self.depth);
                break;
            }
        }
        while out
            .last()
            .is_some_and(|f| f.name.is_none() && f.location.is_none())
        {
            out.pop();
        }
        out
    }
}

/// One symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolizedFrame {
    /// The return address.
    pub ip: usize,
    /// The demangled function name, without its hash.
    pub name: Option<String>,
    /// `file:line`.
    pub location: Option<String>,
}

impl SymbolizedFrame {
    /// A frame of the capture itself: this crate's recording or reporting, the unwinder,
    /// the kernel's signal trampoline.
    fn is_own(&self) -> bool {
        match &self.name {
            Some(n) => {
                n.starts_with("keepalloc_scribble::")
                    || n.starts_with("<keepalloc_scribble::")
                    || n.starts_with("backtrace::")
                    || n.starts_with("_Unwind_")
                    || n.starts_with("__restore_rt")
            }
            None => false,
        }
    }
}

impl fmt::Display for Stack {
    /// ASan's layout: `    #0 0x55d1c0de in name file:line`, one frame a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, frame) in self.symbolized().iter().enumerate() {
            write!(f, "    #{i} {:#x} in ", frame.ip)?;
            match &frame.name {
                Some(name) => write!(f, "{name}")?,
                None => write!(f, "??")?,
            }
            if let Some(location) = &frame.location {
                write!(f, " {location}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
