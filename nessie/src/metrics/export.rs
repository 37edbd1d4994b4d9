//! A node's figures as Prometheus metrics, computed at each scrape
//! (a `prometheus_client` collector). Every name starts with `nessie_` and
//! every series has a `node` label.

use super::{Figures, KINDS, LATENCY_BUCKETS};
use crate::fabric::{NodeId, TcpFabric, VerbCounts};
use crate::runtime::store::Shared;
use crate::stats::{OpKind, OpStats, RetryCause};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::Arc;

/// Labels of one series.
type Labels = Vec<(&'static str, String)>;
/// The series of one family.
type Series = Vec<(Labels, f64)>;

/// The collector of one node.
pub(crate) struct NodeCollector {
    pub(crate) shared: Arc<Shared>,
    pub(crate) node: NodeId,
    pub(crate) tcp: Option<Arc<TcpFabric>>,
}

impl fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCollector")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

fn op_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Get => "get",
        OpKind::Put => "put",
        OpKind::Delete => "delete",
    }
}

/// Writes one metric family of `kind` with its series.
fn family<V: Copy + Into<f64>>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    series: &[(Labels, V)],
) -> fmt::Result {
    let mut metric = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        let mut m = metric.encode_family(labels)?;
        let v: f64 = (*value).into();
        match kind {
            MetricType::Counter => m.encode_counter::<NoLabelSet, f64, f64>(&v, None)?,
            _ => m.encode_gauge(&v)?,
        }
    }
    Ok(())
}

/// Encoders of the metric families, each with its node label.
struct Families<'a, 'b> {
    enc: &'a mut DescriptorEncoder<'b>,
    node: String,
}

impl Families<'_, '_> {
    fn labels(&self, more: &[(&'static str, String)]) -> Labels {
        let mut l = vec![("node", self.node.clone())];
        l.extend_from_slice(more);
        l
    }

    /// A counter family with one series per operation kind.
    fn per_op(
        &mut self,
        name: &str,
        help: &str,
        figures: &Figures,
        value: impl Fn(&OpStats) -> f64,
    ) -> fmt::Result {
        let series: Vec<(Labels, f64)> = KINDS
            .iter()
            .map(|&k| {
                let l = self.labels(&[("op", op_name(k).into())]);
                (l, value(figures.stats.of(k)))
            })
            .collect();
        family(self.enc, name, help, MetricType::Counter, &series)
    }

    fn operations(&mut self, f: &Figures) -> fmt::Result {
        let mut ops = Vec::new();
        for &k in &KINDS {
            let s = f.stats.of(k);
            let op = op_name(k).to_owned();
            ops.push((
                self.labels(&[("op", op.clone()), ("outcome", "ok".into())]),
                (s.ops - s.errors) as f64,
            ));
            ops.push((
                self.labels(&[("op", op), ("outcome", "error".into())]),
                s.errors as f64,
            ));
        }
        family(
            self.enc,
            "nessie_operations",
            "Operations completed, by kind and outcome.",
            MetricType::Counter,
            &ops,
        )?;
        let labels: Vec<Labels> = KINDS
            .iter()
            .map(|&k| self.labels(&[("op", op_name(k).into())]))
            .collect();
        let mut metric = self.enc.encode_descriptor(
            "nessie_operation_duration_seconds",
            "Operation latency as the client saw it (checks, verbs, retries, back-off).",
            None,
            MetricType::Histogram,
        )?;
        for (lat, labels) in f.latency.iter().zip(&labels) {
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                .iter()
                .zip(lat.buckets)
                .map(|(&b, c)| (b, c))
                .collect();
            metric
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(
                    lat.sum_ns as f64 / 1e9,
                    lat.count,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn retries(&mut self, f: &Figures) -> fmt::Result {
        let mut series = Vec::new();
        for &k in &KINDS {
            for cause in RetryCause::ALL {
                let labels =
                    self.labels(&[("op", op_name(k).into()), ("cause", cause.name().into())]);
                series.push((labels, f.stats.of(k).retries.get(cause) as f64));
            }
        }
        family(
            self.enc,
            "nessie_retries",
            "Times an operation went around its loop again, by cause.",
            MetricType::Counter,
            &series,
        )?;
        self.per_op(
            "nessie_backoff_seconds",
            "Time slept backing off between retries.",
            f,
            |s| s.backoff_us as f64 / 1e6,
        )?;
        self.per_op(
            "nessie_slot_scan_seconds",
            "Time spent scanning a data table for a reusable slot when none was free.",
            f,
            |s| s.scan_ns as f64 / 1e9,
        )?;
        self.per_op(
            "nessie_migrations",
            "MIGRATEs performed to make room in the index.",
            f,
            |s| s.migrations as f64,
        )?;
        self.per_op(
            "nessie_recoveries",
            "Entries of dead or aborted owners recovered.",
            f,
            |s| s.recoveries as f64,
        )?;
        self.per_op(
            "nessie_cache_hits",
            "Data entries served from the client cache.",
            f,
            |s| s.cache_hits as f64,
        )?;
        self.per_op(
            "nessie_hint_hits",
            "Operations that used the entry their location hint named, read with the index.",
            f,
            |s| s.hint_hits as f64,
        )?;
        self.per_op(
            "nessie_hint_misses",
            "Operations whose hinted entry was read and not used (a stale hint).",
            f,
            |s| s.hint_misses as f64,
        )?;
        self.per_op(
            "nessie_values_landed",
            "GETs whose value a scatter READ put straight into the caller's buffer.",
            f,
            |s| s.values_landed as f64,
        )?;
        self.per_op(
            "nessie_late_cas",
            "CASes that returned later than the landing bound after their deadline check.",
            f,
            |s| s.late_cas as f64,
        )?;
        self.per_op(
            "nessie_stage_failures",
            "Stage WRITEs that failed (a leaked slot each).",
            f,
            |s| s.stage_failures as f64,
        )?;
        self.per_op(
            "nessie_mirrors_behind",
            "Won index CASes whose mirrors were not brought up to date in time.",
            f,
            |s| s.mirrors_behind as f64,
        )
    }

    fn verbs(&mut self, f: &Figures) -> fmt::Result {
        let (mut verbs, mut bytes) = (Vec::new(), Vec::new());
        for (peer, c) in f.peers.iter().enumerate() {
            let p = peer.to_string();
            let VerbCounts {
                reads,
                writes,
                cas,
                read_bytes,
                write_bytes,
                ..
            } = *c;
            for (kind, n) in [("read", reads), ("write", writes), ("cas", cas)] {
                verbs.push((
                    self.labels(&[("kind", kind.into()), ("peer", p.clone())]),
                    n as f64,
                ));
            }
            for (kind, n) in [("read", read_bytes), ("write", write_bytes)] {
                bytes.push((
                    self.labels(&[("kind", kind.into()), ("peer", p.clone())]),
                    n as f64,
                ));
            }
        }
        family(
            self.enc,
            "nessie_fabric_verbs",
            "Verbs this node's clients issued, by kind and target node (peer = this node: local memory).",
            MetricType::Counter,
            &verbs,
        )?;
        family(
            self.enc,
            "nessie_fabric_bytes",
            "Bytes READ or WRITTEN by this node's clients, by kind and target node.",
            MetricType::Counter,
            &bytes,
        )?;
        self.per_op(
            "nessie_fabric_round_trips",
            "Network round trips (a batch reaching another node counts one).",
            f,
            |s| s.verbs.round_trips as f64,
        )
    }

    fn tables(&mut self, shared: &Shared, node: NodeId) -> fmt::Result {
        let Some(data) = shared.data(node) else {
            return Ok(());
        };
        let figures: Vec<_> = (0..data.classes()).map(|c| data.figures(c as u8)).collect();
        let series = |pick: &dyn Fn(&crate::data::DataTableFigures) -> f64| -> Vec<(Labels, f64)> {
            figures
                .iter()
                .map(|t| {
                    let l = self.labels(&[
                        ("class", t.class.to_string()),
                        ("capacity_bytes", t.value_capacity.to_string()),
                    ]);
                    (l, pick(t))
                })
                .collect()
        };
        let gauges: [(&str, &str, Series); 6] = [
            ("nessie_data_table_slots", "Slots of a size class, the tombstone reserve included.", series(&|t| t.slots as f64)),
            ("nessie_data_table_free_slots", "Slots free or never used.", series(&|t| t.free as f64)),
            ("nessie_data_table_used_slots", "Slots holding an entry, live or replaced and waiting out the reuse window.", series(&|t| t.in_use as f64)),
            ("nessie_data_table_peak_used_slots", "The most slots ever in use at once, which the sizing rule must cover.", series(&|t| t.peak_in_use as f64)),
            ("nessie_data_table_reserved_slots", "Slots only DELETEs may take (the tombstone reserve).", series(&|t| t.reserve as f64)),
            (
                "nessie_data_table_sustainable_puts_per_second",
                "PUTs per second the class sustains with its entries now in use, by the sizing rule (slots - used) / reuse window.",
                series(&|t| t.sustained_puts_per_sec(t.in_use)),
            ),
        ];
        for (name, help, s) in &gauges {
            family(self.enc, name, help, MetricType::Gauge, s)?;
        }
        let window = shared.config().reuse_window().as_secs_f64();
        family(
            self.enc,
            "nessie_reuse_window_seconds",
            "How long a replaced entry's slot waits before reuse (the sizing rule's window).",
            MetricType::Gauge,
            &[(self.labels(&[]), window)],
        )?;
        let recycled: Vec<(Labels, f64)> = data
            .recycle_counts()
            .by_name()
            .into_iter()
            .filter(|(name, _)| *name != "scan_ns")
            .map(|(name, n)| (self.labels(&[("event", name.into())]), n as f64))
            .collect();
        family(
            self.enc,
            "nessie_recycler_events",
            "What the node's slot recycling did: scans, slots reclaimed, markers resolved, in-doubt slots freed.",
            MetricType::Counter,
            &recycled,
        )?;
        let scan = data.recycle_counts().scan_ns as f64 / 1e9;
        family(
            self.enc,
            "nessie_recycler_scan_seconds",
            "Time the recycler spent scanning.",
            MetricType::Counter,
            &[(self.labels(&[]), scan)],
        )
    }

    fn clocks(&mut self, shared: &Shared, node: NodeId) -> fmt::Result {
        let refusing = f64::from(u8::from(shared.skew(node).is_err()));
        family(
            self.enc,
            "nessie_clock_skew_refusing",
            "1 while a peer's clock is off by more than max_clock_skew and the node refuses operations.",
            MetricType::Gauge,
            &[(self.labels(&[]), refusing)],
        )?;
        family(
            self.enc,
            "nessie_clock_skew_alarms",
            "Clock checks that found a peer's clock off by more than max_clock_skew.",
            MetricType::Counter,
            &[(self.labels(&[]), shared.skew_alarms(node) as f64)],
        )
    }

    fn tcp(&mut self, tcp: &TcpFabric) -> fmt::Result {
        let s = tcp.stats();
        let refused = [
            ("out_of_bounds", s.refused_out_of_bounds),
            ("misaligned", s.refused_misaligned),
            ("unknown_region", s.refused_unknown_region),
            ("late", s.refused_late),
            ("other", s.refused_other),
        ];
        let frames = [
            ("oversized", s.oversized_frames),
            ("malformed", s.malformed_frames),
            ("truncated", s.truncated_frames),
        ];
        let conns = [
            ("accepted", s.connections_accepted),
            ("rejected", s.connections_rejected),
            ("evicted", s.connections_evicted),
            ("opened", s.connections_opened),
            ("broken", s.connections_broken),
        ];
        let rows = |label: &'static str, rows: &[(&str, u64)]| -> Vec<(Labels, f64)> {
            rows.iter()
                .map(|(v, n)| (self.labels(&[(label, (*v).into())]), *n as f64))
                .collect()
        };
        let (refused, frames, conns) = (
            rows("reason", &refused),
            rows("kind", &frames),
            rows("event", &conns),
        );
        let served = [(self.labels(&[]), s.verbs_served as f64)];
        let handshakes = [(self.labels(&[]), s.handshake_failures as f64)];
        family(
            self.enc,
            "nessie_tcp_verbs_served",
            "Verbs this node's tcp service executed or refused for peers.",
            MetricType::Counter,
            &served,
        )?;
        family(
            self.enc,
            "nessie_tcp_refused_verbs",
            "Verbs the tcp service refused, by reason.",
            MetricType::Counter,
            &refused,
        )?;
        family(
            self.enc,
            "nessie_tcp_bad_frames",
            "Connections closed for a bad frame, by kind.",
            MetricType::Counter,
            &frames,
        )?;
        family(
            self.enc,
            "nessie_tcp_refused_handshakes",
            "Incoming connections that failed the authenticated handshake.",
            MetricType::Counter,
            &handshakes,
        )?;
        family(
            self.enc,
            "nessie_tcp_connections",
            "Connection events of the tcp fabric.",
            MetricType::Counter,
            &conns,
        )
    }
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let figures = self
            .shared
            .metrics(self.node)
            .map(|m| m.total())
            .unwrap_or_default();
        let mut f = Families {
            enc: &mut encoder,
            node: self.node.to_string(),
        };
        f.operations(&figures)?;
        f.retries(&figures)?;
        f.verbs(&figures)?;
        f.tables(&self.shared, self.node)?;
        f.clocks(&self.shared, self.node)?;
        if let Some(tcp) = &self.tcp {
            f.tcp(tcp)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    /// The families of [`Families`] over fixed figures.
    #[derive(Debug)]
    struct Fixed(Figures);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
            let mut f = Families {
                enc: &mut encoder,
                node: "7".into(),
            };
            f.operations(&self.0)?;
            f.retries(&self.0)
        }
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    /// Durations go out in seconds and counts as counted, whatever unit
    /// the figures keep them in.
    #[test]
    fn figures_are_exported_in_seconds_and_counts() {
        let mut fig = Figures::default();
        let put = fig.stats.of_mut(OpKind::Put);
        put.ops = 5;
        put.errors = 2;
        put.backoff_us = 2_500_000;
        put.scan_ns = 250_000_000;
        put.migrations = 3;
        *put.retries.get_mut(RetryCause::ALL[0]) = 4;
        for ms in [500, 1000] {
            fig.latency[1].record(Duration::from_millis(ms));
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(fig)));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();

        let put = r#"{node="7",op="put""#;
        assert_eq!(
            value(
                &text,
                &format!("nessie_operations_total{put},outcome=\"ok\"}}")
            ),
            3.0
        );
        assert_eq!(
            value(
                &text,
                &format!("nessie_operations_total{put},outcome=\"error\"}}")
            ),
            2.0
        );
        assert_eq!(
            value(
                &text,
                &format!("nessie_operation_duration_seconds_sum{put}}}")
            ),
            1.5
        );
        assert_eq!(
            value(
                &text,
                &format!("nessie_operation_duration_seconds_count{put}}}")
            ),
            2.0
        );
        assert_eq!(
            value(&text, &format!("nessie_backoff_seconds_total{put}}}")),
            2.5
        );
        assert_eq!(
            value(&text, &format!("nessie_slot_scan_seconds_total{put}}}")),
            0.25
        );
        assert_eq!(
            value(&text, &format!("nessie_migrations_total{put}}}")),
            3.0
        );
        let cause = RetryCause::ALL[0].name();
        assert_eq!(
            value(
                &text,
                &format!("nessie_retries_total{put},cause=\"{cause}\"}}")
            ),
            4.0
        );
    }
}
