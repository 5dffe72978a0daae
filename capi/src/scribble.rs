//! Scribble from C: the C library's provider over `keepalloc-scribble`'s debugging allocator,
//! chosen at run time, on top of whatever base backend the provider has (the feature-selected
//! one, or one plugged in with `keepalloc_set_backend`).
//!
//! Whether to wrap is decided once, at the first acquire: when `keepalloc_scribble_configure`
//! was called before it, its spec; otherwise the environment variable `KEEPALLOC_SCRIBBLE`;
//! when neither, the base backend alone ([`wrap`] is the provider's hook). A spec (see
//! [`ScribbleConfig::apply_spec`]) is a comma-separated list such as
//! `guard:1/64,stacks:both,quarantine:8MiB`; an empty one means Scribble with its defaults.
//! A bad spec is never ignored: `keepalloc_scribble_configure` refuses it at once, and a bad
//! `KEEPALLOC_SCRIBBLE` makes the first acquire fail (see [`check_settings`]) with the
//! message on stderr and from `keepalloc_scribble_error()`; no owner is built.
//!
//! Under Scribble a violation ends the process: the report (with the allocation, free and
//! faulting stacks when recorded) goes to stderr and the process exits with the kind's code
//! (`keepalloc_scribble::exit`: 12 write after free, 13 double free, 14 invalid free, 15/16
//! red zone, 17 layout mismatch, 19 read or write of a freed guarded block, 22 guard page
//! touched).

use core::ffi::{c_char, c_int};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_scribble::{ConfigError, ENV_VAR, Scribble, ScribbleConfig};

use crate::KeepallocStatus;
use crate::layer::Layered;

/// The C library's backend: its base backend `B` (the feature-selected one, or one plugged in
/// from C), or Scribble over it, decided at the first acquire.
pub type Backend<B> = crate::layer::Layered<B, Scribble<B>>;

/// Where the decided setting came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `keepalloc_scribble_configure`.
    Call,
    /// The environment variable `KEEPALLOC_SCRIBBLE`.
    Environment,
    /// Neither: the plain backend.
    Nothing,
}

/// The setting decided at the first acquire.
#[derive(Debug)]
pub struct Decision {
    /// Where it came from.
    pub source: Source,
    /// `Ok(None)`: the plain backend; `Ok(Some(config))`: Scribble; `Err`: a bad setting.
    pub config: Result<Option<ScribbleConfig>, String>,
}

/// The spec given by `keepalloc_scribble_configure`, waiting for the first acquire.
static CONFIGURED: Mutex<Option<ScribbleConfig>> = Mutex::new(None);
static DECISION: OnceLock<Decision> = OnceLock::new();
/// The message of the last refused setting, for `keepalloc_scribble_error`. It only ever
/// points to strings that are never freed or changed (literals, [`DECISION_ERROR`] and the
/// strings kept in [`KEPT_MESSAGES`]), so a pointer handed to C stays valid for the life of
/// the process however many refusals replace it afterwards.
static LAST_ERROR: Mutex<Option<&'static CStr>> = Mutex::new(None);
/// The decided setting's message when it is bad: the decision is made once, so is this.
static DECISION_ERROR: OnceLock<CString> = OnceLock::new();
/// The distinct messages of `keepalloc_scribble_configure`'s refusals, each kept once and
/// never freed: the same refusal again costs nothing, and at most [`MAX_KEPT_MESSAGES`] are
/// kept (past those, [`TOO_MANY_MESSAGES`]).
static KEPT_MESSAGES: Mutex<Vec<&'static CStr>> = Mutex::new(Vec::new());
/// How many distinct refusal messages [`KEPT_MESSAGES`] holds at most.
const MAX_KEPT_MESSAGES: usize = 32;
/// The message of a refusal once [`MAX_KEPT_MESSAGES`] distinct ones are kept.
const TOO_MANY_MESSAGES: &CStr = c"keepalloc_scribble_configure: the spec was refused (its \
      message is not kept: keepalloc keeps the first 32 distinct ones)";

fn c_message(message: &str) -> CString {
    CString::new(message.replace('\0', " ")).unwrap_or_default()
}

/// `message` as a string that lives for the rest of the process: the kept copy when the same
/// message was kept before, else a new one (while fewer than [`MAX_KEPT_MESSAGES`] are kept).
fn keep(message: &str) -> &'static CStr {
    let message = c_message(message);
    let mut kept = KEPT_MESSAGES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&same) = kept.iter().find(|m| **m == message.as_c_str()) {
        return same;
    }
    if kept.len() >= MAX_KEPT_MESSAGES {
        return TOO_MANY_MESSAGES;
    }
    let leaked: &'static CStr = Box::leak(message.into_boxed_c_str());
    kept.push(leaked);
    leaked
}

fn set_error(message: &'static CStr) {
    *LAST_ERROR.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
}

/// Decides between a spec given by the C call and the environment variable's value: the
/// call wins; an environment value that is not UTF-8 is an error.
pub fn decide_from(
    configured: Option<ScribbleConfig>,
    env: Option<std::ffi::OsString>,
) -> Decision {
    if let Some(config) = configured {
        return Decision {
            source: Source::Call,
            config: Ok(Some(config)),
        };
    }
    let Some(value) = env else {
        return Decision {
            source: Source::Nothing,
            config: Ok(None),
        };
    };
    let config = match value.to_str() {
        None => Err(format!(
            "keepalloc: {ENV_VAR}={value:?}: not valid UTF-8; the allocator was not created"
        )),
        Some(spec) => ScribbleConfig::from_env_spec(spec).map(Some).map_err(|e| {
            format!("keepalloc: {ENV_VAR}={spec:?}: {e}; the allocator was not created")
        }),
    };
    Decision {
        source: Source::Environment,
        config,
    }
}

/// The setting, decided on the first call (by the first acquire).
pub fn decision() -> &'static Decision {
    DECISION.get_or_init(|| {
        let configured = *CONFIGURED.lock().unwrap_or_else(PoisonError::into_inner);
        decide_from(configured, std::env::var_os(ENV_VAR))
    })
}

/// The check the first acquire runs before building anything: `Ok` when the setting is good
/// (or absent); otherwise the message goes to stderr (once per call that fails, so that a
/// runtime that swallows statuses still shows it) and to `keepalloc_scribble_error`, and the
/// status is `KEEPALLOC_INVALID_ARGUMENT`.
pub fn check_settings() -> Result<(), KeepallocStatus> {
    match &decision().config {
        Ok(_) => Ok(()),
        Err(message) => {
            // Not `eprintln!`: it panics when stderr cannot be written, and this runs inside
            // an `extern "C"` function, outside its `catch_unwind`.
            let _ = writeln!(std::io::stderr(), "{message}");
            set_error(DECISION_ERROR.get_or_init(|| c_message(message)));
            Err(KeepallocStatus::InvalidArgument)
        }
    }
}

/// Wraps a freshly built base backend as the decision says: the `make_backend` of the C
/// library's provider is `|| wrap(make_base_backend())`. A bad setting builds nothing
/// ([`check_settings`] reports it before this is reached).
pub fn wrap<B: Allocator>(base: Result<B, AllocError>) -> Result<Backend<B>, AllocError> {
    match &decision().config {
        Ok(None) => base.map(Layered::Plain),
        Ok(Some(config)) => base.map(|b| Layered::Wrapped(Scribble::new(b, *config))),
        Err(_) => Err(AllocError),
    }
}

/// See `keepalloc.h`: sets the Scribble spec for the backend, before the first acquire.
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn keepalloc_scribble_configure(spec: *const c_char) -> KeepallocStatus {
    if spec.is_null() {
        set_error(c"keepalloc_scribble_configure: spec is NULL");
        return KeepallocStatus::InvalidArgument;
    }
    // SAFETY: non-NULL and NUL-terminated (caller's promise).
    let spec = unsafe { CStr::from_ptr(spec) };
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<(), &'static CStr> {
        let Ok(spec) = spec.to_str() else {
            return Err(c"keepalloc_scribble_configure: spec is not valid UTF-8");
        };
        let config = ScribbleConfig::from_env_spec(spec).map_err(|e: ConfigError| {
            keep(&format!("keepalloc_scribble_configure({spec:?}): {e}"))
        })?;
        let mut configured = CONFIGURED.lock().unwrap_or_else(PoisonError::into_inner);
        if DECISION.get().is_some() {
            drop(configured);
            return Err(keep(&format!(
                "keepalloc_scribble_configure({spec:?}): too late, the backend was decided \
                 at the first acquire"
            )));
        }
        *configured = Some(config);
        Ok(())
    }));
    match outcome {
        Ok(Ok(())) => KeepallocStatus::Ok,
        Ok(Err(message)) => {
            set_error(message);
            KeepallocStatus::InvalidArgument
        }
        Err(_) => KeepallocStatus::InvalidArgument,
    }
}

/// See `keepalloc.h`: the message of the last refused Scribble setting, or NULL. The string
/// is never freed or changed (see `LAST_ERROR`): the pointer is valid for the life of the
/// process, whatever other threads do after it was returned.
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_scribble_error() -> *const c_char {
    let last = *LAST_ERROR.lock().unwrap_or_else(PoisonError::into_inner);
    last.map_or(core::ptr::null(), CStr::as_ptr)
}

/// See `keepalloc.h`: 1 when the backend is Scribble, 0 when it is the plain one, -1 before
/// the first acquire decided it (or when the setting was bad).
#[unsafe(no_mangle)]
pub extern "C" fn keepalloc_scribble_enabled() -> c_int {
    match DECISION.get().map(|d| &d.config) {
        Some(Ok(Some(_))) => 1,
        Some(Ok(None)) => 0,
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keepalloc_scribble::StackMode;

    #[test]
    fn the_call_wins_over_the_environment() {
        let call = ScribbleConfig::from_env_spec("stacks:free").unwrap();
        let d = decide_from(Some(call), Some("guard:1/2".into()));
        assert_eq!(d.source, Source::Call);
        assert_eq!(d.config.unwrap().unwrap().stacks, StackMode::Free);
    }

    #[test]
    fn the_environment_is_read_and_checked() {
        let d = decide_from(None, Some("guard:1/64,stacks:both,quarantine:8MiB".into()));
        let c = d.config.unwrap().unwrap();
        assert_eq!((c.guard.sample_every, c.quarantine_bytes), (64, 8 << 20));
        let d = decide_from(None, Some("guard:1/64,stack:both".into()));
        let message = d.config.unwrap_err();
        assert!(
            message.contains(
                "KEEPALLOC_SCRIBBLE=\"guard:1/64,stack:both\": unknown setting \"stack\""
            ),
            "{message}"
        );
        assert_eq!(decide_from(None, None).config, Ok(None));
    }

    #[test]
    fn refusal_messages_are_kept_once_each_and_bounded() {
        let first = keep("keepalloc_scribble_configure(\"a\"): bad");
        // The same message again is the same kept string: no new one per call.
        assert_eq!(
            keep("keepalloc_scribble_configure(\"a\"): bad").as_ptr(),
            first.as_ptr()
        );
        for i in 0..2 * MAX_KEPT_MESSAGES {
            let kept = keep(&format!("refusal {i}"));
            assert!(kept == TOO_MANY_MESSAGES || kept.to_str() == Ok(&format!("refusal {i}")));
        }
        assert_eq!(
            KEPT_MESSAGES.lock().unwrap().len(),
            MAX_KEPT_MESSAGES,
            "bounded"
        );
        assert_eq!(keep("one more"), TOO_MANY_MESSAGES);
        // Kept strings are never freed or changed.
        assert_eq!(
            first.to_str(),
            Ok("keepalloc_scribble_configure(\"a\"): bad")
        );
        assert!(
            TOO_MANY_MESSAGES
                .to_str()
                .unwrap()
                .contains(&MAX_KEPT_MESSAGES.to_string())
        );
    }
}
