//! `nessie-bench` under a launcher: a stand-in for `srun` on this host
//! (`support/fake-srun`) starts the node processes, which take their ids
//! from its variables, talk through its merged stdout and shared stdin, and
//! hand their reports over as files; failures end the launcher and leave
//! nothing behind.

mod support;

use std::path::{Path, PathBuf};
use support::{assert_ok, bench, failed_reason, leftover_processes, leftover_shm, results, run};

const FAKE_SRUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/fake-srun");

fn assert_clean(dir: &Path, pid: u32) {
    let left = leftover_processes(dir);
    assert!(left.is_empty(), "{left:?}");
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}

/// A free loopback port, for the tcp fabric's rendezvous.
fn free_port() -> String {
    nessie_fabric::conformance::bootstrap::free_port().to_string()
}

/// `compare --quick` of `systems` on `fabric` under the fake srun.
fn launched_compare(
    dir: &Path,
    fabric: &str,
    systems: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, u32) {
    let args = [
        "compare",
        "--quick",
        "--duration-ms",
        "300",
        "--keys",
        "300",
        "--systems",
        systems,
        "--fabric",
        fabric,
        "--launcher",
        "srun",
        "--launcher-program",
        FAKE_SRUN,
        "--peer-host",
        "127.0.0.1",
        "--network",
        "one host (a test)",
    ];
    run(&args, dir, env)
}

#[test]
fn launched_nodes_on_shm_report_through_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shm");
    let (out, pid) = launched_compare(&dir, "shm", "null,cd", &[]);
    assert_ok(&out);
    let json = results(&dir);
    let setup = json["setup"].as_str().unwrap();
    assert!(setup.contains("started by `srun -N 3 -n 3"), "{setup}");
    assert!(setup.contains("one host (a test)"), "{setup}");
    for r in json["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{}: {}", r["label"], r["reason"]);
        assert_eq!(r["spec"]["fabric"], "shm");
        let f = &r["figures"];
        assert!(f["throughput_ops_s"].as_f64().unwrap() > 0.0);
        assert_eq!(f["cpu_s_per_node"].as_array().unwrap().len(), 3);
        let run_dir = Path::new(r["dir"].as_str().unwrap());
        // The launcher's own line is kept aside, not taken for an event.
        let stray = std::fs::read_to_string(run_dir.join("launcher.stdout")).unwrap();
        assert_eq!(stray, "fake-srun: starting 3 tasks\n");
        for node in 0..3 {
            for file in [
                format!("node-{node}.report.json"),
                format!("node-{node}.stderr"),
            ] {
                assert!(run_dir.join(&file).exists(), "{}: {file}", r["label"]);
            }
        }
    }
    assert_clean(&dir, pid);
}

#[test]
fn launched_nodes_on_tcp_meet_at_the_launchers_rendezvous() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tcp");
    let port = free_port();
    let env = [("NESSIE_RENDEZVOUS_PORT", port.as_str())];
    let (out, pid) = launched_compare(&dir, "tcp", "cd,sd", &env);
    assert_ok(&out);
    let json = results(&dir);
    assert!(json["setup"].as_str().unwrap().contains("`tcp` fabric"));
    for r in json["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{}: {}", r["label"], r["reason"]);
        assert_eq!(r["spec"]["fabric"], "tcp");
        let f = &r["figures"];
        assert!(f["throughput_ops_s"].as_f64().unwrap() > 0.0);
        assert_eq!(f["get"]["misses"], 0);
        // Every GET of a value on another node crossed the fabric.
        assert!(f["get"]["remote_bytes_per_op"].as_f64().unwrap() > 0.0);
        let run_dir = Path::new(r["dir"].as_str().unwrap());
        let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
        assert!(config.contains("kind = \"tcp\""), "{config}");
        assert!(config.contains("secret = \"\""), "no secret in the file");
        assert!(!run_dir.join("secret").exists(), "removed after the run");
    }
    assert_clean(&dir, pid);
}

#[test]
fn a_crashing_launched_node_ends_the_launcher_and_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("crash");
    let port = free_port();
    let env = [
        ("NESSIE_BENCH_FAIL_NODE", "1"),
        ("NESSIE_RENDEZVOUS_PORT", port.as_str()),
    ];
    let (out, pid) = launched_compare(&dir, "tcp", "cd", &env);
    let reason = failed_reason(&out, &dir);
    assert!(reason.contains("srun"), "{reason}");
    assert!(
        reason.contains("crashing on purpose"),
        "node 1's stderr: {reason}"
    );
    let json = results(&dir);
    let run_dir = Path::new(json["runs"][0]["dir"].as_str().unwrap());
    assert!(!run_dir.join("secret").exists());
    assert_clean(&dir, pid);
}

#[test]
fn launcher_flags_that_cannot_run_are_refused() {
    let mut cases = vec![
        vec!["compare", "--launcher-arg=-N1"],
        vec!["compare", "--launcher-program", FAKE_SRUN],
        vec![
            "compare",
            "--launcher",
            "mpirun",
            "--launcher-program",
            "/nonexistent/mpirun",
        ],
        vec!["compare", "--launcher", "pbs"],
    ];
    if !nessie::VERBS_BUILT {
        cases.push(vec!["compare", "--fabric", "verbs"]);
    }
    for args in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = bench()
            .args(&args)
            .arg("--out")
            .arg(tmp.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !tmp.path().join("results.json").exists(),
            "{args:?}: refused before any run"
        );
    }
}

/// Writes the files of a 3-node CD run on `fabric` into `dir` (config,
/// spec) as the harness would; their paths.
fn run_files(dir: &Path, fabric: harness::launcher::Fabric) -> (PathBuf, PathBuf) {
    let mut spec = harness::spec::RunSpec::new(
        "t",
        nessie_examples::StoreKind::Cd,
        harness::workload::WorkloadSpec {
            keys: 100,
            ..Default::default()
        },
    );
    spec.fabric = fabric;
    let cluster = format!("launcher-test-{}", std::process::id());
    let config = spec.config(&cluster).unwrap();
    let (c, s) = (dir.join("config.toml"), dir.join("spec.json"));
    std::fs::write(&c, config.to_toml().unwrap()).unwrap();
    std::fs::write(&s, serde_json::to_vec(&spec).unwrap()).unwrap();
    (c, s)
}

/// Runs one launched node (as task 1 of 3 of a Slurm step) with `files`;
/// the message of the error event it printed.
fn launched_node_error(files: &(PathBuf, PathBuf), env: &[(&str, &str)]) -> String {
    let out = bench()
        .arg("node")
        .arg("--config")
        .arg(&files.0)
        .arg("--spec")
        .arg(&files.1)
        .args(["--report-dir", "/nonexistent"])
        .envs([
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_NODELIST", "h[0-2]"),
        ])
        .envs(env.iter().copied())
        .env_remove("NESSIE_SECRET")
        .env_remove("NESSIE_SECRET_FILE")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line = String::from_utf8_lossy(&out.stdout);
    let event: serde_json::Value = serde_json::from_str(line.trim()).expect("one event line");
    assert_eq!(event["event"], "error");
    assert_eq!(event["node"], 1, "the id came from the launcher: {event}");
    event["message"].as_str().unwrap().to_owned()
}

#[test]
fn a_launched_node_refuses_what_cannot_work_where_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    // shm: the harness's marker is not in this host's /dev/shm.
    let shm = run_files(tmp.path(), harness::launcher::Fabric::Shm);
    let message = launched_node_error(&shm, &[]);
    assert!(message.contains("use --fabric tcp"), "{message}");
    // tcp: no secret anywhere.
    let tcp = run_files(tmp.path(), harness::launcher::Fabric::Tcp);
    let message = launched_node_error(&tcp, &[]);
    assert!(message.contains("no cluster secret"), "{message}");
    // A launch of another size than the run's.
    let message = launched_node_error(&tcp, &[("SLURM_NTASKS", "2")]);
    assert!(message.contains("2 tasks for a cluster of 3"), "{message}");
}
