//! A linearizable in-memory store for unit tests: one locked map shared by
//! every client.

use nessie::{Error, KvClient, Stats};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Vec<u8>, Vec<u8>>,
    longest: usize,
}

/// The store; clone clients off it.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemStore {
    inner: Arc<Mutex<Inner>>,
}

impl MemStore {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn client(&self) -> MemClient {
        MemClient {
            store: self.clone(),
            stats: Stats::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub(crate) fn longest_value(&self) -> usize {
        self.lock().longest
    }
}

/// A client of a [`MemStore`].
#[derive(Debug)]
pub(crate) struct MemClient {
    store: MemStore,
    stats: Stats,
}

impl KvClient for MemClient {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        self.stats.get.ops += 1;
        out.clear();
        match self.store.lock().map.get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                self.stats.get.verbs.read_bytes += v.len() as u64;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.stats.put.ops += 1;
        self.stats.put.verbs.write_bytes += value.len() as u64;
        let mut inner = self.store.lock();
        inner.longest = inner.longest.max(value.len());
        inner.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.stats.delete.ops += 1;
        Ok(self.store.lock().map.remove(key).is_some())
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}
