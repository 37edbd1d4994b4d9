//! A small sort and word count on every store (in-process, `local`
//! fabric), validated by the jobs themselves and checked again here.

use nessie::Config;
use nessie_examples::job::{MapOutput, Reduced};
use nessie_examples::sort::{key, RECORD_BYTES};
use nessie_examples::{
    job_config, run_task, run_threads, BarrierConfig, Input, JobError, JobReport, JobSpec,
    LocalCluster, MapReduce, Output, Phase, Sizing, Sort, StoreKind, WordCount,
};
use std::time::Duration;

const INPUT: u64 = 3 << 20;
const MAX_VALUE: usize = 64 << 10;

fn config(tasks: usize, output_in_store: bool) -> Config {
    let base = Config {
        nodes: tasks,
        ..Config::default()
    };
    job_config(
        &base,
        &Sizing {
            tasks,
            shuffle_bytes: INPUT,
            max_value: MAX_VALUE,
            output_in_store,
        },
    )
    .unwrap()
}

fn spec(stage: &str, tasks: usize) -> JobSpec {
    JobSpec {
        max_value: MAX_VALUE,
        ..JobSpec::new(stage, tasks)
    }
}

/// A job of three tasks: its configuration (with room for the output in
/// the store if `output_in_store`) and a cluster of `kind` in this process.
fn three_tasks(kind: StoreKind, output_in_store: bool) -> (usize, Config, LocalCluster) {
    let tasks = 3;
    let config = config(tasks, output_in_store);
    let cluster = LocalCluster::start(kind, config.clone(), None).unwrap();
    (tasks, config, cluster)
}

fn generated(seed: u64) -> Input {
    Input::Generated { bytes: INPUT, seed }
}

fn check_counts(report: &JobReport, tasks: usize) {
    assert_eq!(report.tasks.len(), tasks);
    let records_in: u64 = report.tasks.iter().map(|t| t.records_in).sum();
    let records_out: u64 = report.tasks.iter().map(|t| t.records_out).sum();
    assert_eq!(records_in, records_out);
    for t in &report.tasks {
        assert_eq!(t.job_digest, report.tasks[0].job_digest);
        assert_eq!(t.phases.len(), Phase::ALL.len());
    }
    let shuffled: u64 = report.tasks.iter().map(|t| t.shuffle_bytes).sum();
    let fetched: u64 = report.tasks.iter().map(|t| t.fetched_bytes).sum();
    assert_eq!(shuffled, fetched);
    assert!(
        report.verbs().bytes() >= shuffled * 2,
        "written and read once each at least"
    );
}

#[test]
fn sort_runs_and_validates_on_cd_sd_and_hy() {
    for kind in [StoreKind::Cd, StoreKind::Sd, StoreKind::Hy] {
        let (tasks, config, cluster) = three_tasks(kind, true);
        let sort = Sort {
            input: generated(11),
        };
        let spec = JobSpec {
            output: Output::Store,
            cleanup: true,
            ..spec("sort-test", tasks)
        };
        let report = run_threads(&cluster, &sort, &spec, &config).unwrap();
        check_counts(&report, tasks);
        assert_eq!(
            report.tasks[0].job_digest.records,
            INPUT / RECORD_BYTES as u64
        );
        assert!(
            report.tasks.iter().any(|t| t.shuffle_values > tasks as u64),
            "{kind}: partitions of ~{} KiB must be chunked at 64 KiB",
            (INPUT / 9) >> 10
        );
        assert_eq!(report.store, kind.label());
        assert_eq!(report.server_verbs.is_some(), kind != StoreKind::Cd);

        // The output is in the store, globally sorted; the shuffle's keys
        // are gone, the last barrier's arrivals stay.
        let mut c = cluster.client(0).unwrap();
        let mut all = Vec::new();
        let mut part = Vec::new();
        for r in 0..tasks {
            nessie_examples::chunk::get_blob(
                c.as_mut(),
                &format!("job/sort-test/output/{r}"),
                &mut part,
            )
            .unwrap();
            all.extend_from_slice(&part);
        }
        assert_eq!(
            all.len() as u64,
            INPUT / RECORD_BYTES as u64 * RECORD_BYTES as u64
        );
        let keys: Vec<&[u8]> = all.chunks_exact(RECORD_BYTES).map(key).collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "{kind}: output not sorted"
        );
        assert_eq!(
            c.get(b"job/sort-test/1/2").unwrap(),
            None,
            "{kind}: cleanup"
        );
        assert_eq!(
            c.get(b"job/sort-test/done/0").unwrap(),
            None,
            "{kind}: cleanup"
        );
        assert!(c.get(b"job/sort-test/finished/0").unwrap().is_some());
    }
}

#[test]
fn word_count_runs_and_validates_on_cd_sd_and_hy() {
    for kind in [StoreKind::Cd, StoreKind::Sd, StoreKind::Hy] {
        let (tasks, config, cluster) = three_tasks(kind, false);
        let dir = tempfile::tempdir().unwrap();
        let wc = WordCount {
            input: generated(5),
        };
        let spec = JobSpec {
            output: Output::Dir {
                path: dir.path().to_owned(),
            },
            ..spec("wc-test", tasks)
        };
        let report = run_threads(&cluster, &wc, &spec, &config).unwrap();
        check_counts(&report, tasks);
        let mut total = 0u64;
        for r in 0..tasks {
            let text = std::fs::read_to_string(dir.path().join(format!("part-{r:05}"))).unwrap();
            for line in text.lines() {
                let (_, count) = line.rsplit_once(' ').unwrap();
                total += count.parse::<u64>().unwrap();
            }
        }
        assert_eq!(total, report.tasks[0].job_digest.records, "{kind}");
    }
}

#[test]
fn cd_writes_partitions_locally_and_sd_ships_them() {
    // The decoupled design: a CD map's PUTs put its partitions into its own
    // node's memory; SD sends each to the key's home node.
    let tasks = 3;
    let shuffle_remote = |kind| {
        let config = config(tasks, false);
        let cluster = LocalCluster::start(kind, config.clone(), None).unwrap();
        let sort = Sort {
            input: generated(3),
        };
        let report = run_threads(&cluster, &sort, &spec("locality", tasks), &config).unwrap();
        let v = report.phase_verbs(Phase::ShuffleWrite);
        (v.remote_bytes, v.bytes() - v.remote_bytes)
    };
    let (cd_remote, cd_local) = shuffle_remote(StoreKind::Cd);
    let (sd_remote, _) = shuffle_remote(StoreKind::Sd);
    assert!(cd_local >= INPUT / RECORD_BYTES as u64 * RECORD_BYTES as u64);
    assert!(
        cd_remote * 20 < cd_local,
        "CD shuffle: {cd_remote} remote vs {cd_local} local"
    );
    assert!(
        sd_remote > INPUT / 2,
        "SD shuffle: only {sd_remote} bytes remote"
    );
}

/// A sort whose map fails on one task.
struct Failing(Sort);

impl MapReduce for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn map(&self, task: usize, tasks: usize) -> Result<MapOutput, JobError> {
        if task == 1 {
            return Err(JobError::Spec("map 1 fails on purpose".into()));
        }
        self.0.map(task, tasks)
    }
    fn reduce(&self, task: usize, tasks: usize, runs: &[Vec<u8>]) -> Reduced {
        self.0.reduce(task, tasks, runs)
    }
    fn ordered_across_reducers(&self) -> bool {
        true
    }
}

#[test]
fn a_failing_task_aborts_the_others_and_its_error_is_reported() {
    let tasks = 3;
    let config = config(tasks, false);
    let cluster = LocalCluster::start(StoreKind::Cd, config.clone(), None).unwrap();
    let job = Failing(Sort {
        input: generated(1),
    });
    let spec = JobSpec {
        barrier: BarrierConfig {
            timeout: Duration::from_secs(600),
            ..BarrierConfig::default()
        },
        ..spec("abort-test", tasks)
    };
    match run_threads(&cluster, &job, &spec, &config) {
        Err(JobError::Spec(m)) => assert!(m.contains("on purpose"), "{m}"),
        other => panic!("expected the failing map's error, got {other:?}"),
    }
    // A task that runs alone against the aborted stage stops at once.
    let mut c = cluster.client(0).unwrap();
    let e = run_task(c.as_mut(), &job, &spec, 2).unwrap_err();
    assert!(
        matches!(e, JobError::Aborted { ref reason } if reason.contains("task 1")),
        "{e}"
    );
}

#[test]
fn bad_specs_are_refused_before_anything_runs() {
    let config = config(3, false);
    let cluster = LocalCluster::start(StoreKind::Cd, config.clone(), None).unwrap();
    let sort = Sort {
        input: generated(1),
    };
    let too_big = JobSpec {
        max_value: MAX_VALUE * 2,
        ..spec("s", 3)
    };
    assert!(matches!(
        run_threads(&cluster, &sort, &too_big, &config),
        Err(JobError::Spec(_))
    ));
    assert!(matches!(
        run_threads(&cluster, &sort, &spec("no/slash", 3), &config),
        Err(JobError::Spec(_))
    ));
    assert!(matches!(
        LocalCluster::start(StoreKind::Redis, config, None),
        Err(JobError::Spec(_))
    ));
}

/// A redis-server on a free loopback port, killed on drop.
struct Redis(std::process::Child, std::net::SocketAddr);

impl Redis {
    /// Starts the server (installed: the caller checked).
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let redis = Redis(child, addr);
        for _ in 0..500 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not accept connections on {addr} within 5 s");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sort_runs_on_redis_when_installed() {
    if !optional_tools::require(
        "sort_runs_on_redis_when_installed",
        &["redis-server"],
        "apt-get install redis-server",
    ) {
        return;
    }
    let redis = Redis::start();
    let tasks = 3;
    let config = config(tasks, false);
    let cluster = LocalCluster::start(StoreKind::Redis, config.clone(), Some(redis.1)).unwrap();
    let sort = Sort {
        input: generated(2),
    };
    let report = run_threads(&cluster, &sort, &spec("redis-test", tasks), &config).unwrap();
    check_counts(&report, tasks);
    let v = report.phase_verbs(Phase::ShuffleWrite);
    assert_eq!(
        v.remote_bytes,
        v.bytes(),
        "every Redis byte crosses the network"
    );
}
