//! The suite must be able to fail: each check is run against a backend
//! with one deliberate fault.

use super::*;
use crate::{FabricError, LocalFabric};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    CasReturnsNew,
    CasIgnoresExpected,
    PostDropsResults,
    MisalignedAsOutOfBounds,
    WritesSkipLastWord,
    /// Every seventh CAS reports success without storing.
    CasLosesSomeStores,
    /// Says it keeps a node's verbs in batch order, and runs a batch last
    /// verb first.
    PostRunsBackwards,
}

#[derive(Debug)]
struct Faulty {
    inner: LocalFabric,
    fault: Fault,
    cas_calls: std::sync::atomic::AtomicU64,
}

impl Fabric for Faulty {
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    fn fence_node(&self, node: usize) {
        self.inner.fence_node(node);
    }

    fn region_len(&self, node: usize, region: RegionId) -> Option<u64> {
        self.inner.region_len(node, region)
    }

    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.inner.read(addr, buf)
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        if self.fault == Fault::WritesSkipLastWord && data.len() > 8 {
            return self.inner.write(addr, &data[..data.len() - 8]);
        }
        self.inner.write(addr, data)
    }

    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        let call = self.cas_calls.fetch_add(1, Ordering::Relaxed);
        match self.fault {
            Fault::CasLosesSomeStores if call % 7 == 6 => Ok(expected),
            Fault::CasReturnsNew => self.inner.cas(addr, expected, new).map(|_| new),
            Fault::CasIgnoresExpected => {
                let mut b = [0u8; 8];
                self.inner.read(addr, &mut b)?;
                let old = u64::from_le_bytes(b);
                self.inner.cas(addr, old, new)
            }
            Fault::MisalignedAsOutOfBounds if addr.offset % 8 != 0 => {
                Err(FabricError::OutOfBounds {
                    node: addr.node,
                    region: addr.region,
                    offset: addr.offset,
                    len: 8,
                    region_len: 0,
                })
            }
            _ => self.inner.cas(addr, expected, new),
        }
    }

    fn keeps_batch_order(&self) -> bool {
        self.fault == Fault::PostRunsBackwards || self.inner.keeps_batch_order()
    }

    fn post(&self, batch: &mut [Verb<'_>]) -> Result<(), FabricError> {
        if self.fault == Fault::PostRunsBackwards {
            return batch
                .iter_mut()
                .rev()
                .try_for_each(|v| self.inner.post(std::slice::from_mut(v)));
        }
        if self.fault != Fault::PostDropsResults {
            return self.inner.post(batch);
        }
        for verb in batch.iter_mut() {
            match verb {
                Verb::Read { addr, buf } => self.inner.read(*addr, &mut vec![0; buf.len()])?,
                Verb::ReadScatter { addr, head, tail } => {
                    let len = head.len() + tail.len();
                    self.inner.read(*addr, &mut vec![0; len])?;
                }
                Verb::Write { addr, data } => self.inner.write(*addr, data)?,
                Verb::Cas {
                    addr,
                    expected,
                    new,
                    ..
                } => drop(self.inner.cas(*addr, *expected, *new)?),
            }
        }
        Ok(())
    }
}

fn fails(fault: Fault, check: fn(Factory<'_>)) -> bool {
    let make = move |spec: &ClusterSpec| {
        let f: Arc<dyn Fabric> = Arc::new(Faulty {
            inner: LocalFabric::new(spec.nodes, &spec.regions).unwrap(),
            fault,
            cas_calls: 0.into(),
        });
        vec![f; spec.nodes]
    };
    catch_unwind(AssertUnwindSafe(|| check(&make))).is_err()
}

#[test]
fn a_correct_backend_passes() {
    assert!(!fails(Fault::None, run_all));
}

#[test]
fn the_whole_suite_catches_a_faulty_backend() {
    assert!(fails(Fault::CasReturnsNew, run_all));
    assert!(fails(Fault::PostRunsBackwards, run_all));
}

/// A backend with only the required methods.
#[derive(Debug)]
struct Plain(LocalFabric);

impl Fabric for Plain {
    fn nodes(&self) -> usize {
        self.0.nodes()
    }
    fn region_len(&self, node: usize, region: RegionId) -> Option<u64> {
        self.0.region_len(node, region)
    }
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), FabricError> {
        self.0.read(addr, buf)
    }
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<(), FabricError> {
        self.0.write(addr, data)
    }
    fn cas(&self, addr: RemoteAddr, expected: u64, new: u64) -> Result<u64, FabricError> {
        self.0.cas(addr, expected, new)
    }
}

/// Batch order is promised only by a backend that says so, and an
/// endpoint reports its fabric's promise.
#[test]
fn batch_order_is_promised_only_where_said() {
    let spec = suite_spec();
    let local = LocalFabric::new(spec.nodes, &spec.regions).unwrap();
    let plain = Plain(LocalFabric::new(spec.nodes, &spec.regions).unwrap());
    assert!(local.keeps_batch_order());
    assert!(!plain.keeps_batch_order());
    assert!(crate::Endpoint::new(Arc::new(local), 0).keeps_batch_order());
    assert!(!crate::Endpoint::new(Arc::new(plain), 0).keeps_batch_order());
}

#[test]
fn each_check_catches_its_fault() {
    assert!(fails(Fault::CasReturnsNew, check_cas));
    assert!(fails(Fault::CasIgnoresExpected, check_cas));
    assert!(fails(Fault::PostDropsResults, check_batches));
    assert!(fails(Fault::PostRunsBackwards, check_batch_order));
    assert!(fails(Fault::MisalignedAsOutOfBounds, check_errors));
    assert!(fails(Fault::WritesSkipLastWord, check_read_write));
}

#[test]
fn views_that_do_not_share_memory_are_caught() {
    let make = |spec: &ClusterSpec| {
        (0..spec.nodes)
            .map(|_| {
                Arc::new(LocalFabric::new(spec.nodes, &spec.regions).unwrap()) as Arc<dyn Fabric>
            })
            .collect()
    };
    assert!(catch_unwind(|| check_read_write(&make)).is_err());
    assert!(catch_unwind(|| check_cas(&make)).is_err());
}

#[test]
fn lost_cas_increments_are_caught() {
    assert!(fails(Fault::CasLosesSomeStores, |make| {
        check_concurrent_cas(make, 2, 100);
    }));
}
