//! The I/O layer: every file operation of the journal goes through [`Disk`] and
//! [`DiskFile`], so that tests can run the store over [`SimulatedDisk`](crate::testing::SimulatedDisk),
//! which keeps synced and unsynced bytes apart and can lose power.
//!
//! [`RealDisk`] is the implementation over `std::fs`: positioned reads and writes
//! (`pread`/`pwrite`), `fdatasync` for [`DiskFile::sync`], `fallocate` for
//! [`DiskFile::allocate`] (falling back to extending the file where the file system does not
//! support it) and `fsync` on the directory for [`Disk::sync_dir`].

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// A directory of files, as the journal uses it.
pub trait Disk: Send + Sync + Debug + 'static {
    /// Creates `dir` (and its parents) if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir` (not their paths).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Creates a file (truncating one that exists) for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Renames `from` to `to`, replacing `to`. Durable once the directory is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file. Durable once the directory is synced; open handles keep working.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// True if `path` names a file.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// One open file.
pub trait DiskFile: Send + Sync + Debug + 'static {
    /// Writes all of `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Fills `buf` from `offset`; reading past the end is `UnexpectedEof`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// The file's length.
    fn len(&self) -> io::Result<u64>;
    /// True if the file has no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves space so that the file is at least `len` bytes long (zeros) and writes inside
    /// it cannot fail for lack of space.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data (and the size, if it changed) durable: `fdatasync`.
    fn sync(&self) -> io::Result<()>;
}

/// [`Disk`] over the real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

#[derive(Debug)]
struct RealFile(File);

impl Disk for RealDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(RealFile(file)))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Arc::new(RealFile(file)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl DiskFile for RealFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        match rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::OPNOTSUPP => {
                // No preallocation on this file system: extend the file instead (sparse; a
                // later write may then fail for lack of space, which poisons the store).
                if self.len()? < len {
                    self.0.set_len(len)?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// True if `error` says the device is out of space.
pub(crate) fn is_out_of_space(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(28)
}
