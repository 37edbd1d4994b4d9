//! `nessie-bench job` end to end: a small sort through every store on real
//! task processes (shm fabric), a report in the usual format, and nothing
//! left behind.

mod support;

use std::path::Path;
use support::{assert_ok, leftover_shm, results, run};

/// Runs `nessie-bench job <args> --out <dir>`.
fn job(args: &[&str], dir: &Path) -> (std::process::Output, u32) {
    run(&[&["job"][..], args].concat(), dir, &[])
}

#[test]
fn a_small_sort_runs_on_every_store_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (out, pid) = job(
        &["--quick", "--input-size", "2MiB", "--max-value", "256KiB"],
        dir.path(),
    );
    assert_ok(&out);
    let r = results(dir.path());
    assert_eq!(r["experiment"], "job");
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4);
    for j in jobs {
        let store = j["store"].as_str().unwrap();
        if store == "redis" && j["status"] == "skipped" {
            optional_tools::skip(
                "a_small_sort_runs_on_every_store_and_is_reported (redis)",
                j["reason"].as_str().unwrap_or_default(),
                "apt-get install redis-server",
            );
            continue;
        }
        assert_eq!(j["status"], "ok", "{store}: {}", j["reason"]);
        let tasks = j["report"]["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), 3);
        let records: u64 = tasks
            .iter()
            .map(|t| t["records_out"].as_u64().unwrap())
            .sum();
        assert_eq!(records, (2 << 20) / 100, "{store}");
        assert!(tasks
            .iter()
            .all(|t| t["process_cpu_secs"].as_f64().is_some()));
    }
    for f in ["report.md", "job_time.csv", "job_bytes.csv", "job_cpu.csv"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("shuffle-write fabric"), "{md}");
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}

#[test]
fn word_count_runs_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = job(
        &[
            "--quick",
            "--app",
            "wordcount",
            "--in-process",
            "--stores",
            "cd,sd",
            "--input-size",
            "1MiB",
            "--json",
        ],
        dir.path(),
    );
    assert_ok(&out);
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(printed["params"]["app"], "wordcount");
}

#[test]
fn bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = job(&["--max-value", "100"], dir.path());
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
