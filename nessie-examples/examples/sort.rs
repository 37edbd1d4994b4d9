//! A distributed sort on the store, step by step.
//!
//! Every task is a map and a reduce: it generates its share of 100-byte
//! records, cuts them into one sorted run per reducer, PUTs the runs, waits
//! at a barrier made of store keys, GETs its runs from every map, merges
//! them, and checks — through the store again — that all reducers together
//! output exactly the input, globally sorted.
//!
//! All nodes in this process, one thread per task (the `local` fabric):
//!
//! ```sh
//! cargo run --release -p nessie-examples --example sort -- --tasks 3 --size 64MiB
//! ```
//!
//! One process per node on shared memory (start every node, in any order;
//! all with the same `--stage`):
//!
//! ```sh
//! for i in 0 1 2; do
//!   target/release/examples/sort --nodes 3 --node $i --stage run1 &
//! done; wait
//! ```
//!
//! Under a launcher, one process per node on any hosts: the node id and
//! count come from the launcher's environment, and on `--fabric tcp` the
//! nodes meet at an authenticated rendezvous on the first host (the cluster
//! secret comes from `NESSIE_SECRET` or the file `NESSIE_SECRET_FILE`
//! names, never from the command line):
//!
//! ```sh
//! export NESSIE_SECRET_FILE=~/.nessie-secret     # mode 0600
//! srun -N 3 -n 3 target/release/examples/sort --fabric tcp
//! mpirun -np 3 -x NESSIE_SECRET_FILE target/release/examples/sort --fabric tcp
//! ```
//!
//! `--store sd|hy` runs the same code on the baselines; `--store redis
//! --redis 127.0.0.1:6379` on a Redis server; `--input FILE…` sorts files
//! of 100-byte records instead of generated ones.

use clap::Parser;
use nessie::bootstrap::Launch;
use nessie::{Config, FabricConfig, KvClient};
use nessie_examples::chunk::{get_blob, put_blob};
use nessie_examples::job::{check_summaries, ReduceSummary};
use nessie_examples::keys::Keys;
use nessie_examples::ops::{get_json, put_json};
use nessie_examples::{
    job_config, Barrier, Digest, Input, JobError, JobSpec, LocalCluster, MapReduce, Sizing, Sort,
    StoreKind, StoreNode,
};
use std::net::SocketAddr;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(about = "A distributed sort on Nessie (or its baselines, or Redis)")]
struct Args {
    /// cd, sd, hy or redis.
    #[arg(long, default_value = "cd")]
    store: StoreKind,
    /// Tasks, as threads of this process (ignored with --node).
    #[arg(long, default_value_t = 3)]
    tasks: usize,
    /// Run only task NODE, as node NODE of a cluster of --nodes processes
    /// (under a launcher, the launcher says which).
    #[arg(long)]
    node: Option<usize>,
    /// The fabric of a cluster of processes: shm (one host) or tcp (any
    /// hosts).
    #[arg(long, default_value = "shm")]
    fabric: ProcessFabric,
    /// Processes of the cluster (with --node).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Total input, e.g. 64MiB.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the generated records.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sort these files of 100-byte records (gensort's format) instead of
    /// generated ones; every process must see the same files.
    #[arg(long, num_args = 1..)]
    input: Vec<std::path::PathBuf>,
    /// Largest value PUT; larger runs are chunked.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    max_value: u64,
    /// Names this run (keys are `job/<stage>/…`); the same on every process.
    #[arg(long, default_value = "sort")]
    stage: String,
    /// Redis server (with --store redis).
    #[arg(long)]
    redis: Option<SocketAddr>,
}

/// The fabric of a cluster of processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProcessFabric {
    /// Shared memory on one host.
    Shm,
    /// TCP between hosts; the nodes meet at the launcher's rendezvous.
    Tcp,
    /// RDMA NICs (a build with the `verbs` feature; the first RDMA
    /// device); queue pairs are exchanged at the launcher's rendezvous.
    Verbs,
}

impl ProcessFabric {
    fn config(self) -> FabricConfig {
        match self {
            ProcessFabric::Shm => FabricConfig::Shm { dir: None },
            ProcessFabric::Tcp => FabricConfig::Tcp {
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: String::new(),
                threads: 2,
            },
            ProcessFabric::Verbs => FabricConfig::Verbs {
                device: None,
                peers: Vec::new(),
                rendezvous: None,
                join: Vec::new(),
                secret: String::new(),
                gid_index: None,
            },
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split]
        .parse()
        .map_err(|_| format!("{s:?} is not a size"))?;
    let unit = match t[split..].trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: use B, KiB, MiB or GiB")),
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// One task of the sort: what `nessie_examples::run_task` does, without
/// the timing.
fn sort_task(
    client: &mut dyn KvClient,
    sort: &Sort,
    spec: &JobSpec,
    task: usize,
) -> Result<Digest, JobError> {
    let keys = Keys::new(&spec.stage)?;
    let n = spec.tasks;
    let barrier = |name| Barrier::new(&keys, name, n, spec.barrier);

    // 1. Map: this task's records, one sorted run per reducer (by key range).
    let mapped = sort.map(task, n)?;

    // 2. Shuffle: PUT run r under job/<stage>/<task>/<r> — on Nessie into
    //    this node's own memory — and the digest of what the map read.
    for (r, run) in mapped.partitions.iter().enumerate() {
        put_blob(client, &keys.partition(task, r), run, spec.max_value)?;
    }
    put_json(client, &keys.input_digest(task), &mapped.digest)?;

    // 3. Barrier: every map has written all its runs.
    barrier("done").sync(client, task)?;

    // 4. Reduce: GET this reducer's run from every map, merge, check order.
    let mut runs = vec![Vec::new(); n];
    for (m, run) in runs.iter_mut().enumerate() {
        get_blob(client, &keys.partition(m, task), run)?;
    }
    let out = sort.reduce(task, n, &runs)?;

    // 5. Validate: all reducers together output the maps' input, in order.
    let summary = ReduceSummary {
        digest: out.digest,
        first_key: out.first_key,
        last_key: out.last_key,
    };
    put_json(client, &keys.summary(task), &summary)?;
    barrier("reduced").sync(client, task)?;
    let mut inputs = Vec::new();
    let mut summaries = Vec::new();
    for t in 0..n {
        inputs.push(get_json(client, &keys.input_digest(t))?);
        summaries.push(get_json(client, &keys.summary(t))?);
    }
    let digest = check_summaries(&inputs, &summaries, true)?;

    // 6. Leave together: until then peers may read this node's memory
    //    (and a little after, see `main`).
    barrier("finished").sync(client, task)?;
    Ok(digest)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // A launcher (srun, mpirun, torchrun) names this process's node.
    let launch = match args.node {
        Some(_) => None,
        None => Launch::detect()?,
    };
    let node = args.node.or(launch.as_ref().map(|l| l.node));
    let tasks = match (&launch, node) {
        (Some(l), _) => l.nodes,
        (None, Some(_)) => args.nodes,
        (None, None) => args.tasks,
    };
    let spec = JobSpec {
        max_value: usize::try_from(args.max_value)?,
        ..JobSpec::new(args.stage.clone(), tasks)
    };
    let (input, size) = if args.input.is_empty() {
        let generated = Input::Generated {
            bytes: args.size,
            seed: args.seed,
        };
        (generated, args.size)
    } else {
        let mut size = 0;
        for p in &args.input {
            size += std::fs::metadata(p)?.len();
        }
        (
            Input::Files {
                paths: args.input.clone(),
            },
            size,
        )
    };
    let sort = Sort { input };
    let mut base = Config {
        nodes: tasks,
        cluster: format!("sort-{}", args.stage),
        fabric: if node.is_some() {
            args.fabric.config()
        } else {
            FabricConfig::Local
        },
        ..Config::default()
    };
    match &launch {
        Some(l) => l.configure(&mut base)?,
        // Without a launcher, tcp and verbs need the rendezvous's address.
        None if node.is_some() && args.fabric != ProcessFabric::Shm => {
            return Err("--fabric tcp and --fabric verbs need a launcher (srun, mpirun, torchrun) or NESSIE_NODE_ID, NESSIE_NODES and NESSIE_RENDEZVOUS".into())
        }
        None => {}
    }
    let sizing = Sizing {
        tasks,
        shuffle_bytes: size,
        max_value: spec.max_value,
        output_in_store: false,
    };
    let config = job_config(&base, &sizing)?;
    let start = Instant::now();

    let digest = if let Some(node) = node {
        // This process is node `node`: start it, take a client, run task `node`.
        let store = StoreNode::start(args.store, config, node, args.redis)?;
        let mut client = store.client()?;
        let digest = sort_task(client.as_mut(), &sort, &spec, node)?;
        // Stay up a moment: peers still polling the last barrier may read
        // keys that live on this node.
        std::thread::sleep(nessie_examples::job::LINGER);
        digest
    } else {
        // Every node in this process; one thread (and client) per task.
        let cluster = LocalCluster::start(args.store, config, args.redis)?;
        let mut clients = (0..tasks)
            .map(|t| cluster.client(t))
            .collect::<Result<Vec<_>, _>>()?;
        let digests = std::thread::scope(|s| {
            let handles: Vec<_> = clients
                .iter_mut()
                .enumerate()
                .map(|(t, c)| {
                    let (sort, spec) = (&sort, &spec);
                    s.spawn(move || sort_task(c.as_mut(), sort, spec, t))
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(task, h)| h.join().unwrap_or(Err(JobError::TaskPanicked { task })))
                .collect::<Result<Vec<_>, _>>()
        })?;
        digests[0]
    };
    println!(
        "{} sorted {} records ({} bytes) on {} in {:.2} s; every task validated the output",
        sort.name(),
        digest.records,
        digest.records * 100,
        args.store,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
