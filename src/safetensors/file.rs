//! Safetensors files by tensor name: `open` validates a file's whole header
//! and registers it as a handle; `get` maps one tensor's bytes in place;
//! `save` writes named tensors atomically.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::{header, header_len, parse_header, write_order, Layout, Spec, Tiling, MAX_HEADER};
use crate::backend::imp;
use crate::checkpoint::fsutil;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::registry::{SAFETENSORS, TENSORS};
use crate::{json, quant, tensor};

/// An open file: its validated header, and the descriptor `get` maps from.
pub struct SafeFile {
    path: String,
    file: File,
    data_start: u64,
    /// In file (offset) order.
    layouts: Vec<Layout>,
    by_name: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
    /// The data section, mapped once at the first `get` and shared by the
    /// tensors read from it (a mapping per tensor cost an mmap and an munmap
    /// each, most of a load's time); `None` when it could not be mapped.
    shared: OnceLock<Option<Arc<Mapping>>>,
    /// Per layout: already handed out as a view of `shared`. A second `get`
    /// of the same name maps its own bytes, so that writes into one tensor
    /// never show in another.
    taken: Vec<AtomicBool>,
}

impl SafeFile {
    /// The file's list of quantized tensors (`quant::META_KEY`), if any.
    fn quantized(&self) -> Result<Option<serde_json::Value>> {
        let Some(list) = self.metadata.get(quant::META_KEY) else { return Ok(None) };
        serde_json::from_str(list)
            .map(Some)
            .map_err(|e| crate::err!(E_CKPT_FORMAT, "{}: metadata {:?} is not JSON: {e}", self.path, quant::META_KEY))
    }

    /// The layouts `get_all` returns, in file order: all but the scales of
    /// qint8 tensors, which come inside their tensor.
    fn listed<'f>(&'f self, quantized: Option<&serde_json::Value>) -> Vec<(usize, &'f Layout)> {
        let scale_of = |name: &str| {
            let q = quantized?.get(name.strip_suffix(quant::SCALE_SUFFIX)?)?;
            (q.get("dtype").and_then(|d| d.as_str()) == Some("qint8")).then_some(())
        };
        self.layouts.iter().enumerate().filter(|(_, l)| scale_of(&l.name).is_none()).collect()
    }

    fn layout(&self, name: &str) -> Result<&Layout> {
        self.index(name).map(|i| &self.layouts[i])
    }

    fn index(&self, name: &str) -> Result<usize> {
        match self.by_name.get(name) {
            Some(&i) => Ok(i),
            None => crate::bail!(E_INVALID_ARG, "{}: no tensor named {name:?}", self.path),
        }
    }

    /// The whole data section, mapped privately on first use. Files whose
    /// data section is empty, or larger than the address space, have none.
    fn shared(&self) -> Option<&Arc<Mapping>> {
        self.shared
            .get_or_init(|| {
                let len = usize::try_from(self.layouts.last()?.end).ok().filter(|&n| n > 0)?;
                Mapping::new(&self.file, self.data_start, len).ok().map(Arc::new)
            })
            .as_ref()
    }
}

fn path_arg(path: &str) -> Result<&Path> {
    if path.is_empty() {
        crate::bail!(E_INVALID_ARG, "the path is an empty string");
    }
    Ok(Path::new(path))
}

fn read_at(file: &File, buf: &mut [u8], at: u64, path: &str) -> Result<()> {
    file.read_exact_at(buf, at).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => crate::err!(E_CKPT_FORMAT, "{path}: the file shrank while its header was read"),
        _ => fsutil::io_err("read", Path::new(path), e),
    })
}

/// Opens and validates `path`; a new handle of kind safetensors.
pub fn open(path: &str) -> Result<i64> {
    let p = path_arg(path)?;
    // O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore it).
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => crate::err!(E_CKPT_MISSING, "{path} does not exist"),
        _ => fsutil::io_err("open", p, e),
    })?;
    let stat = file.metadata().map_err(|e| fsutil::io_err("stat", p, e))?;
    if !stat.is_file() {
        crate::bail!(E_CKPT_IO, "{path} is not a regular file");
    }
    let len = stat.len();
    if len < 8 {
        crate::bail!(E_CKPT_FORMAT, "{path}: {len} bytes is too short for a safetensors file (it starts with an 8-byte header length)");
    }
    let mut prefix = [0u8; 8];
    read_at(&file, &mut prefix, 0, path)?;
    let mut text = vec![0u8; header_len(prefix, len, path)?];
    read_at(&file, &mut text, 8, path)?;
    let data_start = 8 + text.len() as u64;
    let (layouts, metadata) = parse_header(&text, len - data_start, Tiling::Exact, path)?;
    let by_name = layouts.iter().enumerate().map(|(i, l)| (l.name.clone(), i)).collect();
    let taken = layouts.iter().map(|_| AtomicBool::new(false)).collect();
    SAFETENSORS.insert(SafeFile { path: path.into(), file, data_start, layouts, by_name, metadata, shared: OnceLock::new(), taken })
}

/// The tensor names as a JSON array, in file (offset) order.
pub fn names(st: i64) -> Result<String> {
    let f = SAFETENSORS.get(st)?;
    Ok(serde_json::Value::from(f.layouts.iter().map(|l| l.name.as_str()).collect::<Vec<_>>()).to_string())
}

/// `{"dtype":"F32","shape":[..]}` of tensor `name`, in the format's dtype names.
pub fn info(st: i64, name: &str) -> Result<String> {
    let f = SAFETENSORS.get(st)?;
    let l = f.layout(name)?;
    Ok(format!("{{\"dtype\":\"{}\",\"shape\":{}}}", l.format.name, json::write_int_list(&l.shape)))
}

/// The `__metadata__` map as a JSON object (`{}` when the file has none).
pub fn metadata(st: i64) -> Result<String> {
    let f = SAFETENSORS.get(st)?;
    Ok(serde_json::Value::Object(f.metadata.iter().map(|(k, v)| (k.clone(), v.as_str().into())).collect()).to_string())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize
}

/// A private, copy-on-write mapping of bytes `[at, at + len)` of a file:
/// writes land on pages of its own, so neither the file nor any other
/// mapping of it ever sees them.
struct Mapping {
    base: *mut c_void,
    size: usize,
    skip: usize,
    len: usize,
}

// SAFETY: plain memory owned by this value alone, unmapped once, on drop.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(file: &File, at: u64, len: usize) -> std::io::Result<Mapping> {
        let page = page_size() as u64;
        let skip = (at % page) as usize;
        let (size, offset) = (skip + len, libc::off_t::try_from(at - skip as u64).map_err(std::io::Error::other)?);
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh private mapping of a descriptor we hold; nothing else refers to it yet.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), size, prot, libc::MAP_PRIVATE, file.as_raw_fd(), offset) };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { base, size, skip, len })
    }

    fn data(&self) -> *mut c_void {
        // SAFETY: `skip` < the page size <= `size`.
        unsafe { self.base.cast::<u8>().add(self.skip).cast() }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping holds `len` bytes from `data()` while self lives.
        unsafe { std::slice::from_raw_parts(self.data().cast(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped only here.
        unsafe { libc::munmap(self.base, self.size) };
    }
}

// SAFETY: the mapping's bytes are only written through the tensors over
// them, each over bytes of its own (`SafeFile::taken`); the pointer itself is
// never changed after `new`.
unsafe impl Sync for Mapping {}

/// Where `get` reads a tensor's bytes from: its file's shared mapping, or a
/// mapping of their own when the file has none.
enum Mapped<'a> {
    Shared(&'a Arc<Mapping>),
    Own(Mapping),
}

/// A tensor's bytes `[at, at + len)` within the shared mapping of its file.
struct View {
    map: Arc<Mapping>,
    at: usize,
    len: usize,
}

/// The release callback of a tensor over a mapping of its own: its storage died.
unsafe extern "C" fn unmap(ctx: *mut c_void) {
    // SAFETY: `ctx` is the Box `get` leaked, released exactly once by the backend.
    drop(unsafe { Box::from_raw(ctx.cast::<Mapping>()) });
}

/// The release callback of a tensor over the shared mapping: the pages
/// wholly its own are given back (a private mapping's written pages would
/// otherwise stay until the last tensor of the file dies, and its read ones
/// in the RSS), and the mapping is released with the last of them.
unsafe extern "C" fn release_view(ctx: *mut c_void) {
    // SAFETY: `ctx` is the Box `get` leaked, released exactly once by the backend.
    let v = unsafe { Box::from_raw(ctx.cast::<View>()) };
    let page = page_size();
    let start = v.map.data() as usize + v.at;
    let (lo, hi) = (start.next_multiple_of(page), (start + v.len) / page * page);
    if hi > lo {
        // SAFETY: [lo, hi) lies within the mapping and holds only this
        // tensor's bytes, which nothing reads after this release. On a
        // private file mapping the pages revert to the file's contents.
        unsafe { libc::madvise(lo as *mut c_void, hi - lo, libc::MADV_DONTNEED) };
    }
}

/// What each tensor of one call needs and is checked once per call: the
/// target backend and device, the file's length now, and its list of
/// quantized tensors.
struct Target {
    b: crate::backend::BackendId,
    d: Device,
    now: u64,
    quantized: Option<serde_json::Value>,
}

impl Target {
    fn new(f: &SafeFile, dev: i64) -> Result<Target> {
        let (b, d) = tensor::target(dev)?;
        let now = f.file.metadata().map_err(|e| fsutil::io_err("stat", Path::new(&f.path), e))?.len();
        Ok(Target { b, d, now, quantized: f.quantized()? })
    }

    fn quantized(&self, name: &str) -> Option<&serde_json::Value> {
        self.quantized.as_ref()?.get(name)
    }
}

/// Tensor `name` of file `st` on device `dev`, made by the active backend.
/// On the CPU it is the file's bytes in place, through a private mapping
/// (see `Mapping`), alive as long as the tensor and its views, even after
/// the file handle is freed: the first `get` of a name views the file's
/// shared mapping, later ones map the bytes again. Bytes not aligned to the
/// element size (a writer other than the reference's) and other devices get
/// a copy.
pub fn get(st: i64, name: &str, dev: i64) -> Result<i64> {
    let f = SAFETENSORS.get(st)?;
    let i = f.index(name)?;
    get_one(&f, i, &Target::new(&f, dev)?)
}

/// How many tensors `get_all` returns for `st`.
pub fn count_all(st: i64) -> Result<usize> {
    let f = SAFETENSORS.get(st)?;
    Ok(f.listed(f.quantized()?.as_ref()).len())
}

/// Every tensor of file `st` on device `dev` as `get` makes each (qint8
/// scales inside their tensor), in file order, at most `cap` of them: their
/// names as a JSON array and their handles, released unless kept. One call
/// where a loop of `get`s would pay the checks, and a caller's per-call
/// cost, per tensor.
pub fn get_all(st: i64, dev: i64, cap: usize) -> Result<(String, tensor::Made)> {
    let f = SAFETENSORS.get(st)?;
    let t = Target::new(&f, dev)?;
    let listed = f.listed(t.quantized.as_ref());
    if listed.len() > cap {
        crate::bail!(E_INVALID_ARG, "{}: {} tensors, more than cap ({cap})", f.path, listed.len());
    }
    let mut made = tensor::Made(Vec::with_capacity(listed.len()));
    for &(i, _) in &listed {
        made.0.push(get_one(&f, i, &t)?);
    }
    let names = serde_json::Value::from(listed.iter().map(|(_, l)| l.name.as_str()).collect::<Vec<_>>()).to_string();
    Ok((names, made))
}

/// Tensor `i` of `f` for `get` and `get_all`.
fn get_one(f: &SafeFile, i: usize, t: &Target) -> Result<i64> {
    let l = &f.layouts[i];
    let name = &l.name;
    if let Some(meta) = t.quantized(name) {
        return get_quantized(f, l, meta, t);
    }
    let dtype = l.dtype()?;
    let (b, d) = (t.b, t.d);
    let len = usize::try_from(l.end - l.begin).map_err(|_| crate::err!(E_RESOURCE, "tensor {name:?} is larger than the address space"))?;
    if len == 0 {
        return tensor::register(b, imp::from_bytes(b, &[], &l.shape, dtype, d)?);
    }
    // Mapping past the end of a file that shrank since `open` would fault at the first touch.
    if t.now < f.data_start + l.end {
        crate::bail!(E_CKPT_FORMAT, "{}: the file shrank to {} bytes since it was opened", f.path, t.now);
    }
    let map_own = || Mapping::new(&f.file, f.data_start + l.begin, len).map_err(|e| fsutil::io_err("map", Path::new(&f.path), e));
    let src = match f.shared() {
        Some(m) => Mapped::Shared(m),
        None => Mapped::Own(map_own()?),
    };
    let bytes = match &src {
        Mapped::Shared(m) => &m.bytes()[l.begin as usize..][..len],
        Mapped::Own(m) => m.bytes(),
    };
    if dtype == DType::Bool {
        if let Some(i) = bytes.iter().position(|&x| x > 1) {
            crate::bail!(E_CKPT_FORMAT, "{}: tensor {name:?} has bool byte {i} = {} (must be 0 or 1)", f.path, bytes[i]);
        }
    }
    if d != Device::Cpu || bytes.as_ptr() as usize % dtype.size() != 0 {
        return tensor::register(b, imp::from_bytes(b, bytes, &l.shape, dtype, d)?);
    }
    let (data, strides) = (bytes.as_ptr().cast_mut().cast(), crate::dlpack::contiguous_strides(&l.shape));
    let raw = match src {
        Mapped::Shared(m) if !f.taken[i].swap(true, Ordering::AcqRel) => {
            let ctx = Box::into_raw(Box::new(View { map: Arc::clone(m), at: l.begin as usize, len })).cast();
            // SAFETY: the view holds the shared mapping, and with it the
            // tensor's extent, until `release_view(ctx)`, which the backend
            // runs exactly once, on failure too; no other tensor views these
            // bytes of it (`taken`).
            unsafe { imp::wrap_foreign(b, data, &l.shape, &strides, dtype, d, release_view, ctx)? }
        }
        src => {
            // The bytes' own mapping: the one already made, or, when the
            // shared one already lends them to a tensor, a new one.
            let map = match src {
                Mapped::Own(m) => m,
                Mapped::Shared(_) => map_own()?,
            };
            let data = map.data();
            let ctx = Box::into_raw(Box::new(map)).cast();
            // SAFETY: the mapping holds the tensor's extent until `unmap(ctx)`,
            // which the backend runs exactly once, on failure too.
            unsafe { imp::wrap_foreign(b, data, &l.shape, &strides, dtype, d, unmap, ctx)? }
        }
    };
    tensor::register(b, raw)
}

/// A quantized tensor (listed under `quant::META_KEY`) from its stored
/// parts, copied out of the file: host memory, as every quantized tensor.
fn get_quantized(f: &SafeFile, l: &Layout, meta: &serde_json::Value, t: &Target) -> Result<i64> {
    let (b, d) = (t.b, t.d);
    if d != Device::Cpu {
        crate::bail!(E_DEVICE, "{}: tensor {:?} is quantized, and quantized tensors live on the CPU", f.path, l.name);
    }
    let read = |l: &Layout| -> Result<Vec<u8>> {
        let len = usize::try_from(l.end - l.begin).map_err(|_| crate::err!(E_RESOURCE, "tensor {:?} is larger than the address space", l.name))?;
        let mut buf = vec![0u8; len];
        read_at(&f.file, &mut buf, f.data_start + l.begin, &f.path)?;
        Ok(buf)
    };
    let bytes = read(l)?;
    let scales = match meta.get("dtype").and_then(|d| d.as_str()) {
        Some("qint8") => {
            let sl = f.layout(&format!("{}{}", l.name, quant::SCALE_SUFFIX)).map_err(|e| crate::err!(E_CKPT_FORMAT, "{}: quantized {:?}: {}", f.path, l.name, e.detail))?;
            if sl.dtype()? != DType::F32 {
                crate::bail!(E_CKPT_FORMAT, "{}: the scales of {:?} are not F32", f.path, l.name);
            }
            Some(read(sl)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<f32>>())
        }
        _ => None,
    };
    let what = format!("{}: tensor {:?}", f.path, l.name);
    quant::from_parts(meta, &bytes, scales.as_deref(), b, &what)
}

/// Writes the tensors `handles_json` under the names `names_json` with
/// `metadata_json` (a JSON object of strings, None for none), laid out as
/// the reference writer lays them out (`write_order`), atomically.
pub fn save(path: &str, names_json: &str, handles_json: &str, metadata_json: Option<&str>) -> Result<()> {
    let p = path_arg(path)?;
    let names: Vec<String> =
        serde_json::from_str(names_json).map_err(|e| crate::err!(E_INVALID_ARG, "names_json is not a JSON array of strings: {e}"))?;
    let hs = json::handle_list(handles_json)?;
    if names.len() != hs.len() {
        crate::bail!(E_INVALID_ARG, "{} names for {} tensors", names.len(), hs.len());
    }
    let mut seen = HashSet::new();
    for n in &names {
        if n == "__metadata__" {
            crate::bail!(E_INVALID_ARG, "\"__metadata__\" is the format's own key, not a tensor name");
        }
        if !seen.insert(n) {
            crate::bail!(E_INVALID_ARG, "the name {n:?} appears twice");
        }
    }
    let mut metadata: BTreeMap<String, String> = match metadata_json {
        None => BTreeMap::new(),
        Some(t) => serde_json::from_str(t).map_err(|e| crate::err!(E_INVALID_ARG, "metadata_json is not a JSON object of strings: {e}"))?,
    };
    if metadata.contains_key(quant::META_KEY) {
        crate::bail!(E_INVALID_ARG, "{:?} is the library's own metadata key (it lists the quantized tensors)", quant::META_KEY);
    }
    // Quantized tensors become their stored parts (`quant::parts`); the rest are borrowed.
    let (plain, quantized): (Vec<_>, Vec<_>) = names.into_iter().zip(hs).partition(|(_, h)| !quant::is_quantized(*h));
    let hs: Vec<i64> = plain.iter().map(|(_, h)| *h).collect();
    let ts = TENSORS.get_many(&hs)?;
    let mut order = Vec::with_capacity(ts.len() + 2 * quantized.len());
    for ((name, _), t) in plain.into_iter().zip(ts.iter()) {
        let (dtype, shape) = (imp::dtype(&t.raw)?, imp::shape(&t.raw));
        let nbytes = tensor::numel_of(&shape)?
            .checked_mul(dtype.size())
            .ok_or_else(|| crate::err!(E_SHAPE, "tensor {name:?} of shape {shape:?} has more bytes than the address space"))?;
        order.push((Spec { name, dtype, shape, nbytes }, Src::Raw(&t.raw)));
    }
    let mut listed = serde_json::Map::new();
    for (name, h) in quantized {
        let parts = quant::parts(h)?;
        if let Some(s) = parts.scales {
            let scale_name = format!("{name}{}", quant::SCALE_SUFFIX);
            let bytes: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
            order.push((Spec { name: scale_name, dtype: DType::F32, shape: vec![s.len() as i64], nbytes: bytes.len() }, Src::Bytes(bytes)));
        }
        listed.insert(name.clone(), parts.meta);
        order.push((Spec { name, dtype: parts.dtype, shape: parts.shape, nbytes: parts.bytes.len() }, Src::Bytes(parts.bytes)));
    }
    let mut names_now = HashSet::new();
    if let Some((s, _)) = order.iter().find(|(s, _)| !names_now.insert(s.name.as_str())) {
        crate::bail!(E_INVALID_ARG, "the name {:?} appears twice (a quantized tensor's scales are saved as \"<name>{}\")", s.name, quant::SCALE_SUFFIX);
    }
    if !listed.is_empty() {
        metadata.insert(quant::META_KEY.into(), serde_json::Value::Object(listed).to_string());
    }
    order.sort_by(|(a, _), (b, _)| write_order(a.dtype, &a.name).cmp(&write_order(b.dtype, &b.name)));
    let header = header(order.iter().map(|(s, _)| s), &metadata);
    if header.len() as u64 - 8 > MAX_HEADER {
        crate::bail!(E_INVALID_ARG, "the header would be {} bytes, over the format's limit of {MAX_HEADER}", header.len() - 8);
    }
    fsutil::write_atomic(p, |sink| {
        sink(&header)?;
        order.iter().try_for_each(|(_, t)| match t {
            Src::Raw(t) => imp::with_bytes(t, |b| sink(b)),
            Src::Bytes(b) => sink(b),
        })
    })
}

/// Where a saved tensor's bytes come from.
enum Src<'a> {
    Raw(&'a imp::Raw),
    Bytes(Vec<u8>),
}
