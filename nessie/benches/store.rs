//! GET and PUT of the client-driven store on the `local` and `shm` fabrics,
//! beside a plain 16 KiB memcpy (the floor a one-sided GET can approach).
//!
//! The reader runs on node 0; keys are written by a client of node 1, so
//! every GET reads a remote DTE. Caching is off for the GET benchmarks
//! (a cached GET is measured separately), so each GET is the full protocol.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nessie::{Client, Cluster, Config, FabricConfig, Node, Optimizations};
use std::time::Duration;

const SIZES: [usize; 3] = [256, 16 << 10, 128 << 10];
const KEYS: usize = 64;

/// The fastest PUT loop of the largest size this bench sustains on one
/// core, with headroom (about 60,000/s at 128 KiB on the reference
/// machine; smaller values go faster but their classes' slots are smaller).
const PUTS_PER_SEC_BOUND: f64 = 80_000.0;

/// PUTs in a tight loop consume a slot each, reusable `expiry +
/// max_clock_skew` later: the tables are sized by the documented rule
/// (`Config::data_bytes_for`) for the largest size at the bound above,
/// which leaves every smaller class more room than it needs. The mappings
/// are sparse, so only the slots a loop cycles through are touched. Tables
/// below the rule would measure the allocator waiting for free slots, not
/// a PUT.
fn config(cache: bool) -> Config {
    let mut config = Config {
        nodes: 2,
        index_slots_per_node: 1 << 14,
        expiry: Duration::from_millis(200),
        op_timeout: Duration::from_millis(100),
        max_clock_skew: Duration::from_millis(5),
        optimizations: Optimizations {
            cache,
            ..Optimizations::default()
        },
        ..Config::default()
    };
    let largest = SIZES[SIZES.len() - 1];
    config.data_bytes_per_node = config
        .data_bytes_for(largest, KEYS, PUTS_PER_SEC_BOUND)
        .expect("the largest size fits value_size_max");
    config
}

fn key(i: usize) -> Vec<u8> {
    format!("bench-key-{i:08}").into_bytes()
}

fn bench_pair(
    c: &mut Criterion,
    fabric: &str,
    reader: &mut Client,
    writer: &mut Client,
    cached: bool,
) {
    let mut group = c.benchmark_group(format!("store/{fabric}"));
    group
        // Past the first `expiry`: until then a PUT loop writes into fresh
        // slots and pays the page faults of first touches, after it the
        // loop reuses its own expired slots, as a long-running node does.
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for size in SIZES {
        let value = vec![0xa5u8; size];
        for i in 0..KEYS {
            writer.put(&key(i), &value).unwrap();
        }
        group.throughput(Throughput::Bytes(size as u64));
        let name = if cached { "get-cached" } else { "get" };
        // Keys are made before the loops: formatting one (and allocating
        // it) in the timed loop added some 40 ns to every operation.
        let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
        let mut i = 0;
        let mut out = Vec::with_capacity(size);
        group.bench_with_input(BenchmarkId::new(name, size), &size, |b, _| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                assert!(reader.get_into(&keys[i], &mut out).unwrap());
                black_box(&out);
            });
        });
        if !cached {
            let mut j = 0;
            group.bench_with_input(BenchmarkId::new("put", size), &size, |b, _| {
                b.iter(|| {
                    j = (j + 1) % KEYS;
                    reader.put(&keys[j], &value).unwrap();
                });
            });
        }
    }
    group.finish();
}

fn memcpy_floor(c: &mut Criterion) {
    let src = vec![1u8; 16 << 10];
    let mut dst = vec![0u8; 16 << 10];
    c.bench_function("memcpy/16384", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        });
    });
}

fn local(c: &mut Criterion) {
    for cached in [false, true] {
        let cluster = Cluster::local(config(cached)).unwrap();
        let mut reader = cluster.client(0).unwrap();
        let mut writer = cluster.client(1).unwrap();
        bench_pair(c, "local", &mut reader, &mut writer, cached);
    }
}

fn shm(c: &mut Criterion) {
    for cached in [false, true] {
        let mut cfg = config(cached);
        cfg.cluster = format!("bench-{}-{cached}", std::process::id());
        cfg.fabric = FabricConfig::Shm { dir: None };
        let dir = cfg.shm_dir();
        let c1 = cfg.clone();
        let peer = std::thread::spawn(move || Node::start(c1, 1).unwrap());
        let node0 = Node::start(cfg, 0).unwrap();
        let node1 = peer.join().unwrap();
        let mut reader = node0.client().unwrap();
        let mut writer = node1.client().unwrap();
        bench_pair(c, "shm", &mut reader, &mut writer, cached);
        drop((node0, node1));
        let _ = std::fs::remove_dir_all(dir);
    }
}

criterion_group!(benches, memcpy_floor, local, shm);
criterion_main!(benches);
