//! Ranked saves: each rank writes its own shard (`rank{r}/`), and a round
//! becomes the new `latest`, with a `manifest.json` of every rank's hashes,
//! only once every rank's shard is in. The promise: once every rank's save of
//! a round has returned 0, every rank's load returns that round; a save that
//! cannot guarantee it returns an error and leaves the previous `latest`.
//!
//! A round's identity is the snapshot number it will take (the last one + 1),
//! never the bytes the caller saves: ranks may save different meta. Saves are
//! collective, so every rank of a round reads the same last snapshot.
//!
//! - With a process group (`enkai_dist_init` of more than one rank), the
//!   commit goes through it as PyTorch's DCP does (the directory must be
//!   shared by every rank: one host, or a shared file system): every rank writes and
//!   fsyncs its shard, rank 0 gathers every rank's file hashes, writes the
//!   manifest and switches `latest`, and the outcome goes back to every rank,
//!   so all return after the commit with the same result.
//! - Without one, ranks meet through the file system (one host), and a save
//!   returns once its own shard is durable: the save that puts the last
//!   shard of a round in place commits it, under the directory lock. A rank
//!   that saves again before its round completes replaces its shard there (a
//!   round takes each rank's newest shard), so one process may save every
//!   rank in turn. A round that never completes is never `latest`; the next
//!   commit sweeps it. With `ENKAI_CKPT_RANKED_WAIT=1` (opt-in) a save also
//!   waits until its round is committed, and after `ENKAI_DIST_TIMEOUT_S`
//!   (default 1800 s) withdraws its shard and fails with `E_CKPT_INCOMPLETE`;
//!   a waiting writer that died never completes a round (its save never
//!   returned, and a restarted attempt writes a new shard).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::fsutil::{self, io_err};
use super::{format_err, gather, read_verified, restore, take_tensors, write_files, Files, Loaded, Partition, Sharding};
use super::{FORMAT, INTEGRITY, MANIFEST, OPTIMIZER};
use crate::dist;
use crate::error::{Error, Result};

// The largest world a ranked checkpoint takes, as a process group: the
// protocol walks every rank, so a world from one bad integer must not become
// billions of steps.
use crate::dist::rendezvous::MAX_WORLD;

fn round_dir(dir: &Path, round: u64) -> PathBuf {
    dir.join(format!(".round-{round:06}"))
}

/// The round `latest` holds, from its manifest (0 when there is none).
fn committed_round(dir: &Path) -> u64 {
    let read = || -> Option<u64> {
        let snap = fsutil::latest(dir).ok()?;
        let v: Value = serde_json::from_slice(&std::fs::read(snap.join(MANIFEST)).ok()?).ok()?;
        v.get("round")?.as_u64()
    };
    read().unwrap_or(0)
}

/// Writes this rank's shard into `pending` as `rank{rank}` (replacing one an
/// earlier attempt left), returning its files' hashes.
fn write_shard(pending: &Path, rank: i64, plan: &super::Plan) -> Result<Value> {
    let staged = fsutil::staging(pending, &format!("rank{rank}"))?;
    let written = write_files(&staged, plan).and_then(|hashes| {
        let shard = pending.join(format!("rank{rank}"));
        if shard.exists() {
            std::fs::remove_dir_all(&shard).map_err(|e| io_err("replace", &shard, e))?;
        }
        std::fs::rename(&staged, &shard).map_err(|e| io_err("rename", &staged, e))?;
        fsutil::fsync_dir(pending)?;
        Ok(json!(hashes))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    written
}

/// Writes the manifest into `pending` and makes it the new `latest`; older
/// rounds that can no longer complete are removed. Called by one rank, with
/// the directory lock held.
fn commit_round(dir: &Path, pending: &Path, round: u64, world: i64, ranks: serde_json::Map<String, Value>, partition: &Partition) -> Result<()> {
    let mut manifest = json!({"format": FORMAT, "world": world, "round": round, "ranks": ranks});
    if let Some(p) = partition {
        manifest["partition"] = p.clone();
    }
    fsutil::write_synced(&pending.join(MANIFEST), manifest.to_string().as_bytes())?;
    for e in std::fs::read_dir(pending).map_err(|e| io_err("list", pending, e))?.flatten() {
        let name = e.file_name();
        if name.to_str().is_some_and(|n| n.starts_with(".owner-") || n.starts_with(".staging-")) {
            let _ = std::fs::remove_file(e.path()).or_else(|_| std::fs::remove_dir_all(e.path()));
        }
    }
    fsutil::sweep_stale(dir)?;
    fsutil::commit(dir, pending)?;
    // Every rank has moved past the rounds before this one (and past the
    // rounds of the older meta-keyed layout): none of them can complete.
    for e in std::fs::read_dir(dir).map_err(|e| io_err("list", dir, e))?.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let old = name.strip_prefix(".round-").and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n < round)
            || name.starts_with(".pending-");
        if old {
            std::fs::remove_dir_all(e.path()).map_err(|err| io_err("remove", &e.path(), err))?;
        }
    }
    Ok(())
}

fn shard_hashes(pending: &Path, r: i64) -> Result<Value> {
    let shard = pending.join(format!("rank{r}"));
    let integrity = std::fs::read(shard.join(INTEGRITY)).map_err(|e| io_err("read", &shard, e))?;
    let v: Value = serde_json::from_slice(&integrity).map_err(|e| format_err(INTEGRITY, e))?;
    Ok(v["files"].clone())
}

pub fn save_ranked(dir: &str, rank: i64, world: i64, params: &str, opt: i64, scaler: i64, meta: &str) -> Result<()> {
    if world > MAX_WORLD {
        crate::bail!(E_INVALID_ARG, "a world of {world} ranks is larger than the limit of {MAX_WORLD}");
    }
    if world < 1 || !(0..world).contains(&rank) {
        crate::bail!(E_INVALID_ARG, "rank {rank} is not in a world of {world}");
    }
    let dir = super::dir_arg(dir)?;
    let group = dist::multi_rank_group()?;
    if let Some((gw, gr)) = group {
        if (gw, gr) != (world, rank) {
            crate::bail!(E_INVALID_ARG, "save_ranked: rank {rank} of {world}, but this process is rank {gr} of {gw} in the process group");
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
    match group {
        Some(_) => save_through_group(dir, rank, world, (params, opt, scaler, meta)),
        None => save_through_files(dir, rank, world, (params, opt, scaler, meta)),
    }
}

/// The next round: the number the next snapshot will take.
fn next_round(dir: &Path) -> Result<u64> {
    Ok(fsutil::last_snapshot(dir)? + 1)
}

/// What a rank saves: params, optimizer, scaler (0 for none), meta.
type What<'a> = (&'a str, i64, i64, &'a str);

fn save_through_group(dir: &Path, rank: i64, world: i64, (params, opt, scaler, meta): What) -> Result<()> {
    let call = "checkpoint_save_ranked";
    // 1. Every rank writes and fsyncs its shard (or records why it could not).
    let mut partition = None;
    let local = (|| -> Result<(u64, Value)> {
        let (plan, p) = gather(params, opt, scaler, meta.as_bytes())?;
        partition = p;
        let round = next_round(dir)?;
        let pending = round_dir(dir, round);
        std::fs::create_dir_all(&pending).map_err(|e| io_err("create", &pending, e))?;
        Ok((round, write_shard(&pending, rank, &plan)?))
    })();
    let report = match &local {
        Ok((round, files)) => json!({"round": round, "files": files}),
        Err(e) => json!({"error": e.to_string()}),
    };
    // 2. Rank 0 collects every rank's report and commits when all succeeded.
    let reports = dist::exchange(call, report.to_string().as_bytes())?;
    let outcome = if rank == 0 {
        let decided = decide(dir, world, &reports, &partition);
        match &decided {
            Ok(()) => String::new(),
            Err(e) => e.to_string(),
        }
    } else {
        String::new()
    };
    // 3. Everyone learns rank 0's outcome.
    let outcomes = dist::exchange(call, outcome.as_bytes())?;
    let outcome = String::from_utf8_lossy(&outcomes[0]).into_owned();
    if outcome.is_empty() {
        return Ok(());
    }
    if let Ok((round, _)) = &local {
        let _ = std::fs::remove_dir_all(round_dir(dir, *round).join(format!("rank{rank}")));
    }
    Err(local.err().unwrap_or_else(|| Error::parse(&outcome).unwrap_or_else(|| crate::err!(E_CKPT_INCOMPLETE, "{outcome}"))))
}

/// Rank 0's half of a group commit: every report must be a written shard of one round.
fn decide(dir: &Path, world: i64, reports: &[Vec<u8>], partition: &Partition) -> Result<()> {
    let mut ranks = serde_json::Map::new();
    let (mut rounds, mut failed) = (Vec::new(), None);
    for (r, raw) in reports.iter().enumerate() {
        let v: Value = serde_json::from_slice(raw).map_err(|e| crate::err!(E_INTERNAL, "rank {r}'s report: {e}"))?;
        match v.get("error").and_then(Value::as_str) {
            Some(e) => drop(failed.get_or_insert((r, e.to_string()))),
            None => {
                rounds.push(v.get("round").and_then(Value::as_u64).ok_or_else(|| crate::err!(E_INTERNAL, "rank {r}'s report has no round"))?);
                ranks.insert(r.to_string(), v["files"].clone());
            }
        }
    }
    rounds.dedup();
    let abandon = |why: Error| {
        rounds.iter().for_each(|&n| drop(std::fs::remove_dir_all(round_dir(dir, n))));
        Err(why)
    };
    if let Some((r, e)) = failed {
        return abandon(crate::err!(E_CKPT_INCOMPLETE, "rank {r} could not save its shard ({e}); nothing was committed"));
    }
    let &[round] = rounds.as_slice() else {
        return abandon(crate::err!(
            E_CKPT_INCOMPLETE,
            "the ranks are saving different rounds ({rounds:?}): they do not share one checkpoint directory, or one saved without the others; nothing was committed"
        ));
    };
    let pending = round_dir(dir, round);
    if let Some(r) = (0..world).find(|r| !pending.join(format!("rank{r}")).join(INTEGRITY).is_file()) {
        return abandon(crate::err!(
            E_CKPT_INCOMPLETE,
            "rank {r} wrote its shard, but not into {} as rank 0 sees it: every rank must save into one shared directory; nothing was committed",
            pending.display()
        ));
    }
    let _lock = fsutil::DirLock::take(dir)?;
    let committed = commit_round(dir, &pending, round, world, ranks, partition);
    if committed.is_err() {
        let _ = std::fs::remove_dir_all(&pending);
    }
    committed
}

/// Whether saves without a group wait for their round's commit: opt-in,
/// with `ENKAI_CKPT_RANKED_WAIT=1` (ranks in separate processes that must not
/// run ahead of each other).
fn waits() -> Result<bool> {
    match std::env::var("ENKAI_CKPT_RANKED_WAIT").ok().as_deref() {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => crate::bail!(E_INVALID_ARG, "ENKAI_CKPT_RANKED_WAIT={v:?} is neither 0 nor 1"),
    }
}

/// The owner file of rank `r`'s shard in a pending round: the writer's pid,
/// and `wait` when that writer waits for the commit.
fn owner_file(pending: &Path, r: i64) -> PathBuf {
    pending.join(format!(".owner-rank{r}"))
}

fn save_through_files(dir: &Path, rank: i64, world: i64, (params, opt, scaler, meta): What) -> Result<()> {
    let (plan, partition) = gather(params, opt, scaler, meta.as_bytes())?;
    let wait = waits()?.then(|| dist::rendezvous::timeout(&dist::rendezvous::ProcessEnv, 0.0)).transpose()?;
    // The shard is written and synced outside the lock (ranks write at once);
    // its round is chosen when it is put in place, under the lock, so a shard
    // never lands in a round that was committed meanwhile.
    let staged = fsutil::staging(dir, &format!("rank{rank}"))?;
    let placed = write_files(&staged, &plan).and_then(|_| {
        let _lock = fsutil::DirLock::take(dir)?;
        let round = next_round(dir)?;
        let pending = round_dir(dir, round);
        std::fs::create_dir_all(&pending).map_err(|e| io_err("create", &pending, e))?;
        let shard = pending.join(format!("rank{rank}"));
        if shard.exists() {
            // This rank saved again before the round completed: the round takes its newest shard.
            std::fs::remove_dir_all(&shard).map_err(|e| io_err("replace", &shard, e))?;
        }
        let owner = format!("{}{}", std::process::id(), if wait.is_some() { " wait" } else { "" });
        fsutil::write_synced(&owner_file(&pending, rank), owner.as_bytes())?;
        std::fs::rename(&staged, &shard).map_err(|e| io_err("rename", &staged, e))?;
        fsutil::fsync_dir(&pending)?;
        try_complete(dir, &pending, round, world, &partition)?;
        Ok((round, pending))
    });
    let (round, pending) = placed.inspect_err(|_| drop(std::fs::remove_dir_all(&staged)))?;
    match wait {
        Some(timeout) => wait_for_commit(dir, &pending, round, rank, world, timeout),
        None => Ok(()),
    }
}

/// Whether rank `r`'s shard counts towards its round: it is in place, and
/// its writer, if it waits for the commit, is still alive (a waiting save
/// that died never returned, and a restarted attempt writes a new shard).
fn shard_live(pending: &Path, r: i64) -> bool {
    if !pending.join(format!("rank{r}")).is_dir() {
        return false;
    }
    let owner = std::fs::read_to_string(owner_file(pending, r)).unwrap_or_default();
    let mut words = owner.split_whitespace();
    let pid = words.next().and_then(|p| p.parse::<i32>().ok());
    if words.next() != Some("wait") {
        return true;
    }
    // SAFETY: signal 0 only asks whether the process exists.
    pid.is_some_and(|p| p == std::process::id() as i32 || unsafe { libc::kill(p, 0) } == 0)
}

/// Commits the round when every rank's shard is in; a shard whose waiting
/// writer died is dropped. Called with the directory lock held.
fn try_complete(dir: &Path, pending: &Path, round: u64, world: i64, partition: &Partition) -> Result<()> {
    if !pending.is_dir() || committed_round(dir) >= round {
        return Ok(());
    }
    let mut complete = true;
    for r in 0..world {
        if !shard_live(pending, r) {
            complete = false;
            let _ = std::fs::remove_dir_all(pending.join(format!("rank{r}")));
        }
    }
    if !complete {
        return Ok(());
    }
    let mut ranks = serde_json::Map::new();
    for r in 0..world {
        ranks.insert(r.to_string(), shard_hashes(pending, r)?);
    }
    commit_round(dir, pending, round, world, ranks, partition)
}

fn wait_for_commit(dir: &Path, pending: &Path, round: u64, rank: i64, world: i64, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(1);
    loop {
        if committed_round(dir) == round {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let _lock = fsutil::DirLock::take(dir)?;
            if committed_round(dir) == round {
                return Ok(());
            }
            let missing: Vec<i64> = (0..world).filter(|&r| !shard_live(pending, r)).collect();
            let _ = std::fs::remove_dir_all(pending.join(format!("rank{rank}")));
            let _ = std::fs::remove_file(owner_file(pending, rank));
            crate::bail!(
                E_CKPT_INCOMPLETE,
                "round {round} in {}: rank(s) {missing:?} did not save within {:.1} s; this rank's shard was withdrawn and nothing was committed",
                dir.display(),
                timeout.as_secs_f64()
            );
        }
        if !pending.is_dir() {
            // The commit renames the round before it switches `latest`, all under
            // the lock: only with the lock does a vanished round mean abandoned.
            let _lock = fsutil::DirLock::take(dir)?;
            if committed_round(dir) == round {
                return Ok(());
            }
            crate::bail!(E_CKPT_INCOMPLETE, "round {round} in {} was abandoned: a later round was committed without it", dir.display());
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// The latest ranked snapshot of a directory, as rank `rank` reads it.
struct Saved {
    snap: PathBuf,
    manifest: Value,
    world: i64,
    /// The world size of a live process group that differs from the saved one.
    resharding: Option<i64>,
}

impl Saved {
    fn latest(dir: &str, rank: i64) -> Result<Saved> {
        let snap = fsutil::latest(super::dir_arg(dir)?)?;
        let mpath = snap.join(MANIFEST);
        let raw = fsutil::read_required(&mpath)?;
        let v: Value = serde_json::from_slice(&raw).map_err(|e| format_err(MANIFEST, e))?;
        let world = v.get("world").and_then(Value::as_i64).ok_or_else(|| format_err(MANIFEST, "no \"world\""))?;
        if !(1..=MAX_WORLD).contains(&world) {
            return Err(format_err(MANIFEST, format!("world {world} is not between 1 and {MAX_WORLD}")));
        }
        let ranks = v.get("ranks").and_then(Value::as_object).ok_or_else(|| format_err(MANIFEST, "no \"ranks\""))?;
        if let Some(r) = (0..world).find(|r| !ranks.contains_key(&r.to_string())) {
            crate::bail!(E_CKPT_MISSING, "{} does not list rank{r}", mpath.display());
        }
        let resharding = match dist::multi_rank_group()? {
            Some((gw, gr)) if gr != rank => {
                crate::bail!(E_INVALID_ARG, "load_ranked: rank {rank}, but this process is rank {gr} of {gw} in the process group")
            }
            Some((gw, _)) => (gw != world).then_some(gw),
            None if !(0..world).contains(&rank) => crate::bail!(E_INVALID_ARG, "rank {rank} is not in the saved world of {world}"),
            None => None,
        };
        Ok(Saved { snap, manifest: v, world, resharding })
    }

    /// The manifest's hashes of saved rank `r`'s files.
    fn expected(&self, r: i64) -> Result<std::collections::BTreeMap<String, String>> {
        serde_json::from_value(self.manifest["ranks"][&r.to_string()].clone()).map_err(|e| format_err(MANIFEST, e))
    }

    fn shard_dir(&self, r: i64) -> Result<PathBuf> {
        let path = self.snap.join(format!("rank{r}"));
        if !path.is_dir() {
            crate::bail!(E_CKPT_MISSING, "rank{r} is missing from {}", self.snap.display());
        }
        Ok(path)
    }

    /// Saved rank `r`'s verified files (or only the file `only`).
    fn shard(&self, r: i64, only: Option<&str>) -> Result<Files> {
        read_verified(&self.shard_dir(r)?, Some(&self.expected(r)?), only)
    }
}

/// A new scaler with the state rank `rank` saved in the latest ranked snapshot
/// (saved rank `rank % world` when the world size changed).
pub fn load_ranked_scaler(dir: &str, rank: i64) -> Result<i64> {
    let saved = Saved::latest(dir, rank)?;
    let r = rank % saved.world;
    super::scaler_in(&saved.shard_dir(r)?, Some(&saved.expected(r)?))
}

/// Rank `rank`'s part of the latest ranked snapshot. With a process group of
/// another size than the saved world, a sharded optimizer is re-partitioned
/// over the new world from every saved rank's moments, and params and meta
/// come from saved rank `rank % world` (data-parallel params are the same on
/// every rank).
pub fn load_ranked(dir: &str, rank: i64) -> Result<(Vec<i64>, i64, Vec<u8>)> {
    let saved = Saved::latest(dir, rank)?;
    let world = saved.world;
    let shard = |r: i64, only: Option<&str>| saved.shard(r, only);
    let Some(new_world) = saved.resharding else {
        return restore(shard(rank, None)?, Sharding::AsSaved { rank });
    };
    let mut files = shard(rank % world, None)?;
    if saved.manifest.get("partition").is_none() {
        // Not sharded: every rank saved the whole optimizer state.
        return restore(files, Sharding::AsSaved { rank });
    }
    // Sharded: gather every saved rank's moments, then partition them afresh.
    let Some((mut moments, mut meta)) = take_tensors(&mut files, OPTIMIZER)? else {
        return Err(format_err(MANIFEST, "a partition is recorded but rank's shard has no optimizer state"));
    };
    let mut steps: serde_json::Map<String, Value> = super::json_meta(&meta, "steps", OPTIMIZER)?;
    for r in (0..world).filter(|&r| r != rank % world) {
        let mut other = shard(r, Some(OPTIMIZER))?;
        let (m, om) = take_tensors(&mut other, OPTIMIZER)?.ok_or_else(|| crate::err!(E_CKPT_MISSING, "rank{r} has no {OPTIMIZER}"))?;
        let s: serde_json::Map<String, Value> = super::json_meta(&om, "steps", OPTIMIZER)?;
        moments.extend(m);
        steps.extend(s);
    }
    meta.insert("steps".into(), Value::Object(steps).to_string());
    files.insert(OPTIMIZER.into(), Loaded::Tensors(moments, meta));
    restore(files, Sharding::Fresh { world: new_world, rank })
}
