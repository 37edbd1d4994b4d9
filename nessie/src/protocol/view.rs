//! A DTE as an operation read it.

use crate::layout::dte::{self, DteHeader, DteState, DteStatus, KEY_OFFSET};
use crate::layout::SlotRef;

/// A DTE as read through an ITE value.
#[derive(Debug, Clone)]
pub(crate) struct DteView {
    /// The DTE.
    pub(crate) at: SlotRef,
    /// Its decoded header.
    pub(crate) header: DteHeader,
    /// The bytes read: header, then as much of key and value as was read.
    pub(crate) bytes: Vec<u8>,
    /// Bytes a scatter READ put in the GET's destination instead, right
    /// after `bytes`: the value onwards, if the entry holds a key of the
    /// length `bytes` was cut for (docs/design.md#one-copy-gets).
    pub(crate) landed: Option<usize>,
}

impl DteView {
    pub(crate) fn state(&self) -> DteState {
        self.header.state
    }

    pub(crate) fn status(&self) -> DteStatus {
        self.header.state.status()
    }

    /// Where the stored key lies in [`DteView::bytes`] (which may end
    /// before it: see [`DteView::key`]).
    pub(crate) fn key_range(&self) -> std::ops::Range<usize> {
        KEY_OFFSET..KEY_OFFSET + self.header.state.key_len()
    }

    /// Where the value lies in [`DteView::bytes`] (which may end before
    /// it: see [`DteView::has_value`]).
    pub(crate) fn value_range(&self) -> std::ops::Range<usize> {
        let s = self.header.state;
        let off = dte::value_offset(s.key_len());
        off..off + s.value_len()
    }

    /// The stored key, if it was read whole. A read sized for a shorter key
    /// stops inside a longer one: that entry holds another key, which is all a
    /// caller looking for the shorter key needs to know
    /// (docs/design.md#f1-a-longer-key-is-a-mismatch-not-a-torn-read).
    pub(crate) fn key(&self) -> Option<&[u8]> {
        self.bytes.get(self.key_range())
    }

    /// Whether the entry holds `key` (decided from the header's key length
    /// first, so a longer stored key is a mismatch, never a torn read).
    pub(crate) fn holds(&self, key: &[u8]) -> bool {
        self.header.state.key_len() == key.len() && self.key() == Some(key)
    }

    pub(crate) fn has_value(&self) -> bool {
        self.bytes.len() >= self.value_range().end
    }

    /// Whether a value landed in the GET's destination is there whole: the
    /// entry's value starts where `bytes` ends, and fits in what landed.
    pub(crate) fn has_landed_value(&self) -> bool {
        let value = self.value_range();
        self.landed
            .is_some_and(|n| value.start == self.bytes.len() && value.len() <= n)
    }

    /// The value; callers check [`DteView::has_value`] first.
    pub(crate) fn value(&self) -> &[u8] {
        self.bytes.get(self.value_range()).unwrap_or_default()
    }

    /// Whether key and value were read and match the checksum. Callers
    /// decide when to verify: see [`super::Ctx::must_verify`].
    pub(crate) fn checksum_ok(&self) -> bool {
        self.has_value() && self.checksum_matches(self.value())
    }

    /// Whether the key read and `value` match the checksum.
    pub(crate) fn checksum_matches(&self, value: &[u8]) -> bool {
        self.key()
            .is_some_and(|key| self.header.compute_checksum(key, value) == self.header.checksum)
    }
}
