//! Server workers: poll request rings, execute GET / PUT / DELETE on the
//! node's own tables, reply into the client's response ring.
//!
//! **Who writes what.** Only the home node's workers ever change its index
//! and data tables. Every ITE change is a CAS (the atomicity rule: HY
//! clients READ these words, and a real NIC's CAS is atomic only against
//! other CAS), DTEs are written with WRITE before any ITE points at them,
//! and an unlinked DTE is staged for reuse by `WRITing` its `expires_at`.
//! These are local memory operations, issued through the worker's own
//! endpoint so that the harness can count server-side work too.
//!
//! **Linearizability of writes: lock striping.** A worker holds the stripe
//! lock of a key (by its first candidate slot) while it finds and replaces
//! or clears the key's ITE, so writes of one key from different workers are
//! serialised; different keys proceed in parallel. The new DTE is written
//! before taking the lock, so the critical section is a few word reads and
//! one CAS. GETs take no lock (see [`crate::table`] for why lock-free reads
//! are linearizable). Within its critical section a PUT's ITE CAS fails
//! only when another key's PUT or move took an empty slot first; it then
//! re-reads the candidates and tries again.
//!
//! **Making room (cuckoo displacement).** When every candidate of a new key
//! is taken, the worker moves an occupant to one of its own other
//! candidates, recursively up to `max_migrate_depth` (then
//! [`Error::IndexFull`]). Moving key `z` holds `z`'s stripe, taken with
//! `try_lock` (a worker never blocks on a second lock, so workers cannot
//! deadlock; a busy stripe just makes that occupant unmovable for now). A
//! move copies `z`'s DTE to a fresh slot, CASes the empty destination to
//! point at the copy, then clears the source: at every instant each slot
//! holding `z` shows `z`'s one current value, and ITE values never repeat,
//! which is what lock-free readers rely on.

use crate::messaging::{begin_reply, send_reply, Inbox, Incoming};
use crate::poll::Spinner;
use crate::ring::{
    finish_frame, ReplyHeader, ReplyNotes, ReplyStatus, RequestHeader, RingGeometry, RingOp,
    MAX_ERROR_MESSAGE,
};
use crate::table::{self, probe, read_ites, target, Probe, Table, MAX_TORN_RETRIES};
use nessie::data::{NodeData, TableAccess};
use nessie::fabric::{Endpoint, Fabric, NodeId, VerbCounts};
use nessie::layout::dte::{self, encode_entry, DteHeader, DteState, DteStatus};
use nessie::layout::{Ite, SlotRef};
use nessie::{Clock, Error, RetryCounts};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Stripe locks per node.
const STRIPES: usize = 256;
/// Pause between allocation attempts when the data table has no free slot
/// (slots free up only as staged entries expire).
const ALLOC_BACKOFF: Duration = Duration::from_micros(200);

/// What a node's server needs.
#[derive(Debug)]
pub(crate) struct ServerConfig {
    pub(crate) node: NodeId,
    pub(crate) fabric: Arc<dyn Fabric>,
    pub(crate) table: Arc<Table>,
    pub(crate) geometry: RingGeometry,
    pub(crate) data: Arc<NodeData>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) workers: usize,
    pub(crate) op_timeout_us: u64,
    pub(crate) max_migrate_depth: usize,
}

impl ServerConfig {
    /// How the allocator reaches the node's tables (SD's DTEs are never
    /// MIGRATE copies, so scans issue no verbs to other nodes).
    fn tables(&self) -> TableAccess<'_> {
        TableAccess {
            local: self.fabric.as_ref(),
            cluster: self.fabric.as_ref(),
            clock: self.clock.as_ref(),
            views: None,
            wall_read_us: None,
        }
    }
}

#[derive(Debug)]
struct Shared {
    config: ServerConfig,
    stripes: Vec<Mutex<()>>,
    stop: AtomicBool,
    /// Each worker's verb counts, refreshed after every request.
    verbs: Vec<Mutex<VerbCounts>>,
}

impl Shared {
    fn stripe(&self, key: &[u8]) -> usize {
        self.config
            .table
            .candidates(key)
            .first()
            .copied()
            .unwrap_or(0) as usize
            % STRIPES
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The protected data is `()` or plain counters, valid after any panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A node's running server workers; stops and joins them when dropped.
#[derive(Debug)]
pub(crate) struct Server {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Starts `config.workers` workers; worker `w` serves the request rings
    /// whose index is `w` modulo the number of workers.
    pub(crate) fn start(config: ServerConfig) -> Result<Server, Error> {
        let workers = config.workers;
        let g = config.geometry;
        let shared = Arc::new(Shared {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            stop: AtomicBool::new(false),
            verbs: (0..workers)
                .map(|_| Mutex::new(VerbCounts::default()))
                .collect(),
            config,
        });
        let mut server = Server {
            shared: Arc::clone(&shared),
            threads: Vec::new(),
        };
        for w in 0..workers {
            let inboxes = (0..g.nodes)
                .flat_map(|n| (0..g.slots).map(move |s| (n, s)))
                .filter(|&(n, s)| g.request_ring_index(n, s) % workers == w)
                .map(|(n, s)| Inbox::new(&g, n, s))
                .collect();
            let worker = Worker {
                ep: Endpoint::new(Arc::clone(&shared.config.fabric), shared.config.node),
                shared: Arc::clone(&shared),
                index: w,
                inboxes,
                payload: Vec::new(),
                frame: Vec::new(),
                value: Vec::new(),
                dte: Vec::new(),
                probe: Vec::new(),
                notes: ReplyNotes::default(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("sd-n{}-w{w}", shared.config.node))
                .spawn(move || worker.run())?;
            server.threads.push(thread);
        }
        Ok(server)
    }

    /// Verbs all workers issued so far.
    pub(crate) fn verbs(&self) -> VerbCounts {
        self.shared
            .verbs
            .iter()
            .fold(VerbCounts::default(), |acc, v| acc + *lock(v))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A key and its value, owned.
type KeyValue = (Vec<u8>, Vec<u8>);

/// Bumps a saturating 16-bit reply counter.
fn bump(counter: &mut u16) {
    *counter = counter.saturating_add(1);
}

/// A writer making room by cuckoo displacement: its deadline, and the lock
/// stripes it holds (a move of a key in a held stripe must not lock it
/// again).
struct Displacing {
    deadline: u64,
    held: Vec<usize>,
}

struct Worker {
    shared: Arc<Shared>,
    index: usize,
    ep: Endpoint,
    inboxes: Vec<Inbox>,
    payload: Vec<u8>,
    frame: Vec<u8>,
    value: Vec<u8>,
    dte: Vec<u8>,
    probe: Vec<u8>,
    notes: ReplyNotes,
}

impl Worker {
    fn run(mut self) {
        let g = self.shared.config.geometry;
        let mut spinner = Spinner::default();
        while !self.shared.stop.load(Ordering::Relaxed) {
            let mut served = false;
            for i in 0..self.inboxes.len() {
                match self.inboxes[i].poll(&mut self.ep, &g, &mut self.payload) {
                    Ok(Some(from)) => {
                        self.serve(from);
                        served = true;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!("polling a request ring failed: {e}; ring abandoned");
                        self.inboxes[i].abandon();
                    }
                }
            }
            if served {
                *lock(&self.shared.verbs[self.index]) = self.ep.counts();
                spinner.reset();
            } else {
                spinner.idle();
            }
        }
    }

    /// Executes the request in `self.payload` and replies.
    fn serve(&mut self, from: Incoming) {
        let Some(req) = RequestHeader::decode(&self.payload) else {
            tracing::error!(
                "request from node {} slot {} too short to answer",
                from.client_node,
                from.slot
            );
            return;
        };
        self.notes = ReplyNotes::default();
        let payload = std::mem::take(&mut self.payload);
        let outcome = self.execute(&req, &payload);
        self.payload = payload;
        let (status, body): (ReplyStatus, &[u8]) = match &outcome {
            Ok(true) => (ReplyStatus::Ok, &self.value),
            Ok(false) => (ReplyStatus::NotFound, &[]),
            Err(e) => {
                let status = match e {
                    Error::Timeout => ReplyStatus::Timeout,
                    Error::IndexFull => ReplyStatus::IndexFull,
                    Error::DataTableFull => ReplyStatus::DataTableFull,
                    Error::Corrupt { .. } => ReplyStatus::Corrupt,
                    _ => ReplyStatus::Failed,
                };
                let msg = match e {
                    Error::Corrupt { what, .. } => what.clone(),
                    other => other.to_string(),
                };
                let mut cut = msg.len().min(MAX_ERROR_MESSAGE);
                while !msg.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.value.clear();
                self.value.extend_from_slice(&msg.as_bytes()[..cut]);
                (status, &self.value)
            }
        };
        let header = ReplyHeader {
            status: status as u8,
            seq: req.seq,
            body_len: body.len() as u64,
            notes: self.notes,
        };
        begin_reply(&mut self.frame, &header);
        self.frame.extend_from_slice(body);
        finish_frame(&mut self.frame);
        let g = self.shared.config.geometry;
        if let Err(e) = send_reply(&mut self.ep, &g, from, req.reply_offset, &self.frame) {
            tracing::error!(
                "reply to node {} slot {} failed: {e}",
                from.client_node,
                from.slot
            );
        }
    }

    /// Runs one request. `Ok(true)`: done (a GET's value is in
    /// `self.value`); `Ok(false)`: the key was absent.
    fn execute(&mut self, req: &RequestHeader, payload: &[u8]) -> Result<bool, Error> {
        // Only a GET's reply has a body.
        self.value.clear();
        let config = &self.shared.config;
        let table = Arc::clone(&config.table);
        let malformed = |what: &str| Error::corrupt(format!("malformed request: {what}"));
        let op = RingOp::from_code(req.op).ok_or_else(|| malformed("unknown op"))?;
        let key_start = RequestHeader::key_offset();
        let key_len = usize::from(req.key_len);
        let value_len = usize::try_from(req.value_len)
            .ok()
            .filter(|&len| table.class_for(len).is_some())
            .ok_or_else(|| malformed("value length"))?;
        // Lengths are bounded now, so this sum cannot overflow.
        if req.payload_bytes() > payload.len() {
            return Err(malformed("shorter than its lengths"));
        }
        let key = &payload[key_start..key_start + key_len];
        let value = &payload[req.value_offset()..req.value_offset() + value_len];
        table.check_key(key)?;
        table.check_value(value)?;
        let deadline = req.created_at.saturating_add(config.op_timeout_us);
        match op {
            RingOp::Get => {
                let clock = Arc::clone(&config.clock);
                let mut retries = RetryCounts::default();
                let found = table::lookup(
                    &mut self.ep,
                    &table,
                    clock.as_ref(),
                    deadline,
                    key,
                    &mut self.value,
                    &mut retries,
                );
                self.notes.torn = u16::try_from(retries.torn).unwrap_or(u16::MAX);
                found
            }
            RingOp::Put => self.put(key, value, deadline).map(|()| true),
            RingOp::Delete => self.delete(key, deadline),
        }
    }

    fn now(&self) -> u64 {
        self.shared.config.clock.now_us()
    }

    fn check_deadline(&self, deadline: u64) -> Result<(), Error> {
        if self.now() > deadline {
            Err(Error::Timeout)
        } else {
            Ok(())
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], deadline: u64) -> Result<(), Error> {
        let shared = Arc::clone(&self.shared);
        let class = shared
            .config
            .table
            .class_for(value.len())
            .ok_or(Error::ValueTooLarge)?;
        let slot = self.allocate(class, deadline)?;
        let linked = self.write_dte(slot, key, value).and_then(|()| {
            let stripe = shared.stripe(key);
            let _guard = lock(&shared.stripes[stripe]);
            let mut moving = Displacing {
                deadline,
                held: vec![stripe],
            };
            self.link(key, Ite::occupied(slot, 0), &mut moving)
        });
        match linked {
            Ok(replaced) => {
                if let Some(old) = replaced {
                    self.stage(old);
                }
                Ok(())
            }
            Err(e) => {
                shared.config.data.release_unpublished(slot);
                Err(e)
            }
        }
    }

    /// Points the key's ITE at `new`: replaces the ITE holding the key, or
    /// takes an empty candidate (making room if there is none). Returns the
    /// replaced ITE, if the key was present. Caller holds the key's stripe.
    fn link(
        &mut self,
        key: &[u8],
        new: Ite,
        moving: &mut Displacing,
    ) -> Result<Option<Ite>, Error> {
        let deadline = moving.deadline;
        let shared = Arc::clone(&self.shared);
        let table = &shared.config.table;
        let node = shared.config.node;
        let slots = table.candidates(key);
        loop {
            self.check_deadline(deadline)?;
            let ites = read_ites(&mut self.ep, table, node, &slots)?;
            let Some(hit) = self.find(key, &ites)? else {
                continue; // torn: re-read
            };
            let Some(i) = hit.or_else(|| ites.iter().position(|e| e.is_empty())) else {
                let depth = shared.config.max_migrate_depth;
                if !self.make_room(&slots, &ites, depth, moving)? {
                    return Err(Error::IndexFull);
                }
                continue;
            };
            self.check_deadline(deadline)?;
            let old = self
                .ep
                .cas(table.ite_addr(node, slots[i]), ites[i].0, new.0)?;
            if old == ites[i].0 {
                return Ok(hit.map(|_| ites[i]));
            }
            bump(&mut self.notes.cas_failed);
        }
    }

    /// Which of `ites` holds `key`: `Some(Some(i))`, `Some(None)` if none
    /// does, `None` if a read was torn (re-read the ITEs).
    #[expect(
        clippy::option_option,
        reason = "torn, absent and found are three answers"
    )]
    fn find(&mut self, key: &[u8], ites: &[Ite]) -> Result<Option<Option<usize>>, Error> {
        let shared = Arc::clone(&self.shared);
        let node = shared.config.node;
        for (i, &ite) in ites.iter().enumerate() {
            if !ite.is_occupied() {
                continue;
            }
            match probe(
                &mut self.ep,
                &shared.config.table,
                node,
                key,
                ite,
                &mut self.probe,
            )? {
                Probe::Hit(_) => return Ok(Some(Some(i))),
                Probe::Miss => {}
                Probe::Torn => {
                    bump(&mut self.notes.torn);
                    if u32::from(self.notes.torn) >= MAX_TORN_RETRIES {
                        return Err(Error::corrupt(format!(
                            "index entry {:#018x} on node {node} keeps pointing at a recycled entry",
                            ite.0
                        )));
                    }
                    return Ok(None);
                }
            }
        }
        Ok(Some(None))
    }

    fn delete(&mut self, key: &[u8], deadline: u64) -> Result<bool, Error> {
        let shared = Arc::clone(&self.shared);
        let table = &shared.config.table;
        let node = shared.config.node;
        let slots = table.candidates(key);
        let guard = lock(&shared.stripes[shared.stripe(key)]);
        let removed = loop {
            self.check_deadline(deadline)?;
            let ites = read_ites(&mut self.ep, table, node, &slots)?;
            let Some(hit) = self.find(key, &ites)? else {
                continue;
            };
            let Some(i) = hit else {
                break None;
            };
            self.check_deadline(deadline)?;
            let addr = table.ite_addr(node, slots[i]);
            if self.ep.cas(addr, ites[i].0, ites[i].emptied().0)? == ites[i].0 {
                break Some(ites[i]);
            }
            bump(&mut self.notes.cas_failed);
        };
        drop(guard);
        if let Some(old) = removed {
            self.stage(old);
        }
        Ok(removed.is_some())
    }

    /// Frees one of the candidate `slots` (whose values are `ites`) by
    /// moving its occupant elsewhere. Returns whether it did.
    fn make_room(
        &mut self,
        slots: &[u64],
        ites: &[Ite],
        depth: usize,
        moving: &mut Displacing,
    ) -> Result<bool, Error> {
        for (&slot, &ite) in slots.iter().zip(ites) {
            if ite.is_occupied() && self.evict(slot, ite, depth, moving)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves the occupant of `slot` (ITE value `ite`) to another of its
    /// candidates, making room there first if `depth` allows.
    fn evict(
        &mut self,
        slot: u64,
        ite: Ite,
        depth: usize,
        moving: &mut Displacing,
    ) -> Result<bool, Error> {
        if depth == 0 {
            return Ok(false);
        }
        let shared = Arc::clone(&self.shared);
        let r = target(&shared.config.table, shared.config.node, ite)?;
        let Some((key, value)) = self.read_entry(r)? else {
            return Ok(false);
        };
        let stripe = shared.stripe(&key);
        let guard = if moving.held.contains(&stripe) {
            None
        } else {
            match shared.stripes[stripe].try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => return Ok(false),
            }
        };
        if guard.is_some() {
            moving.held.push(stripe);
        }
        let moved = self.evict_locked(slot, ite, r, (&key, &value), depth, moving);
        if guard.is_some() {
            moving.held.pop();
        }
        moved
    }

    /// [`Worker::evict`] once the stripe of the occupant's key (`entry`,
    /// read from DTE `r`) is held.
    fn evict_locked(
        &mut self,
        slot: u64,
        ite: Ite,
        r: SlotRef,
        (key, value): (&[u8], &[u8]),
        depth: usize,
        moving: &mut Displacing,
    ) -> Result<bool, Error> {
        let deadline = moving.deadline;
        let shared = Arc::clone(&self.shared);
        let table = &shared.config.table;
        let node = shared.config.node;
        if read_ites(&mut self.ep, table, node, &[slot])?[0] != ite {
            return Ok(false); // changed before we held its stripe
        }
        let alts: Vec<u64> = table
            .candidates(key)
            .into_iter()
            .filter(|&s| s != slot)
            .collect();
        let mut alt_ites = read_ites(&mut self.ep, table, node, &alts)?;
        let mut dest = alt_ites.iter().position(|e| e.is_empty());
        if dest.is_none() && depth > 1 {
            for j in 0..alts.len() {
                if alt_ites[j].is_occupied()
                    && self.evict(alts[j], alt_ites[j], depth - 1, moving)?
                {
                    alt_ites = read_ites(&mut self.ep, table, node, &alts)?;
                    dest = alt_ites.iter().position(|e| e.is_empty());
                    if dest.is_some() {
                        break;
                    }
                }
            }
        }
        let Some(j) = dest else {
            return Ok(false);
        };
        // Copy to a fresh DTE slot so that the destination's new ITE value
        // has never been seen there before (ITE values never repeat).
        let Some(copy) = shared
            .config
            .data
            .allocate(r.class, shared.config.tables())?
        else {
            bump(&mut self.notes.no_free_slot);
            return Ok(false);
        };
        let linked = self
            .write_dte(copy, key, value)
            .and_then(|()| self.check_deadline(deadline))
            .and_then(|()| {
                let new = Ite::occupied(copy, 0);
                Ok(self
                    .ep
                    .cas(table.ite_addr(node, alts[j]), alt_ites[j].0, new.0)?
                    == alt_ites[j].0)
            });
        if !matches!(linked, Ok(true)) {
            shared.config.data.release_unpublished(copy);
            if matches!(linked, Ok(false)) {
                bump(&mut self.notes.cas_failed);
            }
            return linked;
        }
        // The key is now in both slots with the same value; clear the old.
        let new = Ite::occupied(copy, 0);
        if self
            .ep
            .cas(table.ite_addr(node, slot), ite.0, ite.emptied().0)?
            != ite.0
        {
            // Only writers of this key change its ITEs, and we hold its
            // stripe, so this does not happen; undo the copy if it does.
            bump(&mut self.notes.cas_failed);
            self.ep
                .cas(table.ite_addr(node, alts[j]), new.0, new.emptied().0)?;
            self.stage(new);
            return Ok(false);
        }
        self.stage(ite);
        bump(&mut self.notes.migrations);
        Ok(true)
    }

    /// Reads a linked DTE's key and value; `None` if torn.
    fn read_entry(&mut self, r: SlotRef) -> Result<Option<KeyValue>, Error> {
        let table = Arc::clone(&self.shared.config.table);
        let Some(addr) = table.dte_addr(r) else {
            return Ok(None);
        };
        let mut head = [0u8; dte::DTE_HEADER_BYTES];
        self.ep.read(addr, &mut head)?;
        let header = DteHeader::decode(&head);
        let (key_len, value_len) = (header.state.key_len(), header.state.value_len());
        if header.state.generation() != r.generation
            || header.state.status() != DteStatus::Valid
            || value_len > table.class_capacity(r.class)
        {
            return Ok(None);
        }
        let mut rest = vec![0u8; header.entry_bytes() - dte::KEY_OFFSET];
        self.ep.read(addr.add(dte::KEY_OFFSET as u64), &mut rest)?;
        let value_at = dte::value_offset(key_len) - dte::KEY_OFFSET;
        let key = rest[..key_len].to_vec();
        let value = rest[value_at..value_at + value_len].to_vec();
        if header.compute_checksum(&key, &value) != header.checksum {
            bump(&mut self.notes.torn);
            return Ok(None);
        }
        Ok(Some((key, value)))
    }

    /// Writes a committed DTE for `key` and `value` into the fresh slot `r`.
    fn write_dte(&mut self, r: SlotRef, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let table = Arc::clone(&self.shared.config.table);
        let addr = table.dte_addr(r).ok_or_else(|| {
            Error::corrupt(format!(
                "allocator returned a slot outside the tables: {r:?}"
            ))
        })?;
        let header = DteHeader {
            state: DteState::new(r.generation, key.len(), value.len(), false, false)
                .with_status(DteStatus::Valid),
            created_at: self.now(),
            ..DteHeader::default()
        };
        self.dte.clear();
        self.dte.resize(dte::entry_bytes(key.len(), value.len()), 0);
        encode_entry(header, key, value, &mut self.dte);
        self.ep.write(addr, &self.dte)?;
        Ok(())
    }

    /// Takes a free data slot of `class`, waiting for staged slots to expire
    /// until `deadline`.
    fn allocate(&mut self, class: u8, deadline: u64) -> Result<SlotRef, Error> {
        let config = &self.shared.config;
        loop {
            if let Some(r) = config.data.allocate(class, config.tables())? {
                return Ok(r);
            }
            bump(&mut self.notes.no_free_slot);
            if config.clock.now_us() > deadline {
                return Err(Error::DataTableFull);
            }
            config.clock.sleep(ALLOC_BACKOFF);
        }
    }

    /// Stages the DTE an unlinked ITE pointed at: it may be reused once
    /// `expiry` (plus the clock skew) has passed.
    fn stage(&mut self, unlinked: Ite) {
        let config = &self.shared.config;
        let Some(addr) = unlinked.target().and_then(|r| config.table.dte_addr(r)) else {
            return;
        };
        let at = config.data.expires_at(config.clock.now_us());
        let addr = addr.add(dte::EXPIRES_AT_OFFSET as u64);
        if let Err(e) = self.ep.write(addr, &at.to_le_bytes()) {
            // The operation itself succeeded; the slot just never recycles.
            tracing::warn!("staging the entry at {addr} failed: {e}");
        }
    }
}
