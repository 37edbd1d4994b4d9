//! GET and PUT latency of both baselines beside the client-driven store, in
//! one run, on the shared-memory fabric: two node "processes" (each with
//! its own `ShmFabric` mapping, here threads of one process), one server
//! worker per node, a client on node 0 and keys homed on node 1, so every
//! SD operation goes over the rings (and HY's GET reads node 1's tables
//! one-sided). For CD the keys are written by a client of node 1, so a GET
//! from node 0 reads remote data; its PUTs write node 0's own data table,
//! as the design does. Short runs: about a minute and a half in all.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use nessie::{Config, FabricConfig, KvClient};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 2] = [256, 16 << 10];
const KEYS: usize = 256;

fn config(name: &str) -> Config {
    Config {
        cluster: format!("bench-{name}-{}", std::process::id()),
        nodes: 2,
        index_slots_per_node: 4096,
        value_size_max: 16 << 10,
        // Every PUT takes a fresh data slot and the one it replaced comes
        // back only after `expiry` (1 s). Once a class has used all its
        // slots, allocation scans the class for expired ones, which would
        // dominate a PUT loop: 4 GiB (sparse, touched only as used) gives
        // the 16 KiB class 35,000 slots, more than a whole run of PUTs.
        data_bytes_per_node: 4 << 30,
        // A short expiry returns replaced slots sooner: CD's PUTs take a
        // fresh slot each at a much higher rate than the baselines'.
        expiry: Duration::from_millis(200),
        op_timeout: Duration::from_millis(100),
        max_clock_skew: Duration::from_millis(5),
        fabric: FabricConfig::Shm { dir: None },
        ..Config::default()
    }
}

fn start_all<N: Send>(
    config: &Config,
    start: fn(Config, usize) -> Result<N, nessie::Error>,
) -> Vec<N> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..config.nodes)
            .map(|n| {
                let c = config.clone();
                s.spawn(move || start(c, n).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Counts operations that timed out: on a shared 2-core machine a polling
/// server thread can be descheduled past `op_timeout`, which is a result
/// (reported on stderr), not a reason to abort the run.
fn check<T>(r: Result<T, nessie::Error>, timeouts: &mut u64) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(nessie::Error::Timeout) => {
            *timeouts += 1;
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn bench_store<C: KvClient>(
    c: &mut Criterion,
    store: &str,
    client: &mut C,
    mut writer: Option<&mut dyn KvClient>,
    keys: &[String],
) {
    let mut timeouts = 0;
    let mut group = c.benchmark_group(store);
    for size in SIZES {
        let value = vec![0x5a; size];
        for k in keys {
            match writer.as_deref_mut() {
                Some(w) => w.put(k.as_bytes(), &value).unwrap(),
                None => client.put(k.as_bytes(), &value).unwrap(),
            }
        }
        let mut i = 0;
        group.bench_function(BenchmarkId::new("get", size), |b| {
            let mut out = Vec::with_capacity(size);
            b.iter(|| {
                i = (i + 1) % keys.len();
                let found = client.get_into(black_box(keys[i].as_bytes()), &mut out);
                assert_ne!(check(found, &mut timeouts), Some(false));
            });
        });
        group.bench_function(BenchmarkId::new("put", size), |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                check(
                    client.put(black_box(keys[i].as_bytes()), &value),
                    &mut timeouts,
                );
            });
        });
    }
    group.finish();
    if timeouts > 0 {
        eprintln!("{store}: {timeouts} operations timed out");
    }
}

fn remote_keys(table: &nessie_sd::table::Table) -> Vec<String> {
    (0..)
        .map(|i| format!("bench-key-{i:08}"))
        .filter(|k| table.home(k.as_bytes()) == 1)
        .take(KEYS)
        .collect()
}

fn baselines(c: &mut Criterion) {
    {
        let config = config("cd");
        let nodes = start_all(&config, nessie::Node::start);
        let mut reader = nodes[0].client().unwrap();
        let mut writer = nodes[1].client().unwrap();
        let keys: Vec<String> = (0..KEYS).map(|i| format!("bench-key-{i:08}")).collect();
        bench_store(c, "cd", &mut reader, Some(&mut writer), &keys);
        drop((reader, writer, nodes));
        let _ = std::fs::remove_dir_all(config.shm_dir());
    }
    bench_baseline(
        c,
        "sd",
        nessie_sd::Node::start,
        nessie_sd::Node::client,
        |c| remote_keys(c.table()),
    );
    bench_baseline(
        c,
        "hy",
        nessie_hy::Node::start,
        nessie_hy::Node::client,
        |c| remote_keys(c.table()),
    );
}

/// Benchmarks a baseline from a client on node 0, on keys homed on node 1.
fn bench_baseline<N: Send, C: KvClient>(
    c: &mut Criterion,
    name: &str,
    start: fn(Config, usize) -> Result<N, nessie::Error>,
    client: impl Fn(&N) -> Result<C, nessie::Error>,
    keys: impl Fn(&C) -> Vec<String>,
) {
    let config = config(name);
    let nodes = start_all(&config, start);
    let mut client = client(&nodes[0]).unwrap();
    let keys = keys(&client);
    bench_store(c, name, &mut client, None, &keys);
    drop(client);
    drop(nodes);
    let _ = std::fs::remove_dir_all(config.shm_dir());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = baselines
}
criterion_main!(benches);
