//! Two OS processes, one per node, on the shared-memory fabric.
//!
//! The parent test re-runs this test binary twice, each time selecting only
//! the `#[ignore]`d [`child_node`] test and telling it through environment
//! variables which node it is and where the region files live. Each child
//! opens `ShmFabric` as its node of a two-node cluster (an index-like region
//! of CAS'd control words and a data-like region of blocks), then at once:
//!
//! * **counts**: CAS-increments one shared word in node 0's index region
//!   [`INCREMENTS`] times, each a READ then a CAS loop from the value read;
//! * **writes** 16 KiB blocks into its mailbox in the peer's data region;
//! * **reads** both mailboxes (the peer's, in its own region, written by the
//!   other process; its own, in the peer's region, written by its writer
//!   thread) and verifies every block it can prove was published and not
//!   overwritten while being read.
//!
//! **Mailbox protocol.** A READ of many words is not atomic, so a block is
//! double-buffered and guarded by two CAS'd words in the host's index
//! region: `writing` (the sequence number being written) and `published`
//! (the last complete one). The writer of sequence `s` CASes `writing`
//! `s-1 → s`, WRITEs the block into slot `s % 2`, then CASes `published`
//! `s-1 → s`. A reader READs `published = p`, READs slot `p % 2`, then READs
//! `writing = w`. Slot `p % 2` is next overwritten by `p + 2`, which is
//! announced in `writing` before any of its words is stored; word stores are
//! release and word loads acquire, so a reader that saw any word of `p + 2`
//! also sees `w ≥ p + 2`. Hence if `w ≤ p + 1` the block read is exactly
//! block `p`, and must carry sequence `p` and a matching checksum (xxh3 of
//! the payload, seeded with the sequence number); any mismatch there is a
//! **torn published block**, and the test demands none. If `w ≥ p + 2` the
//! read may be torn and is retried (its checksum is still computed and the
//! detected tears are reported, to show the checksum catches them).
//!
//! The parent waits for both children (with a deadline), then asserts both
//! succeeded, that node 0 saw the shared word end at exactly
//! `2 × INCREMENTS`, that each child verified blocks and found none torn,
//! and that the children removed their region files.

use nessie_fabric::conformance::{FORMAT_VERSION, LARGE, SMALL};
use nessie_fabric::{Fabric, Membership, RegionId, RegionSpec, RemoteAddr, ShmFabric, ShmOptions};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use twox_hash::XxHash3_64;

/// CAS increments per process.
const INCREMENTS: u64 = 100_000;
/// Bytes of a block, header included.
const BLOCK: usize = 16 * 1024;
/// Blocks each writer publishes at least (more while its node counts).
const MIN_BLOCKS: u64 = 1000;
/// Header of a block: sequence number, checksum.
const HEADER: usize = 16;

const INDEX: RegionId = SMALL;
const DATA: RegionId = LARGE;
/// Index-region words: the shared counter (node 0 only), the mailbox's
/// `published` and `writing` words, node 1's "done" flag and node 0's
/// "seen" flag (node 0 only).
const COUNTER: u64 = 0;
const PUBLISHED: u64 = 64;
const WRITING: u64 = 72;
const DONE: u64 = 80;
/// Node 0's "read the total" flag: node 1 keeps its region files (which
/// it removes on exit) until node 0 has opened them and is done.
const SEEN: u64 = 88;

const ENV_NODE: &str = "NESSIE_TWO_PROCESSES_NODE";
const ENV_DIR: &str = "NESSIE_TWO_PROCESSES_DIR";
const ENV_CLUSTER: &str = "NESSIE_TWO_PROCESSES_CLUSTER";
const CHILD_TEST: &str = "child_node";
const RESULT_TAG: &str = "CHILD-RESULT";

fn regions() -> Vec<RegionSpec> {
    vec![
        RegionSpec {
            id: INDEX,
            len: 4096,
        },
        RegionSpec {
            id: DATA,
            len: 2 * BLOCK as u64,
        },
    ]
}

fn read_u64(f: &dyn Fabric, addr: RemoteAddr) -> u64 {
    let mut b = [0u8; 8];
    f.read(addr, &mut b).expect("READ of a word");
    u64::from_le_bytes(b)
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Block `seq` of `writer`: header (seq, checksum), then a payload that
/// differs for every sequence number and writer.
fn make_block(writer: u64, seq: u64, block: &mut [u8]) {
    for (i, chunk) in block[HEADER..].chunks_exact_mut(8).enumerate() {
        let word = splitmix64(seq ^ (writer << 48) ^ ((i as u64) << 20));
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    let checksum = XxHash3_64::oneshot_with_seed(seq, &block[HEADER..]);
    block[..8].copy_from_slice(&seq.to_le_bytes());
    block[8..HEADER].copy_from_slice(&checksum.to_le_bytes());
}

/// Whether `block` is exactly a complete block with sequence number `seq`.
fn block_is(block: &[u8], seq: u64) -> bool {
    let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().expect("a word"));
    word(0) == seq && word(8) == XxHash3_64::oneshot_with_seed(seq, &block[HEADER..])
}

/// Publishes blocks into the mailbox hosted by `host` until `stop` is set
/// and at least [`MIN_BLOCKS`] are out; returns how many.
fn write_blocks(f: &dyn Fabric, writer: u64, host: usize, stop: &AtomicBool) -> u64 {
    let mut block = vec![0u8; BLOCK];
    let mut seq = 0;
    while seq < MIN_BLOCKS || !stop.load(Ordering::Relaxed) {
        seq += 1;
        let announced = f
            .cas(RemoteAddr::new(host, INDEX, WRITING), seq - 1, seq)
            .expect("CAS writing");
        assert_eq!(announced, seq - 1, "the mailbox has one writer");
        make_block(writer, seq, &mut block);
        let slot = (seq % 2) * BLOCK as u64;
        f.write(RemoteAddr::new(host, DATA, slot), &block)
            .expect("WRITE of a block");
        let published = f
            .cas(RemoteAddr::new(host, INDEX, PUBLISHED), seq - 1, seq)
            .expect("CAS published");
        assert_eq!(published, seq - 1, "the mailbox has one writer");
    }
    seq
}

/// What a reader found in the mailboxes.
#[derive(Debug, Default)]
struct ReadStats {
    /// Published blocks read whole and verified.
    verified: u64,
    /// Published blocks that failed verification although no overwrite
    /// could have overlapped the read.
    torn: u64,
    /// Reads that may have overlapped an overwrite, retried.
    retried: u64,
    /// Of those, reads whose checksum did not match (tears caught).
    caught: u64,
}

/// Reads one block of the mailbox hosted by `host`.
fn read_mailbox(f: &dyn Fabric, host: usize, buf: &mut [u8], stats: &mut ReadStats) {
    let p = read_u64(f, RemoteAddr::new(host, INDEX, PUBLISHED));
    if p == 0 {
        return;
    }
    f.read(RemoteAddr::new(host, DATA, (p % 2) * BLOCK as u64), buf)
        .expect("READ of a block");
    let w = read_u64(f, RemoteAddr::new(host, INDEX, WRITING));
    if w >= p + 2 {
        stats.retried += 1;
        if !block_is(buf, p) && !block_is(buf, p + 2) {
            stats.caught += 1;
        }
    } else if block_is(buf, p) {
        stats.verified += 1;
    } else {
        stats.torn += 1;
        eprintln!(
            "torn published block {p} in node {host}'s mailbox (writing = {w}, header seq {})",
            u64::from_le_bytes(buf[..8].try_into().expect("a word"))
        );
    }
}

/// CAS-increments the shared counter `times` times.
fn count(f: &dyn Fabric, times: u64) {
    let counter = RemoteAddr::new(0, INDEX, COUNTER);
    for _ in 0..times {
        let mut current = read_u64(f, counter);
        loop {
            let old = f.cas(counter, current, current + 1).expect("CAS increment");
            if old == current {
                break;
            }
            current = old;
        }
    }
}

/// One node of the two-process test; runs only when the parent test spawns
/// it (and says so through the environment).
#[test]
#[ignore = "spawned by two_processes_share_a_counter_and_never_see_torn_blocks"]
fn child_node() {
    let (Ok(node), Ok(dir), Ok(cluster)) = (
        std::env::var(ENV_NODE),
        std::env::var(ENV_DIR),
        std::env::var(ENV_CLUSTER),
    ) else {
        eprintln!("{CHILD_TEST}: not spawned by the parent test; nothing to do");
        return;
    };
    let node: usize = node.parse().expect("node id");
    let cluster: u64 = cluster.parse().expect("cluster id");
    let peer = 1 - node;
    let fabric = ShmFabric::open(&ShmOptions {
        dir: PathBuf::from(dir),
        membership: Membership {
            cluster_id: cluster,
            format_version: FORMAT_VERSION,
            node,
            nodes: 2,
            regions: regions(),
        },
        attach_timeout: Duration::from_secs(20),
        replace: false,
    })
    .expect("open the shm fabric");
    let f: &dyn Fabric = &fabric;
    let stop = AtomicBool::new(false);
    let (written, reads) = std::thread::scope(|s| {
        let stop = &stop;
        let writer = s.spawn(move || write_blocks(f, node as u64, peer, stop));
        let reader = s.spawn(move || {
            let mut stats = ReadStats::default();
            let mut buf = vec![0u8; BLOCK];
            while !stop.load(Ordering::Relaxed) || stats.verified < MIN_BLOCKS {
                // The peer's mailbox (in this node's region, written by the
                // other process), then this node's (in the peer's region).
                read_mailbox(f, node, &mut buf, &mut stats);
                read_mailbox(f, peer, &mut buf, &mut stats);
            }
            stats
        });
        count(f, INCREMENTS);
        stop.store(true, Ordering::Relaxed);
        (
            writer.join().expect("writer thread"),
            reader.join().expect("reader thread"),
        )
    });
    let final_count = if node == 0 {
        // Wait for node 1 to finish counting, then read the total.
        let deadline = Instant::now() + Duration::from_secs(25);
        while read_u64(f, RemoteAddr::new(0, INDEX, DONE)) == 0 {
            assert!(Instant::now() < deadline, "node 1 never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
        let total = read_u64(f, RemoteAddr::new(0, INDEX, COUNTER)).to_string();
        f.write(RemoteAddr::new(0, INDEX, SEEN), &1u64.to_le_bytes())
            .expect("WRITE seen");
        total
    } else {
        let old = f
            .cas(RemoteAddr::new(0, INDEX, DONE), 0, 1)
            .expect("CAS done");
        assert_eq!(old, 0);
        // Alone on a busy host, this node can finish before node 0 has
        // opened its files; it must not remove them before then.
        let deadline = Instant::now() + Duration::from_secs(25);
        while read_u64(f, RemoteAddr::new(0, INDEX, SEEN)) == 0 {
            assert!(Instant::now() < deadline, "node 0 never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
        "-".to_string()
    };
    println!(
        "{RESULT_TAG} node={node} written={written} verified={} torn={} retried={} caught={} final={final_count}",
        reads.verified, reads.torn, reads.retried, reads.caught
    );
    assert_eq!(reads.torn, 0, "published blocks were torn");
}

/// This test binary, set to run only its ignored test `name`, with output
/// shown.
fn child_test(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// A child process and the thread collecting its output.
struct Spawned {
    child: Child,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn(node: usize, dir: &std::path::Path, cluster: u64) -> Spawned {
    let mut child = child_test(CHILD_TEST)
        .env(ENV_NODE, node.to_string())
        .env(ENV_DIR, dir)
        .env(ENV_CLUSTER, cluster.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a child test process");
    let collect = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let stdout = collect(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = collect(Box::new(child.stderr.take().expect("piped stderr")));
    Spawned {
        child,
        stdout,
        stderr,
    }
}

/// Waits for every child until `deadline`, killing all of them if one is
/// late; returns (success, stdout, stderr) per child.
fn wait_all(mut children: Vec<Spawned>, deadline: Instant) -> Vec<(bool, String, String)> {
    let mut status = vec![None; children.len()];
    while status.iter().any(Option::is_none) {
        for (s, c) in status.iter_mut().zip(&mut children) {
            if s.is_none() {
                *s = c.child.try_wait().expect("wait for a child");
            }
        }
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.child.kill();
                let _ = c.child.wait();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    children
        .into_iter()
        .zip(status)
        .map(|(c, s)| {
            (
                s.is_some_and(|s| s.success()),
                c.stdout.join().expect("stdout collector"),
                c.stderr.join().expect("stderr collector"),
            )
        })
        .collect()
}

/// The `key=value` fields of a child's result line.
fn result_fields(stdout: &str) -> Option<Vec<(String, String)>> {
    // libtest may print "test child_node ... " on the same line.
    let line = stdout
        .lines()
        .find_map(|l| l.find(RESULT_TAG).map(|i| &l[i..]))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map_or_else(|| panic!("result line without {key}"), |(_, v)| v)
}

#[test]
fn two_processes_share_a_counter_and_never_see_torn_blocks() {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::Builder::new()
            .prefix("nessie-two-processes-")
            .tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("scratch directory");
    let dir = base.path().join("cluster");
    let cluster = u64::from(std::process::id()) << 20 | 0x2b;
    let children = vec![spawn(0, &dir, cluster), spawn(1, &dir, cluster)];
    let results = wait_all(children, Instant::now() + Duration::from_secs(120));
    for (node, (ok, out, err)) in results.iter().enumerate() {
        assert!(
            ok,
            "node {node} failed:\n--- stdout\n{out}\n--- stderr\n{err}"
        );
    }
    let mut total_final = None;
    for (node, (_, out, err)) in results.iter().enumerate() {
        let fields = result_fields(out)
            .unwrap_or_else(|| panic!("node {node} reported nothing:\n{out}\n{err}"));
        assert_eq!(field(&fields, "node"), node.to_string());
        assert_eq!(
            field(&fields, "torn"),
            "0",
            "node {node}: torn published blocks"
        );
        let verified: u64 = field(&fields, "verified").parse().expect("a count");
        let written: u64 = field(&fields, "written").parse().expect("a count");
        assert!(
            verified >= MIN_BLOCKS,
            "node {node} verified only {verified} blocks"
        );
        assert!(
            written >= MIN_BLOCKS,
            "node {node} wrote only {written} blocks"
        );
        eprintln!("node {node}: {fields:?}");
        if node == 0 {
            total_final = Some(field(&fields, "final").to_string());
        }
    }
    assert_eq!(
        total_final.as_deref(),
        Some((2 * INCREMENTS).to_string().as_str()),
        "no CAS increment of either process may be lost"
    );
    // Each child removed its own region files when it closed the fabric.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("cluster directory")
        .map(|e| e.expect("directory entry").file_name())
        .collect();
    assert!(left.is_empty(), "region files left behind: {left:?}");
    base.close().expect("remove the scratch directory");
}
