//! The faulting stack of a crash: a handler for the fatal signals that prints the stack of
//! the interrupted code (the frames after the kernel's signal trampoline), symbolized with
//! keepalloc's own frames dropped, between `KEEPALLOC_EXPLORE_CRASH` markers on stderr, and
//! then lets the signal end the process as it would have.

use std::io::Write as _;

use keepalloc_scribble::sites::caller_frames;
use keepalloc_scribble::{Stack, interrupted_pc};

const SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// Installs the handler (on an alternate stack, so a stack overflow is reported too).
pub fn install() {
    const ALT: usize = 256 << 10;
    let stack = Box::leak(vec![0u8; ALT].into_boxed_slice());
    // SAFETY: `stack` lives for the rest of the process; the sigaction is fully initialized (zeroed, then the fields used) and names a handler with the SA_SIGINFO signature.
    unsafe {
        let ss = libc::stack_t {
            ss_sp: stack.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: ALT,
        };
        libc::sigaltstack(&ss, core::ptr::null_mut());
        for sig in SIGNALS {
            let mut action: libc::sigaction = core::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND;
            libc::sigaction(sig, &action, core::ptr::null_mut());
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // The process is ending: symbolizing here is not async-signal-safe, which is acceptable
    // for a report that is the last thing it does (as sanitizers' reports are).
    let stack = Stack::capture(64);
    let frames = stack.frames();
    // The unwinder passes through the kernel's signal frame to the interrupted code: start
    // at the interrupted instruction (this handler's frames come before it).
    // SAFETY: `context` is this SA_SIGINFO handler's third argument.
    let after = unsafe { interrupted_pc(context) }
        .and_then(|pc| frames.iter().position(|&ip| ip == pc || ip == pc + 1))
        .unwrap_or(0);
    let faulting = Stack::from_frames(stack.thread, &frames[after..], 64);
    let mut text = format!(
        "KEEPALLOC_EXPLORE_CRASH signal {sig} ({})\n",
        signal_name(sig)
    );
    for (i, frame) in caller_frames(&faulting).iter().enumerate() {
        text.push_str(&format!("    #{i} {frame}\n"));
    }
    text.push_str("KEEPALLOC_EXPLORE_CRASH end\n");
    let _ = std::io::stderr().write_all(text.as_bytes());
    // SA_RESETHAND restored the default action: a fault re-executes and is raised again;
    // an abort is raised again here.
    if sig == libc::SIGABRT {
        // SAFETY: raise has no preconditions.
        unsafe { libc::raise(sig) };
    }
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        _ => "signal",
    }
}
