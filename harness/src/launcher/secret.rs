//! The cluster secret of a `tcp` or `verbs` run: the caller's, or a fresh one in a
//! file only its owner reads; never on a command line.

use crate::error::{HarnessError, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The cluster secret of one `tcp` or `verbs` run, as the node processes find it: the
/// caller's (`NESSIE_SECRET` or `NESSIE_SECRET_FILE` set), or a fresh one
/// in a file of the run directory with mode 0600, named to the nodes by
/// `NESSIE_SECRET_FILE` and removed when this drops. Never an argument.
#[derive(Debug, Default)]
pub struct RunSecret {
    owned: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    forwarded: Vec<&'static str>,
}

impl RunSecret {
    /// No secret (the `shm` fabric).
    #[must_use]
    pub fn none() -> Self {
        RunSecret::default()
    }

    /// The secret of a `tcp` or `verbs` run in `dir`; `var` reads the harness's
    /// environment.
    ///
    /// # Errors
    /// [`HarnessError::Store`] if the caller's secret is unusable (a file
    /// open to others, say); [`HarnessError::Io`] if the file cannot be
    /// written.
    pub fn prepare(dir: &Path, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let set = |name: &str| var(name).is_some_and(|v| !v.is_empty());
        let callers: Vec<&'static str> = ["NESSIE_SECRET", "NESSIE_SECRET_FILE"]
            .into_iter()
            .filter(|name| set(name))
            .collect();
        if !callers.is_empty() {
            // Refused here, once, rather than by every node.
            nessie::bootstrap::secret_from("", &var)?;
            return Ok(RunSecret {
                owned: None,
                env: Vec::new(),
                forwarded: callers,
            });
        }
        let path = dir.join("secret");
        let mut bytes = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
        let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let _ = std::fs::remove_file(&path);
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(HarnessError::io("creating", &path))?
        };
        let secret = RunSecret {
            owned: Some(path.clone()),
            env: vec![("NESSIE_SECRET_FILE".into(), path.clone().into())],
            forwarded: vec!["NESSIE_SECRET_FILE"],
        };
        std::io::Write::write_all(&mut file, text.as_bytes())
            .map_err(HarnessError::io("writing", &path))?;
        Ok(secret)
    }

    /// Variables to add to the node processes' (or launcher's)
    /// environment.
    #[must_use]
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// Names of the variables that carry the secret, for `mpirun -x`.
    #[must_use]
    pub fn forwarded(&self) -> &[&'static str] {
        &self.forwarded
    }
}

impl Drop for RunSecret {
    fn drop(&mut self) {
        if let Some(p) = &self.owned {
            let _ = std::fs::remove_file(p);
        }
    }
}
