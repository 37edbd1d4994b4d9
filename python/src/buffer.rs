//! The buffer protocol: a value's bytes straight from (or into) the memory
//! of any object that exports a contiguous buffer — `bytes`, `bytearray`,
//! `memoryview`, `array.array`, NumPy arrays — with no copy in between.

// The crate denies unsafe code (Cargo.toml) except here, where each block
// states its SAFETY argument.
#![allow(
    unsafe_code,
    reason = "the buffer protocol (PyObject_GetBuffer) has no safe wrapper for raw bytes"
)]

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// An exported buffer, held until this drops (the exporter cannot resize
/// or free the memory meanwhile: `bytearray` refuses to resize while a
/// view is held).
pub(crate) struct ByteBuffer {
    // Boxed: the exporter may keep the view's address until release.
    view: Box<ffi::Py_buffer>,
}

impl std::fmt::Debug for ByteBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBuffer")
            .field("len", &self.view.len)
            .field("readonly", &self.view.readonly)
            .finish()
    }
}

impl ByteBuffer {
    /// The bytes of `obj` as one C-contiguous run; `writable` asks for a
    /// buffer the caller may write.
    ///
    /// # Errors
    /// `TypeError` if `obj` exports no buffer, `BufferError` (raised by the
    /// exporter) if it cannot export a contiguous or writable one.
    pub(crate) fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<ByteBuffer> {
        let flags = if writable {
            ffi::PyBUF_SIMPLE | ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `obj` is a live object (the GIL is held: we have a
        // `Bound`), and `view` points to a writable, properly aligned
        // `Py_buffer` that outlives the call; on success it is released
        // exactly once, in `Drop`.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &raw mut *view, flags) };
        if rc != 0 {
            let err = PyErr::take(obj.py()).unwrap_or_else(|| {
                PyTypeError::new_err("the object does not export a contiguous buffer")
            });
            return Err(err);
        }
        Ok(ByteBuffer { view })
    }

    /// Bytes in the buffer.
    pub(crate) fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }

    /// The buffer's bytes.
    ///
    /// Other Python threads may write the same memory meanwhile (as with
    /// any C extension that reads a buffer without the GIL); the store then
    /// stores whatever bytes it read.
    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.len() == 0 || self.view.buf.is_null() {
            return &[];
        }
        // SAFETY: a successful PyBUF_SIMPLE export is `len` contiguous
        // bytes at `buf`, valid until the view is released (in `Drop`,
        // after every borrow of `self` ends); the exporter keeps the memory
        // in place while the view is held.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), self.len()) }
    }

    /// The buffer's bytes, to write (the buffer was exported writable).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len() == 0 || self.view.buf.is_null() || self.view.readonly != 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`, and the export was requested with
        // PyBUF_WRITABLE (the exporter refuses otherwise; `readonly` is
        // checked above too). `&mut self` makes this the only borrow from
        // Rust; Python code writing the same memory at once races as it
        // would with any writer releasing the GIL.
        unsafe { std::slice::from_raw_parts_mut(self.view.buf.cast::<u8>(), self.len()) }
    }
}

impl Drop for ByteBuffer {
    fn drop(&mut self) {
        Python::attach(|_| {
            // SAFETY: the view was filled by a successful
            // PyObject_GetBuffer and is released once, here, with the
            // interpreter attached.
            unsafe { ffi::PyBuffer_Release(&raw mut *self.view) }
        });
    }
}
