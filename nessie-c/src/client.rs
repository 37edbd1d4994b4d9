//! Client handles: GET, PUT and DELETE with caller-owned buffers.

use crate::{bytes, fail, guard, null, store_error, NessieStatus};

/// A client of the store on one node. Opaque; one thread at a time; freed
/// with `nessie_client_free`.
#[derive(Debug)]
pub struct NessieClient {
    inner: nessie::Client,
}

impl NessieClient {
    pub(crate) fn new(inner: nessie::Client) -> NessieClient {
        NessieClient { inner }
    }
}

/// `NESSIE_INVALID_ARGUMENT` for a null pointer with a non-zero length.
fn no_bytes(what: &str) -> NessieStatus {
    fail(
        NessieStatus::NessieInvalidArgument,
        format!("{what} is NULL with a non-zero length"),
    )
}

/// Stores `value` (`value_len` bytes) under `key` (`key_len` bytes).
///
/// # Safety
/// `client` is a live handle no other thread uses during the call; `key`
/// and `value` point to `key_len` and `value_len` readable bytes (either
/// may be NULL with a length of 0).
#[no_mangle]
pub unsafe extern "C" fn nessie_client_put(
    client: *mut NessieClient,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> NessieStatus {
    guard(|| {
        // SAFETY: the caller promises a live handle used by this thread only.
        let Some(client) = (unsafe { client.as_mut() }) else {
            return null("client");
        };
        // SAFETY: the caller promises `key_len` readable bytes at `key`.
        let Some(key) = (unsafe { bytes(key, key_len) }) else {
            return no_bytes("key");
        };
        // SAFETY: the caller promises `value_len` readable bytes at `value`.
        let Some(value) = (unsafe { bytes(value, value_len) }) else {
            return no_bytes("value");
        };
        match client.inner.put(key, value) {
            Ok(()) => NessieStatus::NessieOk,
            Err(e) => store_error(&e),
        }
    })
}

/// GETs `key` into the caller's buffer `buf` (`buf_len` bytes). Returns
/// `NESSIE_OK` with the value at the start of `buf` and its length in
/// `*value_len`; `NESSIE_NOT_FOUND` if the key holds no value;
/// `NESSIE_BUFFER_TOO_SMALL` with the length needed in `*value_len` (the
/// buffer untouched: call again with a larger one).
///
/// # Safety
/// `client` is a live handle no other thread uses during the call; `key`
/// points to `key_len` readable bytes; `buf` to `buf_len` writable bytes
/// (NULL if `buf_len` is 0); `value_len` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nessie_client_get(
    client: *mut NessieClient,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    buf_len: usize,
    value_len: *mut usize,
) -> NessieStatus {
    guard(|| {
        // SAFETY: the caller promises a live handle used by this thread only.
        let Some(client) = (unsafe { client.as_mut() }) else {
            return null("client");
        };
        // SAFETY: the caller promises that `value_len` is writable (or NULL).
        let Some(value_len) = (unsafe { value_len.as_mut() }) else {
            return null("value_len");
        };
        // SAFETY: the caller promises `key_len` readable bytes at `key`.
        let Some(key) = (unsafe { bytes(key, key_len) }) else {
            return no_bytes("key");
        };
        let out: &mut [u8] = if buf_len == 0 {
            &mut []
        } else if buf.is_null() {
            return no_bytes("buf");
        } else {
            // SAFETY: not null, and the caller promises `buf_len` writable
            // bytes at `buf`, used by no one else during the call.
            unsafe { std::slice::from_raw_parts_mut(buf, buf_len) }
        };
        match client.inner.get_into_slice(key, out) {
            Ok(Some(n)) => {
                *value_len = n;
                NessieStatus::NessieOk
            }
            Ok(None) => {
                *value_len = 0;
                NessieStatus::NessieNotFound
            }
            Err(e) => {
                if let nessie::Error::BufferTooSmall { needed, .. } = e {
                    *value_len = needed;
                }
                store_error(&e)
            }
        }
    })
}

/// Removes `key`; `*existed` (if not NULL) tells whether it held a value.
///
/// # Safety
/// `client` is a live handle no other thread uses during the call; `key`
/// points to `key_len` readable bytes; `existed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nessie_client_delete(
    client: *mut NessieClient,
    key: *const u8,
    key_len: usize,
    existed: *mut bool,
) -> NessieStatus {
    guard(|| {
        // SAFETY: the caller promises a live handle used by this thread only.
        let Some(client) = (unsafe { client.as_mut() }) else {
            return null("client");
        };
        // SAFETY: the caller promises `key_len` readable bytes at `key`.
        let Some(key) = (unsafe { bytes(key, key_len) }) else {
            return no_bytes("key");
        };
        match client.inner.delete(key) {
            Ok(was) => {
                // SAFETY: the caller promises NULL or a writable bool.
                if let Some(existed) = unsafe { existed.as_mut() } {
                    *existed = was;
                }
                NessieStatus::NessieOk
            }
            Err(e) => store_error(&e),
        }
    })
}

/// Frees `client` (NULL is ignored).
///
/// # Safety
/// `client` is NULL or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn nessie_client_free(client: *mut NessieClient) {
    // SAFETY: as this function's contract.
    unsafe { crate::host::take_back(client) }
}
