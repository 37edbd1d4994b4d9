//! The client: one per thread, holding one client slot of its node (a
//! response ring, a request ring on every node and their cursors).

use crate::messaging::{Request, RpcClient, SlotRings};
use crate::ring::{ReplyNotes, ReplyStatus, RingOp};
use crate::table::Table;
use nessie::fabric::{Endpoint, NodeId};
use nessie::{Clock, Error, KvClient, OpKind, RetryCounts, Stats};
use std::sync::{Arc, Mutex, PoisonError};

/// The free client slots of one node. A slot's messaging state outlives
/// its clients (the servers' cursors of its rings do), so it comes back
/// here when a client drops.
#[derive(Debug)]
pub(crate) struct SlotPool {
    node: NodeId,
    slots: usize,
    free: Mutex<Vec<SlotRings>>,
}

impl SlotPool {
    pub(crate) fn new(node: NodeId, slots: usize, nodes: usize) -> SlotPool {
        SlotPool {
            node,
            slots,
            // Reversed, so that clients take slots 0, 1, 2, ... in order.
            free: Mutex::new((0..slots).rev().map(|s| SlotRings::new(s, nodes)).collect()),
        }
    }

    pub(crate) fn take(&self) -> Result<SlotRings, Error> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .ok_or_else(|| {
                Error::Config(format!(
                    "all {} client slots of node {} are in use (one per client); drop a client first",
                    self.slots, self.node
                ))
            })
    }

    fn give_back(&self, rings: SlotRings) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(rings);
    }
}

/// What a client needs from its node.
#[derive(Debug, Clone)]
pub(crate) struct ClientContext {
    pub(crate) table: Arc<Table>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) pool: Arc<SlotPool>,
    pub(crate) op_timeout_us: u64,
    /// How long past its start a client waits for a reply: the server
    /// answers by the operation's deadline (`op_timeout`) unless it is
    /// stalled or gone; the extra `expiry` is slack for a stalled server.
    pub(crate) give_up_us: u64,
}

/// A client of the server-driven store, for one thread (it is `Send`;
/// each thread makes its own). Every operation is a request to the key's
/// home node; see the crate documentation.
#[derive(Debug)]
pub struct Client {
    rpc: RpcClient,
    ctx: ClientContext,
    stats: Stats,
}

/// One-sided access to the tables, for operations that a store built on
/// this one performs itself instead of sending them to a server (the
/// hybrid store's GET). Verbs issued through `endpoint` are counted in the
/// client's statistics.
#[derive(Debug)]
pub struct OneSided<'a> {
    /// The client's endpoint.
    pub endpoint: &'a mut Endpoint,
    /// The cluster's tables.
    pub table: &'a Table,
    /// The clock.
    pub clock: &'a dyn Clock,
    /// When the operation must give up (µs).
    pub deadline_us: u64,
    /// Retries to report.
    pub retries: &'a mut RetryCounts,
}

impl Client {
    pub(crate) fn new(rpc: RpcClient, ctx: ClientContext) -> Client {
        Client {
            rpc,
            ctx,
            stats: Stats::default(),
        }
    }

    /// The node this client runs on.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.rpc.ep.node()
    }

    /// The client slot this client holds on its node.
    #[must_use]
    pub fn slot(&self) -> usize {
        self.rpc.rings.slot
    }

    /// The cluster's tables (placement of keys).
    #[must_use]
    pub fn table(&self) -> &Table {
        &self.ctx.table
    }

    /// Runs `op` as one operation of kind `kind`: its verbs, retries and
    /// outcome are counted in this client's statistics like those of the
    /// built-in operations. The deadline is `op_timeout` from now.
    ///
    /// # Errors
    /// Whatever `op` returns.
    pub fn one_sided<T>(
        &mut self,
        kind: OpKind,
        op: impl FnOnce(OneSided<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.measured(kind, |c| {
            let mut retries = RetryCounts::default();
            let result = op(OneSided {
                endpoint: &mut c.rpc.ep,
                table: &c.ctx.table,
                clock: c.ctx.clock.as_ref(),
                deadline_us: c.ctx.clock.now_us() + c.ctx.op_timeout_us,
                retries: &mut retries,
            });
            c.stats.of_mut(kind).retries += retries;
            result
        })
    }

    fn measured<T>(
        &mut self,
        kind: OpKind,
        f: impl FnOnce(&mut Client) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let before = self.rpc.counts();
        let result = f(self);
        let verbs = self.rpc.counts() - before;
        let s = self.stats.of_mut(kind);
        s.ops += 1;
        s.verbs += verbs;
        if result.is_err() {
            s.errors += 1;
        }
        result
    }

    /// Sends one request to the key's home node. `Ok(true)` for
    /// [`ReplyStatus::Ok`], `Ok(false)` for [`ReplyStatus::NotFound`]; the
    /// reply body is left in `body`.
    fn call(
        &mut self,
        kind: OpKind,
        op: RingOp,
        key: &[u8],
        value: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<bool, Error> {
        let home = self.ctx.table.home(key);
        let created_at = self.ctx.clock.now_us();
        let req = Request {
            op,
            key,
            value,
            created_at,
        };
        let give_up = created_at.saturating_add(self.ctx.give_up_us);
        let reply = self
            .rpc
            .call(home, req, give_up, self.ctx.clock.as_ref(), body)?;
        self.note(kind, reply.notes);
        match reply.status {
            ReplyStatus::Ok => Ok(true),
            ReplyStatus::NotFound => Ok(false),
            ReplyStatus::IndexFull => Err(Error::IndexFull),
            ReplyStatus::DataTableFull => Err(Error::DataTableFull),
            ReplyStatus::Timeout => Err(Error::Timeout),
            // A server reports failures it cannot type as damage.
            ReplyStatus::Corrupt | ReplyStatus::Failed => Err(Error::corrupt(format!(
                "node {home}: {}",
                String::from_utf8_lossy(body)
            ))),
        }
    }

    fn note(&mut self, kind: OpKind, notes: ReplyNotes) {
        let s = self.stats.of_mut(kind);
        s.retries.cas_failed += u64::from(notes.cas_failed);
        s.retries.torn += u64::from(notes.torn);
        s.retries.no_free_slot += u64::from(notes.no_free_slot);
        s.migrations += u64::from(notes.migrations);
    }
}

impl KvClient for Client {
    fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        out.clear();
        let result = self.measured(OpKind::Get, |c| {
            c.ctx.table.check_key(key)?;
            c.call(OpKind::Get, RingOp::Get, key, &[], out)
        });
        if !matches!(result, Ok(true)) {
            out.clear();
        }
        result
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.measured(OpKind::Put, |c| {
            c.ctx.table.check_key(key)?;
            c.ctx.table.check_value(value)?;
            let mut body = Vec::new();
            if c.call(OpKind::Put, RingOp::Put, key, value, &mut body)? {
                Ok(())
            } else {
                Err(Error::corrupt("a PUT was answered 'not found'"))
            }
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.measured(OpKind::Delete, |c| {
            c.ctx.table.check_key(key)?;
            let mut body = Vec::new();
            c.call(OpKind::Delete, RingOp::Delete, key, &[], &mut body)
        })
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let rings = std::mem::replace(&mut self.rpc.rings, SlotRings::new(usize::MAX, 0));
        self.ctx.pool.give_back(rings);
    }
}
