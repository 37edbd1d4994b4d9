//! How the workspace's tests meet optional system tools (`redis-server`,
//! `memcached`, `ipmi_sim`, `ipmitool`, `ip`, …): find them on `PATH`, or
//! skip the test with a banner that cannot be missed.
//!
//! A fresh machine without the tools passes `cargo test --workspace` with
//! a SKIPPED banner per test that could not run. With
//! `NESSIE_REQUIRE_TOOLS=1` (set by `.ci/run`, which installs the tools)
//! every skip is a failure instead, so a missing install step cannot hide.
//!
//! ```no_run
//! if optional_tools::require("my_test", &["redis-server"], "apt-get install redis-server") {
//!     // … the test proper …
//! }
//! ```

use std::io::Write;
use std::path::PathBuf;

/// The environment variable that turns every skip into a failure.
pub const REQUIRE_ENV: &str = "NESSIE_REQUIRE_TOOLS";

/// Whether skips are failures (`NESSIE_REQUIRE_TOOLS` set to anything but
/// empty or `0`).
#[must_use]
pub fn required() -> bool {
    std::env::var_os(REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The executable `program` on `PATH`, if any.
#[must_use]
pub fn find(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The banner of a skipped test.
fn banner(test: &str, why: &str, install: &str) -> String {
    let rule = "!".repeat(72);
    format!(
        "\n{rule}\n!!! SKIPPED {test}: {why}\n!!! needs: {install}\n\
         !!! ({REQUIRE_ENV}=1 makes this a failure)\n{rule}\n"
    )
}

/// Skips `test` because `why`, naming what would let it run (`install`).
/// Call it, then return from the test.
///
/// # Panics
/// With the same message, when `NESSIE_REQUIRE_TOOLS` is set.
#[track_caller]
pub fn skip(test: &str, why: &str, install: &str) {
    let msg = banner(test, why, install);
    assert!(
        !required(),
        "{msg}{REQUIRE_ENV} is set, so this is a failure"
    );
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of passing tests, and this must be seen.
    let _ = std::io::stderr().write_all(msg.as_bytes());
}

/// Whether every one of `programs` is on `PATH`; if not, skips `test`
/// (see [`skip`]) naming the first missing one.
///
/// # Panics
/// When a program is missing and `NESSIE_REQUIRE_TOOLS` is set.
#[must_use]
#[track_caller]
pub fn require(test: &str, programs: &[&str], install: &str) -> bool {
    match programs.iter().find(|p| find(p).is_none()) {
        Some(missing) => {
            skip(test, &format!("`{missing}` is not on PATH"), install);
            false
        }
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_is_found_and_a_made_up_name_is_not() {
        assert!(find("sh").is_some_and(|p| p.is_absolute()));
        assert!(find("no-such-program-for-optional-tools").is_none());
    }

    #[test]
    fn the_banner_names_the_test_the_reason_and_the_switch() {
        let b = banner("t", "`x` is not on PATH", "apt-get install x");
        for part in [
            "SKIPPED t: `x` is not on PATH",
            "apt-get install x",
            "NESSIE_REQUIRE_TOOLS=1",
        ] {
            assert!(b.contains(part), "{part}: {b}");
        }
    }
}
