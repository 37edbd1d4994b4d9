//! LMDB as the harness runs it: node processes that share one environment
//! see each other's writes, a map that is missing or too small fails with a
//! typed error, and a `peers` run of LMDB measures and cleans up.

mod support;

use harness::lmdb::{self, LmdbTarget};
use harness::system::{start_run_node, NodeHandle};
use harness::workload::WorkloadSpec;
use harness::HarnessError;
use nessie::Config;
use nessie_examples::StoreKind;
use std::process::Command;
use support::{assert_ok, leftover_shm, results, run};

/// Set in the second process of the two-process test: the environment it
/// opens, as JSON.
const CHILD_ENV: &str = "NESSIE_BENCH_LMDB_TEST_CHILD";

fn node(target: &LmdbTarget) -> Box<dyn NodeHandle> {
    start_run_node(StoreKind::Lmdb, &Config::default(), 0, None, Some(target)).unwrap()
}

/// The second process: it must see the first one's value, then replaces it
/// and deletes another key.
fn child(json: &str) {
    let target: LmdbTarget = serde_json::from_str(json).unwrap();
    let node = node(&target);
    let mut c = node.client().unwrap();
    assert_eq!(c.get(b"shared").unwrap(), Some(b"from the first".to_vec()));
    c.put(b"shared", b"from the second").unwrap();
    assert!(c.delete(b"doomed").unwrap());
    c.put(b"new", &vec![7u8; 20_000]).unwrap();
}

#[test]
fn two_processes_share_one_environment() {
    if let Ok(json) = std::env::var(CHILD_ENV) {
        child(&json);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let w = WorkloadSpec {
        keys: 100,
        value_size: 20_000,
        ..WorkloadSpec::default()
    };
    let target = lmdb::prepare(&w, 2, &tmp.path().join("env")).unwrap();
    let node = node(&target);
    let mut c = node.client().unwrap();
    c.put(b"shared", b"from the first").unwrap();
    c.put(b"doomed", b"x").unwrap();
    assert_eq!(c.get(b"shared").unwrap(), Some(b"from the first".to_vec()));

    // The same test binary, running only this test, as the other process.
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_share_one_environment",
            "--nocapture",
        ])
        .env(CHILD_ENV, serde_json::to_string(&target).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "the second process failed: {status}");

    assert_eq!(c.get(b"shared").unwrap(), Some(b"from the second".to_vec()));
    assert_eq!(c.get(b"doomed").unwrap(), None);
    assert_eq!(c.get(b"new").unwrap(), Some(vec![7u8; 20_000]));
    let s = c.stats();
    assert_eq!((s.get.ops, s.put.ops), (4, 2));
    assert_eq!(s.get.verbs.round_trips + s.put.verbs.round_trips, 0);
    assert_eq!(s.get.verbs.remote_bytes + s.put.verbs.remote_bytes, 0);
}

#[test]
fn a_missing_or_full_map_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut target = LmdbTarget {
        dir: tmp.path().join("nothing-here"),
        map_bytes: 1 << 20,
        max_readers: 4,
    };
    let Err(e) = start_run_node(StoreKind::Lmdb, &Config::default(), 0, None, Some(&target)) else {
        panic!("opened an environment that was never made");
    };
    assert!(
        matches!(e, HarnessError::Lmdb(lmdb_kv::LmdbError::Missing { .. })),
        "{e}"
    );

    // A map of 1 MiB made by hand, too small for 64 values of 64 KiB.
    target.dir = tmp.path().join("small");
    std::fs::create_dir(&target.dir).unwrap();
    lmdb_kv::create(&target.dir, &target.options()).unwrap();
    let node = node(&target);
    let mut c = node.client().unwrap();
    let e = (0u32..64)
        .find_map(|i| c.put(&i.to_le_bytes(), &vec![1u8; 64 << 10]).err())
        .expect("the map fills up");
    assert!(
        matches!(
            lmdb_kv::lmdb_error(&e),
            Some(lmdb_kv::LmdbError::MapFull { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("map"), "{e}");
    assert!(c.stats().put.errors >= 1);
}

#[test]
fn a_peers_run_of_lmdb_measures_and_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("peers");
    let args = [
        "peers",
        "--quick",
        "--systems",
        "lmdb",
        "--duration-ms",
        "300",
        "--keys",
        "300",
    ];
    let (out, pid) = run(&args, &dir, &[]);
    assert_ok(&out);
    let json = results(&dir);
    let r = &json["runs"][0];
    assert_eq!(r["system"], "lmdb");
    assert_eq!(r["status"], "ok", "{}", r["reason"]);
    assert!(r["figures"]["throughput_ops_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        r["figures"]["get"]["misses"], 0,
        "every node sees the preload"
    );
    let notes = json["notes"].to_string();
    assert!(
        notes.contains("LMDB runs inside the node processes"),
        "{notes}"
    );
    for f in ["latency.svg", "latency-cdf-get.svg", "latency-cdf-put.svg"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}
