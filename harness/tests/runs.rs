//! End-to-end runs of `nessie-bench` against real multi-process clusters:
//! results are written and sane, and nothing is left behind — after a normal
//! run, a crashed node, or Ctrl-C.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{
    assert_ok, bench, failed_reason, leftover_processes, leftover_shm, results, run, wait_until,
};

fn assert_clean(dir: &Path, pid: u32) {
    assert!(
        leftover_processes(dir).is_empty(),
        "{:?}",
        leftover_processes(dir)
    );
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}

/// A quick `compare` of the `null` store only (no store: the
/// orchestration alone), measured for `duration_ms`.
fn null_compare(dir: &Path, duration_ms: &str, keys: &str, env: &[(&str, &str)]) -> (Output, u32) {
    let args = ["compare", "--quick", "--duration-ms", duration_ms];
    run(
        &[&args[..], &["--systems", "null", "--keys", keys]].concat(),
        dir,
        env,
    )
}

#[test]
fn compare_quick_measures_every_available_system() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("compare");
    let started = Instant::now();
    let (out, pid) = run(
        &[
            "compare",
            "--quick",
            "--duration-ms",
            "300",
            "--keys",
            "600",
            "--json",
        ],
        &dir,
        &[],
    );
    assert_ok(&out);
    // --json: stdout is exactly the results document.
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let json = results(&dir);
    assert_eq!(printed["experiment"], json["experiment"]);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "CD, SD and HY");
    // All three stores are built in, so every run must have measured.
    for r in runs {
        assert_eq!(r["status"], "ok", "run {}: {}", r["label"], r["reason"]);
        let tp = r["figures"]["throughput_ops_s"].as_f64().unwrap();
        assert!(tp > 0.0, "{} measured no throughput", r["label"]);
    }
    let systems: Vec<&str> = runs.iter().map(|r| r["system"].as_str().unwrap()).collect();
    assert_eq!(systems, ["cd", "sd", "hy"]);
    for f in [
        "report.md",
        "summary.csv",
        "data-tables.csv",
        "throughput.svg",
        "throughput.png",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    // CD's nodes report the tables they used: every node wrote entries,
    // and no more slots were ever in use than the table has.
    let cd = &runs[0]["figures"]["nodes"];
    for n in cd.as_array().unwrap() {
        let tables = n["tables"].as_array().unwrap();
        assert!(!tables.is_empty(), "node {} reported no table", n["node"]);
        for t in tables {
            let (peak, slots) = (t["peak_in_use"].as_u64(), t["slots"].as_u64());
            assert!(peak > Some(0) && peak <= slots, "{t}");
        }
    }
    assert_clean(&dir, pid);
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn the_orchestration_works_without_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("null");
    let (out, pid) = null_compare(&dir, "200", "300", &[]);
    assert_ok(&out);
    let json = results(&dir);
    let run = &json["runs"][0];
    assert_eq!(run["status"], "ok");
    let f = &run["figures"];
    assert!(f["throughput_ops_s"].as_f64().unwrap() > 0.0);
    assert_eq!(f["get"]["misses"], 0);
    assert_eq!(f["cpu_s_per_node"].as_array().unwrap().len(), 3);
    assert!(f["get"]["p99_us"].as_f64().unwrap() > 0.0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("| null |"));
    assert_clean(&dir, pid);
}

#[test]
fn a_crashing_node_fails_the_run_and_is_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("crash");
    let (out, pid) = null_compare(&dir, "2000", "300", &[("NESSIE_BENCH_FAIL_NODE", "1")]);
    let reason = failed_reason(&out, &dir);
    assert!(reason.contains("node 1 failed"), "{reason}");
    assert_clean(&dir, pid);
}

/// A 20 s `contention` run of `system` with one hog, to be interrupted,
/// writing into `tmp/name`: that directory, the harness and its pid.
fn long_run(system: &str, tmp: &Path, name: &str) -> (PathBuf, Child, u32) {
    let dir = tmp.join(name);
    let child = bench()
        .args(["contention", "--quick", "--duration-ms", "20000"])
        .args(["--systems", system, "--keys", "300", "--hogs", "1"])
        .arg("--out")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    (dir, child, pid)
}

#[test]
fn ctrl_c_tears_everything_down() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, mut child, pid) = long_run("null", tmp.path(), "sigint");
    // Wait until the run phase has started (a node's stderr file exists and
    // the nodes are up), then interrupt.
    wait_until(Duration::from_secs(20), || {
        leftover_processes(&dir).len() >= 3
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !leftover_processes(&dir).is_empty(),
        "the nodes never started"
    );
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_clean(&dir, pid);
    let json = results(&dir);
    assert!(json["notes"].to_string().contains("interrupted"));
}

/// Pids of the direct children of `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            if let Ok(child) = e.file_name().to_string_lossy().parse() {
                out.push(child);
            }
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, a)| a.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_killed_harness_takes_its_processes_along_and_its_files_are_swept() {
    let tmp = tempfile::tempdir().unwrap();
    let (_dir, mut child, pid) = long_run("cd", tmp.path(), "sigkill");
    let mut kids = Vec::new();
    wait_until(Duration::from_secs(20), || {
        kids = children_of(pid);
        kids.len() >= 4 && !leftover_shm(pid).is_empty()
    });
    assert!(kids.len() >= 4, "3 nodes and a hog should run: {kids:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until(Duration::from_secs(5), || !kids.iter().any(|&k| alive(k)));
    let alive_kids: Vec<u32> = kids.iter().copied().filter(|&k| alive(k)).collect();
    assert!(
        alive_kids.is_empty(),
        "children outlived the harness: {alive_kids:?}"
    );
    // SIGKILL leaves the shm files; the next harness sweeps them.
    assert!(!leftover_shm(pid).is_empty());
    let next = tmp.path().join("next");
    let (out, _) = null_compare(&next, "50", "100", &[]);
    assert_ok(&out);
    assert!(leftover_shm(pid).is_empty(), "{:?}", leftover_shm(pid));
}

#[test]
fn bad_flags_are_refused_without_a_panic() {
    for args in [
        &["compare", "--value-size", "0"][..],
        &["compare", "--get-ratio", "1.5"],
        &["compare", "--nodes", "0"],
        &["sweep", "--value-sizes", "12q"],
        &["compare", "--systems", "mongo"],
        &["frobnicate"],
    ] {
        let out = bench().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = bench()
        .args([
            "compare",
            "--keys",
            "100000",
            "--key-size",
            "8",
            "--systems",
            "null",
        ])
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("key size"), "{stderr}");
}
