//! Test support, public so that other crates' tests can use it: [`SimulatedDisk`], a
//! [`Disk`] that can lose power, and [`JournalHarness`], the conformance kit's harness.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use store::{Failpoints, MessageStore, StoreError, StoreHarness, SyncPolicy};

use crate::disk::{Disk, DiskFile};
use crate::{JournalOptions, JournalStore, FAILPOINTS};

/// A disk in memory that keeps synced and unsynced state apart.
///
/// File contents: writes change a file's current bytes; [`DiskFile::sync`] makes them
/// durable. Directory entries: creates, renames and removes change the current namespace;
/// [`Disk::sync_dir`] makes it durable. [`SimulatedDisk::lose_power`] throws away everything
/// not durable (bytes, sizes, creates, renames, removes) and cuts off every [`Disk`] view and
/// file handle taken before it, as a power loss would (the store that was running sees
/// every later I/O fail). A capacity bounds the bytes of all files (growing past it fails
/// with `ENOSPC`). Every file sync is counted, and syncs can be held (to line up a test).
///
/// Open a store over it with `JournalStore::open_with_disk(disk.disk(), dir, options)`.
#[derive(Debug, Default)]
pub struct SimulatedDisk {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    namespace: Mutex<Namespace>,
    syncs: AtomicU64,
    /// Bumped by every power loss; views and handles of an older epoch fail.
    epoch: AtomicU64,
    gate: Mutex<Gate>,
    gate_changed: Condvar,
}

#[derive(Debug, Default)]
struct Gate {
    held: bool,
    waiting: usize,
}

#[derive(Debug, Default)]
struct Namespace {
    current: BTreeMap<PathBuf, Arc<SimFileData>>,
    durable: BTreeMap<PathBuf, Arc<SimFileData>>,
    capacity: Option<u64>,
}

#[derive(Debug, Default)]
struct SimFileData {
    bytes: Mutex<Contents>,
    /// The current length, readable without the bytes' lock (lock order: a file's bytes,
    /// then the namespace; never the other way round).
    len: AtomicU64,
}

#[derive(Debug, Default, Clone)]
struct Contents {
    current: Vec<u8>,
    durable: Vec<u8>,
}

/// A [`Disk`] view of a [`SimulatedDisk`], valid until the next power loss.
#[derive(Debug)]
struct SimDisk {
    inner: Arc<Inner>,
    epoch: u64,
}

#[derive(Debug)]
struct SimFile {
    disk: Arc<Inner>,
    data: Arc<SimFileData>,
    epoch: u64,
}

fn powered_off() -> io::Error {
    io::Error::other("simulated power loss: this handle is gone")
}

fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl SimulatedDisk {
    pub fn new() -> Arc<SimulatedDisk> {
        Arc::new(SimulatedDisk::default())
    }

    /// A [`Disk`] over this simulated disk, cut off by the next power loss.
    pub fn disk(&self) -> Arc<dyn Disk> {
        Arc::new(SimDisk {
            inner: Arc::clone(&self.inner),
            epoch: self.inner.epoch.load(Ordering::SeqCst),
        })
    }

    /// Bounds the bytes of all files together (`None`: unbounded).
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.inner.namespace.lock().capacity = capacity;
    }

    /// File syncs (`fdatasync`) so far.
    pub fn sync_count(&self) -> u64 {
        self.inner.syncs.load(Ordering::SeqCst)
    }

    /// Drops every byte and directory change not yet synced, and cuts off every view and
    /// handle taken so far.
    pub fn lose_power(&self) {
        let files: Vec<Arc<SimFileData>> = {
            let mut namespace = self.inner.namespace.lock();
            self.inner.epoch.fetch_add(1, Ordering::SeqCst);
            namespace.current = namespace.durable.clone();
            namespace.durable.values().cloned().collect()
        };
        for data in files {
            let mut bytes = data.bytes.lock();
            bytes.current = bytes.durable.clone();
            data.len.store(bytes.current.len() as u64, Ordering::SeqCst);
        }
        self.release_syncs();
    }

    /// Makes every file sync wait until [`SimulatedDisk::release_syncs`].
    pub fn hold_syncs(&self) {
        self.inner.gate.lock().held = true;
    }

    pub fn release_syncs(&self) {
        self.inner.gate.lock().held = false;
        self.inner.gate_changed.notify_all();
    }

    /// Waits until a sync is held at the gate.
    pub fn wait_for_held_sync(&self) {
        let mut gate = self.inner.gate.lock();
        while gate.waiting == 0 {
            self.inner.gate_changed.wait(&mut gate);
        }
    }

    /// The names of the files in `dir`.
    pub fn file_names(&self, dir: &Path) -> Vec<String> {
        let namespace = self.inner.namespace.lock();
        names_in(&namespace, dir)
    }

    /// The current bytes of a file, for tests that damage it.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let data = self.inner.namespace.lock().current.get(path).cloned()?;
        let contents = data.bytes.lock().current.clone();
        Some(contents)
    }

    /// Replaces a file's bytes, durably (damage on the medium).
    pub fn set_contents(&self, path: &Path, bytes: Vec<u8>) {
        let Some(data) = self.inner.namespace.lock().current.get(path).cloned() else { return };
        let mut contents = data.bytes.lock();
        data.len.store(bytes.len() as u64, Ordering::SeqCst);
        contents.current = bytes.clone();
        contents.durable = bytes;
    }
}

fn names_in(namespace: &Namespace, dir: &Path) -> Vec<String> {
    namespace
        .current
        .keys()
        .filter(|path| path.parent() == Some(dir))
        .filter_map(|path| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .collect()
}

impl SimDisk {
    /// The namespace, if this view has not been cut off by a power loss.
    fn namespace(&self) -> io::Result<parking_lot::MutexGuard<'_, Namespace>> {
        let namespace = self.inner.namespace.lock();
        if self.inner.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(powered_off());
        }
        Ok(namespace)
    }

    fn handle(&self, data: Arc<SimFileData>) -> Arc<dyn DiskFile> {
        Arc::new(SimFile { disk: Arc::clone(&self.inner), data, epoch: self.epoch })
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        self.namespace().map(|_| ())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        Ok(names_in(&*self.namespace()?, dir))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let data = self.namespace()?.current.get(path).cloned().ok_or_else(not_found)?;
        Ok(self.handle(data))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let data = Arc::new(SimFileData::default());
        self.namespace()?.current.insert(path.to_path_buf(), Arc::clone(&data));
        Ok(self.handle(data))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut namespace = self.namespace()?;
        let data = namespace.current.remove(from).ok_or_else(not_found)?;
        namespace.current.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.namespace()?.current.remove(path).map(|_| ()).ok_or_else(not_found)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.namespace()?.current.contains_key(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut namespace = self.namespace()?;
        let namespace = &mut *namespace;
        namespace.durable.retain(|path, _| path.parent() != Some(dir));
        for (path, data) in &namespace.current {
            if path.parent() == Some(dir) {
                namespace.durable.insert(path.clone(), Arc::clone(data));
            }
        }
        Ok(())
    }
}

impl SimFile {
    /// Fails once power was lost; called with the file's bytes locked, so that a power loss
    /// is wholly before or wholly after each operation.
    fn check(&self) -> io::Result<()> {
        if self.disk.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(powered_off());
        }
        Ok(())
    }

    /// Grows the file to `len`, within the disk's capacity.
    fn grow(&self, contents: &mut Contents, len: usize) -> io::Result<()> {
        if len <= contents.current.len() {
            return Ok(());
        }
        let namespace = self.disk.namespace.lock();
        if let Some(capacity) = namespace.capacity {
            let others: u64 = namespace
                .current
                .values()
                .filter(|data| !Arc::ptr_eq(data, &self.data))
                .map(|data| data.len.load(Ordering::SeqCst))
                .sum();
            if others + len as u64 > capacity {
                return Err(no_space());
            }
        }
        drop(namespace);
        contents.current.resize(len, 0);
        self.data.len.store(len as u64, Ordering::SeqCst);
        Ok(())
    }

    fn wait_at_gate(&self) {
        let mut gate = self.disk.gate.lock();
        if !gate.held {
            return;
        }
        gate.waiting += 1;
        self.disk.gate_changed.notify_all();
        while gate.held {
            self.disk.gate_changed.wait(&mut gate);
        }
        gate.waiting -= 1;
    }
}

impl DiskFile for SimFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut contents = self.data.bytes.lock();
        self.check()?;
        let start = offset as usize;
        self.grow(&mut contents, start + data.len())?;
        contents.current[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let contents = self.data.bytes.lock();
        self.check()?;
        let start = offset as usize;
        let source = contents
            .current
            .get(start..start + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(source);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let contents = self.data.bytes.lock();
        self.check()?;
        Ok(contents.current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut contents = self.data.bytes.lock();
        self.check()?;
        if len as usize > contents.current.len() {
            self.grow(&mut contents, len as usize)
        } else {
            contents.current.truncate(len as usize);
            self.data.len.store(len, Ordering::SeqCst);
            Ok(())
        }
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut contents = self.data.bytes.lock();
        self.check()?;
        self.grow(&mut contents, len as usize)
    }

    fn sync(&self) -> io::Result<()> {
        self.wait_at_gate();
        let mut contents = self.data.bytes.lock();
        self.check()?;
        contents.durable = contents.current.clone();
        self.disk.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The conformance kit's harness: a store in a temporary directory, with small segments so
/// that the kit's workload rolls files, checkpoints every 2 KiB so that it checkpoints,
/// reclaims and compacts, and `SyncPolicy::Always`.
#[derive(Debug)]
pub struct JournalHarness {
    dir: tempfile::TempDir,
    options: JournalOptions,
}

impl JournalHarness {
    pub fn new() -> Self {
        JournalHarness::with_options(JournalOptions {
            segment_size: 64 * 1024,
            checkpoint_bytes: 2 * 1024,
            sync: SyncPolicy::Always,
            ..JournalOptions::default()
        })
    }

    pub fn with_options(options: JournalOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ferromq-journal-")
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temporary directory failed: {e}"));
        JournalHarness { dir, options }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn options(&self) -> &JournalOptions {
        &self.options
    }
}

impl Default for JournalHarness {
    fn default() -> Self {
        JournalHarness::new()
    }
}

impl StoreHarness for JournalHarness {
    fn open(&mut self) -> Result<Arc<dyn MessageStore>, StoreError> {
        Ok(Arc::new(JournalStore::open(self.dir.path(), self.options.clone())?))
    }

    fn failpoints(&self) -> Failpoints {
        self.options.failpoints.clone()
    }

    fn failpoint_names(&self) -> &'static [&'static str] {
        FAILPOINTS
    }
}
