//! [`NameTable`]: a set of names with a `u32` each, without one allocation per name.
//!
//! The module keeps every instruction name for uniqueness (and, per `.N` stem, the next suffix
//! to try). A `HashMap<String, u32>` allocated and later freed one string per instruction, which
//! was a visible part of parsing a large module; here the names are appended to one arena string
//! and the table holds offsets.

use std::hash::Hasher;

use hashbrown::HashTable;

use crate::fxhash::FxHasher;

#[derive(Clone, Copy, Debug)]
struct Entry {
    hash: u64,
    start: u32,
    len: u32,
    value: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct NameTable {
    arena: String,
    table: HashTable<Entry>,
    /// Arena bytes still referenced by an entry (the rest is left by removals).
    live_bytes: usize,
}

/// The hash of a name in the tables of this module and of the text parser: [`spread`] of the
/// name, except for `stem.N` names (below).
#[inline]
pub(crate) fn hash(name: &str) -> u64 {
    if let Some((stem, n)) = numbered(name) {
        // Consecutive numbers of one stem go to consecutive groups of 16 buckets, so that
        // making `add.N` for rising N (what renaming does) walks the table in order instead
        // of at random. The table compares entries whose top 7 bits match the probe's: those
        // come from N alone, so that neighbours of one stem rarely match each other.
        const LOW: u64 = u64::MAX >> 7;
        let tag = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !LOW;
        return (spread(stem).wrapping_add(n << 4) & LOW) | tag;
    }
    spread(name)
}

/// Fx over the bytes, then the high half folded into the low one: the table picks buckets by
/// the low bits, and a bare Fx product leaves those depending only on the first bytes.
#[inline]
fn spread(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    h.write_u8(0xff);
    let x = h.finish();
    x ^ (x >> 32)
}

/// `stem.N` split into `stem` and the digits of N: a non-empty stem, a dot, and only digits
/// after it. The one reading of XLA's `.N` suffixes, for renaming and for hashing.
pub(crate) fn split_suffix(name: &str) -> Option<(&str, &str)> {
    let (stem, digits) = name.rsplit_once('.')?;
    (!stem.is_empty() && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then_some((stem, digits))
}

/// `stem.N` with N of at most 18 digits (so that it fits a u64): (stem, N).
#[inline]
fn numbered(name: &str) -> Option<(&str, u64)> {
    let (stem, digits) = split_suffix(name)?;
    if digits.len() > 18 {
        return None;
    }
    let n = digits
        .bytes()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some((stem, n))
}

impl NameTable {
    #[inline]
    fn text(&self, e: &Entry) -> &str {
        &self.arena[e.start as usize..(e.start + e.len) as usize]
    }

    pub fn reserve(&mut self, names: usize, bytes: usize) {
        self.table.reserve(names, |e| e.hash);
        self.arena.reserve(bytes);
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        let h = hash(name);
        self.table
            .find(h, |e| self.text(e) == name)
            .map(|e| e.value)
    }

    /// The number of names.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Adds `name` with `value`; false (and nothing changed) if it is already there.
    pub fn insert_new(&mut self, name: &str, value: u32) -> bool {
        let h = hash(name);
        let NameTable {
            arena,
            table,
            live_bytes,
        } = self;
        let found = table
            .find(h, |e| {
                &arena[e.start as usize..(e.start + e.len) as usize] == name
            })
            .is_some();
        if found {
            return false;
        }
        let start = u32::try_from(arena.len()).expect("names arena over 4 GiB");
        arena.push_str(name);
        *live_bytes += name.len();
        table.insert_unique(
            h,
            Entry {
                hash: h,
                start,
                len: name.len() as u32,
                value,
            },
            |e| e.hash,
        );
        true
    }

    /// Sets the value of `name`, adding it when absent.
    pub fn set(&mut self, name: &str, value: u32) {
        let h = hash(name);
        let arena = &self.arena;
        if let Some(e) = self.table.find_mut(h, |e| {
            &arena[e.start as usize..(e.start + e.len) as usize] == name
        }) {
            e.value = value;
            return;
        }
        self.insert_new(name, value);
    }

    pub fn remove(&mut self, name: &str) {
        self.remove_hashed(hash(name), name);
    }

    /// Removes many names, visiting the table in the order of their buckets (the low bits of
    /// their hashes) instead of at random: once the table outgrows the caches, a sweep in
    /// bucket order costs far fewer cache misses than one random probe per name (removing
    /// the 100,000 names of a 50,000-deep chain's dead callees after `inline`).
    pub fn remove_many<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        // hashbrown's bucket count: a power of two of which 7/8 is the capacity (tables of
        // 8 buckets and more); the bucket is the hash's low bits.
        let mask = (self.table.capacity() / 7 * 8).next_power_of_two() as u64 - 1;
        let mut hashed: Vec<(u64, &str)> = names.into_iter().map(|n| (hash(n), n)).collect();
        hashed.sort_unstable_by_key(|&(h, _)| h & mask);
        for (h, name) in hashed {
            self.remove_hashed(h, name);
        }
    }

    fn remove_hashed(&mut self, h: u64, name: &str) {
        let arena = &self.arena;
        if let Ok(entry) = self.table.find_entry(h, |e| {
            &arena[e.start as usize..(e.start + e.len) as usize] == name
        }) {
            entry.remove();
            self.live_bytes -= name.len();
            if self.arena.len() > 4096 && self.arena.len() > 2 * self.live_bytes {
                self.compact();
            }
        }
    }

    /// Rewrites the arena with only the names still present.
    fn compact(&mut self) {
        let mut arena = String::with_capacity(self.live_bytes);
        for e in self.table.iter_mut() {
            let start = arena.len() as u32;
            arena.push_str(&self.arena[e.start as usize..(e.start + e.len) as usize]);
            e.start = start;
        }
        self.arena = arena;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_set_remove() {
        let mut t = NameTable::default();
        assert!(t.insert_new("add", 0));
        assert!(!t.insert_new("add", 5));
        assert_eq!(t.get("add"), Some(0));
        assert_eq!(t.get("ad"), None);
        assert_eq!(t.get("add.1"), None);
        t.set("add", 3);
        t.set("mul", 2);
        assert_eq!((t.get("add"), t.get("mul")), (Some(3), Some(2)));
        t.remove("add");
        assert!(!t.contains("add"));
        t.remove_many(["mul", "absent"]);
        assert!(!t.contains("mul"));
        t.set("mul", 2);
        assert!(t.contains("mul"));
        assert!(t.insert_new("add", 1));
        assert_eq!(t.get("add"), Some(1));
    }

    /// Computation names such as `c123456` differ only in their last bytes; the bucket bits of
    /// their hashes must still differ (the text parser's computation table hashes with
    /// `hash`: a bare Fx hash put 200,000 such names in a few probe chains).
    #[test]
    fn names_differing_in_their_last_bytes_spread_over_the_buckets() {
        let buckets = 1u64 << 18;
        for prefix in ["c", "f", "region_"] {
            let names: Vec<String> = (100_000..200_000).map(|i| format!("{prefix}{i}")).collect();
            let mut used = vec![false; buckets as usize];
            for n in &names {
                used[(hash(n) & (buckets - 1)) as usize] = true;
            }
            let distinct = used.iter().filter(|&&u| u).count();
            // At random, 100,000 names fill about 83,000 of 262,144 buckets.
            assert!(
                distinct > 75_000,
                "{prefix}N: {distinct} buckets for 100,000 names"
            );
        }
    }

    #[test]
    fn removals_compact_the_arena() {
        let mut t = NameTable::default();
        for round in 0..50 {
            for i in 0..100 {
                assert!(t.insert_new(&format!("instruction.{round}.{i}"), i));
            }
            for i in 0..100 {
                if i % 10 != 0 {
                    t.remove(&format!("instruction.{round}.{i}"));
                }
            }
        }
        assert!(t.arena.len() <= 2 * t.live_bytes.max(4096));
        for round in 0..50 {
            for i in 0..100 {
                let name = format!("instruction.{round}.{i}");
                assert_eq!(t.get(&name), (i % 10 == 0).then_some(i), "{name}");
            }
        }
    }
}
