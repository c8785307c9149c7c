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
use super::{format_err, gather, read_verified, restore, take_tensors, write_files, Content, Files, Loaded, Partition, Sharding};
use super::{FORMAT, INTEGRITY, MANIFEST, OPTIMIZER, PARAMS, REPLICATED};
use crate::backend::{self, imp};
use crate::tensor;
use crate::dist;
use crate::error::{Error, Result};

// The largest world a ranked checkpoint takes, as a process group: the
// protocol walks every rank, so a world from one bad integer must not become
// billions of steps.
use crate::dist::rendezvous::MAX_WORLD;

/// The manifest's format when a round lists replicated tensors (written once
/// in pieces, `replicated.bin` in each rank's shard); rounds without any keep
/// `FORMAT`, and both load.
const FORMAT_REPLICATED: u64 = 2;

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
fn commit_round(dir: &Path, pending: &Path, round: u64, world: i64, ranks: serde_json::Map<String, Value>, partition: &Partition, replicated: Option<&Value>) -> Result<()> {
    let mut manifest = json!({"format": FORMAT, "world": world, "round": round, "ranks": ranks});
    if let Some(p) = partition {
        manifest["partition"] = p.clone();
    }
    if let Some(r) = replicated {
        manifest["format"] = json!(FORMAT_REPLICATED);
        manifest["replicated"] = r.clone();
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
    // 0. Every rank takes what it saves and fingerprints the tensors that may
    //    be replicas; one exchange tells every rank what all of them hold alike.
    let taken = gather(params, opt, scaler, meta.as_bytes()).and_then(|(plan, partition)| Ok((fingerprints(&plan)?, plan, partition)));
    let report = match &taken {
        Ok((prints, ..)) => json!({"tensors": prints}),
        Err(e) => json!({"error": e.to_string()}),
    };
    let reports = parse_reports(dist::exchange(call, report.to_string().as_bytes())?)?;
    let (_, mut plan, partition) = taken?;
    if let Some((r, e)) = reports.iter().enumerate().find_map(|(r, v)| v.get("error").and_then(Value::as_str).map(|e| (r, e))) {
        crate::bail!(E_CKPT_INCOMPLETE, "rank {r} could not save its shard ({e}); nothing was written");
    }
    let replicated = split_replicas(&reports, &mut plan, rank, world)?;
    fsutil::make_room(dir)?;
    // 1. Every rank writes and fsyncs its shard (or records why it could not).
    let local = (|| -> Result<(u64, Value)> {
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
        let decided = decide(dir, world, &reports, &partition, replicated.as_ref());
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

fn parse_reports(raw: Vec<Vec<u8>>) -> Result<Vec<Value>> {
    raw.iter().enumerate().map(|(r, b)| serde_json::from_slice(b).map_err(|e| crate::err!(E_INTERNAL, "rank {r}'s report: {e}"))).collect()
}

/// The files whose tensors may be replicas of another rank's.
const SHAREABLE: [&str; 2] = [PARAMS, OPTIMIZER];

/// What identifies a tensor across ranks: its file, name, dtype, shape and
/// the XXH3-128 of its bytes (a fingerprint to find replicas, 20+ GB/s; the
/// bytes written are still covered by SHA-256).
fn fingerprints(plan: &super::Plan) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for file in SHAREABLE {
        let Some(Content::Tensors(named, _)) = plan.get(file) else { continue };
        for (name, t) in named {
            let print = imp::with_bytes(t, |b| Ok(xxhash_rust::xxh3::xxh3_128(b)))?;
            out.push(json!([file, name, imp::dtype(t)?.name(), imp::shape(t), format!("{print:032x}")]));
        }
    }
    Ok(out)
}

/// The tensors every rank holds alike (the same fingerprint in every
/// report), in rank 0's order: they leave this rank's files, and this rank
/// writes bytes `[T*rank/world, T*(rank+1)/world)` of their concatenation
/// (T bytes) as `replicated.bin`, so a data-parallel run's state is written
/// once, spread evenly over the ranks. Returns the manifest's table.
fn split_replicas(reports: &[Value], plan: &mut super::Plan, rank: i64, world: i64) -> Result<Option<Value>> {
    let listed = |v: &Value| -> std::collections::HashSet<String> {
        v["tensors"].as_array().map(|a| a.iter().map(Value::to_string).collect()).unwrap_or_default()
    };
    let others: Vec<_> = reports.iter().map(listed).collect();
    let first = reports.first().and_then(|v| v["tensors"].as_array()).cloned().unwrap_or_default();
    let shared: Vec<Value> = first.into_iter().filter(|t| others.iter().all(|o| o.contains(&t.to_string()))).collect();
    if shared.is_empty() {
        return Ok(None);
    }
    let key = |t: &Value| (t[0].as_str().unwrap_or_default().to_string(), t[1].as_str().unwrap_or_default().to_string());
    let wanted: std::collections::HashMap<(String, String), usize> = shared.iter().enumerate().map(|(i, t)| (key(t), i)).collect();
    let mut taken: Vec<Option<imp::Raw>> = (0..shared.len()).map(|_| None).collect();
    for file in SHAREABLE {
        if let Some(Content::Tensors(named, _)) = plan.get_mut(file) {
            named.retain(|(name, t)| match wanted.get(&(file.to_string(), name.clone())) {
                Some(&i) => {
                    taken[i] = Some(imp::shallow(t));
                    false
                }
                None => true,
            });
        }
    }
    let (mut tensors, mut total) = (Vec::with_capacity(shared.len()), 0u64);
    let mut raws = Vec::with_capacity(shared.len());
    for (t, raw) in shared.iter().zip(taken) {
        let raw = raw.ok_or_else(|| crate::err!(E_INTERNAL, "replica {t} is not among this rank's tensors"))?;
        let nbytes = (tensor::numel_of(&imp::shape(&raw))? * imp::dtype(&raw)?.size()) as u64;
        tensors.push(json!({"file": t[0], "name": t[1], "dtype": t[2], "shape": t[3], "offset": total, "nbytes": nbytes}));
        total += nbytes;
        raws.push(raw);
    }
    let cut = |r: i64| (total as u128 * r as u128 / world as u128) as u64;
    let pieces: Vec<[u64; 2]> = (0..world).map(|r| [cut(r), cut(r + 1)]).collect();
    plan.insert(REPLICATED.into(), Content::Range(raws, cut(rank), cut(rank + 1)));
    Ok(Some(json!({"tensors": tensors, "pieces": pieces})))
}

/// Rank 0's half of a group commit: every report must be a written shard of one round.
fn decide(dir: &Path, world: i64, reports: &[Vec<u8>], partition: &Partition, replicated: Option<&Value>) -> Result<()> {
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
    let committed = commit_round(dir, &pending, round, world, ranks, partition, replicated);
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
    fsutil::make_room(dir)?;
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
    commit_round(dir, pending, round, world, ranks, partition, None)
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
        match v.get("format").and_then(Value::as_u64) {
            Some(FORMAT | FORMAT_REPLICATED) => {}
            f => return Err(format_err(MANIFEST, format!("unsupported format {f:?}"))),
        }
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

    /// The saved rank whose shard rank `rank` loads.
    fn read_rank(&self, rank: i64) -> i64 {
        if self.resharding.is_some() { rank % self.world } else { rank }
    }

    /// The replicated tensors a round lists, checked to tile the pieces
    /// exactly (so nothing is allocated beyond the bytes on disk).
    fn replicas(&self) -> Result<Option<Replicas>> {
        let Some(v) = self.manifest.get("replicated") else { return Ok(None) };
        let bad = |why: String| format_err(MANIFEST, format!("replicated: {why}"));
        let pieces: Vec<(u64, u64)> = serde_json::from_value(v["pieces"].clone()).map_err(|e| bad(format!("pieces: {e}")))?;
        if pieces.len() != self.world as usize {
            return Err(bad(format!("{} pieces for a world of {}", pieces.len(), self.world)));
        }
        let mut at = 0;
        for &(b, e) in &pieces {
            if b != at || e < b {
                return Err(bad(format!("piece [{b}, {e}) does not follow byte {at}")));
            }
            at = e;
        }
        let listed = v["tensors"].as_array().ok_or_else(|| bad("no tensor list".into()))?;
        let mut tensors = Vec::with_capacity(listed.len());
        let mut offset = 0u64;
        for t in listed {
            let s = |k: &str| t[k].as_str().map(str::to_string).ok_or_else(|| bad(format!("a tensor without {k:?}")));
            let (file, name) = (s("file")?, s("name")?);
            if !SHAREABLE.contains(&file.as_str()) {
                return Err(bad(format!("{file:?} is not a file replicas come from")));
            }
            let dtype = crate::dtype::DType::from_name(s("dtype")?.as_bytes()).ok_or_else(|| bad(format!("{name:?}: unknown dtype")))?;
            let shape: Vec<i64> = serde_json::from_value(t["shape"].clone()).map_err(|e| bad(format!("{name:?}: shape: {e}")))?;
            let nbytes = tensor::numel_of(&shape).ok().and_then(|n| n.checked_mul(dtype.size())).ok_or_else(|| bad(format!("{name:?}: shape {shape:?}")))? as u64;
            if t["offset"].as_u64() != Some(offset) || t["nbytes"].as_u64() != Some(nbytes) {
                return Err(bad(format!("{name:?} does not lie at byte {offset} with {nbytes} bytes")));
            }
            tensors.push(Replica { file, name, dtype, shape, offset, nbytes });
            offset += nbytes;
        }
        if offset != at {
            return Err(bad(format!("the tensors hold {offset} bytes, the pieces {at}")));
        }
        Ok(Some(Replicas { tensors, pieces }))
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
///
/// With a process group the load is collective, as DCP's: the replicated
/// tensors' pieces are read by every rank, but each piece's SHA-256 is
/// verified by one rank (piece `p` by rank `p % group size`), which shares
/// the XXH3-128 of the bytes it verified; every other rank checks its own
/// bytes of that piece against it. One exchange, whatever the format, so a
/// rank that fails early still meets the others.
pub fn load_ranked(dir: &str, rank: i64) -> Result<(Vec<i64>, i64, Vec<u8>)> {
    let group = dist::multi_rank_group()?;
    let verifies = |p: usize| group.is_none_or(|(gw, gr)| p as i64 % gw == gr);
    let local = (|| -> Result<(Saved, Files, Prints)> {
        let saved = Saved::latest(dir, rank)?;
        let mut files = saved.shard(saved.read_rank(rank), None)?;
        let prints = match saved.replicas()? {
            None => Vec::new(),
            Some(replicas) => {
                let (tensors, prints) = read_replicated(&saved, &replicas, verifies)?;
                for (file, name, raw) in tensors {
                    match files.get_mut(&file) {
                        Some(Loaded::Tensors(map, _)) => drop(map.insert(name, raw)),
                        _ => return Err(format_err(MANIFEST, format!("replicated {name:?} belongs to {file:?}, which the shard lacks"))),
                    }
                }
                prints
            }
        };
        Ok((saved, files, prints))
    })();
    if let Some((gw, gr)) = group {
        let report = match &local {
            Ok((.., prints)) => json!({"verified": prints.iter().filter(|(p, _)| verifies(*p)).collect::<Vec<_>>()}),
            Err(e) => json!({"error": e.to_string()}),
        };
        let reports = parse_reports(dist::exchange("checkpoint_load_ranked", report.to_string().as_bytes())?)?;
        if let Ok((saved, _, prints)) = &local {
            for (p, print) in prints.iter().filter(|(p, _)| !verifies(*p)) {
                let v = (*p as i64 % gw) as usize;
                let path = saved.snap.join(format!("rank{p}")).join(REPLICATED);
                if let Some(e) = reports[v].get("error").and_then(Value::as_str) {
                    // The verifier's own error (a damaged piece is every reader's E_CKPT_HASH_MISMATCH).
                    let e = Error::parse(e).unwrap_or_else(|| crate::err!(E_CKPT_INCOMPLETE, "{e}"));
                    return Err(Error::new(e.code, format!("rank {v}, which verifies {} for rank {gr}: {}", path.display(), e.detail)));
                }
                let theirs = reports[v]["verified"].as_array().and_then(|a| a.iter().find(|e| e[0].as_u64() == Some(*p as u64)));
                if theirs.and_then(|e| e[1].as_str()) != Some(print.as_str()) {
                    crate::bail!(E_CKPT_HASH_MISMATCH, "{}: rank {gr} read other bytes than rank {v} verified", path.display());
                }
            }
        }
    }
    let (saved, mut files, _) = local?;
    let world = saved.world;
    let Some(new_world) = saved.resharding else {
        return restore(files, Sharding::AsSaved { rank });
    };
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
        let mut other = saved.shard(r, Some(OPTIMIZER))?;
        let (m, om) = take_tensors(&mut other, OPTIMIZER)?.ok_or_else(|| crate::err!(E_CKPT_MISSING, "rank{r} has no {OPTIMIZER}"))?;
        let s: serde_json::Map<String, Value> = super::json_meta(&om, "steps", OPTIMIZER)?;
        moments.extend(m);
        steps.extend(s);
    }
    meta.insert("steps".into(), Value::Object(steps).to_string());
    files.insert(OPTIMIZER.into(), Loaded::Tensors(moments, meta));
    restore(files, Sharding::Fresh { world: new_world, rank })
}

/// A tensor the ranks of a round held alike, as the manifest lists it: its
/// bytes are `[offset, offset + nbytes)` of the concatenation that the
/// ranks' `replicated.bin` pieces split.
struct Replica {
    file: String,
    name: String,
    dtype: crate::dtype::DType,
    shape: Vec<i64>,
    offset: u64,
    nbytes: u64,
}

/// Each piece's XXH3-128 (hex) of the bytes a rank read.
type Prints = Vec<(usize, String)>;

/// A replicated tensor read back: its file, name and tensor.
type ReadReplica = (String, String, imp::Raw);

struct Replicas {
    tensors: Vec<Replica>,
    /// `[begin, end)` of each saved rank's piece.
    pieces: Vec<(u64, u64)>,
}

/// Reads the replicated tensors into CPU tensors, piece by piece in order:
/// each piece's XXH3-128 is taken from the bytes read, and its SHA-256 too
/// where `verifies(piece)`, checked against the manifest. Returns the
/// tensors (file, name, tensor) and every piece's XXH3-128 in hex.
fn read_replicated(saved: &Saved, replicas: &Replicas, verifies: impl Fn(usize) -> bool) -> Result<(Vec<ReadReplica>, Prints)> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::FileExt;
    struct Piece {
        path: PathBuf,
        file: std::fs::File,
        begin: u64,
        end: u64,
        sha: Option<Sha256>,
        xxh: xxhash_rust::xxh3::Xxh3,
    }
    let mut pieces = Vec::with_capacity(replicas.pieces.len());
    for (p, &(begin, end)) in replicas.pieces.iter().enumerate() {
        let path = saved.shard_dir(p as i64)?.join(REPLICATED);
        let (file, len) = fsutil::open_required(&path)?;
        if len != end - begin {
            crate::bail!(E_CKPT_HASH_MISMATCH, "{}: {len} bytes but the manifest records {}", path.display(), end - begin);
        }
        let sha = verifies(p).then(Sha256::new);
        pieces.push(Piece { path, file, begin, end, sha, xxh: xxhash_rust::xxh3::Xxh3::new() });
    }
    let b = backend::active_built()?;
    let mut tensors = Vec::with_capacity(replicas.tensors.len());
    for t in &replicas.tensors {
        let raw = imp::filled_cpu(b, &t.shape, t.dtype, |dst: &mut [u8]| -> Result<()> {
            for piece in pieces.iter_mut().filter(|p| p.begin < t.offset + t.nbytes && t.offset < p.end) {
                let (from, to) = (piece.begin.max(t.offset), piece.end.min(t.offset + t.nbytes));
                let part = &mut dst[(from - t.offset) as usize..(to - t.offset) as usize];
                piece.file.read_exact_at(part, from - piece.begin).map_err(|e| io_err("read", &piece.path, e))?;
                if let Some(sha) = &mut piece.sha {
                    sha.update(&*part);
                }
                piece.xxh.update(part);
            }
            Ok(())
        })?;
        tensors.push((t.file.clone(), t.name.clone(), raw));
    }
    let mut prints = Vec::with_capacity(pieces.len());
    for (p, piece) in pieces.into_iter().enumerate() {
        if let Some(sha) = piece.sha {
            let got = fsutil::hex(&sha.finalize());
            let want = saved.expected(p as i64)?.remove(REPLICATED);
            if want.as_deref() != Some(got.as_str()) {
                crate::bail!(E_CKPT_HASH_MISMATCH, "{}: sha256 {got} but the manifest records {want:?}", piece.path.display());
            }
        }
        prints.push((p, format!("{:032x}", piece.xxh.digest128())));
    }
    Ok((tensors, prints))
}
