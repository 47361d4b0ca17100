//! Data files: names, and the cache of open handles shared by the writer and readers.
//!
//! Segment `n` is `db-<n, 8 digits>.log`. A new segment is created with its full size
//! preallocated (`fallocate`), synced, and the directory synced before anything written in
//! it is acknowledged; writes then never change the file's size, so `fdatasync` has no
//! metadata to flush.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use prost::Message as _;
use store::StoreError;

use crate::disk::{Disk, DiskFile};
use crate::error::Damage;
use crate::frame::{self, Parsed};
use crate::record::{AddMessageRecord, Kind};
use crate::refs::{loc_file, loc_offset, Loc};

const PREFIX: &str = "db-";
const SUFFIX: &str = ".log";

pub fn segment_name(file: u32) -> String {
    format!("{PREFIX}{file:08}{SUFFIX}")
}

/// The number of a segment file name (`db-00000012.log` -> 12).
pub fn parse_segment(name: &str) -> Option<u32> {
    let number: u32 = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()?;
    // Locations reserve the top bit of the file number.
    (number < 1 << 31).then_some(number)
}

/// The most handles kept open; past it, some are closed (and reopened when next used:
/// a handle in use stays valid, and `fdatasync` on any handle syncs the file).
const MAX_OPEN: usize = 256;

/// Open handles to the segments, by number.
#[derive(Debug)]
pub struct FileCache {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    open: Mutex<HashMap<u32, Arc<dyn DiskFile>>>,
}

impl FileCache {
    pub fn new(disk: Arc<dyn Disk>, dir: &Path) -> Self {
        FileCache { disk, dir: dir.to_path_buf(), open: Mutex::new(HashMap::new()) }
    }

    pub fn path(&self, file: u32) -> PathBuf {
        self.dir.join(segment_name(file))
    }

    /// The handle of segment `file`, opened on first use.
    pub fn get(&self, file: u32) -> io::Result<Arc<dyn DiskFile>> {
        if let Some(handle) = self.open.lock().get(&file) {
            return Ok(Arc::clone(handle));
        }
        let handle = self.disk.open(&self.path(file))?;
        let mut open = self.open.lock();
        Self::make_room(&mut open, file);
        Ok(Arc::clone(open.entry(file).or_insert(handle)))
    }

    pub fn insert(&self, file: u32, handle: Arc<dyn DiskFile>) {
        let mut open = self.open.lock();
        Self::make_room(&mut open, file);
        open.insert(file, handle);
    }

    /// Closes the handles of the oldest files (but `keep`'s) when too many are open.
    fn make_room(open: &mut HashMap<u32, Arc<dyn DiskFile>>, keep: u32) {
        if open.len() < MAX_OPEN {
            return;
        }
        let mut files: Vec<u32> = open.keys().copied().filter(|f| *f != keep).collect();
        files.sort_unstable();
        for file in files.into_iter().take(MAX_OPEN / 4) {
            open.remove(&file);
        }
    }

    pub fn forget(&self, file: u32) {
        self.open.lock().remove(&file);
    }
}

/// Reads back the message record (an add or a relocation) of `size` bytes at `at`,
/// checking its frame and checksum.
pub fn read_message_record(
    handle: &dyn DiskFile,
    at: Loc,
    size: u32,
) -> Result<AddMessageRecord, StoreError> {
    let (file, offset) = (loc_file(at), u64::from(loc_offset(at)));
    let mut buf = vec![0u8; size as usize];
    handle.read_at(offset, &mut buf).map_err(|e| {
        crate::io_error(format!("reading {} at offset {offset}", segment_name(file)), e)
    })?;
    let damage = |reason: String| StoreError::from(Damage::new(file, offset, reason));
    let payload = match frame::parse(&buf, 0) {
        Parsed::Record { kind: Kind::AddMessage | Kind::Relocate, payload, .. } => payload,
        Parsed::Record { kind, .. } => {
            return Err(damage(format!("expected a message record, found {kind:?}")))
        }
        Parsed::End => return Err(damage("no record there".into())),
        Parsed::Bad(reason) => return Err(damage(reason)),
    };
    AddMessageRecord::decode(payload).map_err(|e| damage(format!("message record: {e}")))
}
