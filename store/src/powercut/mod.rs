//! Power cuts for stores whose engine does its own file I/O (sled, RocksDB, SQLite), public
//! so that every store crate's tests use the same one.
//!
//! The journal store simulates power loss over its own simulated disk; an engine that calls
//! `open`/`pwrite`/`fsync` itself cannot use one. This module builds a small C library
//! (`powercut.c`, compiled with the system's `cc` on first use) that a test loads with
//! `LD_PRELOAD` into a child process writing the store. The library interposes the file
//! system calls for paths under the store's data directory and keeps a *durable image* of
//! it in a shadow directory, following this model:
//!
//! - **data** reaches the image only when `fsync` or `fdatasync` of that file returns (the
//!   byte ranges written since the file's last sync are copied, and the file takes the size
//!   it had when the sync began); `close`, `sync_file_range`, `msync`, `sync` and `syncfs`
//!   make nothing durable; a write to a file opened `O_SYNC`/`O_DSYNC` is durable at once;
//! - **names** (create, rename, link, unlink) reach the image only when the directory
//!   holding the name is fsynced (POSIX's rule; ext4 is kinder in practice);
//! - **directories** (mkdir, rmdir) reach it at once;
//! - everything not synced is lost, none of it survives torn (a sync cut short by the kill
//!   may leave part of its data).
//!
//! A test [`PowerCut::arm`]s the cut (the image starts as a copy of the data directory:
//! what is there counts as durable), starts the child with [`PowerCut::apply`], SIGKILLs it
//! at a random moment, then [`PowerCut::restore`]s: the data directory is replaced by the
//! image, as after the power came back, and the store is reopened and checked.
//!
//! The library is built once per version of its source, as
//! `<temp dir>/ferromq-powercut-<hash>.so`, and left there for the next test run.
//!
//! PostgreSQL is a server with its own durability (its WAL, `fsync`, `synchronous_commit`):
//! a power cut of the client machine costs it nothing, so it has no such test.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[cfg(test)]
mod tests;

/// The library's C source.
pub const SOURCE: &str = include_str!("powercut.c");

/// Why the power-cut harness cannot run.
#[derive(Debug, thiserror::Error)]
pub enum PowerCutError {
    #[error(
        "no C compiler to build the power-cut library ({0}); install gcc (Debian: apt-get \
         install gcc) or set CC"
    )]
    NoCompiler(String),
    #[error("compiling the power-cut library with `{compiler}` failed:\n{output}")]
    Compile { compiler: String, output: String },
    #[error("the power-cut library is unavailable: {0}")]
    Unavailable(String),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PowerCutError + 'a {
    move |source| PowerCutError::Io { what, path: path.to_path_buf(), source }
}

static LIBRARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The compiled library, built once per source version under the temporary directory (a
/// file named by the source's hash, so concurrent test processes share it).
pub fn library() -> Result<PathBuf, PowerCutError> {
    LIBRARY
        .get_or_init(|| build().map_err(|e| e.to_string()))
        .clone()
        .map_err(PowerCutError::Unavailable)
}

fn build() -> Result<PathBuf, PowerCutError> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut hasher);
    let dir = std::env::temp_dir();
    let target = dir.join(format!("ferromq-powercut-{:016x}.so", hasher.finish()));
    if target.exists() {
        return Ok(target);
    }
    let work = tempfile::Builder::new()
        .prefix("ferromq-powercut-build-")
        .tempdir_in(&dir)
        .map_err(io("creating a build directory in", &dir))?;
    let source = work.path().join("powercut.c");
    std::fs::write(&source, SOURCE).map_err(io("writing", &source))?;
    let built = work.path().join("powercut.so");
    let compilers: Vec<String> = match std::env::var("CC") {
        Ok(cc) if !cc.trim().is_empty() => vec![cc],
        _ => vec!["cc".into(), "gcc".into()],
    };
    let mut missing = Vec::new();
    for compiler in &compilers {
        let output = Command::new(compiler)
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wno-format-truncation", "-o"])
            .arg(&built)
            .arg(&source)
            .args(["-ldl", "-lpthread"])
            .output();
        match output {
            Err(e) => missing.push(format!("`{compiler}`: {e}")),
            Ok(output) if output.status.success() => {
                // Published by a rename, so a concurrent process never loads half a file.
                std::fs::rename(&built, &target).map_err(io("installing", &target))?;
                return Ok(target);
            }
            Ok(output) => {
                return Err(PowerCutError::Compile {
                    compiler: compiler.clone(),
                    output: format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    ),
                })
            }
        }
    }
    Err(PowerCutError::NoCompiler(missing.join("; ")))
}

/// One data directory under power-cut testing: the durable image lives beside it, in
/// `<data>.powercut-shadow` (the same file system, so restoring is a rename).
#[derive(Debug)]
pub struct PowerCut {
    data: PathBuf,
    shadow: PathBuf,
}

impl PowerCut {
    pub fn new(data: &Path) -> PowerCut {
        let mut shadow = data.as_os_str().to_owned();
        shadow.push(".powercut-shadow");
        PowerCut { data: data.to_path_buf(), shadow: PathBuf::from(shadow) }
    }

    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Starts a new image as a copy of the data directory (created if missing): what is
    /// there now is durable. Call before each child.
    pub fn arm(&self) -> Result<(), PowerCutError> {
        std::fs::create_dir_all(&self.data).map_err(io("creating", &self.data))?;
        if self.shadow.exists() {
            std::fs::remove_dir_all(&self.shadow).map_err(io("removing", &self.shadow))?;
        }
        copy_tree(&self.data, &self.shadow)
    }

    /// Makes `command` a process under the cut: loads the library and names the directories.
    pub fn apply(&self, command: &mut Command) -> Result<(), PowerCutError> {
        command
            .env("LD_PRELOAD", library()?)
            .env("FERROMQ_POWERCUT_DIR", &self.data)
            .env("FERROMQ_POWERCUT_SHADOW", &self.shadow);
        Ok(())
    }

    /// The power came back (call once the child is dead): the data directory becomes the
    /// durable image.
    pub fn restore(&self) -> Result<(), PowerCutError> {
        std::fs::remove_dir_all(&self.data).map_err(io("removing", &self.data))?;
        std::fs::rename(&self.shadow, &self.data).map_err(io("restoring", &self.shadow))?;
        let bookkeeping = self.data.join(".powercut");
        if bookkeeping.exists() {
            std::fs::remove_dir_all(&bookkeeping).map_err(io("removing", &bookkeeping))?;
        }
        Ok(())
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.shadow);
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), PowerCutError> {
    std::fs::create_dir_all(to).map_err(io("creating", to))?;
    for entry in std::fs::read_dir(from).map_err(io("listing", from))? {
        let entry = entry.map_err(io("listing", from))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(io("reading the type of", &source))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).map_err(io("copying", &source))?;
        }
    }
    Ok(())
}
