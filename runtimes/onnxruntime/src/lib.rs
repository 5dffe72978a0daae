//! keepalloc's allocator owner as ONNX Runtime's env allocator.
//!
//! ONNX Runtime lets an application register one `OrtAllocator` per device on its `OrtEnv`
//! (`RegisterAllocator`); sessions created with the config entry
//! `session.use_env_allocators=1` then allocate their tensors through it, and ONNX Runtime
//! keeps the allocator's pointer for as long as the env lives. That is the same hand-off
//! keepalloc makes safe for XNNPACK, with a different C face: this crate gives keepalloc's
//! owner an `OrtAllocator` face ([`EnvAllocator`]) and makes the registration keepalloc's
//! init hook ([`register_env_allocator`]), so the owner's construction, the publication of
//! its table and the registration happen inside one once; a failed `RegisterAllocator` is
//! retried later with the same owner and the same face, never a second one.
//!
//! ONNX Runtime is loaded at run time ([`OnnxRuntime::load`], a path or `$ORT_DYLIB_PATH`),
//! never linked: the workspace builds and its default tests pass without it. An application
//! that already has ONNX Runtime (the `ort` crate, or C's `OrtGetApiBase()`) passes its
//! pointers instead: [`register_with`] takes an `OrtApi*` and an `OrtEnv*`. The OrtApi slots
//! this crate calls (about thirty) are declared in [`ffi`], checked slot by slot against
//! `ort-sys`'s bindgen copy of ONNX Runtime's header in its tests, so no binding crate (and
//! no `links = "onnxruntime"`) reaches a user; [`Env`] and [`Session`] wrap them.
//!
//! ```no_run
//! use keepalloc_allocators::System;
//! use keepalloc_onnxruntime::{Env, OnnxRuntime, Session, SessionConfig, register_env_allocator};
//! use keepalloc_provider::GlobalProvider;
//!
//! static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
//!
//! // SAFETY: $ORT_DYLIB_PATH is this application's ONNX Runtime (1.22 or later).
//! let ort = unsafe { OnnxRuntime::load(None) }?;          // $ORT_DYLIB_PATH
//! let env = Env::create(ort, c"app")?;
//! register_env_allocator(&ALLOCATOR, env)?;               // once; retry on error
//! let session = Session::new(env, "model.onnx".as_ref(), SessionConfig::default())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

mod env_allocator;
pub mod ffi;
mod intern;
pub mod interpose;
mod register;
mod runtime;
mod session;

use std::path::PathBuf;

pub use env_allocator::{EnvAllocator, EnvAllocatorStats, ORT_ALIGNMENT, ORT_OVERRUN};
pub use register::{
    LIBRARY, OTHER_ENV, is_registered_on, register_env_allocator, register_env_allocator_ex,
    register_on, register_with,
};
pub use runtime::{ORT_API_VERSION, OnnxRuntime};
pub use session::{
    ELEMENT_FLOAT, Env, InputSpec, Session, SessionConfig, Tensor, USE_ENV_ALLOCATORS,
    sample_inputs,
};

/// What can go wrong talking to ONNX Runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrtError {
    /// No path was given and `$ORT_DYLIB_PATH` is not set.
    #[error("no ONNX Runtime library: pass a path or set ORT_DYLIB_PATH")]
    NoLibrary,
    /// The library could not be loaded or is not a usable ONNX Runtime.
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Load {
        /// The path tried.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// An OrtApi call returned an error status.
    #[error("{call} failed: {message}")]
    Api {
        /// The OrtApi function.
        call: &'static str,
        /// ONNX Runtime's message.
        message: String,
    },
    /// The model path has a NUL byte.
    #[error("the model path {0:?} contains a NUL byte")]
    BadPath(PathBuf),
    /// The inputs do not match the model.
    #[error("bad input: {0}")]
    Input(String),
    /// The model uses something this thin layer does not handle.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A pointer given to [`register_with`] is NULL (which one).
    #[error("the {0} pointer is NULL")]
    NullPointer(&'static str),
    /// [`register_with`]'s registration failed (the owner is kept; retry), or was made on
    /// another env.
    #[error(transparent)]
    Register(keepalloc_provider::ProviderError),
    /// An `EnvAllocator` already exists for another keepalloc table.
    #[error("this process's OrtAllocator face was made for another keepalloc table")]
    OtherTable,
}
