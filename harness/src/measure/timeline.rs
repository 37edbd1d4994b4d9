//! Time series of a run whose cluster changes under it (`failover`).
//!
//! Every worker sorts what each of its operations ended with into a time
//! bucket ([`Slice`]): successes with their latency, refusals of a
//! replicated store that was changing its view (`ViewChanging`) or had no
//! quorum (`NoQuorum`), and failures. Buckets are numbered by the wall
//! clock (µs since the Unix epoch divided by the bucket's width), so the
//! buckets of different node processes of one host — a replacement that
//! started later included — line up, and the harness adds them up per
//! bucket ([`merge`]).

use super::record::Hist;
use crate::workload::OpKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

/// Distinct error messages a node keeps (the rest count as "other").
const MAX_ERROR_KINDS: usize = 16;

/// What ended in one time bucket, on one node or merged.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Slice {
    /// GETs that succeeded.
    pub get_ok: u64,
    /// PUTs that succeeded.
    pub put_ok: u64,
    /// Operations refused with `ViewChanging` (nothing was done).
    pub view_changing: u64,
    /// Operations refused with `NoQuorum` (nothing was done).
    pub no_quorum: u64,
    /// Operations that failed otherwise (a timeout, a fabric error, ...).
    pub failed: u64,
    /// The earliest `ViewChanging` of the bucket, µs since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_view_changing_us: Option<u64>,
    /// Latency of the successful GETs, ns.
    pub get_latency_ns: Hist,
    /// Latency of the successful PUTs, ns.
    pub put_latency_ns: Hist,
}

impl Default for Slice {
    fn default() -> Self {
        Slice {
            get_ok: 0,
            put_ok: 0,
            view_changing: 0,
            no_quorum: 0,
            failed: 0,
            first_view_changing_us: None,
            get_latency_ns: Hist::series_latency(),
            put_latency_ns: Hist::series_latency(),
        }
    }
}

impl Slice {
    /// Successful operations.
    #[must_use]
    pub fn ok(&self) -> u64 {
        self.get_ok + self.put_ok
    }

    /// Refused operations (`ViewChanging` and `NoQuorum`).
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.view_changing + self.no_quorum
    }

    /// The latency histogram of `kind`.
    #[must_use]
    pub fn latency(&self, kind: OpKind) -> &Hist {
        match kind {
            OpKind::Get => &self.get_latency_ns,
            OpKind::Put => &self.put_latency_ns,
        }
    }

    /// Quantile `q` of `kind`'s latency, µs (`None` without successes).
    #[must_use]
    pub fn quantile_us(&self, kind: OpKind, q: f64) -> Option<f64> {
        let h = &self.latency(kind).0;
        (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Slice) {
        self.get_ok += o.get_ok;
        self.put_ok += o.put_ok;
        self.view_changing += o.view_changing;
        self.no_quorum += o.no_quorum;
        self.failed += o.failed;
        self.first_view_changing_us = match (self.first_view_changing_us, o.first_view_changing_us)
        {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.get_latency_ns.add(&o.get_latency_ns);
        self.put_latency_ns.add(&o.put_latency_ns);
    }
}

/// How one operation ended.
#[derive(Clone, Copy, Debug)]
pub enum Ended<'a> {
    /// It succeeded after this long.
    Ok(OpKind, Duration),
    /// Refused: the cluster was changing its view.
    ViewChanging,
    /// Refused: the node had no quorum.
    NoQuorum,
    /// Failed with this error.
    Failed(OpKind, &'a nessie::Error),
}

impl<'a> Ended<'a> {
    /// How an operation of `kind` that took `latency` and returned
    /// `result` ended.
    #[must_use]
    pub fn of<T>(kind: OpKind, latency: Duration, result: &'a Result<T, nessie::Error>) -> Self {
        match result {
            Ok(_) => Ended::Ok(kind, latency),
            Err(nessie::Error::ViewChanging { .. }) => Ended::ViewChanging,
            Err(nessie::Error::NoQuorum { .. }) => Ended::NoQuorum,
            Err(e) => Ended::Failed(kind, e),
        }
    }

    /// Whether the operation succeeded.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(self, Ended::Ok(..))
    }
}

/// One worker's (or a node's) buckets.
#[derive(Clone, Debug)]
pub struct SliceRecorder {
    bucket_us: u64,
    slices: BTreeMap<u64, Slice>,
    errors: BTreeMap<String, u64>,
}

impl SliceRecorder {
    /// Empty buckets `bucket` wide (at least 1 µs).
    #[must_use]
    pub fn new(bucket: Duration) -> Self {
        SliceRecorder {
            bucket_us: u64::try_from(bucket.as_micros()).unwrap_or(u64::MAX).max(1),
            slices: BTreeMap::new(),
            errors: BTreeMap::new(),
        }
    }

    /// Records an operation that ended at `at_us` (µs since the Unix
    /// epoch).
    pub fn record(&mut self, at_us: u64, ended: Ended<'_>) {
        let s = self.slices.entry(at_us / self.bucket_us).or_default();
        match ended {
            Ended::Ok(kind, latency) => {
                let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
                match kind {
                    OpKind::Get => {
                        s.get_ok += 1;
                        s.get_latency_ns.0.saturating_record(ns);
                    }
                    OpKind::Put => {
                        s.put_ok += 1;
                        s.put_latency_ns.0.saturating_record(ns);
                    }
                }
            }
            Ended::ViewChanging => {
                s.view_changing += 1;
                s.first_view_changing_us =
                    Some(s.first_view_changing_us.map_or(at_us, |f| f.min(at_us)));
            }
            Ended::NoQuorum => s.no_quorum += 1,
            Ended::Failed(kind, error) => {
                s.failed += 1;
                let msg = format!("{} {error}", kind.name());
                let key = if self.errors.len() < MAX_ERROR_KINDS || self.errors.contains_key(&msg) {
                    msg
                } else {
                    "other errors".to_owned()
                };
                *self.errors.entry(key).or_default() += 1;
            }
        }
    }

    /// Adds `o`'s buckets and errors.
    pub fn add(&mut self, o: &SliceRecorder) {
        for (k, s) in &o.slices {
            self.slices.entry(*k).or_default().add(s);
        }
        for (m, n) in &o.errors {
            *self.errors.entry(m.clone()).or_default() += n;
        }
    }

    /// The timeline of node `node` (`replacement`: the process that
    /// rejoined in its place).
    #[must_use]
    pub fn into_timeline(self, node: usize, replacement: bool) -> NodeTimeline {
        NodeTimeline {
            node,
            replacement,
            bucket_us: self.bucket_us,
            slices: self.slices,
            errors: self.errors,
        }
    }
}

/// What one node process measured as a time series.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeTimeline {
    /// Node id.
    pub node: usize,
    /// Whether this is the replacement that rejoined in a lost node's place.
    pub replacement: bool,
    /// Width of a bucket, µs.
    pub bucket_us: u64,
    /// The buckets anything ended in, by number (µs since the Unix epoch
    /// divided by `bucket_us`); a list of pairs in JSON (an event line's
    /// tag makes serde buffer it, and a buffered map has string keys).
    #[serde(with = "pairs")]
    pub slices: BTreeMap<u64, Slice>,
    /// Error messages of failed operations and how often each occurred.
    pub errors: BTreeMap<String, u64>,
}

/// A map of buckets as a list of `[number, bucket]` pairs.
mod pairs {
    use super::Slice;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;

    pub(super) fn serialize<S: Serializer>(
        m: &BTreeMap<u64, Slice>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(m)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<u64, Slice>, D::Error> {
        Ok(Vec::<(u64, Slice)>::deserialize(d)?.into_iter().collect())
    }
}

/// The nodes' buckets added up, by number (`timelines` of one bucket
/// width).
#[must_use]
pub fn merge(timelines: &[NodeTimeline]) -> BTreeMap<u64, Slice> {
    let mut all: BTreeMap<u64, Slice> = BTreeMap::new();
    for t in timelines {
        for (k, s) in &t.slices {
            all.entry(*k).or_default().add(s);
        }
    }
    all
}

/// What a replacement's restore did (`nessie::Node::rejoin`), on its
/// wall clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// The node it replaced.
    pub node: usize,
    /// When it called `Node::rejoin`, µs since the Unix epoch.
    pub called_us: u64,
    /// When `Node::rejoin` returned: the node was active with every copy
    /// restored, µs since the Unix epoch.
    pub returned_us: u64,
    /// Index slots copied.
    pub index_slots: u64,
    /// Data slots copied (every slot of every table, used or not).
    pub data_slots: u64,
    /// Bytes read from the primaries (each chunk twice: copy, then verify).
    pub bytes_read: u64,
    /// Chunks copied again because a slot changed during its copy.
    pub recopies: u64,
}

impl RestoreReport {
    /// The report of a restore between `called_us` and `returned_us`.
    #[must_use]
    pub fn new(node: usize, called_us: u64, returned_us: u64, f: &nessie::RestoreFigures) -> Self {
        RestoreReport {
            node,
            called_us,
            returned_us,
            index_slots: f.index_slots,
            data_slots: f.data_slots,
            bytes_read: f.bytes_read,
            recopies: f.recopies,
        }
    }
}

/// µs since the Unix epoch now.
#[must_use]
pub fn unix_now_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Converts instants of this process to µs since the Unix epoch, from one
/// reading of both clocks (a worker reads the monotonic clock only).
#[derive(Clone, Copy, Debug)]
pub struct UnixClock {
    instant: Instant,
    unix_us: u64,
}

impl UnixClock {
    /// Both clocks, read now.
    #[must_use]
    pub fn now() -> Self {
        UnixClock {
            instant: Instant::now(),
            unix_us: unix_now_us(),
        }
    }

    /// `at` in µs since the Unix epoch.
    #[must_use]
    pub fn unix_us(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.instant);
        self.unix_us + u64::try_from(since.as_micros()).unwrap_or(u64::MAX / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_land_in_their_buckets_and_merge() {
        let mut a = SliceRecorder::new(Duration::from_millis(100));
        let ms = |m: u64| 1_000_000_000 + m * 1000;
        a.record(ms(10), Ended::Ok(OpKind::Get, Duration::from_micros(5)));
        a.record(ms(20), Ended::Ok(OpKind::Put, Duration::from_micros(50)));
        let timeout = nessie::Error::Timeout;
        a.record(ms(150), Ended::Failed(OpKind::Get, &timeout));
        let mut b = SliceRecorder::new(Duration::from_millis(100));
        b.record(ms(160), Ended::ViewChanging);
        b.record(ms(120), Ended::ViewChanging);
        b.record(ms(130), Ended::NoQuorum);
        let mut node = a.clone();
        node.add(&b);
        let t = node.into_timeline(1, false);
        assert_eq!(t.slices.len(), 2);
        let first = &t.slices[&(ms(0) / 100_000)];
        assert_eq!((first.get_ok, first.put_ok, first.ok()), (1, 1, 2));
        assert_eq!(
            first.quantile_us(OpKind::Get, 0.5).map(f64::round),
            Some(5.0)
        );
        let second = &t.slices[&(ms(100) / 100_000)];
        assert_eq!((second.refused(), second.failed), (3, 1));
        assert_eq!(second.first_view_changing_us, Some(ms(120)));
        assert_eq!(t.errors.values().sum::<u64>(), 1);
        // Through an event line and merged with another node's.
        let line = serde_json::to_string(&crate::protocol::NodeEvent::Timeline {
            timeline: Box::new(t),
        })
        .unwrap();
        let crate::protocol::NodeEvent::Timeline { timeline } =
            serde_json::from_str(&line).unwrap()
        else {
            panic!("{line}")
        };
        let back = *timeline;
        let other = a.into_timeline(2, true);
        let merged = merge(&[back, other]);
        assert_eq!(merged[&(ms(0) / 100_000)].ok(), 4);
        assert_eq!(merged[&(ms(100) / 100_000)].failed, 2);
        assert_eq!(
            merged[&(ms(100) / 100_000)].first_view_changing_us,
            Some(ms(120))
        );
    }

    #[test]
    fn instants_become_unix_times() {
        let c = UnixClock::now();
        let later = c.instant + Duration::from_millis(250);
        assert_eq!(c.unix_us(later) - c.unix_us, 250_000);
        assert_eq!(c.unix_us(c.instant), c.unix_us);
    }
}
