//! [`Config::validate`], by concern: sizes and counts, time bounds, the
//! fabric, and the size classes.

use super::{bad, Config, FabricConfig, MAX_DURATION, MAX_VALUE_SIZE, SHORT_SECRET};
use crate::data::Geometry;
use crate::layout::{self, ite};
use crate::Error;

impl Config {
    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::Config`] with a message naming the first bad field.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_counts()?;
        self.validate_times()?;
        if self.value_size_max > MAX_VALUE_SIZE {
            return Err(bad(format!(
                "value_size_max = {} is above the largest size class ({MAX_VALUE_SIZE} bytes)",
                self.value_size_max
            )));
        }
        self.validate_fabric()?;
        if let Some(metrics) = &self.metrics {
            metrics.validate(self.nodes)?;
        }
        self.validate_classes()
    }

    /// Counts and sizes: non-zero, and within what an ITE can address.
    fn validate_counts(&self) -> Result<(), Error> {
        let zero = |name: &str, v: usize| {
            if v == 0 {
                Err(bad(format!("{name} must be greater than 0")))
            } else {
                Ok(())
            }
        };
        zero("nodes", self.nodes)?;
        zero("index_slots_per_node", self.index_slots_per_node)?;
        zero("hashes", self.hashes)?;
        zero("key_size_max", self.key_size_max)?;
        zero("value_size_max", self.value_size_max)?;
        zero("data_bytes_per_node", self.data_bytes_per_node)?;
        zero("cache_entries", self.cache_entries)?;
        zero("server_workers", self.server_workers)?;
        zero("replicas", self.replicas)?;
        if self.replicas > 1
            && (self.replicas > self.nodes
                || self.nodes < 3
                || self.nodes > layout::membership::MAX_MEMBERS
                || self.replicas > layout::region::MAX_REPLICAS)
        {
            return Err(bad(format!(
                "replicas = {} needs 3 to {} nodes and no more replicas than nodes \
                 (nodes = {}), and at most {} (docs/replication.md#placement)",
                self.replicas,
                layout::membership::MAX_MEMBERS,
                self.nodes,
                layout::region::MAX_REPLICAS
            )));
        }
        if self.replicas > 1 {
            if !self.lease.is_zero() && self.lease <= self.op_timeout + self.landing_bound() {
                return Err(bad(format!(
                    "lease = {:?} must exceed op_timeout + the landing bound ({:?}): an \
                     operation must fit in one lease",
                    self.lease,
                    self.op_timeout + self.landing_bound()
                )));
            }
            let beat = crate::clock::heartbeat_period(self.max_clock_skew);
            if self.failure_timeout < beat * 4 {
                return Err(bad(format!(
                    "failure_timeout = {:?} must be at least four heartbeat periods ({:?})",
                    self.failure_timeout,
                    beat * 4
                )));
            }
        }
        if self.cluster.is_empty() {
            return Err(bad("cluster must not be empty".into()));
        }
        if self.nodes > ite::MAX_NODES {
            return Err(bad(format!(
                "nodes = {} exceeds the {} nodes an index entry can address",
                self.nodes,
                ite::MAX_NODES
            )));
        }
        if self.hashes > crate::index::MAX_HASHES {
            return Err(bad(format!(
                "hashes = {} is more than {}",
                self.hashes,
                crate::index::MAX_HASHES
            )));
        }
        if self.filter_bits > ite::FILTER_BITS {
            return Err(bad(format!(
                "filter_bits = {} exceeds the {} filter bits of an index entry",
                self.filter_bits,
                ite::FILTER_BITS
            )));
        }
        if self.key_size_max > layout::dte::MAX_KEY_LEN {
            return Err(bad(format!(
                "key_size_max = {} exceeds {} bytes",
                self.key_size_max,
                layout::dte::MAX_KEY_LEN
            )));
        }
        if self.index_slots_per_node.checked_mul(self.nodes).is_none()
            || (self.index_slots_per_node as u64) > (1 << 40)
        {
            return Err(bad("index_slots_per_node is too large".into()));
        }
        Ok(())
    }

    /// Durations, and the time bounds between them
    /// (docs/design.md#time-assumptions).
    fn validate_times(&self) -> Result<(), Error> {
        if self.expiry.is_zero() || self.op_timeout.is_zero() {
            return Err(bad("expiry and op_timeout must be greater than 0".into()));
        }
        for (name, d) in [
            ("expiry", self.expiry),
            ("op_timeout", self.op_timeout),
            ("max_clock_skew", self.max_clock_skew),
            ("attach_timeout", self.attach_timeout),
            (
                "cas_landing_bound",
                self.cas_landing_bound.unwrap_or_default(),
            ),
        ] {
            if d > MAX_DURATION {
                return Err(bad(format!(
                    "{name} = {d:?} is longer than the longest duration allowed ({MAX_DURATION:?})"
                )));
            }
        }
        if self.cas_landing_bound.is_some_and(|d| d.is_zero()) {
            return Err(bad("cas_landing_bound must be greater than 0".into()));
        }
        if self.op_timeout >= self.expiry {
            return Err(bad(format!(
                "op_timeout ({:?}) must be shorter than expiry ({:?})",
                self.op_timeout, self.expiry
            )));
        }
        if self.op_timeout + self.max_clock_skew * 2 >= self.expiry {
            return Err(bad(format!(
                "op_timeout + 2 x max_clock_skew ({:?}) must be shorter than expiry ({:?})",
                self.op_timeout + self.max_clock_skew * 2,
                self.expiry
            )));
        }
        let landing = self.landing_bound();
        if self.op_timeout + landing + self.max_clock_skew >= self.expiry {
            return Err(bad(format!(
                "expiry ({:?}) must be longer than op_timeout + cas_landing_bound + max_clock_skew \
                 ({:?} + {landing:?} + {:?}): a CAS landing later than expiry - op_timeout \
                 after its deadline check could link a recycled slot",
                self.expiry, self.op_timeout, self.max_clock_skew
            )));
        }
        Ok(())
    }

    /// Every size class addressable, and with at least one slot besides
    /// the tombstone reserve.
    fn validate_classes(&self) -> Result<(), Error> {
        if self.tombstone_reserve == 0 {
            return Err(bad(
                "tombstone_reserve must be greater than 0: a DELETE needs a slot for its \
                 tombstone even when the tables are full"
                    .into(),
            ));
        }
        let geometry = Geometry::new(self);
        let classes = geometry.capacities();
        if classes.len() > ite::MAX_CLASSES {
            return Err(bad(format!(
                "{} size classes exceed the {} an index entry can address",
                classes.len(),
                ite::MAX_CLASSES
            )));
        }
        for (class, &bytes) in classes.iter().enumerate() {
            let slots = geometry.slots(class as u8);
            if slots == geometry.reserve(class as u8) {
                return Err(bad(format!(
                    "data_bytes_per_node = {} leaves no slot for size class {} ({} bytes)",
                    self.data_bytes_per_node, class, bytes
                )));
            }
            if slots as u64 > ite::MAX_SLOTS {
                return Err(bad(format!(
                    "size class {class} has {slots} slots, more than an index entry can address"
                )));
            }
        }
        Ok(())
    }

    fn validate_fabric(&self) -> Result<(), Error> {
        match &self.fabric {
            FabricConfig::Verbs { .. } => {
                if crate::fabric::RcTimeouts::within(self.landing_bound()).is_none() {
                    return Err(bad(format!(
                        "fabric = verbs: the landing bound ({:?}; cas_landing_bound, or 4/5 of \
                         expiry - op_timeout - max_clock_skew) is too short for any RDMA \
                         retransmission setting; raise expiry",
                        self.landing_bound()
                    )));
                }
            }
            FabricConfig::Tcp { threads, .. } => {
                if *threads == 0 || *threads > 1024 {
                    return Err(bad(format!(
                        "fabric.threads = {threads} must be between 1 and 1024"
                    )));
                }
            }
            FabricConfig::Local | FabricConfig::Shm { .. } => return Ok(()),
        }
        let mut fabric = self.fabric.clone();
        let Some((peers, rendezvous, secret)) = fabric.meeting_mut() else {
            return Ok(());
        };
        match rendezvous {
            Some(address) if peers.is_empty() => {
                validate_address("fabric.rendezvous", address)?;
            }
            Some(_) => {
                return Err(bad(
                    "fabric.peers and fabric.rendezvous exclude each other: list every \
                     node's address, or let the nodes find each other"
                        .into(),
                ))
            }
            None => self.validate_peers(peers)?,
        }
        if let FabricConfig::Tcp { join, .. } | FabricConfig::Verbs { join, .. } = &self.fabric {
            for (i, address) in join.iter().enumerate() {
                validate_address(&format!("fabric.join[{i}]"), address)?;
            }
        }
        if secret.is_empty() {
            return Err(bad("fabric.secret must not be empty".into()));
        }
        if secret.len() < SHORT_SECRET {
            tracing::warn!(
                "fabric.secret is only {} bytes; use {SHORT_SECRET} or more random bytes",
                secret.len()
            );
        }
        Ok(())
    }

    /// One `host:port` per node (`tcp` and `verbs` fabrics).
    fn validate_peers(&self, peers: &[String]) -> Result<(), Error> {
        if peers.len() != self.nodes {
            return Err(bad(format!(
                "fabric.peers lists {} addresses for {} nodes",
                peers.len(),
                self.nodes
            )));
        }
        for (node, peer) in peers.iter().enumerate() {
            validate_address(&format!("fabric.peers[{node}]"), peer)?;
        }
        Ok(())
    }
}

/// `address` (the setting `name`) must be `host:port`.
fn validate_address(name: &str, address: &str) -> Result<(), Error> {
    let port = address
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    if matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
        Ok(())
    } else {
        Err(bad(format!("{name} = {address:?} is not host:port")))
    }
}
