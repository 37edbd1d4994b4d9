//! Whether this host can back the nodes a process is to host, checked
//! before anything is allocated.
//!
//! The data tables are address space: a slot's pages are touched only when
//! an entry is written there, so a generous `data_bytes_per_node` costs
//! nothing until used and is left to the allocation itself (whose refusal
//! is an [`Error::OutOfMemory`] too). The index is spread by hashing, so
//! keys touch every page of it, and the tables' per-slot bookkeeping is
//! written when they are created: those must fit the host's memory, or the
//! process would be killed mid-run (or abort) instead of refused at start.

use crate::data::{Geometry, SLOT_BOOKKEEPING_BYTES};
use crate::fabric::FabricError;
use crate::layout::WORD;
use crate::{Config, Error};

/// Checks that the index and data-table bookkeeping of `hosted` nodes of
/// `config` fit this host's RAM plus swap (not checked where
/// `/proc/meminfo` cannot be read).
pub(super) fn check_dense(config: &Config, hosted: usize) -> Result<(), Error> {
    let Some(available) = host_memory() else {
        return Ok(());
    };
    let (bytes, what) = dense_bytes(config, hosted);
    if bytes <= available {
        return Ok(());
    }
    Err(Error::OutOfMemory {
        what,
        bytes,
        available: Some(available),
    })
}

/// Bytes of the index and bookkeeping of `hosted` nodes, and how they add up.
fn dense_bytes(config: &Config, hosted: usize) -> (u64, String) {
    let geometry = Geometry::new(config);
    let index_slots = geometry.index_slots();
    let data_slots: u64 = (0..geometry.classes())
        .map(|c| geometry.slots(c as u8) as u64)
        .sum();
    let per_node = index_slots
        .saturating_mul(WORD as u64)
        .saturating_add(data_slots.saturating_mul(SLOT_BOOKKEEPING_BYTES));
    let what = format!(
        "the index and data-table bookkeeping of {hosted} node(s): per node \
         {index_slots} index slots × {WORD} bytes + {data_slots} data slots × \
         {SLOT_BOOKKEEPING_BYTES} bytes"
    );
    (per_node.saturating_mul(hosted as u64), what)
}

/// RAM plus swap of this host in bytes, if known.
fn host_memory() -> Option<u64> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemTotal` plus `SwapTotal` of a `/proc/meminfo` text, in bytes.
fn parse_meminfo(info: &str) -> Option<u64> {
    let kib = |key: &str| {
        info.lines().find_map(|line| {
            let value = line.strip_prefix(key)?.trim().strip_suffix("kB")?;
            value.trim().parse::<u64>().ok()
        })
    };
    let total = kib("MemTotal:")?.saturating_add(kib("SwapTotal:").unwrap_or(0));
    Some(total.saturating_mul(1024))
}

/// The fabric's error as the store's: a region the allocator refused is
/// [`Error::OutOfMemory`] like every other memory the nodes cannot have.
pub(super) fn fabric_error(e: FabricError) -> Error {
    match e {
        FabricError::OutOfMemory {
            node,
            region,
            bytes,
        } => Error::OutOfMemory {
            what: format!("node {node} {region}"),
            bytes,
            available: None,
        },
        e => Error::Fabric(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_and_swap_are_read_from_meminfo() {
        let info = "MemTotal:       24000000 kB\nMemFree: 1 kB\nSwapTotal:  1000 kB\n";
        assert_eq!(parse_meminfo(info), Some(24_001_000 * 1024));
        assert_eq!(
            parse_meminfo("MemTotal: 8 kB\n"),
            Some(8 * 1024),
            "no swap line"
        );
        assert_eq!(parse_meminfo("SwapTotal: 8 kB\n"), None);
    }

    #[test]
    fn the_dense_figure_is_the_index_plus_the_bookkeeping() {
        let config = Config {
            index_slots_per_node: 1000,
            ..Config::default()
        };
        let geometry = Geometry::new(&config);
        let slots: u64 = (0..geometry.classes())
            .map(|c| geometry.slots(c as u8) as u64)
            .sum();
        let (bytes, what) = dense_bytes(&config, 3);
        assert_eq!(bytes, 3 * (8000 + slots * SLOT_BOOKKEEPING_BYTES));
        assert!(
            what.contains("3 node(s)") && what.contains("1000 index slots"),
            "{what}"
        );
    }
}
