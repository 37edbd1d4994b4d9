//! Configuration shared by every store and every process of a cluster.
//!
//! `Config` is plain data (serde): a TOML file holds the same keys as the
//! struct, durations in milliseconds. [`Config::validate`] rejects every value
//! that would make the store misbehave, with a message naming the field.

use crate::index::Placement;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod fabric;
mod metrics;
mod sizing;
mod validate;

pub use fabric::FabricConfig;
pub use metrics::MetricsConfig;

/// Value capacity of the smallest size class, in bytes.
pub const MIN_CLASS_BYTES: usize = 256;
/// Value capacity of the largest size class there can be, in bytes (1 GiB).
pub const MAX_VALUE_SIZE: usize = 1 << 30;

/// Switches for each optimisation of the Nessie paper, so that the harness
/// can reproduce the paper's breakdown. All on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one switch per optimisation of the paper"
)]
pub struct Optimizations {
    /// Filter bits in ITEs: skip DTE reads of entries whose bits differ.
    pub filter: bool,
    /// LRU cache of remote DTEs keyed by ITE value.
    pub cache: bool,
    /// Readers of an in-progress entry return its `prev` version (not
    /// with `replicas` > 1: docs/replication.md#rp6b).
    pub prev_versions: bool,
    /// Read header, key and value of a DTE in one READ when it fits.
    pub multi_read: bool,
    /// Read all candidate ITEs in one batch (off: one READ at a time).
    pub batched_reads: bool,
    /// Location hints: a GET reads the entry its client last saw linked
    /// for the key in the same batch as the key's ITEs, where remote reads
    /// cost more than local ones (docs/design.md#location-hints). Needs
    /// `batched_reads`.
    pub hints: bool,
}

impl Default for Optimizations {
    fn default() -> Self {
        Optimizations {
            filter: true,
            cache: true,
            prev_versions: true,
            multi_read: true,
            batched_reads: true,
            hints: true,
        }
    }
}

impl Optimizations {
    /// Every switch off: the paper's unoptimised protocol.
    #[must_use]
    pub fn none() -> Self {
        Optimizations {
            filter: false,
            cache: false,
            prev_versions: false,
            multi_read: false,
            batched_reads: false,
            hints: false,
        }
    }
}

/// Secrets shorter than this get a warning.
const SHORT_SECRET: usize = 16;

/// Configuration of a cluster. Every process of a cluster must use the same
/// values (region sizes are checked when peers attach).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Name of the cluster; region files and headers carry it.
    pub cluster: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Copies of every entry and index slot, on consecutive nodes (1: no
    /// replication). With r > 1 there must be at least three nodes and r of
    /// them; memory per node is the sizing rule's times r
    /// (docs/replication.md#placement).
    pub replicas: usize,
    /// ITEs per node.
    pub index_slots_per_node: usize,
    /// Cuckoo hash functions (candidate slots per key).
    pub hashes: usize,
    /// Where a key's candidate slots lie: spread over all nodes (the
    /// paper's layout, the default) or all in one node's index table (one
    /// node to read from per pass). See [`Placement`].
    pub placement: Placement,
    /// Filter bits per ITE (at most 8).
    pub filter_bits: u32,
    /// Largest key, bytes.
    pub key_size_max: usize,
    /// Largest value, bytes (the largest size class fits it).
    pub value_size_max: usize,
    /// Memory of all data tables of a node, bytes, split equally among
    /// the size classes.
    ///
    /// **Sizing rule.** A replaced or deleted entry's slot may be reused
    /// only [`Config::reuse_window`] after it was unlinked (`expiry +
    /// max_clock_skew`, and the clock watch's word three heartbeat periods
    /// later), so each size class of a node needs room for its live
    /// entries plus every entry the node writes in that class during one
    /// such period: `slots ≥ live + peak PUTs per second × reuse window`,
    /// each slot taking [`Config::class_slot_bytes`] (header, largest key,
    /// the class's power-of-two capacity: up to twice the value for values
    /// just above a power of two). Since every class gets an equal share,
    /// `data_bytes_per_node` is the number of classes times the largest
    /// class's need; [`Config::data_bytes_for`] computes it for a workload
    /// of one value size. Memory is touched only when used (the region
    /// files and mappings are sparse), so the idle classes' shares cost
    /// address space, not memory. A table too small for its load makes
    /// PUTs fail with [`crate::Error::DataTableFull`].
    pub data_bytes_per_node: usize,
    /// Slots of the smallest size class (where tombstones go) that only
    /// DELETEs may take, added to that class's share of
    /// `data_bytes_per_node`. A DELETE needs a slot for its tombstone
    /// before it can free anything; without a reserve, a node whose
    /// tables hold only live entries could never be emptied.
    ///
    /// **Sizing rule.** Every tombstone holds its slot from its DELETE's
    /// start until one [`Config::reuse_window`] after it was unlinked, and
    /// an attempt that aborts holds one as long, so while the rest of the
    /// class is full the reserve must cover
    /// `DELETE attempts per second × (op_timeout + reuse window)`;
    /// [`Config::tombstone_reserve_for`] computes it. The default, 1024,
    /// covers about 670 DELETEs per second at the default times (see
    /// `docs/design.md#the-tombstone-reserve`).
    pub tombstone_reserve: usize,
    /// DTE expiry period.
    #[serde(with = "millis")]
    pub expiry: Duration,
    /// Per-operation deadline.
    #[serde(with = "millis")]
    pub op_timeout: Duration,
    /// Largest clock difference between nodes the protocol tolerates.
    #[serde(with = "millis")]
    pub max_clock_skew: Duration,
    /// With replicas: how long a renewal of a node's lease on the current
    /// view lets it serve; it renews every quarter of it or of
    /// `failure_timeout`, whichever is shorter, and a decided
    /// view is activated this plus the landing bound and the skew after
    /// it was observed (docs/replication.md#views-leases-and-the-drain).
    /// More than `op_timeout` plus the landing bound; 0 (the default)
    /// takes twice that, and at least 2 s ([`Config::effective_lease`]).
    #[serde(with = "millis")]
    pub lease: Duration,
    /// With replicas: a member whose heartbeat has not moved for this long
    /// is suspected lost (docs/replication.md#failure-detection).
    #[serde(with = "millis")]
    pub failure_timeout: Duration,
    /// LRU capacity per client.
    pub cache_entries: usize,
    /// Keys per client whose last linked ITE value it keeps as a location
    /// hint (docs/design.md#location-hints): about 40 bytes each, no value
    /// bytes. 0 turns hints off.
    pub hint_entries: usize,
    /// Recursive MIGRATE limit.
    pub max_migrate_depth: usize,
    /// Optimisation switches.
    pub optimizations: Optimizations,
    /// Fabric backend.
    pub fabric: FabricConfig,
    /// How long a starting node waits for its peers' regions.
    #[serde(with = "millis")]
    pub attach_timeout: Duration,
    /// Server worker threads per node (server-driven and hybrid baselines).
    pub server_workers: usize,
    /// When a GET verifies the checksum of the committed entry it returns.
    pub verify_checksums: ChecksumPolicy,
    /// The landing bound Δ₀: how long after an operation's deadline check
    /// its CAS may still take effect at the target (a stall before posting
    /// it, queues, the network, retransmissions). `None` (the default):
    /// four fifths of `expiry − op_timeout − max_clock_skew`. See
    /// [`Config::landing_bound`].
    #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
    pub cas_landing_bound: Option<Duration>,
    /// Each node's Prometheus endpoint (`None`, the default: off). See
    /// [`MetricsConfig`] and `docs/operations.md#metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsConfig>,
}

/// The longest duration a configuration may hold (a day): bounds every
/// timestamp sum (`now + expiry`) far below `u64` microseconds.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A duration in whole microseconds, saturating (validated durations are at
/// most [`MAX_DURATION`]).
#[must_use]
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// When readers verify the checksum of a committed entry.
///
/// A committed DTE never changes, and its slot can be reused only `expiry`
/// after someone unlinked it — after the reader's index read that found it
/// linked. A READ that completes within that window cannot be torn, so
/// verifying it only guards against memory corruption. A reader that was
/// stalled past half the expiry period verifies under either policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumPolicy {
    /// Verify every entry returned (also catches memory corruption, at the
    /// cost of hashing every value).
    Always,
    /// Verify only when the read may have raced a slot's reuse (the reader
    /// stalled for `expiry / 2` or more since its index read).
    #[default]
    AfterStall,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster: "nessie".to_owned(),
            nodes: 3,
            replicas: 1,
            index_slots_per_node: 1 << 20,
            hashes: 3,
            placement: Placement::default(),
            filter_bits: 8,
            key_size_max: 128,
            value_size_max: 128 << 10,
            data_bytes_per_node: 256 << 20,
            tombstone_reserve: 1024,
            expiry: Duration::from_secs(1),
            op_timeout: Duration::from_millis(500),
            lease: Duration::ZERO,
            failure_timeout: Duration::from_secs(1),
            max_clock_skew: Duration::from_millis(10),
            cache_entries: 4096,
            hint_entries: 1 << 16,
            max_migrate_depth: 4,
            optimizations: Optimizations::default(),
            fabric: FabricConfig::Local,
            attach_timeout: Duration::from_secs(30),
            server_workers: 1,
            verify_checksums: ChecksumPolicy::default(),
            cas_landing_bound: None,
            metrics: None,
        }
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod opt_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    #[expect(clippy::ref_option, reason = "the signature serde's `with` expects")]
    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Some(Duration::from_millis(u64::deserialize(d)?)))
    }
}

/// Whether users other than the owner may read the file at `path`.
#[must_use]
pub(crate) fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o044 != 0)
}

fn bad(msg: String) -> Error {
    Error::Config(msg)
}

impl Config {
    /// Parses a TOML document (unknown keys are errors) and validates it.
    ///
    /// # Errors
    /// [`Error::Config`] naming the offending key or value.
    pub fn from_toml(text: &str) -> Result<Config, Error> {
        let config: Config = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file.
    ///
    /// # Errors
    /// [`Error::Config`] if the file cannot be read or is invalid.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let text =
            std::fs::read_to_string(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        let config = Self::from_toml(&text).map_err(|e| match e {
            Error::Config(m) => bad(format!("{}: {m}", path.display())),
            other => other,
        })?;
        if config.has_secret() && readable_by_others(path) {
            tracing::warn!(
                "{}: holds the cluster secret but is readable by other users (chmod 600 it)",
                path.display()
            );
        }
        Ok(config)
    }

    /// Whether the configuration carries a secret (the `tcp` or `verbs`
    /// fabric's).
    #[must_use]
    pub fn has_secret(&self) -> bool {
        self.fabric.secret().is_some_and(|s| !s.is_empty())
    }

    /// The configuration as TOML.
    ///
    /// # Errors
    /// [`Error::Config`] if serialisation fails (it does not for valid values).
    pub fn to_toml(&self) -> Result<String, Error> {
        toml::to_string(self).map_err(|e| bad(e.to_string()))
    }

    /// The lease a node of a replicated cluster holds on its view: `lease`,
    /// or when it is 0, twice `op_timeout` plus the landing bound and at
    /// least 2 s (docs/replication.md#views-leases-and-the-drain).
    #[must_use]
    pub fn effective_lease(&self) -> Duration {
        if self.lease.is_zero() {
            ((self.op_timeout + self.landing_bound()) * 2).max(Duration::from_secs(2))
        } else {
            self.lease
        }
    }

    /// The landing bound Δ₀ (docs/design.md#the-landing-bound): from an
    /// operation's deadline check to its CAS taking effect at the target, at
    /// most this long passes. `validate()` demands `expiry > op_timeout + Δ₀ +
    /// max_clock_skew`, so that a CAS lands before the slots its operation saw
    /// linked can be reused.
    ///
    /// Who enforces it: the `tcp` fabric stamps every CAS with `land_by =
    /// check + Δ₀` and the serving node refuses a CAS it would execute later
    /// (the operation gets `Timeout`, the CAS never happened); the `verbs`
    /// fabric sizes the queue pairs' ACK timeout and retry count so that a
    /// CAS's retransmissions end within Δ₀; on `shm` and `local` the CAS is
    /// the caller's own instruction and Δ₀ bounds only how long a thread may
    /// stall between the check and the CAS. Every fabric reads the clock after
    /// each CAS and counts and logs a breach.
    #[must_use]
    pub fn landing_bound(&self) -> Duration {
        self.cas_landing_bound.unwrap_or_else(|| {
            self.expiry
                .saturating_sub(self.op_timeout)
                .saturating_sub(self.max_clock_skew)
                * 4
                / 5
        })
    }

    /// Directory of the shared-memory region files.
    #[must_use]
    pub fn shm_dir(&self) -> PathBuf {
        match &self.fabric {
            FabricConfig::Shm { dir: Some(dir) } => dir.clone(),
            _ => PathBuf::from(format!("/dev/shm/nessie-{}", self.cluster)),
        }
    }

    /// A 64-bit identity of the cluster, derived from its name and from
    /// what decides which index slots a key may use: `hashes`, `placement`
    /// and `filter_bits`. Nodes that disagreed on those would look for a
    /// key in different slots, or skip its entry, and miss each other's
    /// writes without an error; with the identity they refuse each other
    /// at attach, as nodes of two clusters do. (The region sizes, which
    /// the other fields decide, are compared at attach on their own.)
    #[must_use]
    pub fn cluster_id(&self) -> u64 {
        let placement: u8 = match self.placement {
            Placement::Spread => 0,
            Placement::OneNode => 1,
        };
        let mut bytes = self.cluster.as_bytes().to_vec();
        bytes.push(0);
        bytes.extend_from_slice(&(self.hashes as u64).to_le_bytes());
        bytes.extend_from_slice(&self.filter_bits.to_le_bytes());
        bytes.push(placement);
        twox_hash::XxHash3_64::oneshot(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(c: &Config) -> String {
        match c.validate() {
            Err(Error::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn default_is_valid_and_round_trips_through_toml() {
        let c = Config::default();
        c.validate().unwrap();
        let text = c.to_toml().unwrap();
        assert_eq!(Config::from_toml(&text).unwrap(), c);
    }

    #[test]
    fn the_cluster_id_covers_the_name_and_where_keys_live_and_nothing_else() {
        let base = Config::default();
        let id = base.cluster_id();
        let differs: [fn(&mut Config); 4] = [
            |c| c.cluster.push('x'),
            |c| c.hashes = 2,
            |c| c.filter_bits = 4,
            |c| c.placement = Placement::OneNode,
        ];
        for change in differs {
            let mut c = base.clone();
            change(&mut c);
            assert_ne!(c.cluster_id(), id, "{c:?}");
        }
        let same = Config {
            op_timeout: base.op_timeout * 2,
            cache_entries: 7,
            ..base.clone()
        };
        assert_eq!(same.cluster_id(), id);
        let text = Config {
            placement: Placement::OneNode,
            ..base
        }
        .to_toml()
        .unwrap();
        assert!(text.contains("placement = \"one_node\""), "{text}");
    }

    #[test]
    fn toml_uses_milliseconds_and_names() {
        let c = Config::from_toml(
            "nodes = 5\nexpiry = 2000\nop_timeout = 300\n[optimizations]\ncache = false\n[fabric]\nkind = \"shm\"\ndir = \"/tmp/x\"\n",
        )
        .unwrap();
        assert_eq!(c.nodes, 5);
        assert_eq!(c.expiry, Duration::from_secs(2));
        assert!(!c.optimizations.cache && c.optimizations.filter);
        assert_eq!(c.shm_dir(), PathBuf::from("/tmp/x"));
    }

    #[test]
    fn every_bad_value_is_named() {
        type Mutation = Box<dyn Fn(&mut Config)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|c| c.nodes = 0), "nodes"),
            (
                Box::new(|c| c.index_slots_per_node = 0),
                "index_slots_per_node",
            ),
            (Box::new(|c| c.hashes = 0), "hashes"),
            (Box::new(|c| c.key_size_max = 0), "key_size_max"),
            (Box::new(|c| c.value_size_max = 0), "value_size_max"),
            (
                Box::new(|c| c.data_bytes_per_node = 0),
                "data_bytes_per_node",
            ),
            (Box::new(|c| c.nodes = 5000), "nodes"),
            (Box::new(|c| c.filter_bits = 9), "filter_bits"),
            (Box::new(|c| c.op_timeout = c.expiry), "op_timeout"),
            (
                Box::new(|c| c.value_size_max = (1 << 30) + 1),
                "value_size_max",
            ),
            (
                Box::new(|c| c.data_bytes_per_node = 4096),
                "data_bytes_per_node",
            ),
        ];
        for (mutate, field) in cases {
            let mut c = Config::default();
            mutate(&mut c);
            let m = msg(&c);
            assert!(m.contains(field), "message {m:?} should name {field}");
        }
    }

    #[test]
    fn tcp_fabric_is_parsed_and_checked() {
        let c = Config::from_toml(
            "nodes = 2\n[fabric]\nkind = \"tcp\"\npeers = [\"10.0.0.1:7000\", \"[::1]:7001\"]\nsecret = \"0123456789abcdef\"\n",
        )
        .unwrap();
        assert_eq!(
            c.fabric,
            FabricConfig::Tcp {
                peers: vec!["10.0.0.1:7000".into(), "[::1]:7001".into()],
                rendezvous: None,
                join: Vec::new(),
                secret: "0123456789abcdef".into(),
                threads: 4,
            }
        );
        let tcp = |peers: &[&str], secret: &str, threads| Config {
            nodes: 2,
            fabric: FabricConfig::Tcp {
                peers: peers.iter().map(|p| (*p).to_owned()).collect(),
                rendezvous: None,
                join: Vec::new(),
                secret: secret.into(),
                threads,
            },
            ..Config::default()
        };
        for (c, field) in [
            (tcp(&["a:1"], "s", 1), "fabric.peers"),
            (tcp(&["a:1", "b"], "s", 1), "fabric.peers[1]"),
            (tcp(&["a:1", "b:99999"], "s", 1), "fabric.peers[1]"),
            (tcp(&["a:1", "b:2"], "", 1), "fabric.secret"),
            (tcp(&["a:1", "b:2"], "s", 0), "fabric.threads"),
        ] {
            let m = msg(&c);
            assert!(m.contains(field), "message {m:?} should name {field}");
        }
        tcp(&["a:1", "b:2"], "s", 1).validate().unwrap();
        let shown = format!("{:?}", tcp(&["a:1", "b:2"], "hunter2-hunter2", 1));
        assert!(
            !shown.contains("hunter2") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn secrets_in_world_readable_files_are_noticed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let config = Config {
            fabric: FabricConfig::Tcp {
                peers: vec![
                    "127.0.0.1:1".into(),
                    "127.0.0.1:2".into(),
                    "127.0.0.1:3".into(),
                ],
                rendezvous: None,
                join: Vec::new(),
                secret: "s3cret-s3cret-s3cret".into(),
                threads: 2,
            },
            ..Config::default()
        };
        std::fs::write(&path, config.to_toml().unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(config.has_secret() && readable_by_others(&path));
        assert_eq!(
            Config::from_file(&path).unwrap(),
            config,
            "a warning, not an error"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!readable_by_others(&path));
        assert!(!Config::default().has_secret());
    }

    #[test]
    fn verbs_fabric_is_parsed_and_checked() {
        let c = Config::from_toml(
            "nodes = 2\n[fabric]\nkind = \"verbs\"\ndevice = \"rxe0\"\nsecret = \"0123456789abcdef\"\npeers = [\"10.0.0.1:7000\", \"[::1]:7001\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.fabric,
            FabricConfig::Verbs {
                device: Some("rxe0".into()),
                peers: vec!["10.0.0.1:7000".into(), "[::1]:7001".into()],
                rendezvous: None,
                join: Vec::new(),
                secret: "0123456789abcdef".into(),
                gid_index: None,
            }
        );
        assert!(c.has_secret());
        assert!(
            !format!("{c:?}").contains("0123456789abcdef"),
            "Debug hides the secret"
        );
        assert_eq!(Config::from_toml(&c.to_toml().unwrap()).unwrap(), c);
        let verbs = |peers: &[&str]| Config {
            nodes: 2,
            fabric: FabricConfig::Verbs {
                device: None,
                peers: peers.iter().map(|p| (*p).to_owned()).collect(),
                rendezvous: None,
                join: Vec::new(),
                secret: "0123456789abcdef".into(),
                gid_index: Some(1),
            },
            ..Config::default()
        };
        for (c, field) in [
            (verbs(&["a:1"]), "fabric.peers"),
            (verbs(&["a:1", "b"]), "fabric.peers[1]"),
            (verbs(&["a:1", ":2"]), "fabric.peers[1]"),
            (verbs(&["a:1", "b:70000"]), "fabric.peers[1]"),
        ] {
            let m = msg(&c);
            assert!(m.contains(field), "message {m:?} should name {field}");
        }
        verbs(&["a:1", "b:2"]).validate().unwrap();
        let mut no_secret = verbs(&["a:1", "b:2"]);
        if let Some((_, _, secret)) = no_secret.fabric.meeting_mut() {
            secret.clear();
        }
        assert!(msg(&no_secret).contains("fabric.secret"));
        let mut meet = verbs(&[]);
        if let Some((_, rendezvous, _)) = meet.fabric.meeting_mut() {
            *rendezvous = Some("n0:20000".into());
        }
        meet.validate().unwrap();
        if let FabricConfig::Verbs { join, .. } = &mut meet.fabric {
            join.push("n1:20000".into());
        }
        meet.validate().unwrap();
        if let FabricConfig::Verbs { join, .. } = &mut meet.fabric {
            join.push("n2".into());
        }
        assert!(msg(&meet).contains("fabric.join[1]"), "{}", msg(&meet));
        if let FabricConfig::Verbs { join, .. } = &mut meet.fabric {
            join.pop();
        }
        let mut both = verbs(&["a:1", "b:2"]);
        if let Some((_, rendezvous, _)) = both.fabric.meeting_mut() {
            *rendezvous = Some("n0:20000".into());
        }
        assert!(msg(&both).contains("exclude each other"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = Config::from_toml("nodes = 3\nnoeds = 4\n").unwrap_err();
        assert!(e.to_string().contains("noeds"), "{e}");
    }

    #[test]
    fn the_sizing_rule_counts_live_entries_and_one_window_of_writes() {
        // A window of 975 + 10 ms, and 15 ms (three heartbeat periods of
        // 5 ms) for the clock watch's word: 1 s.
        let c = Config {
            expiry: Duration::from_millis(975),
            max_clock_skew: Duration::from_millis(10),
            ..Config::default()
        };
        assert_eq!(c.reuse_window(), Duration::from_secs(1));
        let (class, classes) = (c.class_for(16 << 10).unwrap(), c.size_classes().len());
        let per_slot = c.class_slot_bytes(class) * classes;
        // 1000 live entries and 500 PUTs/s over a 1 s window: 1500 slots.
        assert_eq!(
            c.data_bytes_for(16 << 10, 1000, 500.0),
            Some(1500 * per_slot)
        );
        let sized = Config {
            data_bytes_per_node: 1500 * per_slot,
            ..c.clone()
        };
        assert!(sized.class_slots(class) >= 1500);
        assert_eq!(c.data_bytes_for(16 << 10, 0, 0.0), Some(0));
        // The README's example, at the defaults.
        let d = Config::default();
        assert_eq!(
            (d.class_slot_bytes(6), d.size_classes().len()),
            (16_568, 10)
        );
        assert_eq!(
            d.data_bytes_for(16 << 10, 100_000, 20_000.0),
            Some(120_500 * 16_568 * 10)
        );
        assert_eq!(c.data_bytes_for(c.value_size_max + 1, 1, 1.0), None);
    }

    #[test]
    fn size_classes_are_powers_of_two_up_to_the_largest_value() {
        let c = Config::default();
        let classes = c.size_classes();
        assert_eq!(classes[0], 256);
        assert!(classes.windows(2).all(|w| w[1] == 2 * w[0]));
        assert_eq!(*classes.last().unwrap(), 128 << 10);
        assert_eq!(c.class_for(16 << 10), Some(6));
        assert_eq!(c.class_for(16 << 10 | 1), Some(7));
        assert_eq!(c.class_for(0), Some(0));
        assert_eq!(c.class_for(c.value_size_max + 1), None);
        assert_eq!(c.class_slot_bytes(0), 56 + 128 + 256);
    }

    /// The recycler looks ten times per expiry, and at least once a
    /// millisecond: stamps expire a tenth of an expiry apart at most
    /// before a scan sees them.
    #[test]
    fn the_recycler_looks_ten_times_per_expiry() {
        let at = |ms| Config {
            expiry: Duration::from_millis(ms),
            ..Config::default()
        };
        assert_eq!(at(1000).recycler_period(), Duration::from_millis(100));
        assert_eq!(at(5).recycler_period(), Duration::from_millis(1));
    }
}
