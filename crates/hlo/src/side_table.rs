//! [`SideTable`]: per-instruction (or per-computation) state of a pass, in a dense vector
//! indexed by id.
//!
//! A pass that adds instructions while it walks (the partitioner adds thousands) cannot size its
//! tables once from [`crate::Module::instr_capacity`]: ids handed out later fall beyond the end.
//! A `SideTable` reads every id it has not stored as the default value and grows when an id
//! beyond its end is written, so it never needs resizing by hand and never panics on a new id.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::instruction::{CompId, InstrId};

/// An id that indexes a dense table.
pub trait EntityId: Copy {
    fn index(self) -> usize;
}

impl EntityId for InstrId {
    fn index(self) -> usize {
        InstrId::index(self)
    }
}

impl EntityId for CompId {
    fn index(self) -> usize {
        CompId::index(self)
    }
}

/// A dense map from ids to `V`, `default` for every id not written.
#[derive(Clone, Debug)]
pub struct SideTable<K, V> {
    values: Vec<V>,
    default: V,
    key: PhantomData<fn(K)>,
}

impl<K: EntityId, V: Clone> SideTable<K, V> {
    /// An empty table whose every entry reads as `default`.
    pub fn new(default: V) -> SideTable<K, V> {
        SideTable {
            values: Vec::new(),
            default,
            key: PhantomData,
        }
    }

    /// An empty table with room for `capacity` ids (e.g. `module.instr_capacity()`).
    pub fn with_capacity(default: V, capacity: usize) -> SideTable<K, V> {
        SideTable {
            values: Vec::with_capacity(capacity),
            default,
            key: PhantomData,
        }
    }

    pub fn get(&self, id: K) -> &V {
        self.values.get(id.index()).unwrap_or(&self.default)
    }

    /// The entry of `id`, growing the table (with defaults) if `id` is beyond its end.
    pub fn get_mut(&mut self, id: K) -> &mut V {
        let i = id.index();
        if i >= self.values.len() {
            self.values.resize(i + 1, self.default.clone());
        }
        &mut self.values[i]
    }

    pub fn set(&mut self, id: K, value: V) {
        *self.get_mut(id) = value;
    }

    /// Puts the default back for `id`, returning what was there.
    pub fn take(&mut self, id: K) -> V {
        match self.values.get_mut(id.index()) {
            Some(v) => std::mem::replace(v, self.default.clone()),
            None => self.default.clone(),
        }
    }

    /// Every entry as stored, by id index (entries beyond the end read as the default).
    pub fn as_slice(&self) -> &[V] {
        &self.values
    }
}

impl<K: EntityId, V: Clone> Index<K> for SideTable<K, V> {
    type Output = V;

    fn index(&self, id: K) -> &V {
        self.get(id)
    }
}

impl<K: EntityId, V: Clone> IndexMut<K> for SideTable<K, V> {
    fn index_mut(&mut self, id: K) -> &mut V {
        self.get_mut(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_on_write_and_reads_defaults() {
        let mut t: SideTable<InstrId, Option<u32>> = SideTable::with_capacity(None, 2);
        assert_eq!(t[InstrId::new(7)], None);
        t[InstrId::new(3)] = Some(3);
        assert_eq!(t.as_slice().len(), 4);
        assert_eq!(t[InstrId::new(3)], Some(3));
        assert_eq!(t[InstrId::new(2)], None);
        t.set(InstrId::new(10), Some(10));
        assert_eq!(t.take(InstrId::new(10)), Some(10));
        assert_eq!(t[InstrId::new(10)], None);
        assert_eq!(t.take(InstrId::new(100)), None);
        let mut c: SideTable<CompId, Vec<i32>> = SideTable::new(Vec::new());
        c.get_mut(CompId::new(1)).push(5);
        assert_eq!(c[CompId::new(1)], vec![5]);
        assert!(c[CompId::new(0)].is_empty());
    }
}
