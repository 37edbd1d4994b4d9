//! The shared-memory backend: one process per node on one host.
//!
//! Each node creates its regions as files under a directory (by default
//! `/dev/shm/nessie-<cluster>`), mode 0600, each starting with a
//! [`RegionHeader`]; it then maps every peer's files and executes verbs
//! directly on the mappings. No remote CPU takes part in a verb: READ and
//! WRITE are word-atomic copies and CAS is an atomic compare-exchange on the
//! shared page.
//!
//! A file is created under a temporary name and renamed into place once its
//! header is written, so a peer never sees a half-made region. Attaching
//! checks magic, format version, cluster, node, region, size and owner, and
//! reports each mismatch as its own [`FabricError`] variant.
#![expect(
    unsafe_code,
    reason = "mapping region files shared with other processes"
)]

use super::memory::{impl_fabric_for_memory_map, MemoryMap, RegionMemory};
use super::{FabricError, HandshakeFailure, NodeId, RegionSpec};
use crate::membership::{Membership, PeerClaim};
use crate::wire::region::{
    RegionHeader, REGION_HEADER_BYTES, REGION_HEADER_USED, REGION_LOST_OFFSET, REGION_MAGIC,
};
use crate::wire::WORD;
use crate::RegionId;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How to open a node's view of a shared-memory cluster.
#[derive(Clone, Debug)]
pub struct ShmOptions {
    /// Directory holding every node's region files.
    pub dir: PathBuf,
    /// This node, its cluster and the regions every node registers: written
    /// into this node's headers and checked in every peer's.
    pub membership: Membership,
    /// How long to wait for peers' regions to appear.
    pub attach_timeout: Duration,
    /// Whether this node replaces a lost one: it takes the lost node's
    /// region files (which every peer has mapped), wiped, instead of
    /// creating new ones.
    pub replace: bool,
}

/// A node's view of a shared-memory cluster.
#[derive(Debug)]
pub struct ShmFabric {
    map: MemoryMap,
    mappings: Vec<MmapRaw>,
    own_files: Vec<PathBuf>,
    /// How many of `mappings` (the first) are this node's own files.
    own_mappings: usize,
}

impl ShmFabric {
    /// The file that holds `region` of `node` under `dir`.
    #[must_use]
    pub fn region_path(dir: &Path, node: NodeId, region: RegionId) -> PathBuf {
        dir.join(format!("n{node}-{region}.region"))
    }

    /// Creates this node's regions, then waits for and maps every peer's.
    ///
    /// # Errors
    /// I/O errors creating the files; for a peer's file, the first check
    /// that fails (magic, version, cluster, node/region, size, owner), or
    /// [`FabricError::Missing`] if it did not appear within
    /// `attach_timeout`.
    pub fn open(options: &ShmOptions) -> Result<ShmFabric, FabricError> {
        let me = &options.membership;
        me.validate()?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FabricError::Io { path, source }
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&options.dir)
            .map_err(io(&options.dir))?;
        let mut fabric = ShmFabric {
            map: MemoryMap::new(me.nodes),
            mappings: Vec::new(),
            own_files: Vec::new(),
            own_mappings: 0,
        };
        let mut uid = None;
        for spec in &me.regions {
            let path = Self::region_path(&options.dir, me.node, spec.id);
            let file = if options.replace && path.exists() {
                take_region(&path, options, *spec)?
            } else {
                create_region(&path, options, *spec)?
            };
            uid = Some(file.metadata().map_err(io(&path))?.uid());
            fabric.own_files.push(path.clone());
            fabric.map_file(&file, &path, me.node, *spec)?;
        }
        fabric.own_mappings = fabric.mappings.len();
        let uid = uid.unwrap_or(u32::MAX);
        let deadline = Instant::now() + options.attach_timeout;
        for node in (0..me.nodes).filter(|&n| n != me.node) {
            for spec in &me.regions {
                let path = Self::region_path(&options.dir, node, spec.id);
                let file = wait_for(&path, deadline, options.attach_timeout)?;
                check_region(&file, &path, options, node, *spec, uid)?;
                fabric.map_file(&file, &path, node, *spec)?;
            }
        }
        Ok(fabric)
    }

    fn map_file(
        &mut self,
        file: &File,
        path: &Path,
        node: NodeId,
        spec: RegionSpec,
    ) -> Result<(), FabricError> {
        let mapping = MmapOptions::new()
            .map_raw(file)
            .map_err(|source| FabricError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let words = (spec.len / WORD as u64) as usize;
        #[expect(
            clippy::cast_ptr_alignment,
            reason = "page aligned plus a whole number of pages"
        )]
        // SAFETY: the mapping is page aligned and `check_region` (or
        // `create_region`) established it spans the header plus `len`
        // bytes; it stays mapped until `self` drops (after `map`), and the
        // region memory and the header's lost word are accessed only
        // atomically, in every process.
        let memory = unsafe {
            RegionMemory::new(
                mapping.as_mut_ptr().add(REGION_HEADER_BYTES).cast::<u64>(),
                words,
            )
            .with_lost_word(mapping.as_mut_ptr().add(REGION_LOST_OFFSET).cast::<u64>())
        };
        self.map.insert(node, spec.id, memory);
        self.mappings.push(mapping);
        Ok(())
    }
}

impl ShmFabric {
    fn memory_map(&self) -> &MemoryMap {
        &self.map
    }

    /// Emulates the loss of `node`'s host on a shared-memory cluster
    /// (docs/replication.md#what-it-guarantees): marks each of its region
    /// files lost, so that every process refuses verbs to it
    /// ([`FabricError::Lost`]); waits `grace` for verbs that passed the
    /// check before; then wipes the regions. The files stay for a
    /// replacement ([`ShmOptions::replace`]). Missing files are skipped.
    ///
    /// # Errors
    /// I/O errors opening, mapping or wiping a file.
    pub fn lose(
        dir: &Path,
        node: NodeId,
        regions: &[RegionSpec],
        grace: Duration,
    ) -> Result<(), FabricError> {
        let mut maps = Vec::new();
        for spec in regions {
            let path = Self::region_path(dir, node, spec.id);
            let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue;
            };
            let map = MmapOptions::new()
                .map_raw(&file)
                .map_err(|source| FabricError::Io {
                    path: path.clone(),
                    source,
                })?;
            set_lost(&map, 1);
            maps.push(map);
        }
        std::thread::sleep(grace);
        for map in &maps {
            wipe(map);
        }
        Ok(())
    }
}

/// Word `i` of a mapped region file (`None` past its end).
#[expect(
    clippy::cast_ptr_alignment,
    reason = "a mapping is page aligned and every word offset a multiple of 8"
)]
fn file_word(map: &MmapRaw, i: usize) -> Option<&AtomicU64> {
    (map.len() >= (i + 1) * WORD).then(|| {
        // SAFETY: word `i` lies inside the mapping (checked) and is 8-byte
        // aligned (page-aligned base); it lives as long as `map`, and every
        // process accesses region files atomically only.
        unsafe { AtomicU64::from_ptr(map.as_mut_ptr().cast::<u64>().add(i)) }
    })
}

/// Stores `value` into the lost word of a mapped region file.
fn set_lost(map: &MmapRaw, value: u64) {
    if let Some(w) = file_word(map, REGION_LOST_OFFSET / WORD) {
        w.store(value, Ordering::Release);
    }
}

/// Whether a mapped region file is marked lost.
fn is_lost(map: &MmapRaw) -> bool {
    file_word(map, REGION_LOST_OFFSET / WORD).is_some_and(|w| w.load(Ordering::Acquire) != 0)
}

/// Zeroes the body of a mapped region file, word by word, atomically.
fn wipe(map: &MmapRaw) {
    let first = REGION_HEADER_BYTES / WORD;
    let mut i = first;
    while let Some(w) = file_word(map, i) {
        w.store(0, Ordering::Relaxed);
        i += 1;
    }
}

impl Drop for ShmFabric {
    fn drop(&mut self) {
        self.map = MemoryMap::default();
        // Peers keep their own mappings; removing the names only stops new
        // attachers from finding a node that is gone. A lost node's files
        // stay for its replacement, which every peer has mapped already.
        let lost = self.mappings.iter().any(is_lost);
        if !lost {
            for path in &self.own_files {
                let _ = fs::remove_file(path);
            }
        }
    }
}

/// A replacement takes a lost node's region file: the header must be the
/// same node's and region's, and marked lost; its body is wiped again and
/// the mark stays until the replacement opens its memory
/// ([`crate::Fabric::close_own_memory`]), once the members have agreed
/// that the node is lost: until then a peer's verb would read the empty
/// memory as its predecessor's.
fn take_region(path: &Path, options: &ShmOptions, spec: RegionSpec) -> Result<File, FabricError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| FabricError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let uid = file
        .metadata()
        .map_err(|source| FabricError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .uid();
    check_region(&file, path, options, options.membership.node, spec, uid)?;
    let map = MmapOptions::new()
        .map_raw(&file)
        .map_err(|source| FabricError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if !is_lost(&map) {
        return Err(FabricError::Refused {
            node: options.membership.node,
            reason: "the node's region files are in use: a replacement takes only a lost node's",
        });
    }
    wipe(&map);
    Ok(file)
}

impl_fabric_for_memory_map!(ShmFabric, @
    fn close_own_memory(&self, closed: bool) {
        ShmFabric::close_own_memory(self, closed);
    }

    fn remote_reads_cost_more(&self) -> bool {
        false
    }
);

impl ShmFabric {
    /// Marks this node's own region files lost (closed) or not.
    fn close_own_memory(&self, closed: bool) {
        for map in &self.mappings[..self.own_mappings] {
            set_lost(map, u64::from(closed));
        }
    }
}

fn create_region(path: &Path, options: &ShmOptions, spec: RegionSpec) -> Result<File, FabricError> {
    let io = |p: &Path| {
        let path = p.to_path_buf();
        move |source| FabricError::Io { path, source }
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.set_len(REGION_HEADER_BYTES as u64 + spec.len)
        .map_err(io(&tmp))?;
    let header = RegionHeader {
        magic: REGION_MAGIC,
        format_version: options.membership.format_version,
        region: spec.id,
        node: options.membership.node as u16,
        cluster_id: options.membership.cluster_id,
        len: spec.len,
        creator_pid: std::process::id(),
    };
    std::os::unix::fs::FileExt::write_all_at(&file, &header.encode(), 0).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))?;
    Ok(file)
}

fn wait_for(path: &Path, deadline: Instant, waited: Duration) -> Result<File, FabricError> {
    loop {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if Instant::now() >= deadline {
                    return Err(FabricError::Missing {
                        path: path.to_path_buf(),
                        waited,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(source) => {
                return Err(FabricError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
}

fn check_region(
    file: &File,
    path: &Path,
    options: &ShmOptions,
    node: NodeId,
    spec: RegionSpec,
    uid: u32,
) -> Result<(), FabricError> {
    let path_buf = || path.to_path_buf();
    let meta = file.metadata().map_err(|source| FabricError::Io {
        path: path_buf(),
        source,
    })?;
    if meta.uid() != uid {
        return Err(FabricError::WrongOwner {
            path: path_buf(),
            found: meta.uid(),
            expected: uid,
        });
    }
    let mut bytes = [0u8; REGION_HEADER_USED];
    let mut reader = file;
    if reader.read_exact(&mut bytes).is_err() {
        return Err(FabricError::WrongSize {
            path: path_buf(),
            found: meta.len(),
            expected: REGION_HEADER_BYTES as u64 + spec.len,
        });
    }
    let header = RegionHeader::decode(&bytes);
    if header.magic != REGION_MAGIC {
        return Err(FabricError::WrongMagic { path: path_buf() });
    }
    let claim = PeerClaim {
        format_version: header.format_version,
        cluster_id: header.cluster_id,
        from: u64::from(header.node),
        to_of: None,
        regions: &[(header.region, header.len)],
    };
    let wrong_region = || FabricError::WrongRegion {
        path: path_buf(),
        found_node: usize::from(header.node),
        found_region: header.region,
        node,
        region: spec.id,
    };
    match options.membership.check(&claim, Some(node), &[spec]) {
        Ok(()) => {}
        Err(HandshakeFailure::Version { found, expected }) => {
            return Err(FabricError::WrongVersion {
                path: path_buf(),
                found,
                expected,
            })
        }
        Err(HandshakeFailure::Cluster { found, expected }) => {
            return Err(FabricError::WrongCluster {
                path: path_buf(),
                found,
                expected,
            })
        }
        Err(HandshakeFailure::RegionSize {
            found: Some(found),
            expected: Some(expected),
            ..
        }) => {
            return Err(FabricError::WrongSize {
                path: path_buf(),
                found,
                expected,
            })
        }
        // Another node's file, or another region's, under this name.
        Err(_) => return Err(wrong_region()),
    }
    if meta.len() != REGION_HEADER_BYTES as u64 + spec.len {
        // The header agrees but the file does not: report the file's length.
        return Err(FabricError::WrongSize {
            path: path_buf(),
            found: meta.len().saturating_sub(REGION_HEADER_BYTES as u64),
            expected: spec.len,
        });
    }
    Ok(())
}
