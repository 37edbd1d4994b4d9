//! Cost of single verbs and a batch on the `tcp` fabric over loopback:
//! three nodes in this process, every verb issued by node 0 to node 1 (the
//! batch reads nodes 1 and 2 at once: one round trip). Run with
//! `cargo bench -p nessie --bench tcp`; short windows keep it near 30 s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nessie_fabric::{
    Fabric, Membership, RegionId, RegionSpec, RemoteAddr, TcpFabric, TcpOptions, Verb,
};
use std::hint::black_box;
use std::net::TcpListener;
use std::time::Duration;

const BLOCK: usize = 16 * 1024;
const INDEX: RegionId = RegionId(0);
const DATA: RegionId = RegionId(1);

fn cluster(nodes: usize) -> Vec<TcpFabric> {
    let ls: Vec<_> = (0..nodes)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let peers: Vec<String> = ls
        .iter()
        .map(|l| l.local_addr().expect("addr").to_string())
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(node, l)| {
                let membership = Membership {
                    cluster_id: 1,
                    format_version: 1,
                    node,
                    nodes,
                    regions: vec![
                        RegionSpec {
                            id: INDEX,
                            len: 64 * 1024,
                        },
                        RegionSpec {
                            id: DATA,
                            len: 1024 * 1024,
                        },
                    ],
                };
                let options = TcpOptions {
                    membership,
                    peers: peers.clone(),
                    secret: "bench-secret-0123456789".into(),
                    threads: 1,
                    attach_timeout: Duration::from_secs(10),
                    handshake_timeout: Duration::from_secs(5),
                    io_timeout: Duration::from_secs(10),
                    frame_limit: 1 << 20,
                };
                s.spawn(move || TcpFabric::with_listener(&options, l).expect("open"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    })
}

fn bench(c: &mut Criterion) {
    let nodes = cluster(3);
    let f = &nodes[0];
    let word = RemoteAddr::new(1, INDEX, 4096);
    let block = RemoteAddr::new(1, DATA, 64 * 1024);
    let mut group = c.benchmark_group("tcp");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);

    let mut buf8 = [0u8; 8];
    group.throughput(Throughput::Bytes(8));
    group.bench_function("read_8B", |b| {
        b.iter(|| f.read(black_box(word), &mut buf8).expect("READ"));
    });
    let mut buf = vec![0u8; BLOCK];
    group.throughput(Throughput::Bytes(BLOCK as u64));
    group.bench_function("read_16KiB", |b| {
        b.iter(|| f.read(black_box(block), &mut buf).expect("READ"));
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
            let old = f.cas(cas_word, expected, expected + 1).expect("CAS");
            expected += 1;
            black_box(old)
        });
    });
    group.throughput(Throughput::Elements(3));
    let (mut a, mut b8, mut c8) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    group.bench_function("batch_3x_read_8B_two_peers", |b| {
        b.iter(|| {
            let mut batch = [
                Verb::Read {
                    addr: word,
                    buf: &mut a,
                },
                Verb::Read {
                    addr: RemoteAddr::new(2, INDEX, 0),
                    buf: &mut b8,
                },
                Verb::Read {
                    addr: RemoteAddr::new(2, INDEX, 8),
                    buf: &mut c8,
                },
            ];
            f.post(&mut batch).expect("batch");
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
