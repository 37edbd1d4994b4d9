//! The interface every store of the project implements, so that the harness
//! and the tests drive the client-driven store and its baselines alike.

use crate::{Error, Stats};

/// A client of a key-value store: one per thread.
///
/// Keys are 1 to `key_size_max` bytes, values 0 to `value_size_max` bytes.
pub trait KvClient: Send {
    /// The value stored under `key`, if any.
    ///
    /// # Errors
    /// Bad input ([`Error::EmptyKey`], [`Error::KeyTooLarge`]), [`Error::Timeout`],
    /// [`Error::Corrupt`] or a fabric error.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Like [`KvClient::get`], into a caller's buffer; returns whether the
    /// key was found. On success the buffer holds exactly the value, or
    /// nothing if the key holds none.
    ///
    /// # Errors
    /// As [`KvClient::get`].
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error>;

    /// Stores `value` under `key`.
    ///
    /// # Errors
    /// Bad input, [`Error::IndexFull`], [`Error::DataTableFull`],
    /// [`Error::Timeout`] (outcome unknown) or a fabric error.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error>;

    /// Removes `key`; returns whether it was present.
    ///
    /// # Errors
    /// As [`KvClient::put`].
    fn delete(&mut self, key: &[u8]) -> Result<bool, Error>;

    /// Counters of everything this client did so far.
    fn stats(&self) -> Stats;
}
