//! Where the cluster secret comes from: never the command line.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::Error;

/// The longest secret file read, bytes.
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// The cluster secret from this process's environment.
///
/// The same as [`secret_from`] with the process's environment variables.
///
/// # Errors
/// As [`secret_from`].
pub fn secret(configured: &str) -> Result<String, Error> {
    secret_from(configured, super::env_var)
}

/// The cluster secret, from the first of these that is set:
///
/// 1. `configured`, the configuration's value, if it is not empty;
/// 2. the variable `NESSIE_SECRET`, if it is not empty;
/// 3. the file named by the variable `NESSIE_SECRET_FILE`, which must be a
///    regular file owned by the current user that neither group nor others
///    may read or write (`chmod 600`); one trailing newline (`\n` or `\r\n`)
///    is removed, and what remains must not be empty.
///
/// A secret is never taken from the command line, where every user of the
/// host can read it. `var` looks up one variable (an empty value counts as
/// unset).
///
/// # Errors
/// [`Error::Config`] if none of the three is set, or if the secret file is
/// missing, unreadable, not a regular file, owned by another user, open to
/// group or others, larger than 64 KiB, not UTF-8 or empty.
pub fn secret_from(
    configured: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<String, Error> {
    if !configured.is_empty() {
        return Ok(configured.to_owned());
    }
    let var = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(secret) = var("NESSIE_SECRET") {
        return Ok(secret);
    }
    if let Some(path) = var("NESSIE_SECRET_FILE") {
        return read_secret_file(Path::new(&path))
            .map_err(|m| Error::Config(format!("NESSIE_SECRET_FILE={path:?}: {m}")));
    }
    Err(Error::Config(
        "no cluster secret: set it in the configuration (fabric.secret), in the environment \
         variable NESSIE_SECRET, or in a file of your own with mode 0600 named by \
         NESSIE_SECRET_FILE (a secret is never read from the command line)"
            .to_owned(),
    ))
}

/// Reads a secret file after checking its owner and mode.
fn read_secret_file(path: &Path) -> Result<String, String> {
    // Checked before opening, so that a FIFO or device never blocks the
    // open, and again on the opened file, so that a swap in between is seen.
    let before = std::fs::metadata(path).map_err(|e| e.to_string())?;
    check_secret_metadata(&before)?;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    check_secret_metadata(&meta)?;
    if (meta.dev(), meta.ino()) != (before.dev(), before.ino()) {
        return Err("the file changed while it was opened".to_owned());
    }
    if meta.len() > MAX_SECRET_FILE {
        return Err(format!("larger than {MAX_SECRET_FILE} bytes"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SECRET_FILE {
        return Err(format!("larger than {MAX_SECRET_FILE} bytes"));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err("the file is empty".to_owned());
    }
    Ok(text)
}

/// A regular file, of this user, closed to group and others.
fn check_secret_metadata(meta: &std::fs::Metadata) -> Result<(), String> {
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() != uid {
        return Err(format!(
            "owned by user {} but this process runs as user {uid}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {mode:04o} lets group or others at the secret; chmod 600 it"
        ));
    }
    Ok(())
}
