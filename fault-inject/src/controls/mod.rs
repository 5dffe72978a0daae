//! The negative controls: deliberately broken providers that the scenarios must catch
//! (feature `controls`; never in a default build).
//!
//! Their owners live in scribbled, quarantined memory ([`owner::OWNER_HEAP`]) and carry a
//! canary that every table callback checks first, so a dangling use is *seen* — 0x55 where
//! the canary was — and reported as a [`Violation`](crate::Violation), not left to crash by
//! chance or, worse, to work because the next owner landed at the same address.

pub mod naive_retry;
pub mod owner;
pub mod racy;
