//! What the end-to-end tests of `nessie-bench` share: running the binary,
//! reading its results, and looking for what a run may have left behind.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `nessie-bench` binary.
pub(crate) fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nessie-bench"))
}

/// The results.json a run wrote into `dir`.
pub(crate) fn results(dir: &Path) -> serde_json::Value {
    let text = std::fs::read(dir.join("results.json")).expect("results.json written");
    serde_json::from_slice(&text).expect("results.json is JSON")
}

/// The reason of the one run in `dir`, which must have failed with the
/// harness exiting 1.
pub(crate) fn failed_reason(out: &Output, dir: &Path) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = results(dir);
    let run = &json["runs"][0];
    assert_eq!(run["status"], "failed");
    run["reason"].as_str().expect("a reason").to_owned()
}

/// `/dev/shm` entries of clusters of harness `pid`.
pub(crate) fn leftover_shm(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&format!("bench-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Node processes of a run whose files live under `dir` that still run.
pub(crate) fn leftover_processes(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&needle) && cmd.contains(" node ") {
                found.push(cmd);
            }
        }
    }
    found
}

/// Runs `nessie-bench <args> --out <dir>` with `env`; its output and pid.
pub(crate) fn run(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> (Output, u32) {
    let mut cmd = bench();
    cmd.args(args).arg("--out").arg(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// Asserts that a run exited 0, showing its stderr if not.
pub(crate) fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `done` every 20 ms until it holds or `limit` has passed; whether
/// it held.
pub(crate) fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
