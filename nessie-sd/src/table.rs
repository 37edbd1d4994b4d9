//! The partitioned tables of the baselines: where a key lives and how its
//! entry is read, by a server worker on its own node (SD) or one-sided by a
//! client on another node (HY's GET).
//!
//! A key's **home node** is `hash mod nodes` ([`Table::home`]); its
//! index entry and its data live there only. Its candidate index slots are
//! `H` slots of the home node's index table (cuckoo hashing, as in Nessie,
//! but over one node's table). The index and data tables use Nessie's
//! layouts unchanged: an ITE is one `u64` pointing at a DTE
//! `(node, class, slot, generation)`, a DTE is a header, the key and the
//! value, with a checksum over all of them.
//!
//! Differences from Nessie's use of the same layouts, all because one
//! server thread at a time writes a key (see the server module): ITEs carry
//! no filter bits (0), DTEs are written `VALID` before any ITE points at
//! them (no commit CAS, no helpers), a DELETE simply clears the ITE (no
//! tombstone), and no ITE ever holds a `MOVED` marker.
//!
//! **Reading without locks** ([`lookup`]), as a HY client does while server
//! workers change the table, stays linearizable because:
//! * ITE values of one slot never repeat within an expiry period (every PUT
//!   and every move takes a fresh DTE slot, slots are reused only after
//!   they expire, a cleared ITE holds `EMPTY(old)`), and every slot that
//!   holds the key at a given instant points at a DTE of the same value (a
//!   move copies the DTE to its new slot before clearing the old one);
//! * so a hit is the key's value at the instant the ITE was read, provided
//!   the DTE read afterwards is the one that ITE meant: the reader checks
//!   the DTE's generation against the ITE's and its checksum over header,
//!   key and value. A DTE is never modified while linked and for `expiry`
//!   after it is unlinked (only `expires_at` changes, which the checksum
//!   does not cover), so a mismatch means the slot was recycled under a
//!   very slow reader, who then simply retries. Re-reading the ITE after
//!   the DTE would add a round trip to every GET and prove nothing more;
//! * a miss is confirmed by a second read of every candidate ITE (the
//!   reverse pass of Nessie's GET): if none changed, all the values seen
//!   held at once at the end of the first pass, when the key was therefore
//!   absent; a change means a concurrent move or PUT, and the reader
//!   retries.

use nessie::data::Geometry;
use nessie::fabric::{Endpoint, NodeId, RegionSpec, RemoteAddr, Verb};
use nessie::index::{Candidate, KeyHasher};
use nessie::layout::dte::{self, DteHeader, DteStatus};
use nessie::layout::{round_up_words, Ite, SlotRef, WORD};
use nessie::{Clock, Config, Error, RetryCounts};

/// How many torn reads of one entry a reader tolerates before it reports
/// [`Error::Corrupt`]: a live DTE cannot change, so repeated mismatches are
/// damage, not races.
pub const MAX_TORN_RETRIES: u32 = 16;

/// The tables of a cluster as the baselines see them: placement of keys and
/// the shape of every node's index and data tables.
#[derive(Clone, Debug)]
pub struct Table {
    geometry: Geometry,
    key_size_max: usize,
    value_size_max: usize,
    /// The hash of the home node: Nessie's first hash function.
    home: KeyHasher,
    slots: KeyHasher,
}

impl Table {
    /// The tables of a (validated) configuration.
    #[must_use]
    pub fn new(config: &Config) -> Table {
        // Candidate slots come from a hasher over one table of
        // `nodes × slots` entries, divided by `nodes`: for the first hash,
        // `h mod (nodes·slots)` splits exactly into the home node
        // (`h mod nodes`) and an independent slot. Taking `h mod slots`
        // instead would tie the first candidate's slot to the home node
        // whenever `nodes` and `slots` share a factor (with 2 nodes, node 0
        // would only ever use its even slots for first choices).
        let flat = Config {
            nodes: 1,
            index_slots_per_node: config.index_slots_per_node * config.nodes,
            ..config.clone()
        };
        Table {
            geometry: Geometry::new(config),
            key_size_max: config.key_size_max,
            value_size_max: config.value_size_max,
            home: KeyHasher::new(config),
            slots: KeyHasher::new(&flat),
        }
    }

    /// The regions every node registers for its tables: the index table and
    /// one data table per size class (the same as Nessie's).
    #[must_use]
    pub fn regions(config: &Config) -> Vec<RegionSpec> {
        let geometry = Geometry::new(config);
        let mut regions = vec![geometry.index_region()];
        regions.extend(geometry.data_regions());
        regions
    }

    /// Number of nodes.
    #[must_use]
    pub fn nodes(&self) -> usize {
        self.geometry.nodes()
    }

    /// The node that holds `key`.
    #[must_use]
    pub fn home(&self, key: &[u8]) -> NodeId {
        (self.home.hash(key, 0) % self.nodes() as u64) as NodeId
    }

    /// The key's candidate slots in its home node's index table, first hash
    /// first, repeats dropped.
    #[must_use]
    pub fn candidates(&self, key: &[u8]) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::with_capacity(4);
        for c in self.slots.candidates(key) {
            let slot = c.slot / self.nodes() as u64;
            if !out.contains(&slot) {
                out.push(slot);
            }
        }
        out
    }

    /// Address of index slot `slot` of `node`.
    #[must_use]
    pub fn ite_addr(&self, node: NodeId, slot: u64) -> RemoteAddr {
        Candidate { node, slot }.addr()
    }

    /// Address of the DTE `r`, or `None` if `r` lies outside the tables.
    #[must_use]
    pub fn dte_addr(&self, r: SlotRef) -> Option<RemoteAddr> {
        self.geometry.dte_addr(r)
    }

    /// Value capacity of size class `class`.
    #[must_use]
    pub fn class_capacity(&self, class: u8) -> usize {
        self.geometry.capacity(class)
    }

    /// The smallest size class holding `value_len` bytes.
    #[must_use]
    pub fn class_for(&self, value_len: usize) -> Option<u8> {
        if value_len > self.value_size_max {
            return None;
        }
        self.geometry.class_for(value_len)
    }

    /// Index slots per node.
    #[must_use]
    pub fn index_slots(&self) -> u64 {
        self.geometry.index_slots()
    }

    /// Checks a key against the configuration.
    ///
    /// # Errors
    /// [`Error::EmptyKey`] or [`Error::KeyTooLarge`].
    pub fn check_key(&self, key: &[u8]) -> Result<(), Error> {
        if key.is_empty() {
            Err(Error::EmptyKey)
        } else if key.len() > self.key_size_max {
            Err(Error::KeyTooLarge)
        } else {
            Ok(())
        }
    }

    /// Checks a value against the configuration.
    ///
    /// # Errors
    /// [`Error::ValueTooLarge`].
    pub fn check_value(&self, value: &[u8]) -> Result<(), Error> {
        if value.len() > self.value_size_max {
            Err(Error::ValueTooLarge)
        } else {
            Ok(())
        }
    }
}

/// Reads the ITEs of `slots` on `node` in one batch.
///
/// # Errors
/// A fabric error.
pub fn read_ites(
    ep: &mut Endpoint,
    table: &Table,
    node: NodeId,
    slots: &[u64],
) -> Result<Vec<Ite>, Error> {
    let mut words = vec![[0u8; WORD]; slots.len()];
    let mut batch: Vec<Verb<'_>> = slots
        .iter()
        .zip(words.iter_mut())
        .map(|(&slot, buf)| Verb::Read {
            addr: table.ite_addr(node, slot),
            buf,
        })
        .collect();
    ep.post(&mut batch)?;
    drop(batch);
    Ok(words
        .into_iter()
        .map(|w| Ite(u64::from_le_bytes(w)))
        .collect())
}

/// What reading the DTE an ITE points at found out about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The DTE holds another key.
    Miss,
    /// The DTE holds the key; here is its header (value not yet read).
    Hit(DteHeader),
    /// The DTE is not the one the ITE meant (recycled since): re-read.
    Torn,
}

/// Reads the header and key of the DTE that the occupied `ite` of `node`
/// points at (one READ) and compares the key.
///
/// # Errors
/// [`Error::Corrupt`] if the ITE points outside `node`'s data tables; a
/// fabric error.
pub fn probe(
    ep: &mut Endpoint,
    table: &Table,
    node: NodeId,
    key: &[u8],
    ite: Ite,
    buf: &mut Vec<u8>,
) -> Result<Probe, Error> {
    let r = target(table, node, ite)?;
    let addr = table.dte_addr(r).ok_or_else(|| bad_ite(node, ite))?;
    buf.clear();
    buf.resize(dte::KEY_OFFSET + round_up_words(key.len()), 0);
    ep.read(addr, buf)?;
    let header = DteHeader::decode(buf);
    if header.state.generation() != r.generation {
        return Ok(Probe::Torn);
    }
    let stored = &buf[dte::KEY_OFFSET..dte::KEY_OFFSET + key.len()];
    if header.state.key_len() != key.len() || stored != key {
        return Ok(Probe::Miss);
    }
    Ok(Probe::Hit(header))
}

/// The DTE an occupied ITE of `node`'s index points at.
///
/// # Errors
/// [`Error::Corrupt`] if it is not an occupied entry of `node`.
pub fn target(table: &Table, node: NodeId, ite: Ite) -> Result<SlotRef, Error> {
    match ite.target() {
        Some(r) if ite.is_occupied() && usize::from(r.node) == node => table
            .dte_addr(r)
            .map(|_| r)
            .ok_or_else(|| bad_ite(node, ite)),
        _ => Err(bad_ite(node, ite)),
    }
}

fn bad_ite(node: NodeId, ite: Ite) -> Error {
    Error::corrupt(format!(
        "index entry {:#018x} on node {node} does not point into node {node}'s data tables",
        ite.0
    ))
}

/// Reads the value of a DTE whose header `header` a [`Probe::Hit`] returned
/// (one READ) into `out` and verifies the checksum. Returns `false` if the
/// read was torn.
///
/// # Errors
/// A fabric error.
pub fn read_value(
    ep: &mut Endpoint,
    table: &Table,
    dte: SlotRef,
    header: &DteHeader,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, Error> {
    let len = header.state.value_len();
    if header.state.status() != DteStatus::Valid || len > table.class_capacity(dte.class) {
        return Ok(false);
    }
    let Some(addr) = table.dte_addr(dte) else {
        return Ok(false);
    };
    out.clear();
    out.resize(round_up_words(len), 0);
    if !out.is_empty() {
        ep.read(addr.add(dte::value_offset(key.len()) as u64), out)?;
    }
    out.truncate(len);
    Ok(header.compute_checksum(key, out) == header.checksum)
}

/// GET without locks: the read path of SD's server workers and of HY's
/// clients. Reads the candidate ITEs of `key` on its home node in one batch;
/// for each occupied one, in order, the DTE header and key (one READ); on a
/// key match, the value (one READ). No filter bits, cache, previous
/// versions or multi-read (as `NessieHY` in the paper). A miss is confirmed by
/// re-reading the ITEs (see the module documentation). Returns whether the
/// key was found; its value is then in `out`.
///
/// # Errors
/// [`Error::Timeout`] once `deadline_us` has passed, [`Error::Corrupt`]
/// after [`MAX_TORN_RETRIES`] torn reads, or a fabric error.
pub fn lookup(
    ep: &mut Endpoint,
    table: &Table,
    clock: &dyn Clock,
    deadline_us: u64,
    key: &[u8],
    out: &mut Vec<u8>,
    retries: &mut RetryCounts,
) -> Result<bool, Error> {
    let node = table.home(key);
    let slots = table.candidates(key);
    let mut buf = Vec::new();
    let mut torn = 0;
    'retry: loop {
        if clock.now_us() > deadline_us {
            return Err(Error::Timeout);
        }
        let ites = read_ites(ep, table, node, &slots)?;
        for &ite in ites.iter().filter(|i| i.is_occupied()) {
            let done = match probe(ep, table, node, key, ite, &mut buf)? {
                Probe::Miss => continue,
                Probe::Torn => false,
                Probe::Hit(header) => {
                    read_value(ep, table, target(table, node, ite)?, &header, key, out)?
                }
            };
            if done {
                return Ok(true);
            }
            torn += 1;
            retries.torn += 1;
            if torn >= MAX_TORN_RETRIES {
                return Err(Error::corrupt(format!(
                    "entry of a key on node {node} failed its checks {torn} times"
                )));
            }
            continue 'retry;
        }
        if read_ites(ep, table, node, &slots)? == ites {
            out.clear();
            return Ok(false);
        }
        retries.changed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_stay_on_the_home_node_and_spread() {
        let t = Table::new(&Config {
            nodes: 2,
            index_slots_per_node: 64,
            ..Config::default()
        });
        let mut first_parity = [[0u32; 2]; 2];
        for i in 0..2000u32 {
            let key = format!("k{i}");
            let c = t.candidates(key.as_bytes());
            assert!(!c.is_empty() && c.len() <= 3);
            assert!(c.iter().all(|&s| s < 64));
            first_parity[t.home(key.as_bytes())][(c[0] % 2) as usize] += 1;
        }
        // The first candidate is not tied to the home node.
        for per_node in first_parity {
            assert!(per_node.iter().all(|&n| n > 300), "{first_parity:?}");
        }
    }

    #[test]
    fn classes_and_bounds() {
        let t = Table::new(&Config {
            value_size_max: 1000,
            ..Config::default()
        });
        assert_eq!(t.class_for(0), Some(0));
        assert_eq!(t.class_for(257), Some(1));
        assert_eq!(t.class_for(1000), Some(2));
        assert_eq!(t.class_for(1001), None);
        assert!(matches!(t.check_key(b""), Err(Error::EmptyKey)));
        assert!(matches!(t.check_key(&[0; 129]), Err(Error::KeyTooLarge)));
        assert!(matches!(
            t.check_value(&[0; 1001]),
            Err(Error::ValueTooLarge)
        ));
        let r = SlotRef {
            node: 0,
            class: 9,
            slot: 0,
            generation: 1,
        };
        assert_eq!(t.dte_addr(r), None);
    }
}
