//! The environment a program runs in under the preload check, shared by `cargo xtask
//! preload-check` and `runtimes/xnnpack/tests/preload.rs`.

use std::path::Path;
use std::process::Command;

/// Sets `cmd` to run with `preload` in `LD_PRELOAD` (or none) and keepalloc's adoption
/// settings cleared. cargo's `LD_LIBRARY_PATH` goes too: it names `target/<profile>/` first,
/// whose libkeepalloc_capi.so is another file than the one the programs link (RUNPATH comes
/// after `LD_LIBRARY_PATH`), and would give a second owner.
pub fn with_preload<'a>(cmd: &'a mut Command, preload: Option<&Path>) -> &'a mut Command {
    cmd.env_remove("LD_PRELOAD")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("KEEPALLOC_ADOPT")
        .env_remove("KEEPALLOC_SCRIBBLE");
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    cmd
}
