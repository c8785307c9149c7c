//! Checkpoints that never lose a run. A checkpoint directory holds numbered
//! snapshots (`snap-000042/`) and a `latest` symlink switched atomically by
//! `rename`; a snapshot holds `params.safetensors`, `optimizer.safetensors`,
//! `scaler.json` (when a scaler is saved), `meta.json` (the caller's bytes)
//! and `integrity.json` (SHA-256 of every file, checked before any handle is
//! made). Ranked saves (`ranked`) put each rank's files under `rank{r}/` and
//! list every rank's hashes in `manifest.json`.

pub(crate) mod fsutil;
mod ranked;

pub use ranked::{load_ranked, load_ranked_scaler, save_ranked};

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::amp::{self, ScalerExport};
use crate::backend::{self, imp};
use crate::device::Device;
use crate::error::Result;
use crate::optim::{self, AdamHyper, Hyper, Hypers, SgdHyper};
use crate::registry::TENSORS;
use crate::dtype::DType;
use crate::{json as ijson, quant, safetensors, tensor};
use fsutil::plain_name;

const FORMAT: u64 = 1;
const PARAMS: &str = "params.safetensors";
const OPTIMIZER: &str = "optimizer.safetensors";
const SCALER: &str = "scaler.json";
const META: &str = "meta.json";
const RNG: &str = "rng.safetensors";
const INTEGRITY: &str = "integrity.json";
const MANIFEST: &str = "manifest.json";
/// A rank's piece of the tensors every rank of a ranked save held alike
/// (listed in the manifest), read by `ranked`, never with the shard's files.
const REPLICATED: &str = "replicated.bin";

/// A checkpoint directory argument: never empty (an empty path would mean the
/// working directory to some calls and nothing to others).
fn dir_arg(dir: &str) -> Result<&Path> {
    if dir.is_empty() {
        crate::bail!(E_INVALID_ARG, "the checkpoint directory is an empty string");
    }
    Ok(Path::new(dir))
}

fn format_err(what: &str, why: impl std::fmt::Display) -> crate::Error {
    crate::err!(E_CKPT_FORMAT, "{what}: {why}")
}

/// Tensors by name, on the CPU.
type Tensors = BTreeMap<String, imp::Raw>;

/// A verified file: safetensors already in tensors (with the header's
/// metadata), read straight into their storage; anything else as bytes.
enum Loaded {
    Bytes(Vec<u8>),
    Tensors(Tensors, BTreeMap<String, String>),
}

/// The verified files of one snapshot (or one rank's shard), by name.
type Files = BTreeMap<String, Loaded>;

/// A verified plain file's bytes, if it was saved.
fn bytes_of<'f>(files: &'f Files, name: &str) -> Option<&'f [u8]> {
    match files.get(name) {
        Some(Loaded::Bytes(b)) => Some(b),
        _ => None,
    }
}

/// A file to write: plain bytes, a safetensors file whose header is built
/// when it is written and whose tensors' bytes are streamed straight from
/// their storage (no staging copy), or bytes `[begin, end)` of the
/// concatenation of some tensors' bytes (a rank's piece of the replicated
/// tensors of a ranked save).
enum Content {
    Bytes(Vec<u8>),
    Tensors(Vec<(String, imp::Raw)>, BTreeMap<String, String>),
    Range(Vec<imp::Raw>, u64, u64),
}

type Plan = BTreeMap<String, Content>;

fn tensors_file(named: Vec<(String, imp::Raw)>, metadata: BTreeMap<String, String>) -> Result<Content> {
    // An upper bound of the header's JSON, before any of it is built: a loader
    // refuses headers over MAX_HEADER, so a save must not write one.
    let mut estimate = metadata.iter().map(|(k, v)| k.len() + 2 * v.len() + 8).sum::<usize>();
    for (name, t) in &named {
        estimate += 2 * name.len() + 21 * imp::shape(t).len() + 96;
        if estimate as u64 > safetensors::MAX_HEADER {
            crate::bail!(
                E_INVALID_ARG,
                "the {} tensors to save need a safetensors header over the {}-byte limit a load accepts",
                named.len(),
                safetensors::MAX_HEADER
            );
        }
    }
    Ok(Content::Tensors(named, metadata))
}

/// The safetensors header of `named` (in order) with `metadata`.
fn header_of(named: &[(String, imp::Raw)], metadata: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    let mut specs = Vec::with_capacity(named.len());
    for (name, t) in named {
        let (dtype, shape) = (imp::dtype(t)?, imp::shape(t));
        let nbytes = tensor::numel_of(&shape)? * dtype.size();
        specs.push(safetensors::Spec { name: name.clone(), dtype, shape, nbytes });
    }
    Ok(safetensors::header(&specs, metadata))
}

/// A param group's hyperparameters and its params (indices into the saved list).
fn group_json(h: &Hypers, idx: &[usize]) -> Value {
    match h {
        Hypers::AdamW(h) => json!({"lr": h.lr, "beta1": h.beta1, "beta2": h.beta2, "eps": h.eps, "weight_decay": h.weight_decay, "params": idx}),
        Hypers::Adam(h) => json!({"lr": h.lr, "beta1": h.beta1, "beta2": h.beta2, "eps": h.eps, "weight_decay": h.weight_decay,
                                  "amsgrad": h.amsgrad, "params": idx}),
        Hypers::Sgd(h) => json!({"lr": h.lr, "momentum": h.momentum, "dampening": h.dampening, "weight_decay": h.weight_decay,
                                 "nesterov": h.nesterov, "params": idx}),
    }
}

/// A saved group's hyperparameters, by the file's kind (absent: AdamW, which
/// every checkpoint from before the other kinds holds).
fn group_hypers(kind: &str, g: &Value) -> Result<Hypers> {
    let f = |k: &str| g.get(k).and_then(Value::as_f64).ok_or_else(|| format_err(OPTIMIZER, format!("group has no {k:?}")));
    let b = |k: &str| g.get(k).and_then(Value::as_bool).ok_or_else(|| format_err(OPTIMIZER, format!("group has no boolean {k:?}")));
    Ok(match kind {
        "adamw" => Hypers::AdamW(Hyper { lr: f("lr")?, beta1: f("beta1")?, beta2: f("beta2")?, eps: f("eps")?, weight_decay: f("weight_decay")? }),
        "adam" => Hypers::Adam(AdamHyper {
            lr: f("lr")?,
            beta1: f("beta1")?,
            beta2: f("beta2")?,
            eps: f("eps")?,
            weight_decay: f("weight_decay")?,
            amsgrad: b("amsgrad")?,
        }),
        "sgd" => Hypers::Sgd(SgdHyper { lr: f("lr")?, momentum: f("momentum")?, dampening: f("dampening")?, weight_decay: f("weight_decay")?, nesterov: b("nesterov")? }),
        other => return Err(format_err(OPTIMIZER, format!("unknown optimizer kind {other:?}"))),
    })
}

/// A sharded optimizer's partition: `{"world": W, "owners": [owner of each saved param, −1 if none]}`.
type Partition = Option<Value>;

/// Everything a save writes, taken from the handles before touching the disk,
/// and the optimizer's partition when it is sharded.
fn gather(params: &str, opt: i64, scaler: i64, meta: &[u8]) -> Result<(Plan, Partition)> {
    let hs = ijson::handle_list(params)?;
    let plain: Vec<i64> = hs.iter().copied().filter(|&h| !quant::is_quantized(h)).collect();
    let ps = TENSORS.get_many(&plain)?;
    let (mut named, mut grads, mut devices) = (Vec::with_capacity(hs.len()), Vec::new(), Vec::new());
    let (mut it, mut quantized) = (ps.iter(), serde_json::Map::new());
    for (i, &h) in hs.iter().enumerate() {
        if quant::is_quantized(h) {
            // Its stored parts (`quant::parts`), listed under "quantized".
            let (b, parts) = (backend::active_built()?, quant::parts(h)?);
            named.push((format!("param_{i}"), imp::from_bytes(b, &parts.bytes, &parts.shape, parts.dtype, Device::Cpu)?));
            if let Some(s) = &parts.scales {
                let bytes: Vec<u8> = s.iter().flat_map(|v| v.to_ne_bytes()).collect();
                named.push((format!("param_{i}{}", quant::SCALE_SUFFIX), imp::from_bytes(b, &bytes, &[s.len() as i64], DType::F32, Device::Cpu)?));
            }
            quantized.insert(i.to_string(), parts.meta);
            grads.push(false);
            devices.push(Device::Cpu.to_string());
            continue;
        }
        let p = it.next().expect("one borrow per plain handle");
        named.push((format!("param_{i}"), imp::shallow(&p.raw)));
        grads.push(imp::requires_grad(&p.raw));
        devices.push(imp::device(&p.raw).to_string());
    }
    let mut m = BTreeMap::new();
    if !quantized.is_empty() {
        m.insert("quantized".into(), Value::Object(quantized).to_string());
    }
    m.insert("format".into(), "enkai-params-1".into());
    m.insert("requires_grad".into(), json!(grads).to_string());
    m.insert("devices".into(), json!(devices).to_string());
    let mut plan = Plan::new();
    plan.insert(PARAMS.into(), tensors_file(named, m)?);
    let mut partition = None;
    if opt != 0 {
        let ex = optim::export(opt, &hs)?;
        partition = ex.shard.as_ref().map(|(world, owners)| json!({"world": world, "owners": owners}));
        let mut named = Vec::new();
        let mut steps = serde_json::Map::new();
        for (i, step, tensors) in ex.states {
            named.extend(tensors.into_iter().map(|(name, t)| (format!("{name}.{i}"), t)));
            steps.insert(i.to_string(), json!(step));
        }
        let groups: Vec<Value> = ex.groups.iter().map(|(h, idx)| group_json(h, idx)).collect();
        let kind = ex.groups.first().map_or("adamw", |(h, _)| h.kind());
        let mut m = BTreeMap::new();
        // AdamW keeps the format it always had; the other kinds say theirs in "kind".
        if kind == "adamw" {
            m.insert("format".into(), "enkai-adamw-1".into());
        } else {
            m.insert("format".into(), "enkai-optim-1".into());
            m.insert("kind".into(), kind.into());
        }
        m.insert("groups".into(), Value::Array(groups).to_string());
        m.insert("steps".into(), Value::Object(steps).to_string());
        if let Some(p) = &partition {
            m.insert("shard".into(), p.to_string());
        }
        plan.insert(OPTIMIZER.into(), tensors_file(named, m)?);
    }
    if scaler != 0 {
        let s = amp::scaler_export(scaler)?;
        let v = json!({"scale": s.scale, "growth_tracker": s.growth_tracker, "init_scale": s.init_scale,
                       "growth_factor": s.growth, "backoff_factor": s.backoff, "growth_interval": s.interval});
        plan.insert(SCALER.into(), Content::Bytes(v.to_string().into_bytes()));
    }
    // The generators' states, so that a resumed run draws the same dropout masks.
    if backend::active_built().is_ok() {
        let states = RNG_KEYS.iter().filter(|(_, b)| b.is_built()).map(|(k, b)| Ok(((*k).into(), imp::rng_state(*b)?))).collect::<Result<_>>()?;
        let mut m = BTreeMap::new();
        m.insert("format".into(), "enkai-rng-1".into());
        plan.insert(RNG.into(), tensors_file(states, m)?);
    }
    plan.insert(META.into(), Content::Bytes(meta.to_vec()));
    Ok((plan, partition))
}

/// Gives `content`'s bytes to `sink` in order (`header`: its safetensors header).
fn feed(content: &Content, header: &[u8], sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    match content {
        Content::Bytes(b) => sink(b),
        Content::Tensors(named, _) => {
            sink(header)?;
            named.iter().try_for_each(|(_, t)| imp::with_bytes(t, |b| sink(b)))
        }
        Content::Range(tensors, begin, end) => {
            let mut at = 0u64; // where the next tensor starts in the concatenation
            for t in tensors {
                imp::with_bytes(t, |b| {
                    let start = at;
                    at += b.len() as u64;
                    let (from, to) = ((*begin).clamp(start, at) - start, (*end).clamp(start, at) - start);
                    if from < to {
                        sink(&b[from as usize..to as usize])?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        }
    }
}

/// Writes the planned files and their integrity.json into `dir`, each synced;
/// hashes are computed from the same bytes as they are written.
fn write_files(dir: &Path, plan: &Plan) -> Result<BTreeMap<String, String>> {
    let write = |name: &String, content: &Content| -> Result<String> {
        let header = match content {
            Content::Tensors(named, metadata) => header_of(named, metadata)?,
            _ => Vec::new(),
        };
        fsutil::write_hashed(&dir.join(name), &|sink| feed(content, &header, sink))
    };
    // One thread per file: SHA-256 is one sequential stream per file, so the
    // params and the optimizer's moments are hashed (and written) at once.
    let hashed: Vec<Result<String>> = std::thread::scope(|s| {
        let threads: Vec<_> = plan.iter().map(|(name, content)| s.spawn(move || write(name, content))).collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut hashes = BTreeMap::new();
    for ((name, _), h) in plan.iter().zip(hashed) {
        hashes.insert(name.clone(), h?);
    }
    let integrity = json!({"format": FORMAT, "files": hashes});
    fsutil::write_synced(&dir.join(INTEGRITY), integrity.to_string().as_bytes())?;
    fsutil::fsync_dir(dir)?;
    Ok(hashes)
}

pub fn save(dir: &str, params: &str, opt: i64, scaler: i64, meta: &str) -> Result<()> {
    let (plan, partition) = gather(params, opt, scaler, meta.as_bytes())?;
    if partition.is_some() {
        crate::bail!(E_INVALID_ARG, "optimizer {opt} is sharded: each rank holds only its part of the state, so save it with enkai_checkpoint_save_ranked");
    }
    let dir = dir_arg(dir)?;
    fsutil::make_room(dir)?;
    let staged = fsutil::staging(dir, "save")?;
    let written = write_files(&staged, &plan).and_then(|_| {
        let _lock = fsutil::DirLock::take(dir)?;
        fsutil::sweep_stale(dir)?;
        fsutil::commit(dir, &staged)
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    written.map(drop)
}

/// Reads `integrity.json` in `dir` and every file it lists (or only the file
/// `only`), verifying each hash; nothing is parsed before all of them check out.
fn read_verified(dir: &Path, expected: Option<&BTreeMap<String, String>>, only: Option<&str>) -> Result<Files> {
    let ipath = dir.join(INTEGRITY);
    let raw = fsutil::read_required(&ipath)?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| format_err(INTEGRITY, e))?;
    if v.get("format").and_then(Value::as_u64) != Some(FORMAT) {
        return Err(format_err(INTEGRITY, format!("unsupported format {:?}", v.get("format"))));
    }
    let listed = v.get("files").and_then(Value::as_object).ok_or_else(|| format_err(INTEGRITY, "no \"files\" object"))?;
    let mut hashes = BTreeMap::new();
    for (name, h) in listed {
        let h = h.as_str().ok_or_else(|| format_err(INTEGRITY, format!("hash of {name:?} is not a string")))?;
        hashes.insert(plain_name(name)?.to_string(), h.to_string());
    }
    if let Some(exp) = expected {
        if exp != &hashes {
            crate::bail!(E_CKPT_HASH_MISMATCH, "{} does not match the manifest", ipath.display());
        }
    }
    hashes.remove(REPLICATED);
    match only {
        // An optional file (scaler.json, another rank's moments) that was not saved.
        Some(name) if !hashes.contains_key(name) => crate::bail!(E_CKPT_MISSING, "{} has no {name}", dir.display()),
        Some(name) => hashes.retain(|n, _| n == name),
        None => {
            for required in [PARAMS, META] {
                if !hashes.contains_key(required) {
                    return Err(format_err(INTEGRITY, format!("does not list {required}")));
                }
            }
        }
    }
    // A damaged file reports its hash mismatch ahead of any format error: the
    // format is only worth judging in bytes known to be the ones saved.
    let mut files = Files::new();
    let mut format_error = None;
    for (name, want) in hashes {
        let path = dir.join(&name);
        let mut r = fsutil::HashingReader::open(&path)?;
        let read = if name.ends_with(".safetensors") { read_tensors(&mut r, &name) } else { read_bytes(&mut r, &name) };
        let read = match read {
            Ok(loaded) => Ok(loaded),
            Err(fsutil::ReadErr::Io(e)) => return Err(e),
            Err(fsutil::ReadErr::Format(e)) => Err(e),
        };
        let got = r.finish()?;
        if got != want {
            crate::bail!(E_CKPT_HASH_MISMATCH, "{}: sha256 {got} but integrity.json records {want}", path.display());
        }
        match read {
            Ok(loaded) => drop(files.insert(name, loaded)),
            Err(e) => drop(format_error.get_or_insert(e)),
        }
    }
    format_error.map_or(Ok(files), Err)
}

fn read_bytes(r: &mut fsutil::HashingReader, what: &str) -> std::result::Result<Loaded, fsutil::ReadErr> {
    let mut bytes = vec![0u8; usize::try_from(r.len()).map_err(|_| format_err(what, "too large to read"))?];
    r.read_into(&mut bytes)?;
    Ok(Loaded::Bytes(bytes))
}

/// Reads a safetensors file into CPU tensors, each straight into its storage;
/// sizes come from a header already checked against the file's length, so
/// memory stays bounded by what is on disk.
fn read_tensors(r: &mut fsutil::HashingReader, what: &str) -> std::result::Result<Loaded, fsutil::ReadErr> {
    let mut prefix = [0u8; 8];
    if r.len() < 8 {
        return Err(format_err(what, format!("{} bytes is too short for a safetensors file", r.len())).into());
    }
    r.read_into(&mut prefix)?;
    let mut header = vec![0u8; safetensors::header_len(prefix, r.len(), what)?];
    r.read_into(&mut header)?;
    let data_start = r.pos();
    let (layouts, metadata) = safetensors::parse_header(&header, r.len() - data_start, safetensors::Tiling::Disjoint, what)?;
    let mut tensors = BTreeMap::new();
    for l in layouts {
        r.skip(data_start + l.begin - r.pos())?;
        let raw = imp::filled_cpu(backend::active(), &l.shape, l.dtype()?, |dst| r.read_into(dst))?;
        tensors.insert(l.name, raw);
    }
    Ok(Loaded::Tensors(tensors, metadata))
}

fn json_meta<T: serde::de::DeserializeOwned>(meta: &BTreeMap<String, String>, key: &str, what: &str) -> Result<T> {
    let text = meta.get(key).ok_or_else(|| format_err(what, format!("metadata has no {key:?}")))?;
    serde_json::from_str(text).map_err(|e| format_err(what, format!("metadata {key:?}: {e}")))
}

fn device_of(name: &str) -> Result<Device> {
    match crate::device::DeviceSpec::parse(name).map_err(|_| format_err(PARAMS, format!("unknown device {name:?}")))? {
        crate::device::DeviceSpec::Exact(d) => Ok(d),
        crate::device::DeviceSpec::Auto => Err(format_err(PARAMS, "device \"auto\" in a checkpoint")),
    }
}

/// The tensors and metadata of a verified safetensors file, if it was saved.
fn take_tensors(files: &mut Files, name: &str) -> Result<Option<(Tensors, BTreeMap<String, String>)>> {
    match files.remove(name) {
        None => Ok(None),
        Some(Loaded::Tensors(t, m)) => Ok(Some((t, m))),
        Some(Loaded::Bytes(_)) => Err(format_err(name, "not read as safetensors")),
    }
}

/// The key of each backend's generator state in `rng.safetensors`: libtorch's
/// CPU generator (in `torch.get_rng_state()`'s format) and the native one's.
/// Native first: its setter validates before it changes anything, so a
/// failure of either leaves both generators as they were.
const RNG_KEYS: [(&str, backend::BackendId); 2] = [("enkai.cpu", backend::BackendId::Cpu), ("torch.cpu", backend::BackendId::Torch)];

/// Restores the saved state of every generator this build has (a state
/// saved by a build without libtorch restores the native one only): all or,
/// on a failure, none.
fn restore_generators(mut rng: Tensors) -> Result<()> {
    let known: Vec<_> = RNG_KEYS.iter().filter_map(|(k, b)| rng.remove(*k).map(|s| (*b, s))).collect();
    if known.is_empty() {
        crate::bail!(E_CKPT_FORMAT, "no generator state (\"torch.cpu\" or \"enkai.cpu\")");
    }
    let saved = imp::rng_state(backend::BackendId::Cpu)?;
    for (b, state) in known.into_iter().filter(|(b, _)| b.is_built()) {
        let done = match state.backend() {
            s if s == b => imp::set_rng_state(&state),
            _ => imp::copy_to_backend(&state, b).and_then(|s| imp::set_rng_state(&s)),
        };
        if let Err(e) = done {
            let _ = imp::set_rng_state(&saved);
            return Err(e);
        }
    }
    Ok(())
}

/// A loaded CPU tensor moved to the device it was saved from.
fn placed(cpu: imp::Raw, dev: Device) -> Result<imp::Raw> {
    match dev {
        Device::Cpu => Ok(cpu),
        _ => imp::to_device(&cpu, dev),
    }
}

/// How a restored optimizer is sharded.
enum Sharding {
    /// As it was saved (sharded or not), as this rank.
    AsSaved { rank: i64 },
    /// Partitioned afresh for `rank` of `world` (every param's state must be in the files).
    Fresh { world: i64, rank: i64 },
}

/// Parses verified files into new handles: params (in saved order), the
/// optimizer bound to them (0 if none was saved), and the meta bytes.
fn restore(mut files: Files, sharding: Sharding) -> Result<(Vec<i64>, i64, Vec<u8>)> {
    let (mut by_name, meta) = take_tensors(&mut files, PARAMS)?.ok_or_else(|| format_err(INTEGRITY, format!("does not list {PARAMS}")))?;
    let grads: Vec<bool> = json_meta(&meta, "requires_grad", PARAMS)?;
    let devices: Vec<String> = json_meta(&meta, "devices", PARAMS)?;
    let quantized: BTreeMap<String, Value> = if meta.contains_key("quantized") { json_meta(&meta, "quantized", PARAMS)? } else { BTreeMap::new() };
    let n = grads.len();
    if devices.len() != n || by_name.len() != n + quantized.values().filter(|q| q["dtype"] == "qint8").count() {
        return Err(format_err(PARAMS, "metadata does not describe every tensor"));
    }
    let b = backend::active_built()?;
    let mut made = tensor::Made(Vec::with_capacity(n));
    let mut opt_state_entries = Vec::new();
    for i in 0..n {
        let cpu = by_name.remove(&format!("param_{i}")).ok_or_else(|| format_err(PARAMS, format!("param_{i} is missing")))?;
        if let Some(q) = quantized.get(&i.to_string()) {
            let scales = match by_name.remove(&format!("param_{i}{}", quant::SCALE_SUFFIX)) {
                Some(s) if imp::dtype(&s)? == DType::F32 => Some(imp::with_bytes(&s, |b| Ok(b.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<f32>>()))?),
                Some(_) => return Err(format_err(PARAMS, format!("the scales of param_{i} are not fp32"))),
                None => None,
            };
            made.0.push(imp::with_bytes(&cpu, |bytes| quant::from_parts(q, bytes, scales.as_deref(), b, PARAMS))?);
            continue;
        }
        let dev = device_of(&devices[i])?;
        b.check_device(dev)?;
        let raw = placed(cpu, dev)?;
        if grads[i] {
            imp::set_requires_grad(&raw, true)?;
        }
        made.0.push(tensor::register(b, raw)?);
    }
    let opt = match take_tensors(&mut files, OPTIMIZER)? {
        None => 0,
        Some((mut moments, meta)) => {
            let groups: Vec<Value> = json_meta(&meta, "groups", OPTIMIZER)?;
            let steps: BTreeMap<String, u64> = json_meta(&meta, "steps", OPTIMIZER)?;
            let kind = meta.get("kind").map_or("adamw", String::as_str);
            let mut gs = Vec::new();
            for g in &groups {
                let hyper = group_hypers(kind, g)?;
                let idx: Vec<usize> = g
                    .get("params")
                    .and_then(|p| serde_json::from_value(p.clone()).ok())
                    .ok_or_else(|| format_err(OPTIMIZER, "group has no \"params\" list"))?;
                let hs = idx
                    .iter()
                    .map(|&i| made.0.get(i).copied().ok_or_else(|| format_err(OPTIMIZER, format!("group names param {i} of {n}"))))
                    .collect::<Result<Vec<_>>>()?;
                gs.push((hyper, hs));
            }
            for (i, step) in steps {
                let idx: usize = i.parse().map_err(|_| format_err(OPTIMIZER, format!("step key {i:?}")))?;
                let h = *made.0.get(idx).ok_or_else(|| format_err(OPTIMIZER, format!("state for param {idx} of {n}")))?;
                let dev = device_of(&devices[idx])?;
                let group = gs.iter().find(|(_, hs): &&(Hypers, Vec<i64>)| hs.contains(&h));
                let names = group.ok_or_else(|| format_err(OPTIMIZER, format!("state for param {idx}, which no group holds")))?.0.state_names();
                let mut tensors = Vec::with_capacity(names.len());
                for name in names {
                    let key = format!("{name}.{idx}");
                    let cpu = moments.remove(&key).ok_or_else(|| format_err(OPTIMIZER, format!("{key} is missing")))?;
                    tensors.push(placed(cpu, dev)?);
                }
                opt_state_entries.push((h, step, tensors));
            }
            let saved: Option<Value> = meta.get("shard").map(|_| json_meta(&meta, "shard", OPTIMIZER)).transpose()?;
            let sharding = match (sharding, saved) {
                (Sharding::Fresh { world, rank }, _) => optim::ImportShard::Fresh { world, rank },
                (Sharding::AsSaved { .. }, None) => optim::ImportShard::None,
                (Sharding::AsSaved { rank }, Some(p)) => {
                    let world = p.get("world").and_then(Value::as_i64).ok_or_else(|| format_err(OPTIMIZER, "shard has no world"))?;
                    let owners: Vec<i64> = serde_json::from_value(p["owners"].clone()).map_err(|e| format_err(OPTIMIZER, e))?;
                    let owners = owners.iter().zip(&made.0).filter(|(o, _)| **o >= 0).map(|(o, h)| (*h, *o)).collect();
                    optim::ImportShard::Saved { world, rank, owners }
                }
            };
            optim::import(gs, opt_state_entries, sharding)?
        }
    };
    let meta = bytes_of(&files, META).ok_or_else(|| format_err(INTEGRITY, format!("does not list {META}")))?.to_vec();
    // Last, so that a load that fails leaves the generator as it was.
    if let Some((rng, _)) = take_tensors(&mut files, RNG)? {
        if let Err(e) = restore_generators(rng) {
            if opt != 0 {
                let _ = crate::registry::OPTIMIZERS.release(opt);
            }
            return Err(format_err(RNG, e.detail));
        }
    }
    Ok((made.keep(), opt, meta))
}

pub fn load(dir: &str) -> Result<(Vec<i64>, i64, Vec<u8>)> {
    let snap = fsutil::latest(dir_arg(dir)?)?;
    restore(read_verified(&snap, None, None)?, Sharding::AsSaved { rank: 0 })
}

/// A new scaler with the state saved in the latest snapshot of `dir`.
pub fn load_scaler(dir: &str) -> Result<i64> {
    let snap = fsutil::latest(dir_arg(dir)?)?;
    scaler_in(&snap, None)
}

/// A new scaler from the verified `scaler.json` of the snapshot (or shard) `dir`.
fn scaler_in(dir: &Path, expected: Option<&BTreeMap<String, String>>) -> Result<i64> {
    let files = read_verified(dir, expected, Some(SCALER))?;
    let bytes = bytes_of(&files, SCALER).ok_or_else(|| crate::err!(E_CKPT_MISSING, "{} has no {SCALER}", dir.display()))?;
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format_err(SCALER, e))?;
    let f = |k: &str| v.get(k).and_then(Value::as_f64).ok_or_else(|| format_err(SCALER, format!("no number {k:?}")));
    let i = |k: &str| v.get(k).and_then(Value::as_i64).ok_or_else(|| format_err(SCALER, format!("no integer {k:?}")));
    amp::scaler_import(ScalerExport {
        scale: f("scale")?,
        growth_tracker: i("growth_tracker")?,
        init_scale: f("init_scale")?,
        growth: f("growth_factor")?,
        backoff: f("backoff_factor")?,
        interval: i("growth_interval")?,
    })
}
