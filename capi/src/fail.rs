//! `KEEPALLOC_FAIL`: fault exploration from the command line, with no rebuild. When the
//! variable is set at the first acquire, the C library's backend records every allocation
//! call's site (`keepalloc_scribble::sites`) and fails the calls the spec names:
//!
//! * `list`: none; at exit, every site with its hit count and its caller's stack;
//! * `site:HEX` (its first hit) or `site:HEX,hits:all` (every hit);
//! * `nth:N`: the Nth allocation call; `p:P,seed:S`: each call with probability P.
//!
//! At exit (any spec) stderr gets a summary: the calls failed, the sites failed with their
//! stacks, and the blocks still live by site. A bad spec makes the first acquire fail with
//! `KEEPALLOC_INVALID_ARGUMENT` and the message on stderr; no owner is built (as a bad
//! `KEEPALLOC_SCRIBBLE` does). Unset, nothing changes.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::OnceLock;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_scribble::sites::{FailSpec, SiteFailing, caller_frames};

use crate::KeepallocStatus;
use crate::layer::Layered;

/// The environment variable.
pub const FAIL_ENV: &str = "KEEPALLOC_FAIL";

/// The backend under the counting wrapper: `B` alone, or `B` with its sites recorded and
/// failed as `KEEPALLOC_FAIL` says.
pub type Failable<B> = Layered<B, SiteFailing<B>>;

/// The spec, read once: `Ok(None)` when unset.
pub fn spec() -> &'static Result<Option<FailSpec>, String> {
    static SPEC: OnceLock<Result<Option<FailSpec>, String>> = OnceLock::new();
    SPEC.get_or_init(|| match std::env::var_os(FAIL_ENV) {
        None => Ok(None),
        Some(v) => match v.to_str() {
            None => Err(format!(
                "keepalloc: {FAIL_ENV}={v:?}: not valid UTF-8; the allocator was not created"
            )),
            Some(s) => FailSpec::parse(s)
                .map(Some)
                .map_err(|e| format!("keepalloc: {e}; the allocator was not created")),
        },
    })
}

/// The check the first acquire runs before building anything (with Scribble's).
pub fn check_settings() -> Result<(), KeepallocStatus> {
    match spec() {
        Ok(_) => Ok(()),
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "{message}");
            Err(KeepallocStatus::InvalidArgument)
        }
    }
}

/// Wraps a freshly built backend as `KEEPALLOC_FAIL` says. The caller, which owns the
/// provider, arranges the [`report`] at exit when the result records sites.
pub fn wrap<B: Allocator>(base: Result<B, AllocError>) -> Result<Failable<B>, AllocError> {
    match spec() {
        Ok(None) => base.map(Layered::Plain),
        Ok(Some(spec)) => {
            let sites = SiteFailing::new(base?);
            sites.arm(*spec);
            Ok(Layered::Wrapped(sites))
        }
        Err(_) => Err(AllocError),
    }
}

/// The exit report: sites (every one for `list`, the failed ones otherwise) and live blocks.
pub fn report<B: Allocator>(s: &SiteFailing<B>) -> String {
    let spec = s.spec();
    let sites = s.sites();
    let calls: u64 = sites.iter().map(|r| r.hits).sum();
    let mut out = format!(
        "keepalloc: {FAIL_ENV} {spec:?}: {} sites, {calls} allocation calls, {} failed\n",
        sites.len(),
        s.failed()
    );
    for r in sites
        .iter()
        .filter(|r| spec == FailSpec::List || r.failed > 0)
    {
        let _ = writeln!(out, "  site {} hits {} failed {}", r.site, r.hits, r.failed);
        for (i, frame) in caller_frames(&r.stack).iter().enumerate() {
            let _ = writeln!(out, "    #{i} {frame}");
        }
    }
    for l in s.live() {
        let _ = writeln!(
            out,
            "  live at exit: site {} {} blocks, {} bytes",
            l.site, l.blocks, l.bytes
        );
    }
    out
}
