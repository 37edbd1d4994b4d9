//! GET, PUT and DELETE with the retries a job may safely make, and errors
//! that name the key.
//!
//! A store operation that fails with [`nessie::Error::Timeout`] has an
//! unknown outcome. Every key of a job has exactly one writer, which writes
//! it once with one value (and deletes it only after everyone is done with
//! it), so repeating a PUT or DELETE whose outcome is unknown is harmless:
//! the key ends with the same value either way. GETs are repeated too.
//! [`nessie::Error::DataTableFull`] is retried as well, since slots of
//! replaced entries come back once they expire. Anything else is returned
//! at once.

use crate::JobError;
use nessie::KvClient;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// Attempts per operation before a retryable error is returned.
pub const ATTEMPTS: u32 = 6;

/// Back-off before the first retry; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(2);

fn retryable(e: &nessie::Error) -> bool {
    matches!(e, nessie::Error::Timeout | nessie::Error::DataTableFull)
}

fn with_retries<T>(
    op: &'static str,
    key: &str,
    mut f: impl FnMut() -> Result<T, nessie::Error>,
) -> Result<T, JobError> {
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if retryable(&e) && attempt < ATTEMPTS => {
                std::thread::sleep(backoff);
                backoff *= 2;
                attempt += 1;
            }
            Err(e) => return Err(JobError::store(op, key)(e)),
        }
    }
}

/// Stores `value` under `key`.
///
/// # Errors
/// [`JobError::Store`] naming the key.
pub fn put<C: KvClient + ?Sized>(client: &mut C, key: &str, value: &[u8]) -> Result<(), JobError> {
    with_retries("PUT", key, || client.put(key.as_bytes(), value))
}

/// Reads `key` into `out`; whether it was there.
///
/// # Errors
/// [`JobError::Store`] naming the key.
pub fn get_into<C: KvClient + ?Sized>(
    client: &mut C,
    key: &str,
    out: &mut Vec<u8>,
) -> Result<bool, JobError> {
    with_retries("GET", key, || client.get_into(key.as_bytes(), out))
}

/// Reads `key`, which an earlier step must have written.
///
/// # Errors
/// [`JobError::Missing`] if it is absent, [`JobError::Store`] otherwise.
pub fn get_required<C: KvClient + ?Sized>(
    client: &mut C,
    key: &str,
    out: &mut Vec<u8>,
) -> Result<(), JobError> {
    if get_into(client, key, out)? {
        Ok(())
    } else {
        Err(JobError::Missing {
            key: key.to_owned(),
        })
    }
}

/// Removes `key`; whether it was there (a retried DELETE may say `false`
/// although its first attempt removed the key).
///
/// # Errors
/// [`JobError::Store`] naming the key.
pub fn delete<C: KvClient + ?Sized>(client: &mut C, key: &str) -> Result<bool, JobError> {
    with_retries("DELETE", key, || client.delete(key.as_bytes()))
}

/// Largest JSON document [`put_json`] stores (small summaries only).
pub const MAX_JSON: usize = 900;

/// Stores `value` as JSON under `key` (digests, summaries).
///
/// # Errors
/// [`JobError::Malformed`] if it does not serialise to at most
/// [`MAX_JSON`] bytes; [`JobError::Store`] if the PUT fails.
pub fn put_json<C: KvClient + ?Sized, T: Serialize>(
    client: &mut C,
    key: &str,
    value: &T,
) -> Result<(), JobError> {
    let bytes =
        serde_json::to_vec(value).map_err(|e| JobError::malformed(key, "JSON", e.to_string()))?;
    if bytes.len() > MAX_JSON {
        return Err(JobError::malformed(
            key,
            "JSON",
            format!("{} bytes is over {MAX_JSON}", bytes.len()),
        ));
    }
    put(client, key, &bytes)
}

/// Reads the JSON value [`put_json`] stored under `key`, which an earlier
/// step must have written.
///
/// # Errors
/// [`JobError::Missing`], [`JobError::Malformed`] if it does not decode,
/// [`JobError::Store`] if the GET fails.
pub fn get_json<C: KvClient + ?Sized, T: DeserializeOwned>(
    client: &mut C,
    key: &str,
) -> Result<T, JobError> {
    let mut bytes = Vec::new();
    get_required(client, key, &mut bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| JobError::malformed(key, "JSON", e.to_string()))
}
