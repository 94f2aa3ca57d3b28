//! [`Rare`]: storage for a group of rarely set fields that costs one pointer while they are unset.
//!
//! Most instructions carry no sharding, metadata, window or custom-call attributes, and most
//! layouts are nothing but a minor-to-major order; keeping those fields inline made an
//! [`crate::Instruction`] 1.5 KB and parsing a large module mostly a matter of touching fresh
//! memory. A `Rare<T>` holds `T` behind a box that is only allocated on the first mutable access;
//! until then it reads as `T::empty()`. The structs that use it ([`crate::Instruction`],
//! [`crate::Attrs`], [`crate::Layout`]) dereference to their rare group, so the fields read and
//! write as before: `instr.sharding`, `instr.attrs.window`, `layout.tiles`.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// A type with a shared "nothing set" value, what an unallocated [`Rare`] reads as.
pub trait Empty: Clone + 'static {
    fn empty() -> &'static Self;
}

/// `T`, boxed on first write. Equality, hashing and `Debug` look at the value, so an allocated
/// `Rare` holding `T::empty()` equals an unallocated one.
#[derive(Clone)]
pub struct Rare<T: Empty>(Option<Box<T>>);

impl<T: Empty> Rare<T> {
    pub const fn new() -> Rare<T> {
        Rare(None)
    }

    /// A `Rare` holding `value` (unallocated when `value` is empty).
    pub fn from_value(value: T) -> Rare<T>
    where
        T: PartialEq,
    {
        if value == *T::empty() {
            Rare(None)
        } else {
            Rare(Some(Box::new(value)))
        }
    }

    /// Frees the box again when it holds the empty value (after code that writes every field,
    /// such as the proto import).
    pub fn shrink(&mut self)
    where
        T: PartialEq,
    {
        if self.0.as_deref().is_some_and(|v| v == T::empty()) {
            self.0 = None;
        }
    }

    /// True while nothing has been written.
    pub fn is_unallocated(&self) -> bool {
        self.0.is_none()
    }
}

impl<T: Empty> Default for Rare<T> {
    fn default() -> Self {
        Rare(None)
    }
}

impl<T: Empty> Deref for Rare<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_deref().unwrap_or_else(|| T::empty())
    }
}

impl<T: Empty> DerefMut for Rare<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(|| Box::new(T::empty().clone()))
    }
}

impl<T: Empty + PartialEq> PartialEq for Rare<T> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            _ => **self == **other,
        }
    }
}

impl<T: Empty + Eq> Eq for Rare<T> {}

impl<T: Empty + Hash> Hash for Rare<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl<T: Empty + fmt::Debug> fmt::Debug for Rare<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Group {
        a: i64,
        b: Vec<i64>,
    }

    static EMPTY_GROUP: Group = Group {
        a: 7,
        b: Vec::new(),
    };

    impl Empty for Group {
        fn empty() -> &'static Group {
            &EMPTY_GROUP
        }
    }

    #[test]
    fn reads_empty_until_written() {
        let mut r: Rare<Group> = Rare::default();
        assert_eq!(r.a, 7);
        assert!(r.is_unallocated());
        r.b.push(3);
        assert!(!r.is_unallocated());
        assert_eq!(*r, Group { a: 7, b: vec![3] });
        assert_ne!(r, Rare::default());
    }

    #[test]
    fn allocated_empty_equals_unallocated() {
        let mut r: Rare<Group> = Rare::new();
        r.a = 7;
        assert!(!r.is_unallocated());
        assert_eq!(r, Rare::default());
        assert_eq!(Rare::default(), r);
        assert!(Rare::from_value(EMPTY_GROUP.clone()).is_unallocated());
        let hash = |r: &Rare<Group>| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            r.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&r), hash(&Rare::default()));
        r.shrink();
        assert!(r.is_unallocated());
        r.a = 8;
        r.shrink();
        assert_eq!(r.a, 8);
    }
}
