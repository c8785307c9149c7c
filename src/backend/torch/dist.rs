//! c10d process groups through the C++ shim (dist_shim.cpp): the Gloo
//! group, its collectives, and the layout check of the gloo declarations.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::NonNull;

use super::Raw;
use crate::vocab::dist::{Plan, Store};
use crate::error::{Code, Result};

type AtTensor = *mut c_void;

extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn enkai_shim_pg_create(
        store_kind: c_int,
        host: *const c_char,
        port: c_int,
        is_server: c_int,
        path: *const c_char,
        prefix: *const c_char,
        world: c_int,
        rank: c_int,
        timeout_ms: i64,
        ifaces: *const *const c_char,
        n_ifaces: usize,
        bind_host: *const c_char,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    fn enkai_shim_pg_destroy(g: *mut c_void);
    fn enkai_shim_pg_allreduce(g: *mut c_void, ts: *const AtTensor, n: usize, op: c_int, prescale: f64) -> *mut c_char;
    fn enkai_shim_pg_broadcast(g: *mut c_void, ts: *const AtTensor, n: usize, root: c_int) -> *mut c_char;
    fn enkai_shim_pg_allgather(g: *mut c_void, t: AtTensor, world: c_int, out: *mut *mut torch_sys::C_tensor) -> *mut c_char;
    fn enkai_shim_pg_barrier(g: *mut c_void) -> *mut c_char;
    fn enkai_shim_gloo_layout(pg: *mut usize, opts: *mut usize, lib_pg: *mut usize, lib_opts: *mut usize) -> *mut c_char;
}

/// A live c10d process group (its store and its Gloo backend).
pub struct Group(NonNull<c_void>);

// SAFETY: c10d process groups are used from any thread in PyTorch; crate::dist
// serialises the calls into one group, which the c10d contract requires anyway.
unsafe impl Send for Group {}
unsafe impl Sync for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: the pointer came from enkai_shim_pg_create and is dropped once.
        unsafe { enkai_shim_pg_destroy(self.0.as_ptr()) }
    }
}

/// Shim failures are `E_DIST`; crate::dist tells peer loss and timeouts apart.
fn shim(msg: *mut c_char) -> Result<()> {
    super::shim_result(msg, crate::error::Code::E_DIST)
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| crate::err!(E_INVALID_ARG, "{s:?} contains a NUL byte"))
}

fn ptrs(ts: &[&Raw]) -> Vec<AtTensor> {
    ts.iter().map(|t| t.0.as_ptr() as AtTensor).collect()
}

fn int(v: i64, what: &str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| crate::err!(E_INVALID_ARG, "{what} {v} does not fit a C int"))
}

pub fn dist_group(p: &Plan) -> Result<Group> {
    let (kind, host, port, server, path) = match &p.store {
        Store::Tcp { host, port, server } => (0, host.as_str(), *port, *server, ""),
        Store::File { path } => (1, "", 0, false, path.as_str()),
    };
    let (host, path, prefix, bind) = (cstr(host)?, cstr(path)?, cstr(&p.prefix)?, cstr(&p.bind_host)?);
    let ifaces = p.interfaces.iter().map(|i| cstr(i)).collect::<Result<Vec<_>>>()?;
    let iface_ptrs: Vec<*const c_char> = ifaces.iter().map(|c| c.as_ptr()).collect();
    let mut out = std::ptr::null_mut();
    // SAFETY: every string outlives the call; out is a valid out-pointer.
    shim(unsafe {
        enkai_shim_pg_create(
            kind,
            host.as_ptr(),
            c_int::from(port),
            c_int::from(server),
            path.as_ptr(),
            prefix.as_ptr(),
            int(p.world, "world")?,
            int(p.rank, "rank")?,
            i64::try_from(p.timeout.as_millis()).unwrap_or(i64::MAX),
            iface_ptrs.as_ptr(),
            iface_ptrs.len(),
            bind.as_ptr(),
            &mut out,
        )
    })?;
    NonNull::new(out).map(Group).ok_or_else(|| crate::err!(E_INTERNAL, "the shim made no process group"))
}

pub fn dist_allreduce(g: &Group, ts: &[&Raw], op: i32, prescale: f64) -> Result<()> {
    let p = ptrs(ts);
    // SAFETY: live tensors for the call; the shim catches every C++ exception.
    shim(unsafe { enkai_shim_pg_allreduce(g.0.as_ptr(), p.as_ptr(), p.len(), op, prescale) })
}

pub fn dist_broadcast(g: &Group, ts: &[&Raw], root: i64) -> Result<()> {
    let p = ptrs(ts);
    // SAFETY: as dist_allreduce.
    shim(unsafe { enkai_shim_pg_broadcast(g.0.as_ptr(), p.as_ptr(), p.len(), int(root, "root")?) })
}

pub fn dist_allgather(g: &Group, t: &Raw, world: i64) -> Result<Raw> {
    let world = int(world, "world")?;
    // SAFETY: a live group and tensor, a valid out-pointer.
    super::shim_tensor(Code::E_DIST, |out| unsafe { enkai_shim_pg_allgather(g.0.as_ptr(), t.0.as_ptr() as AtTensor, world, out) })
        .map(Raw)
}

pub fn dist_barrier(g: &Group) -> Result<()> {
    // SAFETY: a live group.
    shim(unsafe { enkai_shim_pg_barrier(g.0.as_ptr()) })
}

pub fn gloo_layout() -> Result<[usize; 4]> {
    let mut v = [0usize; 4];
    let [a, b, c, d] = &mut v;
    // SAFETY: four valid out-pointers.
    super::shim_result(unsafe { enkai_shim_gloo_layout(a, b, c, d) }, crate::error::Code::E_TORCH)?;
    Ok(v)
}
