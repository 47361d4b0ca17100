//! The harness bites: a child process writes files with and without syncs, is SIGKILLed, and
//! after the cut only what the model calls durable is there.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::PowerCut;

const DIR_VAR: &str = "FERROMQ_POWERCUT_SELF_TEST_DIR";

fn sync_dir(dir: &Path) {
    File::open(dir).and_then(|d| d.sync_all()).expect("fsync the directory");
}

fn write_file(path: &Path, data: &[u8]) -> File {
    let mut file = File::create(path).expect("create");
    file.write_all(data).expect("write");
    file
}

#[test]
#[ignore = "the power-cut self-test's child process; runs only when started by it"]
fn powercut_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else { return };
    let dir = Path::new(&dir);
    // Written, never synced: its name is durable (the directory is synced below), its data
    // is not.
    write_file(&dir.join("unsynced"), b"never synced");
    // Data synced, name synced: kept.
    let kept = write_file(&dir.join("synced"), b"synced data");
    kept.sync_data().expect("fdatasync");
    let renamed = write_file(&dir.join("old-name"), b"renamed");
    renamed.sync_all().expect("fsync");
    let moved = write_file(&dir.join("moving"), b"moved");
    moved.sync_all().expect("fsync");
    let shrunk = write_file(&dir.join("shrunk"), b"0123456789");
    shrunk.sync_all().expect("fsync");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    sync_dir(dir);
    // Overwritten and appended after the sync, not synced again: the synced content stays.
    kept.write_all_at(b"SYNCED", 0).expect("overwrite");
    let mut appended = OpenOptions::new().append(true).open(dir.join("synced")).expect("open");
    appended.write_all(b" and more").expect("append");
    // Renamed, then the directory synced: the new name.
    std::fs::rename(dir.join("moving"), dir.join("moved")).expect("rename");
    sync_dir(dir);
    // Shrunk, then synced: durable.
    shrunk.set_len(4).expect("truncate");
    shrunk.sync_data().expect("fdatasync");
    // Name changes with no directory sync after them: none is durable.
    std::fs::rename(dir.join("old-name"), dir.join("new-name")).expect("rename");
    std::fs::remove_file(dir.join("shrunk")).expect("unlink");
    write_file(&dir.join("nameless"), b"data without a durable name").sync_all().expect("fsync");
    println!("\npowercut-child done");
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn power_cut_keeps_synced_data_and_names_and_loses_the_rest() {
    let base = tempfile::Builder::new().prefix("ferromq-powercut-").tempdir().expect("dir");
    let data = base.path().join("data");
    let cut = PowerCut::new(&data);
    cut.arm().expect("arm");
    // What was there before the child counts as durable.
    std::fs::write(data.join("before"), b"from before").expect("write");
    cut.arm().expect("arm again");
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    command
        .args(["--exact", "powercut::tests::powercut_child", "--ignored", "--nocapture"])
        .args(["--test-threads=1"])
        .env(DIR_VAR, &data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cut.apply(&mut command).unwrap_or_else(|e| panic!("{e}"));
    let mut child = command.spawn().expect("spawn the child");
    let stdout = child.stdout.take().expect("stdout");
    let done = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("powercut-child done"));
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(done, "the child did not finish its writes");
    // Before the cut the page cache has everything.
    assert_eq!(std::fs::read(data.join("unsynced")).expect("read"), b"never synced");
    cut.restore().expect("restore");

    let read = |name: &str| std::fs::read(data.join(name)).ok();
    assert_eq!(read("before").as_deref(), Some(&b"from before"[..]));
    assert_eq!(read("unsynced").as_deref(), Some(&b""[..]), "unsynced data survived the cut");
    assert_eq!(read("synced").as_deref(), Some(&b"synced data"[..]), "synced data");
    assert_eq!(read("nameless"), None, "a name survived without a directory sync");
    assert_eq!(read("old-name").as_deref(), Some(&b"renamed"[..]), "rename not synced");
    assert_eq!(read("new-name"), None, "an unsynced rename survived");
    assert_eq!(read("moved").as_deref(), Some(&b"moved"[..]), "a synced rename");
    assert_eq!(read("moving"), None, "a synced rename left its old name");
    assert!(data.join("sub").is_dir(), "a directory made before a sync");
    assert_eq!(read("shrunk").as_deref(), Some(&b"0123"[..]), "a synced truncate");
    assert!(!data.join(".powercut").exists(), "the bookkeeping is gone");
}
