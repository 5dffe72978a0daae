//! The negative controls: deliberately broken providers that the scenarios must catch
//! (feature `controls`; never in a default build). Each is caught only by the findings
//! that are the signature of its own bug ([`Variant::signature`](crate::scenario::Variant::signature)).
//!
//! Their owners live in scribbled, quarantined memory ([`owner::OWNER_HEAP`]) and carry a
//! [`Witness`](crate::witness::Witness) checked by every table callback, so a dangling use
//! is *seen* — 0x55 where the canary was — and reported, not left to crash by chance or,
//! worse, to work because the next owner landed at the same address.

pub mod build_race;
pub mod drop_on_oom;
pub mod naive_retry;
pub mod owner;
pub mod poisoning_once;
pub mod racy;
