//! Builds the C example (examples/c/job.c) with `cc` against the header and
//! the cdylib, and runs it: three nodes in one process, then a job of three
//! processes on the shm fabric. Skipped with a banner when `cc` is missing
//! (a failure under `NESSIE_REQUIRE_TOOLS=1`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Builds `libnessie_c.so` (`cargo test` builds only the rlib its tests
/// link) and returns the directory holding it: `target/<profile>`, beside
/// this test's `deps/` directory.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args([
            "build",
            "--quiet",
            "--lib",
            "-p",
            "nessie-c",
            "--manifest-path",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    if dir.file_name().is_some_and(|p| p == "release") {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("run cargo build");
    assert!(status.success(), "cargo build -p nessie-c failed");
    dir
}

fn build(out: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    assert!(
        lib.join("libnessie_c.so").exists(),
        "{} has no libnessie_c.so",
        lib.display()
    );
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
        ])
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("examples/c/job.c"))
        .arg("-L")
        .arg(&lib)
        .arg("-lnessie_c")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed to build examples/c/job.c");
}

fn run_checked(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect(what);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed: {text}");
    text
}

#[test]
fn the_c_example_builds_and_runs_in_process_and_on_shm() {
    if !optional_tools::require(
        "the_c_example_builds_and_runs_in_process_and_on_shm",
        &["cc"],
        "a C compiler (apt-get install gcc)",
    ) {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let exe = scratch.path().join("job");
    build(&exe);
    let local = run_checked(&mut Command::new(&exe), "the in-process run");
    assert!(local.contains("3 nodes greeted each other"), "{local}");

    // Three processes on shm (region files in /dev/shm, named after the
    // cluster), each told its node by NESSIE_NODE_ID.
    let cluster = format!("c-test-{}", std::process::id());
    let children: Vec<_> = (0..3)
        .map(|id| {
            let mut cmd = Command::new(&exe);
            cmd.args(["shm", &cluster])
                .env("NESSIE_NODE_ID", id.to_string())
                .env("NESSIE_NODES", "3");
            for (var, _) in std::env::vars() {
                if ["SLURM_", "OMPI_", "PMI_", "RANK", "WORLD_SIZE"]
                    .iter()
                    .any(|p| var.starts_with(p))
                {
                    cmd.env_remove(var);
                }
            }
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the example")
        })
        .collect();
    // The region files stay after the nodes stop; remove them however the
    // test ends.
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(Path::new("/dev/shm").join(format!("nessie-{cluster}")));
    for (id, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "node {id} failed: {text}");
        assert!(text.contains("read every node's greeting"), "{text}");
    }
}
