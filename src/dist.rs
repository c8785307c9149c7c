//! The distributed entry points. A one-rank world is fully supported (its
//! all-reduces leave tensors as they are, which is what a sum or mean over
//! one rank is), so single-process clients run unchanged. Multi-rank worlds
//! are gated by `ENKAI_ENABLE_DIST=1` and need PyTorch's c10d process groups,
//! which this build cannot reach yet: the PyPI wheel ships the c10d headers
//! but not the gloo headers `ProcessGroupGloo.hpp` includes. They fail with
//! `E_DIST` rather than pretending.

use std::sync::Mutex;

use crate::error::Result;
use crate::json;
use crate::registry::TENSORS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct World {
    size: i64,
    rank: i64,
}

static STATE: Mutex<Option<World>> = Mutex::new(None);

fn check_world(size: i64, rank: i64) -> Result<()> {
    if size < 1 || !(0..size).contains(&rank) {
        crate::bail!(E_INVALID_ARG, "rank {rank} is not in a world of {size}");
    }
    if size > 1 {
        if std::env::var("ENKAI_ENABLE_DIST").as_deref() != Ok("1") {
            crate::bail!(E_DIST_ENV_GATE, "a world of {size} ranks needs ENKAI_ENABLE_DIST=1");
        }
        crate::bail!(E_DIST, "multi-rank process groups (c10d Gloo/NCCL) are not available in this build; only world size 1 is");
    }
    Ok(())
}

/// Records the world (and seeds the RNG with `seed`) without starting it.
pub fn config(size: i64, rank: i64, device: i64, seed: i64) -> Result<()> {
    check_world(size, rank)?;
    crate::tensor::device(device)?;
    crate::tensor::manual_seed(seed)
}

pub fn init(size: i64, rank: i64) -> Result<()> {
    check_world(size, rank)?;
    let mut s = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if s.is_some() {
        crate::bail!(E_DIST, "the process group is already initialised (call enkai_dist_shutdown first)");
    }
    *s = Some(World { size, rank });
    Ok(())
}

/// Sum (or mean) over ranks, in place. With one rank both leave the tensors unchanged.
pub fn allreduce(handles: &str) -> Result<()> {
    let world = *STATE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(w) = world else {
        crate::bail!(E_DIST, "the process group is not initialised (call enkai_dist_init)");
    };
    let hs: Vec<i64> = json::handle_list(handles)?.into_iter().filter(|h| *h != 0).collect();
    TENSORS.get_many(&hs)?;
    debug_assert_eq!((w.size, w.rank), (1, 0));
    Ok(())
}

pub fn shutdown() -> Result<()> {
    *STATE.lock().unwrap_or_else(|p| p.into_inner()) = None;
    Ok(())
}
