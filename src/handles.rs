//! Typed, generation-tagged, reference-counted handle registries.
//!
//! A handle is `kind << 48 | generation << 22 | slot`: always positive and
//! below 2^52, so it survives a round trip through an IEEE double (JSON readers
//! in scripting VMs). Freeing a slot advances its generation, so a stale handle
//! is recognised without remembering every freed handle, and the slot is reused.
//! The registry lock is held only to look up or change a slot, never while a
//! backend computes: lookups hand out an `Arc` clone.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Result;

const SLOT_BITS: u32 = 22;
const GEN_BITS: u32 = 26;
const KIND_SHIFT: u32 = SLOT_BITS + GEN_BITS;
const SLOT_MASK: i64 = (1 << SLOT_BITS) - 1;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
/// At most this many live handles of one kind.
pub const MAX_SLOTS: usize = 1 << SLOT_BITS;

/// What a handle refers to. The discriminant is stored in the handle's top bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    Tensor = 1,
    Device = 2,
    Optimizer = 3,
    Scaler = 4,
}

impl HandleKind {
    pub fn name(self) -> &'static str {
        match self {
            HandleKind::Tensor => "tensor",
            HandleKind::Device => "device",
            HandleKind::Optimizer => "optimizer",
            HandleKind::Scaler => "scaler",
        }
    }

    fn from_tag(tag: i64) -> Option<Self> {
        Some(match tag {
            1 => HandleKind::Tensor,
            2 => HandleKind::Device,
            3 => HandleKind::Optimizer,
            4 => HandleKind::Scaler,
            _ => return None,
        })
    }
}

struct Decoded {
    kind: Option<HandleKind>,
    generation: u32,
    slot: usize,
}

fn decode(h: i64) -> Decoded {
    Decoded {
        kind: if h > 0 { HandleKind::from_tag(h >> KIND_SHIFT) } else { None },
        generation: ((h >> SLOT_BITS) as u32) & GEN_MASK,
        slot: (h & SLOT_MASK) as usize,
    }
}

fn encode(kind: HandleKind, generation: u32, slot: usize) -> i64 {
    ((kind as i64) << KIND_SHIFT) | ((generation as i64) << SLOT_BITS) | slot as i64
}

struct Slot<T> {
    /// Generation of the current occupant, or of the next one while free.
    generation: u32,
    refs: u32,
    value: Option<Arc<T>>,
}

struct Inner<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
    live: usize,
}

pub struct Registry<T> {
    kind: HandleKind,
    inner: Mutex<Inner<T>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: HandleKind) -> Self {
        Registry { kind, inner: Mutex::new(Inner { slots: Vec::new(), free: Vec::new(), live: 0 }) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        // A panic while holding the lock cannot leave a slot half-updated (each
        // update is a few plain stores), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `value` with a reference count of 1 and returns its handle.
    pub fn insert(&self, value: T) -> Result<i64> {
        self.insert_arc(Arc::new(value))
    }

    pub fn insert_arc(&self, value: Arc<T>) -> Result<i64> {
        let mut g = self.lock();
        let slot = match g.free.pop() {
            Some(s) => s,
            None if g.slots.len() < MAX_SLOTS => {
                g.slots.push(Slot { generation: 0, refs: 0, value: None });
                g.slots.len() - 1
            }
            None => crate::bail!(E_RESOURCE, "too many live {} handles (limit {})", self.kind.name(), MAX_SLOTS),
        };
        let s = &mut g.slots[slot];
        s.refs = 1;
        s.value = Some(value);
        let generation = s.generation;
        g.live += 1;
        Ok(encode(self.kind, generation, slot))
    }

    fn check<'a>(&self, g: &'a mut Inner<T>, h: i64) -> Result<&'a mut Slot<T>> {
        let d = decode(h);
        match d.kind {
            None => crate::bail!(E_HANDLE_INVALID, "{h} is not a {} handle", self.kind.name()),
            Some(k) if k != self.kind => {
                crate::bail!(E_HANDLE_KIND, "handle {h} is a {} handle, expected a {}", k.name(), self.kind.name())
            }
            Some(_) => {}
        }
        let kind = self.kind.name();
        let Some(s) = g.slots.get_mut(d.slot) else {
            crate::bail!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)")
        };
        if s.generation == d.generation && s.value.is_some() {
            return Ok(s);
        }
        // Generations only move forward (mod 2^26): a handle from the past half is stale.
        let behind = s.generation.wrapping_sub(d.generation) & GEN_MASK;
        if behind != 0 && behind < (1 << (GEN_BITS - 1)) {
            crate::bail!(E_HANDLE_STALE, "{kind} handle {h} was already freed")
        }
        crate::bail!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)")
    }

    /// The value behind `h`, shared: the lock is released before it is used.
    pub fn get(&self, h: i64) -> Result<Arc<T>> {
        let mut g = self.lock();
        let s = self.check(&mut g, h)?;
        Ok(Arc::clone(s.value.as_ref().expect("checked live")))
    }

    /// Looks up every handle under one lock; fails on the first bad one.
    pub fn get_many(&self, hs: &[i64]) -> Result<Vec<Arc<T>>> {
        let mut g = self.lock();
        hs.iter()
            .map(|&h| self.check(&mut g, h).map(|s| Arc::clone(s.value.as_ref().expect("checked live"))))
            .collect()
    }

    /// Whether `h` is a live handle of this registry (no error is built).
    pub fn is_live(&self, h: i64) -> bool {
        let mut g = self.lock();
        self.check(&mut g, h).is_ok()
    }

    pub fn retain(&self, h: i64) -> Result<()> {
        let mut g = self.lock();
        let s = self.check(&mut g, h)?;
        s.refs = s.refs.checked_add(1).ok_or_else(|| crate::err!(E_RESOURCE, "reference count of handle {h} overflows"))?;
        Ok(())
    }

    /// Drops one reference; the last one frees the slot for reuse under a new generation.
    pub fn release(&self, h: i64) -> Result<()> {
        let freed = {
            let mut g = self.lock();
            let s = self.check(&mut g, h)?;
            s.refs -= 1;
            if s.refs > 0 {
                return Ok(());
            }
            s.generation = s.generation.wrapping_add(1) & GEN_MASK;
            let v = s.value.take();
            g.free.push((h & SLOT_MASK) as usize);
            g.live -= 1;
            v
        };
        // The value (perhaps a tensor's storage) is dropped after the lock is released.
        drop(freed);
        Ok(())
    }

    /// Number of live handles (not the sum of reference counts).
    pub fn live(&self) -> i64 {
        self.lock().live as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn encode_stays_below_2_pow_53() {
        let h = encode(HandleKind::Scaler, GEN_MASK, MAX_SLOTS - 1);
        assert!(h > 0 && h < (1i64 << 53));
        assert_eq!(h as f64 as i64, h);
    }

    #[test]
    fn generation_wraps_and_stays_stale() {
        let r: Registry<u8> = Registry::new(HandleKind::Tensor);
        let first = r.insert(1).unwrap();
        r.release(first).unwrap();
        let second = r.insert(2).unwrap();
        assert_eq!(second & SLOT_MASK, first & SLOT_MASK);
        assert_eq!(r.get(first).unwrap_err().code, Code::E_HANDLE_STALE);
        assert_eq!(*r.get(second).unwrap(), 2);
    }
}
