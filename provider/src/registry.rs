//! The bounded registry of consuming libraries of one [`GlobalProvider`](crate::GlobalProvider):
//! library names (compared by content) mapped to their [`LibraryOnce`].
//!
//! Bounds: at most [`MAX_LIBRARIES`] libraries per provider (the default library included),
//! names of 1 to [`MAX_LIBRARY_NAME`] bytes of UTF-8. A slot, once given to a name, is the
//! name's for the life of the provider. Looking a name up takes no lock (each slot's name is a
//! `OnceLock`, filled in order); registering a new one takes a short lock that is never held
//! while a hook runs, so libraries never wait on each other's hooks.

use std::sync::{Mutex, OnceLock};

use crate::library_once::LibraryOnce;

/// How many libraries one provider can serve, the default library included.
pub const MAX_LIBRARIES: usize = 16;
/// The longest library name, in bytes.
pub const MAX_LIBRARY_NAME: usize = 63;
/// The library [`GlobalProvider::acquire`](crate::GlobalProvider::acquire) initializes with
/// the provider's own hook, and `keepalloc_acquire` (C) with the caller's; pass it to
/// [`GlobalProvider::acquire_library`](crate::GlobalProvider::acquire_library) to run a hook of
/// your own in the same once.
pub const DEFAULT_LIBRARY: &str = "default";

/// Why a library name was refused. Nothing was registered and no hook ran.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LibraryError {
    /// The name is empty.
    #[error("the library name is empty")]
    Empty,
    /// The name is longer than [`MAX_LIBRARY_NAME`] bytes.
    #[error("the library name is {len} bytes long; the limit is {MAX_LIBRARY_NAME}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name is not UTF-8 (from C).
    #[error("the library name is not UTF-8")]
    NotUtf8,
    /// [`MAX_LIBRARIES`] libraries are registered already and this name is not one of them.
    #[error("the provider already serves {MAX_LIBRARIES} libraries; `{name}` is not one of them")]
    Full {
        /// The name that did not fit.
        name: String,
    },
}

/// A library's name, stored inline (no allocation).
#[derive(Clone, Copy)]
struct Name {
    len: u8,
    bytes: [u8; MAX_LIBRARY_NAME],
}

impl Name {
    const fn new(name: &str) -> Name {
        let mut bytes = [0u8; MAX_LIBRARY_NAME];
        let src = name.as_bytes();
        let mut i = 0;
        while i < src.len() {
            bytes[i] = src[i];
            i += 1;
        }
        Name {
            len: src.len() as u8,
            bytes,
        }
    }

    fn as_str(&self) -> &str {
        // Built only from a `&str` of at most MAX_LIBRARY_NAME bytes, copied whole.
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

/// Checks a library name against the bounds.
pub fn check_name(name: &str) -> Result<(), LibraryError> {
    if name.is_empty() {
        return Err(LibraryError::Empty);
    }
    if name.len() > MAX_LIBRARY_NAME {
        return Err(LibraryError::TooLong { len: name.len() });
    }
    Ok(())
}

/// Checks a library name from C (bytes before the NUL) against the bounds.
pub fn check_name_bytes(name: &[u8]) -> Result<&str, LibraryError> {
    if name.is_empty() {
        return Err(LibraryError::Empty);
    }
    if name.len() > MAX_LIBRARY_NAME {
        return Err(LibraryError::TooLong { len: name.len() });
    }
    core::str::from_utf8(name).map_err(|_| LibraryError::NotUtf8)
}

/// The libraries of one provider. Slot 0 is [`DEFAULT_LIBRARY`].
pub(crate) struct Registry {
    names: [OnceLock<Name>; MAX_LIBRARIES],
    onces: [LibraryOnce; MAX_LIBRARIES],
    insert: Mutex<()>,
}

impl Registry {
    pub(crate) const fn new() -> Self {
        let names = [const { OnceLock::new() }; MAX_LIBRARIES];
        Registry {
            names,
            onces: [const { LibraryOnce::new() }; MAX_LIBRARIES],
            insert: Mutex::new(()),
        }
    }

    /// The default library's once (slot 0).
    #[inline]
    pub(crate) fn default_library(&self) -> &LibraryOnce {
        &self.onces[0]
    }

    /// The once of `slot` (`slot < MAX_LIBRARIES`).
    pub(crate) fn once(&self, slot: usize) -> &LibraryOnce {
        &self.onces[slot]
    }

    /// The slot of `name`, registering it if it is new.
    pub(crate) fn slot(&self, name: &str) -> Result<(usize, &LibraryOnce), LibraryError> {
        check_name(name)?;
        if name == DEFAULT_LIBRARY {
            return Ok((0, &self.onces[0]));
        }
        if let Some(i) = self.find(name, 1) {
            return Ok((i, &self.onces[i]));
        }
        #[cfg(test)]
        tests::between_scan_and_lock(self, name);
        let _guard = self.insert.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have registered it (or others) since the lock-free scan.
        for i in 1..MAX_LIBRARIES {
            match self.names[i].get() {
                Some(n) if n.as_str() == name => return Ok((i, &self.onces[i])),
                Some(_) => continue,
                None => {
                    let _ = self.names[i].set(Name::new(name));
                    return Ok((i, &self.onces[i]));
                }
            }
        }
        Err(LibraryError::Full {
            name: name.to_owned(),
        })
    }

    /// The slot of an already registered `name` (no registration).
    pub(crate) fn lookup(&self, name: &str) -> Option<&LibraryOnce> {
        if name == DEFAULT_LIBRARY {
            return Some(&self.onces[0]);
        }
        self.find(name, 1).map(|i| &self.onces[i])
    }

    fn find(&self, name: &str, from: usize) -> Option<usize> {
        for i in from..MAX_LIBRARIES {
            match self.names[i].get() {
                Some(n) if n.as_str() == name => return Some(i),
                Some(_) => continue,
                None => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    std::thread_local! {
        /// Registers the name once more between `slot`'s lock-free scan and its lock, on this
        /// thread only: what another thread can do in that window.
        static INTERLOPER: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn between_scan_and_lock(reg: &Registry, name: &str) {
        if INTERLOPER.with(|i| i.replace(false)) {
            reg.slot(name).expect("the interloper registers the name");
        }
    }

    /// A name registered by another thread after `slot`'s lock-free scan missed it is found
    /// by the scan under the lock, not registered a second time (the race that 32 threads
    /// asking for one new name only sometimes produce, made to happen every time).
    #[test]
    fn a_name_registered_after_the_scan_is_found_under_the_lock() {
        let reg = Registry::new();
        INTERLOPER.with(|i| i.set(true));
        let (slot, once) = reg.slot("late").expect("registered");
        assert!(!INTERLOPER.with(Cell::get), "the interloper ran");
        assert_eq!(slot, 1, "the interloper's slot, found under the lock");
        assert!(core::ptr::eq(once, reg.once(1)));
        assert!(
            reg.names[2].get().is_none(),
            "no second slot for the same name"
        );
        assert_eq!(reg.slot("late").expect("registered").0, 1);
    }
}
