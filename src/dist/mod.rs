//! Multi-rank training through PyTorch's own c10d process groups (Gloo),
//! created from torchrun's environment (`rendezvous`), with DDP's gradient
//! averaging in flat buckets (`plan`).
//!
//! Every collective first all-reduces a tiny signature of its arguments, so
//! that a rank that rejects its arguments (a stale handle, a wrong dtype) or
//! passes a different tensor list makes every rank fail with a clean error
//! instead of leaving its peers in a collective that never matches. A
//! communication failure (a peer died, a peer hung past the timeout) marks
//! the group broken: later calls fail at once with the same code, and
//! `shutdown` still works. Dist calls of one process are serialised (they
//! must reach the group in the same order on every rank); compute is not.
//!
//! A world of one rank needs no process group: its collectives are the
//! identity (all-gather copies), so single-process clients run unchanged.

pub mod plan;
pub mod rendezvous;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::backend::{imp, Tensor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Code, Error, Result};
use crate::handles::Ref;
use crate::registry::{DEVICES, TENSORS};
use plan::Entry;
use rendezvous::ProcessEnv;

/// A reduction of `enkai_dist_allreduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// A sum of `x * (1/world)`, the way DDP averages gradients.
    Mean,
    Max,
    Min,
}

impl ReduceOp {
    pub fn parse(name: &str) -> Result<ReduceOp> {
        Ok(match name {
            "sum" => ReduceOp::Sum,
            "mean" | "avg" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            _ => crate::bail!(E_INVALID_ARG, "unknown reduce op {name:?} (expected sum, mean, max or min)"),
        })
    }

    /// The backend's op: 0 sum, 1 max, 2 min.
    fn code(self) -> i32 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
        }
    }
}

struct Up {
    world: i64,
    rank: i64,
    /// None for a world of one rank.
    group: Option<imp::Group>,
}

enum State {
    Down,
    Up(Up),
    /// A collective failed; the error every later call repeats.
    Broken(Error),
}

static STATE: Mutex<State> = Mutex::new(State::Down);
/// Counts the groups this process created, so a second group never reads the first one's keys.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The device `enkai_dist_config` chose.
static CONFIG_DEVICE: Mutex<Option<Device>> = Mutex::new(None);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The device for this rank: `cuda:LOCAL_RANK` when CUDA is usable, else the CPU.
fn local_device() -> Result<Device> {
    let local = rendezvous::local_rank(&ProcessEnv)?;
    Ok(match u32::try_from(local) {
        Ok(n) if i64::from(n) < imp::cuda_device_count() => Device::Cuda(n),
        _ => Device::Cpu,
    })
}

/// Checks the world against the environment, picks the device (`device` −1:
/// `local_device()`, else a device handle) and seeds the RNG with `seed`.
pub fn config(world: i64, rank: i64, device: i64, seed: i64) -> Result<()> {
    rendezvous::check_world(&ProcessEnv, world, rank)?;
    let dev = if device == -1 { local_device()? } else { crate::tensor::device(device)? };
    crate::tensor::manual_seed(seed)?;
    *CONFIG_DEVICE.lock().unwrap_or_else(|p| p.into_inner()) = Some(dev);
    Ok(())
}

/// A new handle on the configured device (`local_device()` without `config`).
pub fn device_handle() -> Result<i64> {
    let configured = *CONFIG_DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    DEVICES.insert(configured.map_or_else(local_device, Ok)?)
}

/// Creates the process group (`init_method` "" = ENKAI_DIST_INIT_METHOD or
/// `env://`; `timeout_s` <= 0 = ENKAI_DIST_TIMEOUT_S or 30 minutes).
pub fn init(init_method: &str, world: i64, rank: i64, timeout_s: f64) -> Result<()> {
    let mut s = state();
    if !matches!(*s, State::Down) {
        crate::bail!(E_DIST, "the process group is already initialised (call enkai_dist_shutdown first)");
    }
    let timeout = rendezvous::timeout(&ProcessEnv, timeout_s)?;
    let group = if world == 1 {
        rendezvous::check_world(&ProcessEnv, world, rank)?;
        None
    } else {
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let plan = rendezvous::plan(&ProcessEnv, init_method, world, rank, timeout, generation)?;
        rendezvous::open_store_file(&plan)?;
        Some(imp::dist_group(&plan).map_err(|e| comm_err("init", e))?)
    };
    *s = State::Up(Up { world, rank, group });
    Ok(())
}

/// Ends the group; a no-op when there is none, and safe after a failure.
pub fn shutdown() -> Result<()> {
    let old = std::mem::replace(&mut *state(), State::Down);
    drop(old);
    Ok(())
}

/// (rank, world size) of the live group.
pub fn rank_and_world() -> Result<(i64, i64)> {
    with_group("rank", |up| Ok((up.rank, up.world)))
}

fn broken(call: &str, e: &Error) -> Error {
    Error::new(e.code, format!("{call}: the process group is broken by an earlier failure ({})", e.detail))
}

/// A backend failure during communication, classified by what Gloo and c10d
/// report (their messages are the only signal they give).
fn comm_err(call: &str, e: Error) -> Error {
    if e.code != Code::E_DIST {
        return e;
    }
    // Gloo prefixes its source location, "[.../pair.cc:553] ".
    let detail = match e.detail.strip_prefix('[').and_then(|d| d.split_once("] ")) {
        Some((_, rest)) => rest,
        None => &e.detail,
    };
    let lower = detail.to_ascii_lowercase();
    let code = if lower.contains("timed out") || lower.contains("timeout") {
        Code::E_DIST_TIMEOUT
    } else if ["closed by peer", "reset by peer", "broken pipe", "connection refused", "connection closed", "eof"]
        .iter()
        .any(|m| lower.contains(m))
    {
        Code::E_DIST_PEER_LOST
    } else {
        Code::E_DIST
    };
    Error::new(code, format!("{call}: {detail}"))
}

fn is_comm(e: &Error) -> bool {
    matches!(e.code, Code::E_DIST | Code::E_DIST_PEER_LOST | Code::E_DIST_TIMEOUT)
}

/// Runs `f` on the live group. No group, or a broken one, fails at once; a
/// communication failure inside `f` marks the group broken.
fn with_group<R>(call: &str, f: impl FnOnce(&Up) -> Result<R>) -> Result<R> {
    let mut s = state();
    let up = match &*s {
        State::Up(up) => up,
        State::Broken(e) => return Err(broken(call, e)),
        State::Down => crate::bail!(E_DIST, "{call}: the process group is not initialised (call enkai_dist_init)"),
    };
    match f(up) {
        Err(e) if is_comm(&e) => {
            *s = State::Broken(e.clone());
            Err(e)
        }
        r => r,
    }
}

/// Makes every rank agree before data moves: each all-reduces (ok, sig, −sig)
/// with MIN, so all learn whether some rank failed its own checks and whether
/// every signature is equal. This rank's own error wins over the others'.
fn agree(up: &Up, call: &str, sig: Result<i64>) -> Result<()> {
    let Some(g) = &up.group else { return sig.map(drop) };
    let (ok, s) = match &sig {
        Ok(s) => (1i64, *s),
        Err(_) => (0, 0),
    };
    let bytes: Vec<u8> = [ok, s, -s].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let t = imp::from_bytes(imp::dist_backend(), &bytes, &[3], DType::I64, Device::Cpu)?;
    imp::dist_allreduce(g, &[&t], ReduceOp::Min.code(), 1.0).map_err(|e| comm_err(call, e))?;
    let mut out = [0u8; 24];
    imp::copy_to(&t, &mut out)?;
    let v = |i: usize| i64::from_ne_bytes(out[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    sig?;
    if v(0) == 0 {
        crate::bail!(E_DIST_MISMATCH, "{call}: another rank rejected its arguments; nothing was exchanged");
    }
    if v(1) != s || -v(2) != s {
        crate::bail!(
            E_DIST_MISMATCH,
            "{call}: the ranks passed different arguments (every rank must pass tensors of the same dtypes and sizes, in the same order, with the same settings); nothing was exchanged"
        );
    }
    Ok(())
}

/// The tensors of a handle list (0 entries skipped), every handle checked.
fn tensors(handles: &str) -> Result<Vec<Ref<'static, Tensor>>> {
    Ok(crate::autograd::live_list(handles)?.into_iter().map(|(_, t)| t).collect())
}

fn entry(call: &str, t: &imp::Raw, op: Option<ReduceOp>) -> Result<Entry> {
    let dtype = imp::dtype(t)?;
    if dtype == DType::Bool && op.is_some() {
        crate::bail!(E_DTYPE, "{call}: bool tensors cannot be reduced");
    }
    if op == Some(ReduceOp::Mean) && !dtype.is_float() {
        crate::bail!(E_DTYPE, "{call}: a mean needs floating tensors, got {}", dtype.name());
    }
    Ok(Entry { dtype, device: imp::device(t), numel: Some(crate::tensor::numel_of(&imp::shape(t))?) })
}

/// A collective in three steps: `prepare` makes this rank's checks and
/// returns what it needs plus the settings and entries every rank must agree
/// on (nothing moves yet); `agree` compares them across ranks; `run` moves data.
fn collective<P, R>(
    call: &'static str,
    prepare: impl FnOnce(&Up) -> Result<(P, Vec<i64>, Vec<Entry>)>,
    run: impl FnOnce(&Up, P, Vec<Entry>) -> Result<R>,
) -> Result<R> {
    with_group(call, |up| {
        let local = prepare(up);
        let sig = local.as_ref().map(|(_, settings, es)| plan::signature(call, settings, es));
        agree(up, call, sig.map_err(Clone::clone))?;
        let (p, _, es) = local?;
        run(up, p, es)
    })
}

/// The tensors of a handle list and their entries, checked for `op`.
fn listed(call: &str, handles: &str, op: Option<ReduceOp>) -> Result<(Vec<Ref<'static, Tensor>>, Vec<Entry>)> {
    let ts = tensors(handles)?;
    let es = ts.iter().map(|t| entry(call, &t.raw, op)).collect::<Result<_>>()?;
    Ok((ts, es))
}

/// Runs `f` on each bucket of `raws` (`entries[i]` describes `raws[i]`); a world of one moves nothing.
fn each_bucket(
    up: &Up,
    call: &str,
    raws: &[&imp::Raw],
    entries: &[Entry],
    cap: usize,
    f: impl Fn(&imp::Group, &[&imp::Raw]) -> Result<()>,
) -> Result<()> {
    let Some(g) = &up.group else { return Ok(()) };
    for bucket in plan::buckets(entries, cap) {
        let ts: Vec<&imp::Raw> = bucket.iter().map(|&i| raws[i]).collect();
        f(g, &ts).map_err(|e| comm_err(call, e))?;
    }
    Ok(())
}

fn allreduce_each(up: &Up, call: &str, raws: &[&imp::Raw], entries: &[Entry], op: ReduceOp, cap: usize) -> Result<()> {
    let prescale = if op == ReduceOp::Mean { 1.0 / up.world as f64 } else { 1.0 };
    each_bucket(up, call, raws, entries, cap, |g, ts| imp::dist_allreduce(g, ts, op.code(), prescale))
}

/// All-reduces the listed tensors in place with `op` (0 entries skipped).
pub fn allreduce(handles: &str, op: ReduceOp) -> Result<()> {
    let call = "allreduce";
    collective(
        call,
        |_| listed(call, handles, Some(op)).map(|(ts, es)| (ts, vec![op.code().into(), (op == ReduceOp::Mean).into()], es)),
        |up, ts, es| {
            let raws: Vec<&imp::Raw> = ts.iter().map(|t| &t.raw).collect();
            allreduce_each(up, call, &raws, &es, op, plan::DEFAULT_BUCKET_BYTES)
        },
    )
}

/// Averages each listed parameter's `.grad` over the ranks in place, in
/// buckets of about `bucket_mb` MiB (<= 0: DDP's 25), as DDP does. Parameters
/// without a grad take no part; every rank must agree on which those are.
pub fn allreduce_grads(params: &str, bucket_mb: f64) -> Result<()> {
    let call = "allreduce_grads";
    let cap = if bucket_mb.is_nan() || bucket_mb <= 0.0 {
        plan::DEFAULT_BUCKET_BYTES
    } else if bucket_mb > 1e6 {
        crate::bail!(E_INVALID_ARG, "{call}: bucket_mb {bucket_mb} is larger than 1e6");
    } else {
        ((bucket_mb * 1048576.0) as usize).max(1)
    };
    collective(
        call,
        |_| {
            let (mut grads, mut es) = (Vec::new(), Vec::new());
            for p in tensors(params)? {
                match imp::grad(&p.raw)? {
                    Some(g) => {
                        es.push(entry(call, &g, Some(ReduceOp::Mean))?);
                        grads.push(g);
                    }
                    None => es.push(Entry { numel: None, ..entry(call, &p.raw, None)? }),
                }
            }
            Ok((grads, vec![], es))
        },
        |up, grads, es| {
            // Every parameter was agreed on; the buckets take those with a grad.
            let present: Vec<Entry> = es.into_iter().filter(|e| e.numel.is_some()).collect();
            let raws: Vec<&imp::Raw> = grads.iter().collect();
            allreduce_each(up, call, &raws, &present, ReduceOp::Mean, cap)
        },
    )
}

/// Overwrites the listed tensors with `root`'s, in place.
pub fn broadcast(handles: &str, root: i64) -> Result<()> {
    let call = "broadcast";
    collective(
        call,
        |up| {
            let (ts, es) = listed(call, handles, None)?;
            if !(0..up.world).contains(&root) {
                crate::bail!(E_INVALID_ARG, "{call}: root {root} is not a rank of a world of {}", up.world);
            }
            Ok((ts, vec![root], es))
        },
        |up, ts, es| {
            let raws: Vec<&imp::Raw> = ts.iter().map(|t| &t.raw).collect();
            each_bucket(up, call, &raws, &es, plan::DEFAULT_BUCKET_BYTES, |g, ts| imp::dist_broadcast(g, ts, root))
        },
    )
}

/// Overwrites each of `raws` with its owner's copy (`owners[i]` is the rank
/// that owns `raws[i]`), one bucketed broadcast per owner: how a sharded
/// optimizer hands every rank the parameters it updated (ZeRO stage 1).
pub fn broadcast_owned(call: &'static str, raws: &[&imp::Raw], owners: &[i64]) -> Result<()> {
    collective(
        call,
        |up| {
            if let Some(o) = owners.iter().find(|o| !(0..up.world).contains(*o)) {
                crate::bail!(E_INVALID_ARG, "{call}: owner {o} is not a rank of a world of {}", up.world);
            }
            let es = raws.iter().map(|t| entry(call, t, None)).collect::<Result<Vec<_>>>()?;
            Ok(((), owners.to_vec(), es))
        },
        |up, (), es| {
            for root in 0..up.world {
                let mine: Vec<usize> = (0..raws.len()).filter(|&i| owners[i] == root).collect();
                let (rs, ms): (Vec<&imp::Raw>, Vec<Entry>) = mine.iter().map(|&i| (raws[i], es[i])).unzip();
                each_bucket(up, call, &rs, &ms, plan::DEFAULT_BUCKET_BYTES, |g, ts| imp::dist_broadcast(g, ts, root))?;
            }
            Ok(())
        },
    )
}

/// A new tensor `[world, *shape]` holding every rank's `h`, in rank order.
pub fn all_gather(h: i64) -> Result<i64> {
    let call = "all_gather";
    collective(
        call,
        |_| {
            let t = TENSORS.get(h)?;
            let e = entry(call, &t.raw, None)?;
            Ok((t, vec![], vec![e]))
        },
        |up, t, _| {
            let out = match &up.group {
                Some(g) => imp::dist_allgather(g, &t.raw, up.world).map_err(|e| comm_err(call, e))?,
                None => imp::dist_stack_one(&t.raw)?,
            };
            crate::tensor::register(t.backend, out)
        },
    )
}

/// `(world, rank)` of a live group of more than one rank; `None` without
/// one. A broken group is its error: its ranks can no longer agree on anything.
pub fn multi_rank_group() -> Result<Option<(i64, i64)>> {
    match &*state() {
        State::Up(up) if up.group.is_some() => Ok(Some((up.world, up.rank))),
        State::Broken(e) => Err(broken("checkpoint", e)),
        _ => Ok(None),
    }
}

/// Every rank's `mine`, in rank order (an all-gather of byte strings: their
/// lengths first, then the bytes padded to the longest), for the library's
/// own agreements such as a checkpoint commit.
pub fn exchange(call: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let gather = |up: &Up, g: &imp::Group, bytes: &[u8], shape: i64, dtype: DType| -> Result<Vec<u8>> {
        let t = imp::from_bytes(imp::dist_backend(), bytes, &[shape], dtype, Device::Cpu)?;
        let all = imp::dist_allgather(g, &t, up.world).map_err(|e| comm_err(call, e))?;
        let mut out = vec![0u8; bytes.len() * up.world as usize];
        imp::copy_to(&all, &mut out)?;
        Ok(out)
    };
    collective(
        call,
        |_| Ok(((), vec![], vec![])),
        |up, (), _| {
            let Some(g) = &up.group else { return Ok(vec![mine.to_vec()]) };
            let lens = gather(up, g, &(mine.len() as i64).to_ne_bytes(), 1, DType::I64)?;
            let lens: Vec<usize> = lens.chunks(8).map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")) as usize).collect();
            let longest = lens.iter().copied().max().unwrap_or(0);
            if longest == 0 {
                return Ok(vec![Vec::new(); lens.len()]);
            }
            let mut padded = mine.to_vec();
            padded.resize(longest, 0);
            let all = gather(up, g, &padded, longest as i64, DType::U8)?;
            Ok(all.chunks(longest).zip(lens).map(|(c, n)| c[..n.min(longest)].to_vec()).collect())
        },
    )
}

/// Returns once every rank has reached it.
pub fn barrier() -> Result<()> {
    let call = "barrier";
    with_group(call, |up| match &up.group {
        Some(g) => imp::dist_barrier(g).map_err(|e| comm_err(call, e)),
        None => Ok(()),
    })
}

/// The layout check of the declaration-only gloo headers: (our size, the
/// usable size of libtorch's allocation) for ProcessGroupGloo and its Options.
pub fn gloo_layout() -> Result<[(usize, usize); 2]> {
    let [pg, opts, lib_pg, lib_opts] = imp::gloo_layout()?;
    Ok([(pg, lib_pg), (opts, lib_opts)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gloo_messages_map_to_codes() {
        let e = |m: &str| comm_err("allreduce", Error::new(Code::E_DIST, m));
        let lost = e("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:7371");
        assert_eq!(lost.code, Code::E_DIST_PEER_LOST);
        assert_eq!(lost.detail, "allreduce: Connection closed by peer [127.0.0.1]:7371");
        assert_eq!(e("Read error [127.0.0.1]:1: Connection reset by peer").code, Code::E_DIST_PEER_LOST);
        assert_eq!(e("[x.cc:1] Timed out waiting 3000ms for recv operation to complete").code, Code::E_DIST_TIMEOUT);
        assert_eq!(e("something else").code, Code::E_DIST);
        assert_eq!(comm_err("x", Error::new(Code::E_SHAPE, "s")).code, Code::E_SHAPE);
    }

    #[test]
    fn reduce_ops_parse() {
        assert_eq!(ReduceOp::parse("mean").unwrap(), ReduceOp::Mean);
        assert_eq!(ReduceOp::parse("prod").unwrap_err().code, Code::E_INVALID_ARG);
    }
}
