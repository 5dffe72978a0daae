//! A process-wide, push-only, lock-free set of `&'static` values keyed by pointers: how
//! [`OnnxRuntime::from_api_base`](crate::OnnxRuntime::from_api_base) and
//! [`Env::from_raw`](crate::Env::from_raw) give the same wrapper to every call with the same
//! pointers instead of leaking a new one per call (`keepalloc_ort_register` may be called any
//! number of times). Nodes are leaked once per distinct key and never freed, never moved; no
//! lock is taken (a `fork()` in the middle of an insertion cannot leave a lock held).

use core::sync::atomic::{AtomicPtr, Ordering};

/// The key: two addresses (the second is 0 when one is enough).
pub(crate) type Key = (usize, usize);

struct Node<T: 'static> {
    key: Key,
    value: T,
    /// The node that was the head when this one was pushed (never changes after the push).
    next: *const Node<T>,
}

/// The set. `T: Sync` because the `&'static T` it hands out is shared by every thread.
pub(crate) struct Interned<T: Send + Sync + 'static> {
    head: AtomicPtr<Node<T>>,
}

impl<T: Send + Sync + 'static> Interned<T> {
    /// An empty set.
    pub(crate) const fn new() -> Self {
        Interned {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The value stored under `key` in the list that starts at `node`.
    fn find_from(mut node: *const Node<T>, key: Key) -> Option<&'static T> {
        while !node.is_null() {
            // SAFETY: every non-NULL pointer in the list is a node leaked by `get_or_try_insert` and published with a Release CAS (read with Acquire), never freed or written again.
            let n: &'static Node<T> = unsafe { &*node };
            if n.key == key {
                return Some(&n.value);
            }
            node = n.next;
        }
        None
    }

    /// The value stored under `key`, if any. Allocates nothing.
    pub(crate) fn get(&self, key: Key) -> Option<&'static T> {
        Self::find_from(self.head.load(Ordering::Acquire), key)
    }

    /// [`Interned::get_or_try_insert`] with a `make` that cannot fail.
    pub(crate) fn get_or_insert(&self, key: Key, make: impl FnOnce() -> T) -> &'static T {
        match self.get_or_try_insert(key, || Ok::<T, core::convert::Infallible>(make())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// The value stored under `key`, or `make()`'s value stored under it. `make` runs only when
    /// the key is absent; if two threads insert the same key at once, one value is kept, the
    /// other dropped, and both callers get the kept one.
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: Key,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<&'static T, E> {
        if let Some(v) = self.get(key) {
            return Ok(v);
        }
        let node = Box::into_raw(Box::new(Node {
            key,
            value: make()?,
            next: core::ptr::null(),
        }));
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            if let Some(v) = Self::find_from(head, key) {
                // SAFETY: `node` came from `Box::into_raw` above and was never published (every CAS that could publish it failed), so this thread owns it.
                drop(unsafe { Box::from_raw(node) });
                return Ok(v);
            }
            // SAFETY: `node` is unpublished, owned by this thread (as above).
            unsafe { (*node).next = head };
            match self
                .head
                .compare_exchange(head, node, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: published: from now on the node is never freed, moved or written.
                Ok(_) => return Ok(unsafe { &(*node).value }),
                Err(now) => head = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_key_across_threads() {
        static SET: Interned<u64> = Interned::new();
        let got: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    s.spawn(move || {
                        let v = SET.get_or_try_insert::<()>((7, 0), || Ok(t)).unwrap();
                        v as *const u64 as usize
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|&p| p == got[0]));
        assert!(SET.get((8, 0)).is_none());
        assert_eq!(SET.get_or_try_insert::<()>((8, 0), || Ok(1)), Ok(&1));
        assert_eq!(SET.get_or_try_insert::<()>((8, 0), || Err(())), Ok(&1));
        assert_eq!(SET.get_or_try_insert((9, 0), || Err(3)), Err(3));
        assert!(SET.get((9, 0)).is_none());
    }
}
