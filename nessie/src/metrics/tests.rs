//! The metrics endpoint of an in-process cluster, read over HTTP.

use super::*;
use crate::{Cluster, Config, MetricsConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

fn config(metrics: Option<MetricsConfig>) -> Config {
    Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        metrics,
        ..Config::default()
    }
}

fn any_port() -> MetricsConfig {
    MetricsConfig {
        base_port: 0,
        ..MetricsConfig::default()
    }
}

/// The status line and body of `request` sent to `addr`.
fn http(addr: SocketAddr, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    body
}

/// The value of the series whose line starts with `series` (name and
/// labels as printed).
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no series {series} in\n{body}"))
}

#[test]
fn latency_buckets_take_each_duration_once() {
    let mut l = Latency::default();
    for us in [0, 1, 3, 700, 2_000_000] {
        l.record(Duration::from_micros(us));
    }
    assert_eq!(l.count, 5);
    assert_eq!(l.buckets[0], 2, "0 and 1 µs are ≤ 1 µs");
    assert_eq!(l.buckets[2], 1, "3 µs is ≤ 5 µs");
    assert_eq!(l.buckets[9], 1, "700 µs is ≤ 1 ms");
    assert_eq!(
        l.buckets.iter().sum::<u64>(),
        4,
        "2 s is above every bucket"
    );
    assert_eq!(l.sum_ns, 2_000_704_000);
}

#[test]
fn each_node_serves_what_its_clients_did() {
    let cluster = Cluster::local(config(Some(any_port()))).unwrap();
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|n| cluster.metrics_address(n).unwrap())
        .collect();
    assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    let mut c = cluster.client(1).unwrap();
    for i in 0..20 {
        c.put(format!("k{i}").as_bytes(), &[1; 300]).unwrap();
    }
    for i in 0..10 {
        c.get(format!("k{i}").as_bytes()).unwrap();
    }
    assert!(c.get_into_slice(b"k0", &mut [0; 10]).is_err(), "too small");
    let body = scrape(addrs[1]);
    assert!(
        body.contains("# TYPE nessie_operations_total counter"),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            r#"nessie_operations_total{node="1",op="put",outcome="ok"}"#
        ),
        20.0
    );
    assert_eq!(
        value(
            &body,
            r#"nessie_operations_total{node="1",op="get",outcome="error"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            &body,
            r#"nessie_operations_total{node="1",op="get",outcome="ok"}"#
        ),
        10.0
    );
    assert_eq!(
        value(
            &body,
            r#"nessie_operation_duration_seconds_count{node="1",op="get"}"#
        ),
        11.0
    );
    assert!(body.contains(r#"nessie_retries_total{node="1",op="put",cause="cas_failed"}"#));
    // Verbs by peer: every node got some of the puts' index CASes.
    let cas: f64 = (0..3)
        .map(|p| {
            value(
                &body,
                &format!(r#"nessie_fabric_verbs_total{{node="1",kind="cas",peer="{p}"}}"#),
            )
        })
        .sum();
    assert!(cas >= 20.0, "{cas}");
    assert!(
        value(
            &body,
            r#"nessie_fabric_bytes_total{node="1",kind="write",peer="1"}"#
        ) >= 20.0 * 300.0
    );
    // Data tables: node 1 holds the 20 entries in the 512-byte class.
    assert!(
        body.contains(
            r#"nessie_data_table_used_slots{node="1",class="1",capacity_bytes="512"} 20"#
        ),
        "{body}"
    );
    assert!(body.contains("nessie_recycler_events_total{node=\"1\",event=\"reclaimed\"}"));
    assert_eq!(value(&body, r#"nessie_clock_skew_refusing{node="1"}"#), 0.0);
    // The other nodes' clients did nothing.
    let other = scrape(addrs[0]);
    assert_eq!(
        value(
            &other,
            r#"nessie_operations_total{node="0",op="put",outcome="ok"}"#
        ),
        0.0
    );
    // A dropped client's operations stay counted.
    drop(c);
    let after = scrape(addrs[1]);
    assert_eq!(
        value(
            &after,
            r#"nessie_operations_total{node="1",op="put",outcome="ok"}"#
        ),
        20.0
    );
}

#[test]
fn other_paths_and_methods_are_refused() {
    let cluster = Cluster::local(config(Some(any_port()))).unwrap();
    let addr = cluster.metrics_address(0).unwrap();
    assert_eq!(
        http(addr, "GET /nope HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(addr, "POST /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(http(addr, "GET / HTTP/1.0\r\n\r\n").0, "HTTP/1.1 200 OK");
    // A head just under the limit is read whole and answered.
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(7_000));
    assert_eq!(http(addr, &long).0, "HTTP/1.1 200 OK");
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    assert_eq!(
        http(addr, &huge).0,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    // A client that connects and says nothing does not stop the others.
    let idle = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    drop(idle);
    assert!(scrape(addr).contains("nessie_operations_total"));
}

#[test]
fn off_by_default_with_no_endpoint_and_no_cells() {
    let cluster = Cluster::local(config(None)).unwrap();
    assert_eq!(cluster.metrics_address(0), None);
    let c = cluster.client(0).unwrap();
    assert!(c.metrics_cell_for_tests().is_none());
}

#[test]
fn ports_past_65535_are_refused_and_bind_failures_are_errors() {
    let bad = Config {
        metrics: Some(MetricsConfig {
            base_port: 65_534,
            ..MetricsConfig::default()
        }),
        ..Config::default()
    };
    let msg = bad.validate().unwrap_err().to_string();
    assert!(msg.contains("metrics.base_port"), "{msg}");
    // The last node may take port 65535 itself.
    let nodes = Config::default().nodes;
    let edge = Config {
        metrics: Some(MetricsConfig {
            base_port: u16::try_from(65_536 - nodes).unwrap(),
            ..MetricsConfig::default()
        }),
        ..Config::default()
    };
    edge.validate().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let clash = config(Some(MetricsConfig {
        base_port: port,
        ..MetricsConfig::default()
    }));
    let msg = Cluster::local(clash).unwrap_err().to_string();
    assert!(msg.contains("cannot bind"), "{msg}");
}

#[test]
fn the_metrics_key_round_trips_through_toml() {
    let c = Config::from_toml("[metrics]\nbase_port = 9500\nbind = \"0.0.0.0\"\n").unwrap();
    let m = c.metrics.clone().unwrap();
    assert_eq!(m.address(2).to_string(), "0.0.0.0:9502");
    assert_eq!(Config::from_toml(&c.to_toml().unwrap()).unwrap(), c);
    assert!(Config::default()
        .to_toml()
        .unwrap()
        .find("metrics")
        .is_none());
}

#[test]
fn figures_of_clients_add_up() {
    let mut a = Figures::default();
    let mut b = Figures::default();
    a.latency[0].record(Duration::from_micros(3));
    for _ in 0..2 {
        b.latency[0].record(Duration::from_micros(3));
    }
    b.peers = vec![VerbCounts::default(); 3];
    b.peers[2].reads = 5;
    a.add(&b);
    assert_eq!(a.latency[0].count, 3);
    assert_eq!(a.latency[0].buckets[2], 3, "3 µs is ≤ 5 µs, three times");
    assert_eq!(a.latency[0].sum_ns, 9_000);
    assert_eq!(a.peers.len(), 3);
    assert_eq!(a.peers[2].reads, 5);
}

#[test]
fn a_dropped_clients_operations_still_count_and_a_stopped_node_stops_serving() {
    let cluster = Cluster::local(config(Some(any_port()))).unwrap();
    let addr = cluster.metrics_address(0).unwrap();
    let mut c = cluster.client(0).unwrap();
    for i in 0..3 {
        c.put(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    drop(c);
    assert_eq!(
        value(
            &scrape(addr),
            r#"nessie_operations_total{node="0",op="put",outcome="ok"}"#
        ),
        3.0
    );
    drop(cluster);
    assert!(
        TcpStream::connect(addr).is_err(),
        "the endpoint outlived its node"
    );
}

/// A dropped client's cell leaves its node (clients come and go for the
/// node's whole life; their cells must not pile up) and its figures stay
/// in the total.
#[test]
fn a_dropped_client_leaves_its_figures_and_not_its_cell() {
    let node = Arc::new(NodeMetrics::default());
    let cluster = Cluster::local(config(None)).unwrap();
    let mut ep = Endpoint::new(cluster.fabric(), 0);
    let cell = node.register(&mut ep, 3);
    let put = OpStats {
        ops: 2,
        ..OpStats::default()
    };
    cell.record(OpKind::Put, &put, Duration::from_micros(3), &mut ep);
    assert_eq!(lock(&node.cells).len(), 1);
    drop(cell);
    assert!(lock(&node.cells).is_empty());
    assert_eq!(node.total().stats.of(OpKind::Put).ops, 2);
    assert_eq!(node.total().latency[1].count, 1);
}

/// The recycler's scan time goes out in seconds: never more than the time
/// the node has lived (its one recycler thread scans for part of it).
#[test]
fn the_recyclers_scan_time_is_in_seconds() {
    let born = std::time::Instant::now();
    let cluster = Cluster::local(config(Some(any_port()))).unwrap();
    let mut c = cluster.client(0).unwrap();
    for i in 0..50 {
        c.put(format!("k{i}").as_bytes(), &[1; 300]).unwrap();
    }
    // A few recycler periods (expiry / 10), so that it scans the class in use.
    std::thread::sleep(Duration::from_millis(350));
    let scanned = value(
        &scrape(cluster.metrics_address(0).unwrap()),
        r#"nessie_recycler_scan_seconds_total{node="0"}"#,
    );
    let lived = born.elapsed().as_secs_f64();
    assert!(
        (0.0..=lived).contains(&scanned),
        "scanned {scanned} s in {lived} s"
    );
}
