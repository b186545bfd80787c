//! Positions found by a string that the data at the position holds — a fold's step by
//! its request key, an episode by its family — without a copy of the string: the
//! table keeps the string's hash beside the position, and a lookup asks the caller
//! whether the string at a candidate position is the one sought. Two strings with
//! one hash each keep their own entry.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

pub(crate) struct Positions<V, S = foldhash::fast::RandomState> {
    table: HashTable<(u64, V)>,
    state: S,
}

impl<V, S: Default> Default for Positions<V, S> {
    fn default() -> Self {
        Positions {
            table: HashTable::new(),
            state: S::default(),
        }
    }
}

impl<V: Copy, S: BuildHasher> Positions<V, S> {
    fn hash(&self, key: &str) -> u64 {
        self.state.hash_one(key)
    }

    /// The position of `key`, where `holds(position)` says the data there holds it.
    pub(crate) fn get(&self, key: &str, holds: impl Fn(V) -> bool) -> Option<V> {
        let hash = self.hash(key);
        self.table
            .find(hash, |&(h, at)| h == hash && holds(at))
            .map(|&(_, at)| at)
    }

    /// `key` is at `at` now (its entry, found through `holds`, moves there).
    pub(crate) fn insert(&mut self, key: &str, at: V, holds: impl Fn(V) -> bool) {
        let hash = self.hash(key);
        match self
            .table
            .entry(hash, |&(h, old)| h == hash && holds(old), |&(h, _)| h)
        {
            Entry::Occupied(mut entry) => entry.get_mut().1 = at,
            Entry::Vacant(entry) => {
                entry.insert((hash, at));
            }
        }
    }

    /// `key`, which has no entry (the caller just looked), is at `at`.
    pub(crate) fn insert_new(&mut self, key: &str, at: V) {
        let hash = self.hash(key);
        self.table.insert_unique(hash, (hash, at), |&(h, _)| h);
    }

    /// Keep the positions `keep` says to (and may move).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        self.table.retain(|(_, at)| keep(at));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_through_the_data_it_points_at_and_moves_and_goes() {
        let mut names = ["a", "b"];
        let holds = |names: [&'static str; 2], key: &'static str| move |i: usize| names[i] == key;
        let mut at: Positions<usize> = Positions::default();
        at.insert_new("a", 0);
        at.insert("b", 1, holds(names, "b"));
        assert_eq!(at.get("a", holds(names, "a")), Some(0));
        assert_eq!(at.get("b", holds(names, "b")), Some(1));
        assert_eq!(at.get("c", |_| false), None);
        // The data moved, and the positions with it.
        names.swap(0, 1);
        at.retain(|i| {
            *i = 1 - *i;
            true
        });
        assert_eq!(at.get("a", holds(names, "a")), Some(1));
        assert_eq!(at.get("b", holds(names, "b")), Some(0));
        at.retain(|i| *i != 0);
        assert_eq!(at.get("b", holds(names, "b")), None);
        assert_eq!(at.get("a", holds(names, "a")), Some(1));
        assert_eq!(at.len(), 1);
    }

    #[test]
    fn a_key_put_again_moves_its_entry_while_its_old_place_still_holds_it() {
        // A request key seen twice (two steps hold it): the newer step is the one found,
        // as a map's insert would have it.
        let steps = ["k", "x", "k"];
        let holds = |key: &'static str| move |i: usize| steps[i] == key;
        let mut at: Positions<usize> = Positions::default();
        at.insert("k", 0, holds("k"));
        at.insert("x", 1, holds("x"));
        at.insert("k", 2, holds("k"));
        assert_eq!(at.len(), 2, "one entry a key");
        assert_eq!(at.get("k", holds("k")), Some(2));
        assert_eq!(at.get("x", holds("x")), Some(1));
    }

    /// Every key's hash is the same.
    #[derive(Default)]
    struct OneHash;

    impl BuildHasher for OneHash {
        type Hasher = OneHasher;
        fn build_hasher(&self) -> OneHasher {
            OneHasher
        }
    }

    struct OneHasher;

    impl std::hash::Hasher for OneHasher {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn two_keys_with_one_hash_keep_their_own_entries() {
        let names = ["x", "y", "z"];
        let holds = |key: &'static str| move |i: usize| names[i] == key;
        let mut at: Positions<usize, OneHash> = Positions::default();
        for (i, name) in names.iter().enumerate() {
            at.insert(name, i, holds(name));
        }
        assert_eq!(at.len(), 3);
        assert_eq!(at.get("x", holds("x")), Some(0));
        assert_eq!(at.get("y", holds("y")), Some(1));
        assert_eq!(at.get("z", holds("z")), Some(2));
        at.insert("y", 1, holds("y"));
        assert_eq!(at.len(), 3, "put again, not added");
        at.retain(|i| *i != 1);
        assert_eq!(at.get("y", holds("y")), None);
        assert_eq!(at.get("z", holds("z")), Some(2));
        assert_eq!(at.get("x", holds("x")), Some(0));
    }
}
