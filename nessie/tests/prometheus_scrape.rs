//! A real Prometheus server scrapes the metrics endpoints of a running
//! cluster, and its query API shows a counter that moved. Skipped with a
//! banner when `prometheus` is missing (a failure under
//! `NESSIE_REQUIRE_TOOLS=1`; CI installs the Debian package).

use nessie::{Cluster, Config, MetricsConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and reaps the server however the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    nessie_fabric::conformance::bootstrap::free_port()
}

/// Percent-encodes a query parameter.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The body of `GET path` at `addr`, if the server answers 200.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The values an instant query returns (one per series), via
/// `/api/v1/query`; none while the server is not ready.
fn query(addr: SocketAddr, q: &str) -> Vec<f64> {
    let Some(body) = get(addr, &format!("/api/v1/query?query={}", encode(q))) else {
        return Vec::new();
    };
    // A chunked answer: the JSON object is between the first '{' and the
    // last '}'.
    let (Some(a), Some(b)) = (body.find('{'), body.rfind('}')) else {
        return Vec::new();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&body[a..=b]) else {
        return Vec::new();
    };
    json["data"]["result"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| r["value"][1].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `q` until `done` holds for its values, doing `work` between polls.
fn wait_for(
    addr: SocketAddr,
    q: &str,
    done: impl Fn(&[f64]) -> bool,
    mut work: impl FnMut(),
) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v = query(addr, q);
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered {q} as hoped: {v:?}"
        );
        work();
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_real_prometheus_scrapes_every_node_and_sees_counters_move() {
    if !optional_tools::require(
        "a_real_prometheus_scrapes_every_node_and_sees_counters_move",
        &["prometheus"],
        "the Prometheus server (apt-get install prometheus)",
    ) {
        return;
    }
    let cluster = Cluster::local(Config {
        index_slots_per_node: 4096,
        data_bytes_per_node: 16 << 20,
        metrics: Some(MetricsConfig {
            base_port: 0,
            ..MetricsConfig::default()
        }),
        ..Config::default()
    })
    .unwrap();
    let targets: Vec<String> = (0..3)
        .map(|n| format!("'{}'", cluster.metrics_address(n).unwrap()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: nessie\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _server = Server(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );

    let mut client = cluster.client(2).unwrap();
    let mut n = 0u32;
    let mut put_some = || {
        for _ in 0..50 {
            client
                .put(format!("key-{}", n % 500).as_bytes(), &[7; 1000])
                .unwrap();
            n += 1;
        }
    };
    // Every node's endpoint is up for Prometheus.
    wait_for(
        web,
        "up{job=\"nessie\"}",
        |v| v.len() == 3 && v.iter().all(|&u| u == 1.0),
        &mut put_some,
    );
    let q = "nessie_operations_total{op=\"put\",outcome=\"ok\",node=\"2\"}";
    let first = wait_for(
        web,
        q,
        |v| v.first().is_some_and(|&x| x > 0.0),
        &mut put_some,
    )[0];
    // More PUTs: the counter Prometheus stores moves on.
    let later = wait_for(
        web,
        q,
        |v| v.first().is_some_and(|&x| x > first),
        &mut put_some,
    )[0];
    assert!(later > first);
    // The latency histogram arrived too, with its buckets.
    let buckets = query(
        web,
        "nessie_operation_duration_seconds_bucket{op=\"put\",node=\"2\"}",
    );
    assert!(buckets.len() > 10, "{buckets:?}");
    eprintln!("prometheus saw nessie_operations_total(put) go from {first} to {later}");
}
