//! `--replicas` end to end: a tiny `compare --replicas 2` on a local
//! three-process cluster reports CD at r = 1 and r = 2 side by side, the
//! nodes really ran with those copies, and the counts move as the protocol
//! says (a PUT pays for its mirrors, a GET does not); `peers` and `job`
//! hand CD its copies too; flags the cluster cannot hold are refused
//! before anything starts.

mod support;

use std::path::Path;
use support::{assert_ok, bench, results, run};

/// The run of `json` labelled `label`.
fn run_named<'a>(json: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no run {label}: {}", json["runs"]))
}

/// Round trips per operation of `kind` (`get`, `put`) of a measured run.
fn round_trips(run: &serde_json::Value, kind: &str) -> f64 {
    assert_eq!(run["status"], "ok", "{}: {}", run["label"], run["reason"]);
    run["figures"][kind]["round_trips_per_op"].as_f64().unwrap()
}

/// The `replicas` line of the config.toml a run's nodes read.
fn configured_replicas(run: &serde_json::Value) -> String {
    let dir = Path::new(run["dir"].as_str().unwrap());
    let text = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    text.lines()
        .find(|l| l.starts_with("replicas"))
        .unwrap_or("replicas missing")
        .to_owned()
}

#[test]
fn compare_with_two_replicas_reports_both_levels_and_what_the_mirrors_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("replicas");
    let (out, _) = run(
        &[
            "compare",
            "--quick",
            "--duration-ms",
            "500",
            "--keys",
            "2000",
            "--get-ratio",
            "0.5",
            "--nodes",
            "3",
            "--threads",
            "1",
            "--systems",
            "cd,sd",
            "--replicas",
            "2",
        ],
        &dir,
        &[],
    );
    assert_ok(&out);
    let json = results(&dir);
    let labels: Vec<&str> = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["CD r=1", "CD r=2", "SD"]);
    let (one, two) = (run_named(&json, "CD r=1"), run_named(&json, "CD r=2"));
    assert_eq!(configured_replicas(one), "replicas = 1");
    assert_eq!(configured_replicas(two), "replicas = 2");
    // SD is unreplicated whatever the flag says.
    assert_eq!(configured_replicas(run_named(&json, "SD")), "replicas = 1");

    // Counts, not times. A PUT at r = 2 also writes its image to a mirror
    // and commits the mirrors first: at least one more round trip (two or
    // three unless a mirror happens to be the writer's own node).
    let (put1, put2) = (round_trips(one, "put"), round_trips(two, "put"));
    assert!(put2 > put1 + 0.5, "PUT round trips: r=1 {put1}, r=2 {put2}");
    // A GET reads only the primaries and costs the same verbs at both r.
    // Its round trips count only verbs to other nodes, and where a key's
    // entry lives (its last writer's node) depends on how the nodes' PUTs
    // interleave in each run, so the two runs agree to within that noise
    // (a few hundredths over 2,000 keys), not to the last digit.
    let (get1, get2) = (round_trips(one, "get"), round_trips(two, "get"));
    assert!(
        (get2 - get1).abs() <= 0.1 * get1,
        "GET round trips: r=1 {get1}, r=2 {get2}"
    );

    // The cost table: a row per r, then their ratio; the summary's r column.
    let tables = json["tables"].as_array().unwrap();
    let table = |name: &str| {
        tables
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no table {name}"))
    };
    let cost = table("replication");
    let rows = cost["rows"].as_array().unwrap();
    let first = |i: usize| rows[i][0].as_str().unwrap().to_owned();
    assert_eq!([first(0), first(1), first(2)], ["1", "2", "2 / 1"]);
    let col = |name: &str| {
        cost["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c == name)
            .unwrap()
    };
    let ratio = |name: &str| rows[2][col(name)].as_str().unwrap().parse::<f64>();
    assert!(ratio("round trips/PUT").unwrap() > 1.0, "{}", rows[2]);
    assert!((ratio("round trips/GET").unwrap() - 1.0).abs() <= 0.1);
    let summary = table("summary");
    assert_eq!(summary["columns"][1], "r");
    let r_cells: Vec<&str> = summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_str().unwrap())
        .collect();
    assert_eq!(r_cells, ["1", "2", "1 (unreplicated)"]);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Cost of replication"), "{md}");
    assert!(dir.join("replication.csv").exists());
}

#[test]
fn peers_gives_cd_its_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("peers");
    let (out, _) = run(
        &[
            "peers",
            "--quick",
            "--duration-ms",
            "100",
            "--keys",
            "300",
            "--threads",
            "1",
            "--systems",
            "cd",
            "--replicas",
            "3",
        ],
        &dir,
        &[],
    );
    assert_ok(&out);
    let json = results(&dir);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["label"], "CD r=3");
    assert_eq!(configured_replicas(&runs[0]), "replicas = 3");
    assert_eq!(runs[0]["status"], "ok", "{}", runs[0]["reason"]);
    assert!(runs[0]["figures"]["throughput_ops_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_job_on_cd_with_two_replicas_writes_its_partitions_to_the_mirrors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("job");
    let args = ["job", "--quick", "--input-size", "4MiB", "--stores", "cd"];
    let (out, _) = run(&[&args[..], &["--replicas", "2"]].concat(), &dir, &[]);
    assert_ok(&out);
    let json = results(&dir);
    let job = &json["jobs"][0];
    assert_eq!(job["status"], "ok", "{}", job["reason"]);
    let plan = std::fs::read(Path::new(job["dir"].as_str().unwrap()).join("plan.json")).unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan).unwrap();
    assert_eq!(plan["config"]["replicas"], 2);
    // A CD PUT writes its value into the writer's own memory (at r = 1 the
    // shuffle moves no value bytes over the fabric); its mirror is on the
    // next node, so at r = 2 every value crosses the fabric once.
    let shuffled: u64 = job["report"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["phases"].as_array().unwrap())
        .filter(|p| p["phase"] == "shuffle_write")
        .map(|p| p["verbs"]["remote_bytes"].as_u64().unwrap())
        .sum();
    assert!(
        shuffled >= (4 << 20) * 9 / 10,
        "{shuffled} bytes over the fabric"
    );
}

#[test]
fn replicas_the_cluster_cannot_hold_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["compare", "--replicas", "2", "--nodes", "2"][..],
            "at least 3 nodes",
        ),
        (
            &["compare", "--replicas", "3", "--nodes", "2"],
            "at least 3 nodes",
        ),
        (
            &["peers", "--replicas", "4", "--nodes", "3"],
            "no more replicas than nodes",
        ),
        (
            &["compare", "--replicas", "2", "--systems", "sd"],
            "leaves CD out",
        ),
        (&["compare", "--replicas", "0"], "replica count"),
        (&["compare", "--replicas", "5"], "replica count"),
        (&["compare", "--replica-rounds", "2"], "--replicas"),
        (
            &["job", "--replicas", "2", "--nodes", "2"],
            "at least 3 nodes",
        ),
        (
            &["job", "--replicas", "2", "--stores", "sd"],
            "leaves CD out",
        ),
    ] {
        let out = bench()
            .args(args)
            .arg("--out")
            .arg(tmp.path().join("refused"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(!tmp.path().join("refused").join("runs").exists());
}
