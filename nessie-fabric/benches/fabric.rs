//! Cost of single verbs and batches on the backends that run without
//! hardware, next to a plain memcpy.
//!
//! Every backend gets two nodes; every verb is issued through node 0's view
//! and targets node 1 (the batch also reads node 0), so the `shm` numbers
//! are what one process pays to reach another process's mapping and the
//! `tcp` numbers what a round trip over loopback costs. Run with
//! `cargo bench -p nessie-fabric --bench fabric`; short measurement windows
//! keep the whole run near a minute.

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use nessie_fabric::{
    Fabric, LocalFabric, Membership, RegionId, RegionSpec, RemoteAddr, ShmFabric, ShmOptions,
    TcpFabric, TcpOptions, Verb,
};
use std::hint::black_box;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

const BLOCK: usize = 16 * 1024;
const INDEX: RegionId = RegionId(0);
const DATA: RegionId = RegionId(1);

fn regions() -> Vec<RegionSpec> {
    vec![
        RegionSpec {
            id: INDEX,
            len: 64 * 1024,
        },
        RegionSpec {
            id: DATA,
            len: 1024 * 1024,
        },
    ]
}

/// READ 8 B, READ 16 KiB, WRITE 16 KiB, CAS, and a batch of three 8-byte
/// READs on two nodes, all through `f` as node 0.
fn verbs(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, f: &dyn Fabric) {
    let word = RemoteAddr::new(1, INDEX, 4096);
    let block = RemoteAddr::new(1, DATA, 64 * 1024);

    group.throughput(Throughput::Bytes(8));
    let mut buf8 = [0u8; 8];
    group.bench_function("read_8B", |b| {
        b.iter(|| {
            f.read(black_box(word), &mut buf8).expect("READ");
            black_box(&buf8);
        });
    });

    group.throughput(Throughput::Bytes(BLOCK as u64));
    let mut buf = vec![0u8; BLOCK];
    group.bench_function("read_16KiB", |b| {
        b.iter(|| {
            f.read(black_box(block), &mut buf).expect("READ");
            black_box(&buf);
        });
    });

    let data = vec![0x5au8; BLOCK];
    group.bench_function("write_16KiB", |b| {
        b.iter(|| f.write(black_box(block), black_box(&data)).expect("WRITE"));
    });

    group.throughput(Throughput::Elements(1));
    let cas_word = RemoteAddr::new(1, INDEX, 8192);
    let mut expected = 0u64;
    group.bench_function("cas", |b| {
        b.iter(|| {
            let old = f
                .cas(black_box(cas_word), expected, expected + 1)
                .expect("CAS");
            debug_assert_eq!(old, expected);
            expected += 1;
            black_box(old)
        });
    });

    group.throughput(Throughput::Elements(3));
    let (mut a, mut b8, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    group.bench_function("batch_3x_read_8B", |b| {
        b.iter(|| {
            let mut batch = [
                Verb::Read {
                    addr: RemoteAddr::new(1, INDEX, 0),
                    buf: &mut a,
                },
                Verb::Read {
                    addr: RemoteAddr::new(0, INDEX, 512),
                    buf: &mut b8,
                },
                Verb::Read {
                    addr: RemoteAddr::new(1, DATA, 4096),
                    buf: &mut c,
                },
            ];
            f.post(black_box(&mut batch)).expect("batch");
            black_box(&batch);
        });
    });
}

fn local(c: &mut Criterion) {
    let fabric = LocalFabric::new(2, &regions()).unwrap();
    let mut group = c.benchmark_group("local");
    verbs(&mut group, &fabric);
    group.finish();
}

fn shm(c: &mut Criterion) {
    let scratch = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::Builder::new()
            .prefix("nessie-bench-")
            .tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("scratch directory");
    // Both nodes open concurrently: each waits for the other's files.
    let views: Vec<Arc<ShmFabric>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|node| {
                let options = ShmOptions {
                    dir: scratch.path().to_path_buf(),
                    membership: membership(node),
                    attach_timeout: Duration::from_secs(10),
                    replace: false,
                };
                s.spawn(move || Arc::new(ShmFabric::open(&options).expect("open shm node")))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("opening thread"))
            .collect()
    });
    let mut group = c.benchmark_group("shm");
    verbs(&mut group, &*views[0]);
    group.finish();
    drop(views);
    scratch.close().expect("remove the scratch directory");
}

/// Node `node` of a two-node cluster.
fn membership(node: usize) -> Membership {
    Membership {
        cluster_id: 0xbe_4c_u64,
        format_version: 1,
        node,
        nodes: 2,
        regions: regions(),
    }
}

fn tcp(c: &mut Criterion) {
    let listeners: Vec<_> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let peers: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").to_string())
        .collect();
    // Both nodes open concurrently: each connects to the other.
    let views: Vec<TcpFabric> = std::thread::scope(|s| {
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(node, listener)| {
                let options = TcpOptions {
                    closed: false,
                    membership: membership(node),
                    peers: peers.clone(),
                    secret: "bench-secret-0123456789".into(),
                    threads: 1,
                    attach_timeout: Duration::from_secs(10),
                    handshake_timeout: Duration::from_secs(5),
                    io_timeout: Duration::from_secs(10),
                    frame_limit: 1 << 20,
                    rendezvous: None,
                    joins: nessie_fabric::Joins::Off,
                };
                s.spawn(move || TcpFabric::with_listener(&options, listener).expect("open"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("opening thread"))
            .collect()
    });
    let mut group = c.benchmark_group("tcp");
    verbs(&mut group, &views[0]);
    group.finish();
}

fn memcpy(c: &mut Criterion) {
    let src = vec![0x5au8; BLOCK];
    let mut dst = vec![0u8; BLOCK];
    let mut group = c.benchmark_group("baseline");
    group.throughput(Throughput::Bytes(BLOCK as u64));
    group.bench_function("memcpy_16KiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        });
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = memcpy, local, shm, tcp
}
criterion_main!(benches);
