//! A client's handle on the fabric: issues verbs and counts them.

use super::{Fabric, FabricError, NodeId, RemoteAddr, Verb};
use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Sub};
use std::sync::Arc;

/// Counts of the verbs one client issued (failed verbs included). Deterministic for a given sequence
/// of operations, so tests assert on them and the harness plots them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbCounts {
    /// READ verbs.
    pub reads: u64,
    /// WRITE verbs.
    pub writes: u64,
    /// CAS verbs.
    pub cas: u64,
    /// Bytes moved by READs.
    pub read_bytes: u64,
    /// Bytes moved by WRITEs.
    pub write_bytes: u64,
    /// Network round trips: a single verb or a batch counts one if it
    /// reaches another node. Verbs on the client's own node's memory count
    /// as verbs (see `local`) but not as round trips.
    pub round_trips: u64,
    /// Verbs whose target was the client's own node.
    pub local: u64,
    /// Verbs whose target was another node.
    pub remote: u64,
    /// Bytes moved (READ and WRITE) to or from other nodes.
    pub remote_bytes: u64,
}

impl VerbCounts {
    /// READs, WRITEs and CASes together.
    #[must_use]
    pub fn verbs(&self) -> u64 {
        self.reads + self.writes + self.cas
    }

    /// Bytes moved by READs and WRITEs together.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes
    }
}

macro_rules! field_wise {
    ($trait:ident, $method:ident, $op:tt) => {
        impl $trait for VerbCounts {
            type Output = VerbCounts;
            fn $method(self, o: VerbCounts) -> VerbCounts {
                VerbCounts {
                    reads: self.reads $op o.reads,
                    writes: self.writes $op o.writes,
                    cas: self.cas $op o.cas,
                    read_bytes: self.read_bytes $op o.read_bytes,
                    write_bytes: self.write_bytes $op o.write_bytes,
                    round_trips: self.round_trips $op o.round_trips,
                    local: self.local $op o.local,
                    remote: self.remote $op o.remote,
                    remote_bytes: self.remote_bytes $op o.remote_bytes,
                }
            }
        }
    };
}
field_wise!(Add, add, +);
field_wise!(Sub, sub, -);

impl AddAssign for VerbCounts {
    fn add_assign(&mut self, o: VerbCounts) {
        *self = *self + o;
    }
}

/// One client's access to the fabric from node `node`: issues verbs and
/// counts them. One per client thread; not shared.
#[derive(Debug, Clone)]
pub struct Endpoint {
    fabric: Arc<dyn Fabric>,
    node: NodeId,
    counts: VerbCounts,
    /// Per target node, when asked for ([`Endpoint::count_per_peer`]).
    per_peer: Option<Vec<VerbCounts>>,
}

impl Endpoint {
    /// An endpoint for a client running on `node`.
    #[must_use]
    pub fn new(fabric: Arc<dyn Fabric>, node: NodeId) -> Endpoint {
        Endpoint {
            fabric,
            node,
            counts: VerbCounts::default(),
            per_peer: None,
        }
    }

    /// Also counts verbs per target node, for a cluster of `nodes` (off by
    /// default: it costs a branch and an add per verb). Round trips are
    /// not counted per peer (a batch may reach several).
    pub fn count_per_peer(&mut self, nodes: usize) {
        self.per_peer = Some(vec![VerbCounts::default(); nodes]);
    }

    /// Moves the per-peer counts gathered since the last call into `into`
    /// (indexed by node; grown as needed), leaving zeros behind. Nothing
    /// unless [`Endpoint::count_per_peer`] was called.
    pub fn drain_per_peer(&mut self, into: &mut Vec<VerbCounts>) {
        let Some(peers) = self.per_peer.as_mut() else {
            return;
        };
        if into.len() < peers.len() {
            into.resize(peers.len(), VerbCounts::default());
        }
        for (to, from) in into.iter_mut().zip(peers.iter_mut()) {
            if from.verbs() != 0 {
                *to += std::mem::take(from);
            }
        }
    }

    /// The node this endpoint's client runs on.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The fabric underneath.
    #[must_use]
    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    /// Verbs issued so far.
    #[must_use]
    pub fn counts(&self) -> VerbCounts {
        self.counts
    }

    fn count_trip(&mut self, remote: bool) {
        if remote {
            self.counts.round_trips += 1;
        }
    }

    fn count(&mut self, addr: RemoteAddr, read: u64, written: u64, cas: bool) {
        let local = addr.node == self.node;
        Self::bump(&mut self.counts, local, read, written, cas);
        if let Some(peer) = self.per_peer.as_mut().and_then(|p| p.get_mut(addr.node)) {
            Self::bump(peer, local, read, written, cas);
        }
    }

    fn bump(c: &mut VerbCounts, local: bool, read: u64, written: u64, cas: bool) {
        if cas {
            c.cas += 1;
        } else if read > 0 {
            c.reads += 1;
        } else {
            c.writes += 1;
        }
        c.read_bytes += read;
        c.write_bytes += written;
        if local {
            c.local += 1;
        } else {
            c.remote += 1;
            c.remote_bytes += read + written;
        }
    }

    fn count_verb(&mut self, verb: &Verb<'_>) {
        match verb {
            Verb::Read { addr, buf } => self.count(*addr, buf.len() as u64, 0, false),
            Verb::ReadScatter { addr, head, tail } => {
                self.count(*addr, (head.len() + tail.len()) as u64, 0, false);
            }
            Verb::Write { addr, data } => self.count(*addr, 0, data.len() as u64, false),
            Verb::Cas { addr, .. } => self.count(*addr, 0, 0, true),
        }
    }

    /// READ (one round trip if remote).
    ///
    /// # Errors
    /// As [`Fabric::read`].
    pub fn read(&mut self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.count(addr, buf.len() as u64, 0, false);
        self.count_trip(addr.node != self.node);
        self.fabric.read(addr, buf)
    }

    /// READ of one little-endian word.
    ///
    /// # Errors
    /// As [`Fabric::read`].
    pub fn read_word(&mut self, addr: RemoteAddr) -> Result<u64, FabricError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// WRITE (one round trip if remote).
    ///
    /// # Errors
    /// As [`Fabric::write`].
    pub fn write(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.count(addr, 0, data.len() as u64, false);
        self.count_trip(addr.node != self.node);
        self.fabric.write(addr, data)
    }

    /// Gathered WRITE that may bypass the cache (one round trip if remote;
    /// see [`Fabric::write_streaming`]).
    ///
    /// # Errors
    /// As [`Fabric::write_streaming`].
    pub fn write_streaming(
        &mut self,
        addr: RemoteAddr,
        parts: &[&[u8]],
        cached: usize,
    ) -> Result<(), FabricError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.count(addr, 0, len as u64, false);
        self.count_trip(addr.node != self.node);
        self.fabric.write_streaming(addr, parts, cached)
    }

    /// CAS (one round trip if remote); returns the old value.
    ///
    /// # Errors
    /// As [`Fabric::cas`].
    pub fn cas(&mut self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.count(addr, 0, 0, true);
        self.count_trip(addr.node != self.node);
        self.fabric.cas(addr, expected, new)
    }

    /// CAS that must land before `land_by_us` (see [`Fabric::cas_by`]).
    ///
    /// # Errors
    /// As [`Fabric::cas_by`].
    pub fn cas_by(
        &mut self,
        addr: RemoteAddr,
        expected: u64,
        new: u64,
        land_by_us: u64,
    ) -> Result<u64, FabricError> {
        self.count(addr, 0, 0, true);
        self.count_trip(addr.node != self.node);
        self.fabric.cas_by(addr, expected, new, land_by_us)
    }

    /// Whether the fabric refuses late CASes (see [`Fabric::enforces_land_by`]).
    #[must_use]
    pub fn enforces_land_by(&self) -> bool {
        self.fabric.enforces_land_by()
    }

    /// Whether a node's verbs of one batch keep their order (see
    /// [`Fabric::keeps_batch_order`]).
    #[must_use]
    pub fn keeps_batch_order(&self) -> bool {
        self.fabric.keeps_batch_order()
    }

    /// Posts a batch (one round trip however many verbs, if any is remote).
    ///
    /// # Errors
    /// As [`Fabric::post`].
    pub fn post(&mut self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        if !self.count_batch(batch) {
            return Ok(());
        }
        if let [single] = batch {
            // One verb: use the single-verb path (cheaper on every backend).
            return single.execute_on(&*self.fabric);
        }
        self.fabric.post(batch)
    }

    /// Posts a batch whose CASes must land before `land_by_us` (see
    /// [`Fabric::post_by`]); one round trip, as [`Endpoint::post`].
    ///
    /// # Errors
    /// As [`Fabric::post_by`].
    pub fn post_by(&mut self, batch: &mut [Verb<'_>], land_by_us: u64) -> Result<(), FabricError> {
        if !self.count_batch(batch) {
            return Ok(());
        }
        self.fabric.post_by(batch, land_by_us)
    }

    /// Counts a batch's verbs and its round trip; false for an empty batch.
    fn count_batch(&mut self, batch: &[Verb<'_>]) -> bool {
        if batch.is_empty() {
            return false;
        }
        for verb in batch {
            self.count_verb(verb);
        }
        let remote = batch.iter().any(|v| v.addr().node != self.node);
        self.count_trip(remote);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalFabric, RegionId, RegionSpec};

    const R: RegionId = RegionId(0);

    fn endpoint() -> Endpoint {
        let fabric = LocalFabric::new(3, &[RegionSpec { id: R, len: 64 }]).unwrap();
        Endpoint::new(Arc::new(fabric), 1)
    }

    #[test]
    fn per_peer_counts_add_up_to_the_totals_and_drain() {
        let mut ep = endpoint();
        let mut drained = Vec::new();
        ep.write(RemoteAddr::new(0, R, 0), &[1; 16]).unwrap();
        ep.drain_per_peer(&mut drained);
        assert!(drained.is_empty(), "off until asked for");
        ep.count_per_peer(3);
        ep.write(RemoteAddr::new(0, R, 0), &[1; 16]).unwrap();
        ep.read(RemoteAddr::new(1, R, 8), &mut [0; 8]).unwrap();
        ep.cas(RemoteAddr::new(2, R, 0), 0, 1).unwrap();
        let mut buf = [0u8; 8];
        let mut batch = [
            Verb::Read {
                addr: RemoteAddr::new(2, R, 8),
                buf: &mut buf,
            },
            Verb::Cas {
                addr: RemoteAddr::new(0, R, 16),
                expected: 0,
                new: 1,
                old: 0,
            },
        ];
        ep.post(&mut batch).unwrap();
        ep.drain_per_peer(&mut drained);
        assert_eq!(drained.len(), 3);
        assert_eq!(
            (drained[0].writes, drained[0].write_bytes, drained[0].cas),
            (1, 16, 1)
        );
        assert_eq!(
            (drained[1].reads, drained[1].read_bytes, drained[1].local),
            (1, 8, 1)
        );
        assert_eq!(
            (drained[2].reads, drained[2].cas, drained[2].remote),
            (1, 1, 2)
        );
        let mut sum = VerbCounts::default();
        for c in &drained {
            sum += *c;
        }
        let total = ep.counts();
        assert_eq!(sum.verbs() + 1, total.verbs(), "all but the write before");
        // Drained counts are gone; new verbs start from zero.
        ep.read(RemoteAddr::new(1, R, 0), &mut [0; 8]).unwrap();
        let mut again = Vec::new();
        ep.drain_per_peer(&mut again);
        assert_eq!(again[1].reads, 1);
        assert_eq!(again[0].verbs() + again[2].verbs(), 0);
    }
}
