//! Interned shardings and memo tables for the sharding algebra the pass asks again and again.
//!
//! A model repeats its layers (the 48-layer transformer asks every question 48 times, at every
//! aggressiveness level), and the algebra of `tessera_hlo::sharding_util` (transposes with
//! collapsed dimensions, partial replication, reshape propagation, merges) costs thousands of
//! instructions a call. So:
//!
//! - Every sharding the pass holds is *interned*: an [`Sh`] is a shared pointer to the one copy
//!   of its value (metadata included), so two handles are equal iff they point to the same
//!   copy; comparing, hashing and cloning a handle costs a few instructions.
//! - Every function memoized here is pure: its result depends only on the key (the input
//!   handles and every other argument), so a hit returns exactly what the call would compute.
//!
//! The tables live as long as one run of the pass and hold only distinct values and questions
//! (hundreds on the transformer), so they stay small.

use std::cell::RefCell;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Deref;
use std::rc::Rc;

use hashbrown::HashTable;
use smallvec::SmallVec;
use tessera_hlo::fxhash::FxBuildHasher;
use tessera_hlo::sharding::TileDims;
use tessera_hlo::sharding_util::{merge_if_compatible, merge_sharding};
use tessera_hlo::{Shape, Sharding};

use crate::dims::DotDims;

/// The Fx hash (`tessera_hlo::fxhash`): keys here are handles and short lists of small
/// integers.
fn hash_of(x: &impl Hash) -> u64 {
    FxBuildHasher::default().hash_one(x)
}

type Idx = SmallVec<[usize; 4]>;

/// An interned sharding: equal values share one copy (see the module docs). Equality and hash
/// are by address, which is equality of value for handles from the same [`Memo`].
#[derive(Clone)]
pub(super) struct Sh(Rc<Sharding>);

impl Deref for Sh {
    type Target = Sharding;
    fn deref(&self) -> &Sharding {
        &self.0
    }
}

impl PartialEq for Sh {
    fn eq(&self, other: &Sh) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Sh {}

impl Hash for Sh {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(Rc::as_ptr(&self.0) as usize);
    }
}

impl fmt::Debug for Sh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Sh {
    /// The value, to keep beyond the pass.
    pub(super) fn to_sharding(&self) -> Sharding {
        (*self.0).clone()
    }
}

/// A question about one sharding (the other arguments of an algebra call).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Op {
    /// `replicate_on_dims(dims)`
    ReplicateOnDims(Idx),
    /// `replicate_on_dims(dims)` then `remove_dims(dims)` (reduce forward, broadcast backward)
    ReplicateAndRemove(Idx),
    /// `insert_dims(out_rank, map)`
    InsertDims(usize, Idx),
    /// `transpose(perm)` normalized
    Transpose(Idx),
    /// `propagate_through_reshape(from, to)` for the dimension pair numbered so by
    /// [`Memo::reshape_id`].
    ThroughReshape(u32),
    /// `element_sharding(start, len, kind)`: one element of a tuple-shaped value.
    Element { start: usize, len: usize, kind: u8 },
    /// `Propagator::dot_from_operand` for operand `k` (rank `op_rank`) of a dot with these
    /// dimensions (a [`Memo::dot_dims_id`]) and this output rank.
    DotFromOperand {
        dims: u32,
        k: usize,
        out_rank: usize,
        op_rank: usize,
    },
    /// `Propagator::dot_operand_sharding` for operand `k` (rank `op_rank`) of a dot with these
    /// dimensions (a [`Memo::dot_dims_id`]) and output rank, given the other operand's (rank
    /// `other_rank`) sharding when it is spatially partitioned (the memoized sharding is the
    /// dot's).
    DotOperand {
        dims: u32,
        k: usize,
        mc: bool,
        out_rank: usize,
        op_rank: usize,
        other_rank: usize,
        other: Option<Sh>,
    },
}

/// `(key, value)` entries found by a precomputed hash and an equality test on borrowed parts.
struct Table<K, V> {
    t: HashTable<(K, V)>,
}

impl<K, V: Clone> Table<K, V> {
    fn new() -> Self {
        Table {
            t: HashTable::new(),
        }
    }

    fn get(&self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<V> {
        self.t.find(hash, |(k, _)| eq(k)).map(|(_, v)| v.clone())
    }

    fn insert(&mut self, hash: u64, key: K, value: V, hasher: impl Fn(&K) -> u64) {
        self.t.insert_unique(hash, (key, value), |(k, _)| hasher(k));
    }
}

/// `merge_sharding(old, new, may_combine)` keyed by `(old, new, may_combine)`.
type MergeTable = Table<(Sh, Sh, bool), (bool, Sh)>;
/// `merge_if_compatible(to_merge, minimum_tiles, dst)` keyed by `(to_merge, minimum_tiles, dst)`.
type MergeCompatibleTable = Table<(Sh, i64, Sh), (bool, Sh)>;

/// The interner and memo tables of one run (see the module docs).
pub(super) struct Memo {
    /// Every interned value, found by the hash of the value.
    interned: RefCell<Table<Sh, ()>>,
    algebra: RefCell<Table<(Sh, Op), Option<Sh>>>,
    /// `merge_sharding(old, new, may_combine)`: whether it merged, and `new` afterwards.
    merge: RefCell<MergeTable>,
    /// `merge_if_compatible(to_merge, minimum_tiles, dst)`: whether it merged, and `dst`
    /// afterwards.
    merge_compatible: RefCell<MergeCompatibleTable>,
    /// `is_sub_tiling(dims, sub, of)`
    sub_tiling: RefCell<Table<(TileDims, Sh, Sh), bool>>,
    /// Distinct dot/convolution dimension maps, numbered (keys of [`Op`] name them by number).
    dot_dims: RefCell<Table<DotDims, u32>>,
    dot_dims_list: RefCell<Vec<DotDims>>,
    /// Per instruction: 1 + the number of its dimension maps, 0 when not asked yet.
    instr_dot_dims: RefCell<Vec<u32>>,
    /// Distinct reshape dimension pairs `(from, to)`, numbered.
    reshapes: RefCell<Table<(TileDims, TileDims), u32>>,
    /// Per reshape instruction: 1 + the numbers of its pair forward (operand to result) and
    /// backward, 0 when not asked yet.
    instr_reshapes: RefCell<Vec<[u32; 2]>>,
}

impl Default for Memo {
    fn default() -> Self {
        Memo {
            interned: RefCell::new(Table::new()),
            algebra: RefCell::new(Table::new()),
            merge: RefCell::new(Table::new()),
            merge_compatible: RefCell::new(Table::new()),
            sub_tiling: RefCell::new(Table::new()),
            dot_dims: RefCell::new(Table::new()),
            dot_dims_list: RefCell::new(Vec::new()),
            instr_dot_dims: RefCell::new(Vec::new()),
            reshapes: RefCell::new(Table::new()),
            instr_reshapes: RefCell::new(Vec::new()),
        }
    }
}

impl Memo {
    /// The handle of `s`'s value.
    pub(super) fn intern(&self, s: Sharding) -> Sh {
        let hash = hash_of(&s);
        if let Some((found, ())) = self.interned.borrow().t.find(hash, |(k, _)| **k == s) {
            return found.clone();
        }
        let h = Sh(Rc::new(s));
        self.interned
            .borrow_mut()
            .insert(hash, h.clone(), (), |k| hash_of(&**k));
        h
    }

    /// [`Memo::intern`] for an optional sharding.
    pub(super) fn intern_opt(&self, s: Option<Sharding>) -> Option<Sh> {
        s.map(|s| self.intern(s))
    }

    /// The number of the reshape from `from` to `to` (the same for equal pairs), cached for
    /// instruction `index` in direction `dir` (0: from its operand, 1: back to it).
    pub(super) fn reshape_id(&self, index: usize, dir: usize, from: &[i64], to: &[i64]) -> u32 {
        if let Some(n) = self.instr_reshapes.borrow().get(index) {
            if n[dir] != 0 {
                return n[dir] - 1;
            }
        }
        let hash = hash_of(&(from, to));
        let found = self
            .reshapes
            .borrow()
            .get(hash, |(f, t)| f.as_slice() == from && t.as_slice() == to);
        let n = found.unwrap_or_else(|| {
            let mut table = self.reshapes.borrow_mut();
            let n = table.t.len() as u32;
            let key = (from.iter().copied().collect(), to.iter().copied().collect());
            table.insert(hash, key, n, |(f, t): &(TileDims, TileDims)| {
                hash_of(&(f.as_slice(), t.as_slice()))
            });
            n
        });
        let mut v = self.instr_reshapes.borrow_mut();
        if v.len() <= index {
            v.resize(index + 1, [0, 0]);
        }
        v[index][dir] = n + 1;
        n
    }

    /// The number of dimension maps `dd` (the same for equal maps).
    pub(super) fn dot_dims_id(&self, dd: &DotDims) -> u32 {
        let hash = hash_of(dd);
        if let Some(n) = self.dot_dims.borrow().get(hash, |k| k == dd) {
            return n;
        }
        let mut list = self.dot_dims_list.borrow_mut();
        let n = list.len() as u32;
        list.push(dd.clone());
        self.dot_dims
            .borrow_mut()
            .insert(hash, dd.clone(), n, hash_of);
        n
    }

    /// The dimension maps numbered `n`.
    pub(super) fn dot_dims(&self, n: u32) -> DotDims {
        self.dot_dims_list.borrow()[n as usize].clone()
    }

    /// The number of the dimension maps of instruction `index`, computed by `compute` the first
    /// time (`None`: it has none).
    pub(super) fn instr_dot_dims(
        &self,
        index: usize,
        compute: impl FnOnce() -> Option<DotDims>,
    ) -> Option<u32> {
        if let Some(&n) = self.instr_dot_dims.borrow().get(index) {
            if n != 0 {
                return Some(n - 1);
            }
        }
        let n = self.dot_dims_id(&compute()?);
        let mut v = self.instr_dot_dims.borrow_mut();
        if v.len() <= index {
            v.resize(index + 1, 0);
        }
        v[index] = n + 1;
        Some(n)
    }

    /// The answer to `op` about `s`, from the table or from `compute` (which may ask the memo
    /// again: no table is borrowed while it runs).
    pub(super) fn algebra(
        &self,
        s: &Sh,
        op: Op,
        compute: impl FnOnce(&Sharding, &Op) -> Option<Sharding>,
    ) -> Option<Sh> {
        let hash = hash_of(&(s, &op));
        if let Some(v) = self
            .algebra
            .borrow()
            .get(hash, |(ks, kop)| ks == s && *kop == op)
        {
            return v;
        }
        let v = self.intern_opt(compute(s, &op));
        self.algebra
            .borrow_mut()
            .insert(hash, (s.clone(), op), v.clone(), |(ks, kop)| {
                hash_of(&(ks, kop))
            });
        v
    }

    /// `merge_sharding(old, new, may_combine)`: whether it merged, and `new` afterwards.
    pub(super) fn merge_sharding(&self, old: &Sh, new: &Sh, mc: bool) -> (bool, Sh) {
        let hash = hash_of(&(old, new, mc));
        let hit = self
            .merge
            .borrow()
            .get(hash, |(o, n, m)| *m == mc && o == old && n == new);
        if let Some(v) = hit {
            return v;
        }
        let mut after = new.to_sharding();
        let merged = merge_sharding(old, &mut after, mc);
        let v = (merged, self.intern(after));
        self.merge
            .borrow_mut()
            .insert(hash, (old.clone(), new.clone(), mc), v.clone(), |k| {
                hash_of(&(&k.0, &k.1, k.2))
            });
        v
    }

    /// `merge_if_compatible(to_merge, minimum_tiles, dst)`: whether it merged, and `dst`
    /// afterwards.
    pub(super) fn merge_if_compatible(&self, to_merge: &Sh, min: i64, dst: &Sh) -> (bool, Sh) {
        let hash = hash_of(&(to_merge, min, dst));
        let hit = self
            .merge_compatible
            .borrow()
            .get(hash, |(t, m, d)| *m == min && t == to_merge && d == dst);
        if let Some(v) = hit {
            return v;
        }
        let mut after = dst.to_sharding();
        let merged = merge_if_compatible(to_merge, min, &mut after);
        let v = (merged, self.intern(after));
        self.merge_compatible.borrow_mut().insert(
            hash,
            (to_merge.clone(), min, dst.clone()),
            v.clone(),
            |k| hash_of(&(&k.0, k.1, &k.2)),
        );
        v
    }

    /// `super::is_sub_tiling(shape, sub, of)`, memoized on the shape's dimensions.
    pub(super) fn is_sub_tiling(&self, shape: &Shape, sub: &Sh, of: &Sh) -> bool {
        if !shape.is_array() {
            return super::is_sub_tiling(shape, sub, of);
        }
        let dims = shape.dims();
        let hash = hash_of(&(dims, sub, of));
        let hit = self.sub_tiling.borrow().get(hash, |(d, s, o)| {
            d.as_slice() == dims && s == sub && o == of
        });
        if let Some(v) = hit {
            return v;
        }
        let v = super::is_sub_tiling(shape, sub, of);
        let key: (TileDims, Sh, Sh) = (dims.iter().copied().collect(), sub.clone(), of.clone());
        self.sub_tiling
            .borrow_mut()
            .insert(hash, key, v, |k| hash_of(&(k.0.as_slice(), &k.1, &k.2)));
        v
    }
}

/// Short index lists for [`Op`] keys.
pub(super) fn idx(v: impl IntoIterator<Item = usize>) -> Idx {
    v.into_iter().collect()
}
