//! A minority partition on `tcp`: three node processes of a replicated
//! cluster (r = 2), each in its own network namespace
//! (`scripts/netns-cluster.sh`), run logged workers on shared keys. Mid-run
//! node 2 cuts itself off with an nftables rule inside its namespace that
//! drops every packet to and from the other two (silently: no RST, no
//! ICMP), and its workers go on calling. The test shows:
//!
//! * the cut-off node stops serving: once the lease it held at the cut has
//!   run out, none of its calls succeeds (they return `NoQuorum`, or time
//!   out while it waits for the others);
//! * the majority goes on: it agrees on a view without node 2, drains, and
//!   each of its workers does its calls after the cut, then reads every key;
//! * the merged history of all three is linearizable, which rules out a
//!   stale read on the cut-off side: a value older than one the majority
//!   acknowledged after the cut would not fit any order.
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables); elsewhere it prints a
//! SKIPPED banner and passes (fails under `NESSIE_REQUIRE_TOOLS=1`).

use super::netns_cluster::{runs_as_root, SKIP_STATUS};
use nessie::{Config, FabricConfig, Node};
use nessie_check::process::history::read_logs;
use nessie_check::process::replicated::{
    audit, barrier, run_fault_workers, serving_gap, FaultWork, Tally,
};
use nessie_check::process::workload::{
    child_test_args, client_id, mark_started, test_name, wait_until_started,
};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NODES: usize = 3;
const CUT: usize = 2;
const MAJORITY: [usize; 2] = [0, 1];
const ALL: [usize; 3] = [0, 1, 2];
const KEYS: usize = 12;
const THREADS: usize = 2;
/// Successful calls each majority worker does after the cut.
const AFTER_CUT: usize = 120;
/// How long the workers run before node 2 cuts itself off.
const CUT_AFTER: Duration = Duration::from_secs(1);
const CHILD_ENV: &str = "NESSIE_NETNS_PARTITION_CHILD";
const DIR_ENV: &str = "NESSIE_NETNS_PARTITION_DIR";
const CLUSTER_ENV: &str = "NESSIE_NETNS_PARTITION_CLUSTER";

/// As `replicated_kill.rs`: short bounds, so that the view change and the
/// lease's end take a few seconds.
fn config(peers: Vec<String>, cluster: &str) -> Config {
    Config {
        cluster: cluster.to_owned(),
        nodes: NODES,
        replicas: 2,
        index_slots_per_node: 1024,
        data_bytes_per_node: 16 << 20,
        value_size_max: 4096,
        op_timeout: Duration::from_millis(300),
        lease: Duration::from_millis(1500),
        failure_timeout: Duration::from_millis(400),
        fabric: FabricConfig::Tcp {
            peers,
            rendezvous: None,
            join: Vec::new(),
            secret: format!("{cluster}-secret-0123456789"),
            threads: 2,
        },
        attach_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

fn skip(why: &str) {
    optional_tools::skip(
        "netns_partition",
        why,
        "root, network namespaces, iproute2's `ip` and nftables' `nft` with the kernel's nf_tables \
         (apt-get install iproute2 nftables)",
    );
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The rules that cut a node off from `others` (IPv4 addresses): every
/// packet to or from them is dropped without an answer.
fn cut_rules(others: &[String]) -> String {
    let set = others.join(", ");
    format!(
        "table inet nessie_cut {{\n\
         chain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n\
         chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n\
         }}\n"
    )
}

/// Loads `rules` with `nft -f -` in the current network namespace.
fn nft(rules: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(rules.as_bytes())
        .map_err(|e| format!("cannot feed nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether nftables works inside a fresh network namespace (the kernel may
/// lack `nf_tables`): loads the cut rules in a throw-away namespace.
fn nft_works_in_a_namespace() -> Result<(), String> {
    let ns = format!("nessie-nftprobe-{}", std::process::id());
    let ip = |args: &[&str]| Command::new("ip").args(args).output();
    let added = ip(&["netns", "add", &ns]).map_err(|e| e.to_string())?;
    if !added.status.success() {
        return Err(format!(
            "ip netns add failed: {}",
            String::from_utf8_lossy(&added.stderr).trim()
        ));
    }
    let rules = cut_rules(&["10.213.0.1".into()]);
    let loaded = Command::new("ip")
        .args(["netns", "exec", &ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("piped").write_all(rules.as_bytes())?;
            c.wait_with_output()
        });
    let _ = ip(&["netns", "del", &ns]);
    match loaded {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "nft in a namespace failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run nft in a namespace: {e}")),
    }
}

#[test]
fn a_node_cut_off_by_nftables_stops_serving_and_the_majority_goes_on() {
    let _cluster = super::one_cluster_at_a_time();
    if !runs_as_root() {
        return skip("not running as root");
    }
    for tool in ["ip", "nft"] {
        if optional_tools::find(tool).is_none() {
            return skip(&format!("`{tool}` is not on PATH"));
        }
    }
    if let Err(why) = nft_works_in_a_namespace() {
        return skip(&why);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-cluster.sh");
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!("partition-{}", std::process::id());
    let started = Instant::now();
    let output = Command::new("bash")
        .arg(&script)
        .args(["-n", &NODES.to_string(), "-t", "90", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(child_test_args(&test_name(
            module_path!(),
            "child_partition_node",
        )))
        .env(CHILD_ENV, "1")
        .env(DIR_ENV, dir.path())
        .env(CLUSTER_ENV, &cluster)
        .output()
        .expect("run scripts/netns-cluster.sh");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(SKIP_STATUS) {
        return skip(stderr.trim());
    }
    assert!(
        output.status.success(),
        "node processes failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    // The nodes' own messages (view changes, missed renewals, any panic),
    // shown if a check below fails.
    println!("{stderr}");
    check(dir.path(), started);
}

/// The parent's checks on what the node processes left in `dir`.
fn check(dir: &Path, started: Instant) {
    let cut_text = std::fs::read_to_string(dir.join("cut-at")).expect("the cut's time");
    let cut_at: u64 = cut_text.trim().parse().expect("a time in ns");
    let tallies: Vec<Tally> = ALL
        .iter()
        .map(|&n| Tally::read(dir, n).expect("a node's tally"))
        .collect();
    let history = read_logs(dir).unwrap();
    let checked = Instant::now();
    nessie_check::linearizability::check(&history).unwrap_or_else(|e| panic!("{e}"));
    let check_s = checked.elapsed().as_secs_f64();
    let clients = |nodes: &[usize]| -> Vec<u64> {
        nodes
            .iter()
            .flat_map(|&n| (0..THREADS).map(move |t| client_id(n, THREADS, t)))
            .collect()
    };
    let cut_clients = clients(&[CUT]);
    let last_cut_success = history
        .ops()
        .iter()
        .filter(|op| cut_clients.contains(&op.client))
        .filter_map(nessie_check::history::Operation::responded)
        .max()
        .unwrap_or(0);
    let (from, to) =
        serving_gap(&history, &clients(&MAJORITY), cut_at).expect("served after the cut");
    for (node, t) in ALL.iter().zip(&tallies) {
        println!(
            "NETNS-PARTITION node {node}: {} ok ({} after the cut), refused {} ViewChanging + {} NoQuorum, {} unknown, {} full, slowest call {:.1} ms; errors: {:?}",
            t.ok, t.ok_after_marker, t.view_changing, t.no_quorum, t.unknown, t.full, t.slowest_ms, t.errors
        );
    }
    let lease = config(Vec::new(), "x").lease;
    println!(
        "NETNS-PARTITION: the cut-off node's last success cut {:+.0} ms (lease {lease:?}); the majority's longest time without a success {:.0} ms (cut + {:.0} ms to cut + {:.0} ms); {} operations, {} of unknown outcome, linearizable (checked in {check_s:.1} s); {:.1} s in all",
        ms(last_cut_success) - ms(cut_at),
        ms(to - from),
        ms(from.saturating_sub(cut_at)),
        ms(to - cut_at),
        history.len(),
        history.unknown_outcomes(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        tallies.iter().all(|t| t.gave_up == 0),
        "a worker gave up: {tallies:?}"
    );
    assert!(
        MAJORITY
            .iter()
            .all(|&n| tallies[n].ok_after_marker >= THREADS * AFTER_CUT),
        "the majority did not go on: {tallies:?}"
    );
    assert!(
        tallies[CUT].no_quorum > 0,
        "the cut-off node never said NoQuorum: {:?}",
        tallies[CUT]
    );
    // Its lease was granted by a renewal that began before the cut; slack
    // for the response's log line to be written.
    let bound = cut_at + (lease + Duration::from_millis(250)).as_nanos() as u64;
    assert!(
        last_cut_success <= bound,
        "the cut-off node served {:.0} ms after the cut, past its lease",
        ms(last_cut_success - cut_at)
    );
    let audited = history.ops().iter().filter(|op| op.client >= 1000).count();
    assert_eq!(
        audited,
        MAJORITY.len() * KEYS,
        "the majority's reads of every key"
    );
}

/// Cuts this node (in its own namespace) off from `peers` but itself, and
/// writes the wall-clock time the rules were in place to `dir/cut-at`;
/// `dir/cut` marks the cut for the workers.
fn cut_off(me: usize, peers: &[String], dir: &Path) {
    let others: Vec<String> = peers
        .iter()
        .enumerate()
        .filter(|&(n, _)| n != me)
        .map(|(_, p)| {
            p.rsplit_once(':')
                .map_or(p.as_str(), |(host, _)| host)
                .to_owned()
        })
        .collect();
    nft(&cut_rules(&others)).unwrap_or_else(|e| panic!("node {me}: {e}"));
    let at = now_ns();
    std::fs::write(dir.join("cut-at"), at.to_string()).unwrap();
    std::fs::write(dir.join("cut"), b"").unwrap();
}

/// The body of a node process (run only inside a namespace by the test
/// above, through the script).
#[test]
#[ignore = "run as a child process by a_node_cut_off_by_nftables_stops_serving_and_the_majority_goes_on"]
fn child_partition_node() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    // The membership thread's view changes and missed renewals on stderr,
    // which the test prints if it fails.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,nessie::membership=debug",
        ))
        .try_init();
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let node: usize = env("NESSIE_NETNS_NODE").parse().unwrap();
    let peers: Vec<String> = env("NESSIE_NETNS_PEERS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let dir = PathBuf::from(env(DIR_ENV));
    let n = Node::start(config(peers.clone(), &env(CLUSTER_ENV)), node).unwrap();
    mark_started(&dir, node).unwrap();
    let timeout = Duration::from_secs(60);
    assert!(
        wait_until_started(&dir, NODES, timeout),
        "the nodes did not start"
    );
    let work = FaultWork {
        node,
        threads: THREADS,
        keys: KEYS,
        max_value: 2000,
        pause: Duration::from_millis(2),
        backoff: Duration::from_millis(50),
        salt: 0x6375_7421,
        marker: "cut",
        // The cut-off node calls on until the majority is done.
        after_marker: if node == CUT { usize::MAX } else { AFTER_CUT },
        limit: Duration::from_secs(50),
    };
    std::thread::scope(|s| {
        let workers = s.spawn(|| run_fault_workers(&n, &dir, work));
        if node == CUT {
            std::thread::sleep(CUT_AFTER);
            cut_off(node, &peers, &dir);
        }
        workers.join().expect("the workers panicked");
    });
    if node != CUT {
        assert!(
            barrier(&dir, "workers-done", node, &MAJORITY, timeout),
            "the other majority node's workers did not finish"
        );
        audit(
            &n,
            &dir,
            node,
            KEYS,
            1000 + node as u64,
            Duration::from_secs(10),
        );
        assert!(
            barrier(&dir, "audited", node, &MAJORITY, timeout),
            "the other majority node did not finish its reads"
        );
        std::fs::write(dir.join("stop"), b"").unwrap();
    }
    assert!(
        barrier(&dir, "finished", node, &ALL, timeout),
        "a node did not finish"
    );
}
