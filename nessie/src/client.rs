//! The client: one per thread, issuing GET, PUT and DELETE against the whole
//! cluster.

use crate::cache::hints::LocationHints;
use crate::cache::DteCache;
use crate::clock::Clock;
use crate::data::NodeData;
use crate::fabric::{Endpoint, NodeId};
use crate::metrics::ClientMetrics;
use crate::protocol::{Ctx, Env, Kept, SliceOut, WriteKind};
use crate::runtime::store::Shared;
use crate::stats::{OpKind, OpStats, Stats};
use crate::{Error, KvClient};
use rand::rngs::StdRng;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

/// A client of the client-driven store, bound to one node: it writes new
/// entries into that node's data tables and reads everything else with
/// one-sided verbs. One per thread (`Send`, not `Sync`).
#[derive(Debug)]
pub struct Client {
    shared: Arc<Shared>,
    ep: Endpoint,
    clock: Arc<dyn Clock>,
    data: Arc<NodeData>,
    kept: Kept,
    stats: Stats,
    /// This client's cell in its node's metrics (`Config::metrics`).
    metrics: Option<ClientMetrics>,
    _not_sync: PhantomData<Cell<()>>,
}

impl Client {
    pub(crate) fn new(
        shared: Arc<Shared>,
        node: NodeId,
        data: Arc<NodeData>,
        rng: StdRng,
    ) -> Client {
        let config = shared.config();
        let mut ep = Endpoint::new(Arc::clone(shared.fabric()), node);
        let metrics = shared
            .metrics(node)
            .map(|m| m.register(&mut ep, config.nodes));
        Client {
            ep,
            metrics,
            clock: Arc::clone(shared.clock(node)),
            kept: Kept::new(
                DteCache::new(config.cache_entries, crate::config::micros(config.expiry)),
                LocationHints::new(config.hint_entries),
                rng,
                data.stagings(),
            ),
            data,
            stats: Stats::default(),
            shared,
            _not_sync: PhantomData,
        }
    }

    /// The node this client runs on.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.ep.node()
    }

    fn check_key(&self, key: &[u8]) -> Result<(), Error> {
        if key.is_empty() {
            Err(Error::EmptyKey)
        } else if key.len() > self.shared.config().key_size_max {
            Err(Error::KeyTooLarge)
        } else {
            Ok(())
        }
    }

    /// Runs one operation with a fresh context and accounts its cost.
    fn run<T>(
        &mut self,
        kind: OpKind,
        op: impl FnOnce(&mut Ctx<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let writes = kind != OpKind::Get;
        // One clock read before and after, only with metrics on.
        let started = self.metrics.as_ref().map(|_| Instant::now());
        self.shared.skew(self.ep.node())?;
        // One monotonic clock read serves the view check and the deadline.
        let started_us = self.clock.mono_us();
        self.shared.views().check_serving(started_us)?;
        let before = self.ep.counts();
        let mut counters = OpStats::default();
        let result = {
            let env = Env::new(
                self.shared.config(),
                self.shared.timing(),
                self.shared.hasher(),
                self.clock.as_ref(),
                &self.data,
                self.shared.views(),
            );
            let mut ctx = Ctx::start(
                env,
                (&mut self.ep, self.shared.scan_fabric().as_ref()),
                &mut self.kept,
                &mut counters,
                writes,
                started_us,
            );
            op(&mut ctx)
        };
        let result = result.map_err(|e| self.shared.views().name_lost_share(e));
        counters.ops = 1;
        counters.errors = u64::from(result.is_err());
        counters.verbs = self.ep.counts() - before;
        *self.stats.of_mut(kind) += counters;
        if let (Some(m), Some(t)) = (&self.metrics, started) {
            m.record(kind, &counters, t.elapsed(), &mut self.ep);
        }
        if let Err(e) = &result {
            tracing::debug!(node = self.node(), ?kind, "operation failed: {e}");
        }
        result
    }

    /// The value stored under `key`, if any.
    ///
    /// # Errors
    /// [`Error::EmptyKey`], [`Error::KeyTooLarge`], [`Error::Timeout`],
    /// [`Error::Corrupt`] or a fabric error.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Like [`Client::get`], into `out`; returns whether the key was found.
    /// `out` then holds exactly the value, or nothing (also after an
    /// error). Its allocation is reused: a GET may read the value straight
    /// into it.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        // Not cleared before: a value read straight into `out` then costs
        // no zeroing of bytes it already has.
        let found = self
            .check_key(key)
            .and_then(|()| self.run(OpKind::Get, |ctx| ctx.get(key, out)));
        if !matches!(found, Ok(true)) {
            out.clear();
        }
        found
    }

    /// Like [`Client::get`], into the caller's slice `out` with no
    /// allocation: copies the value to the start of `out` and returns its
    /// length, or `None` if the key holds no value (`out` untouched).
    ///
    /// ```
    /// # let cluster = nessie::Cluster::local(nessie::Config {
    /// #     index_slots_per_node: 1024, data_bytes_per_node: 16 << 20,
    /// #     ..nessie::Config::default() })?;
    /// let mut client = cluster.client(0)?;
    /// client.put(b"k", b"twelve bytes")?;
    /// let mut buf = [0u8; 64];
    /// let n = client.get_into_slice(b"k", &mut buf)?.expect("stored above");
    /// assert_eq!(&buf[..n], b"twelve bytes");
    /// let mut small = [0u8; 4];
    /// assert!(matches!(
    ///     client.get_into_slice(b"k", &mut small),
    ///     Err(nessie::Error::BufferTooSmall { needed: 12, capacity: 4 })
    /// ));
    /// # Ok::<(), nessie::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] with the value's length if it does not fit
    /// (`out` untouched; the GET counts as failed in [`Client::stats`]);
    /// otherwise as [`Client::get`].
    pub fn get_into_slice(&mut self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, Error> {
        self.check_key(key)?;
        let capacity = out.len();
        self.run(OpKind::Get, |ctx| {
            let mut dst = SliceOut::new(out);
            if !ctx.get(key, &mut dst)? {
                return Ok(None);
            }
            if dst.fitted() {
                Ok(Some(dst.len))
            } else {
                Err(Error::BufferTooSmall {
                    needed: dst.len,
                    capacity,
                })
            }
        })
    }

    /// Stores `value` under `key`. Linearizes at the commit CAS.
    ///
    /// # Errors
    /// [`Error::EmptyKey`], [`Error::KeyTooLarge`], [`Error::ValueTooLarge`]
    /// (nothing changed); [`Error::IndexFull`], [`Error::DataTableFull`];
    /// [`Error::Timeout`] (outcome unknown); a fabric error.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.check_key(key)?;
        if value.len() > self.shared.config().value_size_max {
            return Err(Error::ValueTooLarge);
        }
        self.run(OpKind::Put, |ctx| ctx.write(WriteKind::Put, key, value))
            .map(|_| ())
    }

    /// Removes `key`; returns whether it held a value.
    ///
    /// # Errors
    /// As [`Client::put`].
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.check_key(key)?;
        self.run(OpKind::Delete, |ctx| ctx.write(WriteKind::Delete, key, &[]))
    }

    /// The figures of the data table (node, size class, slots free and in
    /// use, the reuse window) behind this client's most recent
    /// [`Error::DataTableFull`], which is a unit variant so that callers
    /// can match it; `None` if it never had one. The same figures are
    /// logged (`tracing` warning) when it happens.
    #[must_use]
    pub fn last_data_table_full(&self) -> Option<&crate::data::DataTableFigures> {
        self.kept.table_full.as_ref()
    }

    /// Whether this client keeps figures for its node's metrics endpoint.
    #[cfg(test)]
    pub(crate) fn metrics_cell_for_tests(&self) -> Option<&ClientMetrics> {
        self.metrics.as_ref()
    }

    /// Counters of everything this client did so far.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.stats
    }
}

impl KvClient for Client {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Client::get(self, key)
    }

    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        Client::get_into(self, key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        Client::put(self, key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        Client::delete(self, key)
    }

    fn stats(&self) -> Stats {
        Client::stats(self)
    }
}
