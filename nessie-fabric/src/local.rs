//! The in-process backend: every node's regions are heap memory of this
//! process. Used by unit tests, the deterministic simulator and
//! [`crate::Cluster::local`].

use super::memory::{impl_fabric_for_memory_map, HeapRegions, MemoryMap};
use super::{FabricError, RegionSpec};

/// All nodes of a cluster in one address space.
#[derive(Debug)]
pub struct LocalFabric {
    memory: HeapRegions,
}

impl LocalFabric {
    /// A fabric of `nodes` nodes, each registering every region of `regions`
    /// as zeroed memory (allocated lazily by the OS).
    ///
    /// # Errors
    /// [`FabricError::OutOfMemory`] when a region cannot be allocated (the
    /// regions allocated before it are freed).
    ///
    /// # Panics
    /// If a region length is not a multiple of 8 (a caller bug).
    pub fn new(nodes: usize, regions: &[RegionSpec]) -> Result<LocalFabric, FabricError> {
        let hosted: Vec<_> = (0..nodes).collect();
        Ok(LocalFabric {
            memory: HeapRegions::new(nodes, &hosted, regions)?,
        })
    }

    fn memory_map(&self) -> &MemoryMap {
        self.memory.memory_map()
    }
}

impl_fabric_for_memory_map!(LocalFabric);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fabric, RegionId, RemoteAddr, Verb};

    fn fabric() -> LocalFabric {
        LocalFabric::new(
            2,
            &[
                RegionSpec {
                    id: RegionId(0),
                    len: 64,
                },
                RegionSpec {
                    id: RegionId(1),
                    len: 4096,
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_region_larger_than_any_host_is_an_error_not_an_abort() {
        // 2^62 bytes: more than the address space of a process (2^47 or
        // 2^56 on x86-64), so no allocator grants it; the smaller region
        // before it is freed again.
        let huge = RegionSpec {
            id: RegionId(3),
            len: 1 << 62,
        };
        let small = RegionSpec {
            id: RegionId(1),
            len: 4096,
        };
        let e = LocalFabric::new(2, &[small, huge]).unwrap_err();
        assert!(
            matches!(e, FabricError::OutOfMemory { node: 0, region: RegionId(3), bytes } if bytes == 1 << 62),
            "{e:?}"
        );
        let message = e.to_string();
        assert!(
            message.contains(&(1u64 << 62).to_string()) && message.contains("region 3"),
            "{message}"
        );
    }

    /// Memory faulted in ahead of use takes no fault at its first write;
    /// the same amount written cold takes one per page.
    #[test]
    fn prefaulted_memory_takes_no_fault_at_its_first_write() {
        const HALF: u64 = 2 << 20;
        let region = RegionSpec {
            id: RegionId(0),
            len: 2 * HALF,
        };
        let f = LocalFabric::new(1, &[region]).unwrap();
        let chunk = vec![0x5au8; 64 << 10];
        let write_half = |from: u64| {
            let before = crate::conformance::thread_minor_faults();
            for at in (from..from + HALF).step_by(chunk.len()) {
                f.write(RemoteAddr::new(0, RegionId(0), at), &chunk)
                    .unwrap();
            }
            crate::conformance::thread_minor_faults() - before
        };
        let cold = write_half(0);
        f.prefault(RemoteAddr::new(0, RegionId(0), HALF), HALF)
            .unwrap();
        let warm = write_half(HALF);
        let pages = HALF / 4096;
        assert!(
            cold >= pages / 2,
            "a cold write took {cold} faults for {pages} pages (huge pages?)"
        );
        assert!(
            warm * 20 <= cold,
            "a prefaulted write took {warm} faults, a cold one {cold}"
        );
    }

    #[test]
    fn read_write_cas_round_trip() {
        let f = fabric();
        let a = RemoteAddr::new(1, RegionId(1), 64);
        let data: Vec<u8> = (0..128u8).collect();
        f.write(a, &data).unwrap();
        let mut back = vec![0u8; 128];
        f.read(a, &mut back).unwrap();
        assert_eq!(back, data);
        let w = RemoteAddr::new(0, RegionId(0), 8);
        assert_eq!(f.cas(w, 0, 5).unwrap(), 0);
        assert_eq!(
            f.cas(w, 0, 6).unwrap(),
            5,
            "failed CAS returns the current value"
        );
        let mut word = [0u8; 8];
        f.read(w, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 5);
    }

    #[test]
    fn bad_verbs_are_refused() {
        let f = fabric();
        let mut buf = [0u8; 16];
        assert!(matches!(
            f.read(RemoteAddr::new(0, RegionId(0), 56), &mut buf),
            Err(FabricError::OutOfBounds { .. })
        ));
        assert!(matches!(
            f.read(RemoteAddr::new(0, RegionId(0), 4), &mut buf),
            Err(FabricError::Misaligned { .. })
        ));
        assert!(matches!(
            f.cas(RemoteAddr::new(2, RegionId(0), 0), 0, 1),
            Err(FabricError::UnknownNode { .. })
        ));
        assert!(matches!(
            f.write(RemoteAddr::new(0, RegionId(10), 0), &buf),
            Err(FabricError::UnknownRegion { .. })
        ));
        assert!(matches!(
            f.read(RemoteAddr::new(0, RegionId(0), u64::MAX - 7), &mut buf),
            Err(FabricError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn batch_executes_every_verb() {
        let f = fabric();
        let data = [7u8; 16];
        let mut buf = [0u8; 16];
        let mut batch = [
            Verb::Write {
                addr: RemoteAddr::new(0, RegionId(1), 0),
                data: &data,
            },
            Verb::Cas {
                addr: RemoteAddr::new(1, RegionId(0), 0),
                expected: 0,
                new: 9,
                old: 1,
            },
        ];
        f.post(&mut batch).unwrap();
        assert!(matches!(batch[1], Verb::Cas { old: 0, .. }));
        f.read(RemoteAddr::new(0, RegionId(1), 0), &mut buf)
            .unwrap();
        assert_eq!(buf, data);
    }
}
