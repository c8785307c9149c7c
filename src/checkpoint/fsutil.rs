//! Durable file-system steps: synced writes, directory fsync, the atomic
//! switch of `latest`, pruning, and the directory lock.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

pub fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    crate::err!(E_CKPT_IO, "{what} {}: {e}", path.display())
}

/// A file a checkpoint needs: absent is `E_CKPT_MISSING`, unreadable `E_CKPT_IO`.
pub fn read_required(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => crate::err!(E_CKPT_MISSING, "{} is missing", path.display()),
        _ => io_err("read", path, e),
    })
}

/// Writes `bytes` to a new file and fsyncs it.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(|e| io_err("create", path, e))?;
    f.write_all(bytes).map_err(|e| io_err("write", path, e))?;
    f.sync_all().map_err(|e| io_err("fsync", path, e))
}

/// Reads at least this large hash on a second thread.
const PARALLEL_MIN: usize = 4 << 20;

/// The bytes of a file to write, produced in order into a sink; called more
/// than once (and from two threads), giving the same bytes each time.
pub type Feed<'a> = dyn Fn(&mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> + Sync + 'a;

/// Writes the file `feed` produces, fsyncs it, and returns its SHA-256 in
/// hex. SHA-256 (about 2 GB/s with SHA-NI) and the copy into the page cache
/// each take a core: the hash is taken on a second thread, in a pass of its
/// own over the same bytes, so a save costs the slower of the two, and the
/// hash goes on while the fsync waits for the disk.
pub fn write_hashed(path: &Path, feed: &Feed) -> Result<String> {
    std::thread::scope(|s| {
        let hashing = s.spawn(|| -> Result<String> {
            let mut hash = Sha256::new();
            feed(&mut |b| {
                hash.update(b);
                Ok(())
            })?;
            Ok(hex(&hash.finalize()))
        });
        let written = (|| {
            let mut file = File::create(path).map_err(|e| io_err("create", path, e))?;
            feed(&mut |b| file.write_all(b).map_err(|e| io_err("write", path, e)))?;
            file.sync_all().map_err(|e| io_err("fsync", path, e))
        })();
        let hash = hashing.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        written.and(hash)
    })
}

/// A file read front to back with its SHA-256 taken on the way, so a reader
/// can put the bytes where they belong (tensor storage) in the same pass.
pub struct HashingReader<'a> {
    file: File,
    path: &'a Path,
    hash: Sha256,
    len: u64,
    pos: u64,
}

/// What went wrong while reading a file into its structure.
pub enum ReadErr {
    /// The bytes are not what the format says, or end early, or could not be
    /// placed: reported only once the whole file's hash is known to match,
    /// since in damaged bytes it would be a symptom, not the cause.
    Format(Error),
    /// The file could not be read at all.
    Io(Error),
}

impl From<Error> for ReadErr {
    fn from(e: Error) -> Self {
        ReadErr::Format(e)
    }
}

impl<'a> HashingReader<'a> {
    pub fn open(path: &'a Path) -> Result<Self> {
        let (file, len) = open_required(path)?;
        Ok(HashingReader { file, path, hash: Sha256::new(), len, pos: 0 })
    }

    /// Fills `dst` from the file, hashing it chunk by chunk while it is in
    /// cache; a large `dst` is hashed on a second thread, a chunk behind the reads.
    pub fn read_into(&mut self, dst: &mut [u8]) -> std::result::Result<(), ReadErr> {
        let HashingReader { file, path, hash, pos, .. } = self;
        let mut read = |chunk: &mut [u8]| -> std::result::Result<(), ReadErr> {
            file.read_exact(chunk).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    ReadErr::Format(crate::err!(E_CKPT_FORMAT, "{} ends before its header says", path.display()))
                }
                _ => ReadErr::Io(io_err("read", path, e)),
            })?;
            *pos += chunk.len() as u64;
            Ok(())
        };
        if dst.len() < PARALLEL_MIN {
            for chunk in dst.chunks_mut(1 << 20) {
                read(chunk)?;
                hash.update(&*chunk);
            }
            return Ok(());
        }
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<&[u8]>(4);
            s.spawn(move || rx.iter().for_each(|c| hash.update(c)));
            for chunk in dst.chunks_mut(1 << 20) {
                read(chunk)?;
                // The hasher ends only when tx is dropped, so it is alive to receive.
                let _ = tx.send(chunk);
            }
            Ok(())
        })
    }

    /// Reads and hashes the next `n` bytes, keeping none of them.
    pub fn skip(&mut self, n: u64) -> std::result::Result<(), ReadErr> {
        let mut scratch = vec![0u8; n.min(1 << 20) as usize];
        let mut left = n;
        while left > 0 {
            let k = left.min(scratch.len() as u64) as usize;
            self.read_into(&mut scratch[..k])?;
            left -= k as u64;
        }
        Ok(())
    }

    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes read (and hashed) so far.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Hashes whatever is left of the file and returns the digest in hex.
    pub fn finish(mut self) -> Result<String> {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let k = self.file.read(&mut buf).map_err(|e| io_err("read", self.path, e))?;
            if k == 0 {
                break;
            }
            self.hash.update(&buf[..k]);
        }
        Ok(hex(&self.hash.finalize()))
    }
}

/// Writes the file `feed` produces at `path` atomically: into a new
/// temporary file beside it (same file system, so the rename is atomic),
/// fsynced, renamed over `path`, then the directory fsynced. A failure
/// removes the temporary and leaves whatever was at `path` as it was.
pub fn write_atomic(path: &Path, feed: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()>) -> Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| crate::err!(E_INVALID_ARG, "{} does not name a file", path.display()))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The name's head only: a name near NAME_MAX would leave no room for the suffix.
    let head: String = name.to_string_lossy().chars().take(64).collect();
    let tmp = dir.join(format!(".{head}.tmp-{}-{seq}", std::process::id()));
    let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(|e| io_err("create", &tmp, e))?;
    let written = feed(&mut |b| file.write_all(b).map_err(|e| io_err("write", &tmp, e)))
        .and_then(|()| file.sync_all().map_err(|e| io_err("fsync", &tmp, e)))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| io_err("rename", &tmp, e)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    fsync_dir(dir)
}

pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn fsync_dir(path: &Path) -> Result<()> {
    File::open(path).and_then(|d| d.sync_all()).map_err(|e| io_err("fsync directory", path, e))
}

/// A file a checkpoint needs, opened for reading, with its length: absent is
/// `E_CKPT_MISSING`, unreadable `E_CKPT_IO`.
pub fn open_required(path: &Path) -> Result<(File, u64)> {
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => crate::err!(E_CKPT_MISSING, "{} is missing", path.display()),
        _ => io_err("open", path, e),
    })?;
    let len = file.metadata().map_err(|e| io_err("stat", path, e))?.len();
    Ok((file, len))
}

/// A file name from a manifest or link: one plain path component, nothing that climbs out.
pub fn plain_name(name: &str) -> Result<&str> {
    let ok = !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0');
    if !ok {
        crate::bail!(E_CKPT_FORMAT, "{name:?} is not a plain file name");
    }
    Ok(name)
}

const PREFIX: &str = "snap-";

fn snapshot_number(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX).and_then(|n| n.parse().ok())
}

fn snapshots(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| io_err("list", dir, e))? {
        let e = e.map_err(|e| io_err("list", dir, e))?;
        if let Some(n) = e.file_name().to_str().and_then(snapshot_number) {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The number of the newest snapshot in `dir`, 0 when there is none.
pub fn last_snapshot(dir: &Path) -> Result<u64> {
    Ok(snapshots(dir)?.last().map_or(0, |(n, _)| *n))
}

/// The snapshot `latest` points to.
pub fn latest(dir: &Path) -> Result<PathBuf> {
    let link = dir.join("latest");
    let target = fs::read_link(&link).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => crate::err!(E_CKPT_MISSING, "no checkpoint in {}: {} does not exist", dir.display(), link.display()),
        _ => io_err("read link", &link, e),
    })?;
    let name = target.to_str().ok_or_else(|| crate::err!(E_CKPT_FORMAT, "latest points to a non-UTF-8 name"))?;
    let name = plain_name(name)?;
    if snapshot_number(name).is_none() {
        crate::bail!(E_CKPT_FORMAT, "latest points to {name:?}, not a snapshot");
    }
    Ok(dir.join(name))
}

/// A fresh staging directory inside `dir` (same file system, so renames are atomic).
pub fn staging(dir: &Path, tag: &str) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = dir.join(format!(".staging-{tag}-{}-{nanos}", std::process::id()));
    fs::create_dir(&path).map_err(|e| io_err("create", &path, e))?;
    Ok(path)
}

/// Makes the synced staging directory the next snapshot and points `latest`
/// at it, each step durable before the next; then prunes old snapshots.
/// A crash at any instant leaves `latest` on a complete snapshot.
pub fn commit(dir: &Path, staged: &Path) -> Result<PathBuf> {
    fsync_dir(staged)?;
    let next = snapshots(dir)?.last().map_or(1, |(n, _)| n + 1);
    let name = format!("{PREFIX}{next:06}");
    let snap = dir.join(&name);
    fs::rename(staged, &snap).map_err(|e| io_err("rename", staged, e))?;
    fsync_dir(dir)?;
    let tmp = dir.join(format!(".latest-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&name, &tmp).map_err(|e| io_err("symlink", &tmp, e))?;
    fs::rename(&tmp, dir.join("latest")).map_err(|e| io_err("rename", &tmp, e))?;
    fsync_dir(dir)?;
    prune(dir, next)?;
    Ok(snap)
}

/// Removes what savers killed mid-write left behind: staging directories and
/// temporary links whose process is gone. Called with the directory lock held.
pub fn sweep_stale(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).map_err(|e| io_err("list", dir, e))?.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid = if let Some(rest) = name.strip_prefix(".staging-") {
            rest.split('-').rev().nth(1)
        } else {
            name.strip_prefix(".latest-")
        };
        let Some(pid) = pid.and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = pid == std::process::id() as i32 || unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let p = e.path();
            let _ = if p.is_dir() && !p.is_symlink() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
        }
    }
    Ok(())
}

/// How many snapshots to keep: `ENKAI_CKPT_KEEP` (>= 1), default 2.
fn keep() -> u64 {
    std::env::var("ENKAI_CKPT_KEEP").ok().and_then(|v| v.parse().ok()).filter(|k| *k >= 1).unwrap_or(2)
}

/// Before a save writes: removes the snapshots its commit would prune (all
/// but the newest `keep - 1`), so the new one is written into the room (disk
/// and page cache) they leave, and the directory never holds `keep + 1`
/// snapshots. With `keep` = 1 nothing goes before the commit: the newest
/// snapshot always stays until a newer one is in. Takes the directory lock.
pub fn make_room(dir: &Path) -> Result<()> {
    let keep = keep();
    if keep < 2 || !dir.is_dir() {
        return Ok(());
    }
    let _lock = DirLock::take(dir)?;
    match snapshots(dir)?.last() {
        Some(&(newest, _)) => prune_keeping(dir, newest, keep - 1),
        None => Ok(()),
    }
}

fn prune(dir: &Path, newest: u64) -> Result<()> {
    prune_keeping(dir, newest, keep())
}

fn prune_keeping(dir: &Path, newest: u64, keep: u64) -> Result<()> {
    for (n, path) in snapshots(dir)? {
        if n + keep <= newest {
            fs::remove_dir_all(&path).map_err(|e| io_err("remove", &path, e))?;
        }
    }
    Ok(())
}

/// An exclusive `flock` on `dir/.lock`, held until dropped: savers in several
/// processes take turns at the bookkeeping steps.
pub struct DirLock(File);

impl DirLock {
    pub fn take(dir: &Path) -> Result<DirLock> {
        fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
        let path = dir.join(".lock");
        let f = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(|e| io_err("open", &path, e))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io_err("lock", &path, std::io::Error::last_os_error()));
        }
        Ok(DirLock(f))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // SAFETY: unlocking our own descriptor (closing it would too).
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
