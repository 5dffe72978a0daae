//! The C library's provider and its backend: the compile-time default, or one a C runtime
//! plugs in with `keepalloc_set_backend` before the first acquire.
//!
//! Two providers, of which a process only ever uses one, chosen once, at the first acquire
//! ([`choose`], the moment that also freezes the registration and the Scribble decision):
//!
//! * [`C_PLAIN`]: the built-in backend with nothing over it (nothing plugged, no Scribble),
//!   the production case. Its owner is `Counting<DefaultBackend>`, whose C table is the
//!   headerless one on glibc and mimalloc builds: a 64-byte-aligned request is one
//!   `aligned_alloc`/`mi_malloc_aligned` of exactly that size, freed by `free`/`mi_free`.
//! * [`C_PROVIDER`]: a plugged backend or Scribble (over either base). Its blocks carry
//!   keepalloc's header; the plugged functions only ever see whole blocks.
//!
//! Either way it is one [`GlobalProvider`]: the same owner once, the same counting wrapper,
//! the same published table for the rest of the process.
//!
//! The rule for registration: the first `keepalloc_set_backend` before the first [`choose`]
//! wins. Registering the same functions and context again is `KEEPALLOC_OK` (idempotent); a
//! different backend, or any backend once [`choose`] has run (the first acquire past its
//! argument and Scribble checks, even when building the owner then failed), is
//! `KEEPALLOC_BACKEND_CONFLICT` and changes nothing. The registered functions are copied into
//! memory that is never freed.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::io::Write as _;
use std::sync::Mutex;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{
    AllocatorTable, DefaultBackend, Request, RequestAllocator, TableAllocator,
};
use keepalloc_provider::GlobalProvider;

use crate::KeepallocStatus;

/// The C library's base backend: the compile-time default, or one plugged in from C.
#[derive(Debug)]
pub enum BaseBackend {
    /// The compile-time default ([`DefaultBackend`]).
    Builtin(DefaultBackend),
    /// A C runtime's functions, registered with `keepalloc_set_backend`.
    Plugged(TableAllocator<'static>),
}

/// What has been registered, and whether the choice is frozen (by [`choose`] or by building
/// an owner; then nothing may change).
struct Registration {
    plugged: Option<&'static AllocatorTable>,
    frozen: bool,
}

static REGISTRATION: Mutex<Registration> = Mutex::new(Registration {
    plugged: None,
    frozen: false,
});

fn registration() -> std::sync::MutexGuard<'static, Registration> {
    REGISTRATION.lock().unwrap_or_else(|e| e.into_inner())
}

/// The backend of the C library's provider: the base one, or Scribble over it when
/// `KEEPALLOC_SCRIBBLE` or `keepalloc_scribble_configure` asks for it, and site recording and
/// failing over that when `KEEPALLOC_FAIL` is set (decided at first use).
pub type CBackend = crate::fail::Failable<crate::scribble::Backend<BaseBackend>>;

fn make_backend() -> Result<CBackend, AllocError> {
    let backend = crate::fail::wrap(crate::scribble::wrap(make_base_backend()))?;
    if backend.wrapper().is_some() {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::atexit(report_sites_at_exit) };
    }
    Ok(backend)
}

/// `KEEPALLOC_FAIL`'s report at exit, from the owner [`C_PROVIDER`] built.
extern "C" fn report_sites_at_exit() {
    // Never unwind out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        let Some(owner) = C_PROVIDER.constructed_owner() else {
            return;
        };
        if let Some(s) = owner.allocator().inner().wrapper() {
            let _ = std::io::stderr().write_all(crate::fail::report(s).as_bytes());
        }
    });
}

fn make_base_backend() -> Result<BaseBackend, AllocError> {
    let mut reg = registration();
    reg.frozen = true;
    match reg.plugged {
        // SAFETY: `keepalloc_set_backend`'s caller promised that the functions follow the backend contract in keepalloc.h for the rest of the process; the copy is leaked.
        Some(table) => Ok(BaseBackend::Plugged(unsafe { TableAllocator::new(table) })),
        None => keepalloc_allocators::default_backend().map(BaseBackend::Builtin),
    }
}

/// The C library's process-wide provider when a backend is plugged or Scribble is on: the
/// owner every `keepalloc_acquire*` call shares then.
pub static C_PROVIDER: GlobalProvider<CBackend> = GlobalProvider::new(make_backend, None);

/// The C library's process-wide provider for the built-in backend alone (the default): a
/// headerless C table on glibc and mimalloc builds.
pub static C_PLAIN: GlobalProvider<DefaultBackend> = GlobalProvider::new(make_plain, None);

fn make_plain() -> Result<DefaultBackend, AllocError> {
    // `choose` froze the registration when it picked this provider.
    keepalloc_allocators::default_backend()
}

/// Which of the two providers the C library uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// [`C_PLAIN`].
    Plain,
    /// [`C_PROVIDER`].
    Wrapped,
}

static CHOSEN: std::sync::OnceLock<Chosen> = std::sync::OnceLock::new();

/// The provider, chosen by the first call (every acquire calls this, after the Scribble
/// setting was checked): [`Chosen::Plain`] when nothing is plugged and Scribble is off. From
/// then on the registration is frozen (`keepalloc_set_backend` is a conflict), as it is
/// once an owner is being built.
pub fn choose() -> Chosen {
    *CHOSEN.get_or_init(|| {
        let scribbled = !matches!(crate::scribble::decision().config, Ok(None))
            || !matches!(crate::fail::spec(), Ok(None));
        let mut reg = registration();
        reg.frozen = true;
        if reg.plugged.is_none() && !scribbled {
            Chosen::Plain
        } else {
            Chosen::Wrapped
        }
    })
}

/// The provider, if an acquire has chosen it (queries before that see no owner).
pub fn chosen() -> Option<Chosen> {
    CHOSEN.get().copied()
}

/// Runs `$body` with `$p` bound to the chosen provider (`&'static GlobalProvider<_>` of
/// either backend type).
macro_rules! with_provider {
    ($chosen:expr, |$p:ident| $body:expr) => {
        match $chosen {
            $crate::backend::Chosen::Plain => {
                let $p = &$crate::backend::C_PLAIN;
                $body
            }
            $crate::backend::Chosen::Wrapped => {
                let $p = &$crate::backend::C_PROVIDER;
                $body
            }
        }
    };
}
pub(crate) use with_provider;

/// Registers `backend` (already checked complete) under the rule in the module docs.
pub(crate) fn register(backend: AllocatorTable) -> KeepallocStatus {
    let mut reg = registration();
    match reg.plugged {
        Some(existing) if existing.same_as(&backend) => KeepallocStatus::Ok,
        Some(_) => KeepallocStatus::BackendConflict,
        None if reg.frozen => KeepallocStatus::BackendConflict,
        None => {
            reg.plugged = Some(Box::leak(Box::new(backend)));
            KeepallocStatus::Ok
        }
    }
}

/// The name of the backend the owner uses (or will use).
pub(crate) fn is_plugged() -> bool {
    registration().plugged.is_some()
}

macro_rules! dispatch {
    ($self:ident, $a:ident => $e:expr) => {
        match $self {
            BaseBackend::Builtin($a) => $e,
            BaseBackend::Plugged($a) => $e,
        }
    };
}

// SAFETY: forwards every call to one of two allocators, always the same one for a given
// value (the variant never changes), so blocks go back to the allocator that made them.
unsafe impl RequestAllocator for BaseBackend {
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises, forwarded to the same allocator.
        dispatch!(self, a => unsafe { request.forward_to(a) })
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise, forwarded to the same allocator.
        dispatch!(self, a => unsafe { a.deallocate(ptr, layout) })
    }
}
keepalloc_allocators::allocator_from_requests!(BaseBackend);
