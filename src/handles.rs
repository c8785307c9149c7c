//! Typed, generation-tagged, reference-counted handle registries.
//!
//! A handle is `kind << 48 | generation << 22 | slot`: always positive and
//! below 2^52, so it survives a round trip through an IEEE double (JSON readers
//! in scripting VMs). Freeing a slot advances its generation, so a stale handle
//! is recognised without remembering every freed handle, and the slot is reused.
//! Generations never wrap: a slot whose generation is spent (2^26 owners) is
//! retired, so a freed handle can never become live again.
//! The registry lock is held only to look up or change a slot, never while a
//! backend computes: lookups raise the slot's borrow count and hand out a `Ref`.

use std::cell::UnsafeCell;

use crate::spinlock::{SpinGuard, SpinLock};

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

#[derive(Clone, Copy)]
struct Decoded {
    kind: Option<HandleKind>,
    generation: u32,
    slot: usize,
}

#[inline]
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

/// Slot bookkeeping, only touched under the registry lock.
#[derive(Clone, Copy)]
struct Meta {
    /// Generation of the current occupant, or of the next one while free.
    generation: u32,
    /// Handle references (retain/free); the handle is live while > 0.
    refs: u32,
    /// Calls using the value right now, outside the lock.
    borrows: u32,
    /// Every generation has been handed out: the slot is never reused.
    retired: bool,
}

const CHUNK: usize = 1024;

type Cell<T> = UnsafeCell<Option<T>>;

struct Inner<T> {
    meta: Vec<Meta>,
    /// Values live in fixed-size chunks that never move, so a borrowed value
    /// stays put while other threads grow the registry.
    values: Vec<Box<[Cell<T>]>>,
    free: Vec<usize>,
    live: usize,
}

impl<T> Inner<T> {
    fn cell(&self, slot: usize) -> &Cell<T> {
        &self.values[slot / CHUNK][slot % CHUNK]
    }

    /// Ends one borrow; returns the value to drop (outside the lock) when the
    /// handle was freed while it was borrowed.
    fn unborrow(&mut self, slot: usize) -> Option<T> {
        let m = &mut self.meta[slot];
        m.borrows -= 1;
        if m.borrows > 0 || m.refs > 0 {
            return None;
        }
        if !m.retired {
            self.free.push(slot);
        }
        // SAFETY: no borrow is left and the lock is held: nobody else can see the value.
        unsafe { (*self.cell(slot).get()).take() }
    }
}

/// A registry of values of one kind, addressed by handles.
///
/// Lookups return a [`Ref`] that keeps the value in place without copying
/// it: the slot's borrow count is raised under the lock, and a value whose
/// handle is freed while borrowed is dropped by the last borrower. Values
/// are always dropped after the lock is released.
pub struct Registry<T> {
    kind: HandleKind,
    inner: SpinLock<Inner<T>>,
}

/// A value borrowed from a registry for the duration of a call.
pub struct Ref<'a, T: Send + Sync> {
    reg: &'a Registry<T>,
    slot: usize,
    value: *const T,
}

impl<T: Send + Sync> std::ops::Deref for Ref<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the borrow count keeps the value in its (immovable) cell,
        // and writers only touch a cell whose borrow count is zero.
        unsafe { &*self.value }
    }
}

impl<T: Send + Sync> Drop for Ref<'_, T> {
    fn drop(&mut self) {
        let dead = self.reg.lock().unborrow(self.slot);
        drop(dead);
    }
}

impl<T> Registry<T> {
    pub const fn new(kind: HandleKind) -> Self {
        Registry { kind, inner: SpinLock::new(Inner { meta: Vec::new(), values: Vec::new(), free: Vec::new(), live: 0 }) }
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Inner<T>> {
        self.inner.lock()
    }
}

impl<T: Send + Sync> Registry<T> {
    /// Registers `value` with a reference count of 1 and returns its handle.
    pub fn insert(&self, value: T) -> Result<i64> {
        let mut g = self.lock();
        self.insert_locked(&mut g, value)
    }

    fn insert_locked(&self, g: &mut Inner<T>, value: T) -> Result<i64> {
        let slot = match g.free.pop() {
            Some(s) => s,
            None if g.meta.len() < MAX_SLOTS => {
                if g.meta.len().is_multiple_of(CHUNK) {
                    g.values.push((0..CHUNK).map(|_| UnsafeCell::new(None)).collect());
                }
                g.meta.push(Meta { generation: 0, refs: 0, borrows: 0, retired: false });
                g.meta.len() - 1
            }
            None => crate::bail!(E_RESOURCE, "too many live {} handles (limit {})", self.kind.name(), MAX_SLOTS),
        };
        // SAFETY: a free slot has no borrows and the lock is held.
        unsafe { *g.cell(slot).get() = Some(value) };
        let m = &mut g.meta[slot];
        m.refs = 1;
        let generation = m.generation;
        g.live += 1;
        Ok(encode(self.kind, generation, slot))
    }

    /// Ends the borrows in `done` and registers `value`, under one lock: the
    /// common tail of every op (inputs released, output registered).
    pub fn insert_after<const N: usize>(&self, value: T, done: [Ref<'_, T>; N]) -> Result<i64> {
        let mut dead: [Option<T>; N] = [const { None }; N];
        let r = {
            let mut g = self.lock();
            for (d, r) in dead.iter_mut().zip(done) {
                *d = g.unborrow(r.slot);
                std::mem::forget(r);
            }
            self.insert_locked(&mut g, value)
        };
        drop(dead);
        r
    }

    /// The slot of a live handle `h`; `None` for anything else (the hot path
    /// builds no error).
    #[inline]
    fn live_slot(&self, g: &Inner<T>, h: i64) -> Option<usize> {
        let d = decode(h);
        let m = g.meta.get(d.slot)?;
        (d.kind == Some(self.kind) && m.generation == d.generation && m.refs > 0).then_some(d.slot)
    }

    /// The slot of a live handle `h`, or the precise reason it is not one.
    #[inline]
    fn check(&self, g: &Inner<T>, h: i64) -> Result<usize> {
        self.live_slot(g, h).ok_or_else(|| self.explain(g, h))
    }

    #[cold]
    #[inline(never)]
    fn explain(&self, g: &Inner<T>, h: i64) -> crate::Error {
        let d = decode(h);
        let kind = self.kind.name();
        match d.kind {
            None => return crate::err!(E_HANDLE_INVALID, "{h} is not a {kind} handle"),
            Some(k) if k != self.kind => {
                return crate::err!(E_HANDLE_KIND, "handle {h} is a {} handle, expected a {kind}", k.name())
            }
            Some(_) => {}
        }
        let Some(m) = g.meta.get(d.slot) else {
            return crate::err!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)");
        };
        // Generations only move forward and never wrap: an earlier one was
        // issued and freed; a retired slot issued every one.
        if d.generation < m.generation || m.retired {
            return crate::err!(E_HANDLE_STALE, "{kind} handle {h} was already freed");
        }
        crate::err!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)")
    }

    /// Raises the borrow count of a live slot and points at its value.
    #[inline]
    fn borrow_slot<'a>(&'a self, g: &mut Inner<T>, slot: usize) -> Ref<'a, T> {
        g.meta[slot].borrows += 1;
        // SAFETY: the slot is live, so its cell holds a value; it cannot be
        // taken while the borrow we just added is outstanding.
        let value = unsafe { (*g.cell(slot).get()).as_ref().expect("live slot has a value") as *const T };
        Ref { reg: self, slot, value }
    }

    #[inline]
    fn borrow_locked<'a>(&'a self, g: &mut Inner<T>, h: i64) -> Result<Ref<'a, T>> {
        let slot = self.check(g, h)?;
        Ok(self.borrow_slot(g, slot))
    }

    /// Runs `f` on the value behind `h` with the lock held: for small, quick
    /// reads (a device), saving the second lock a borrow's release takes.
    pub fn read<R>(&self, h: i64, f: impl FnOnce(&T) -> R) -> Result<R> {
        let g = self.lock();
        let slot = self.check(&g, h)?;
        // SAFETY: the slot is live and the lock is held, so nobody takes the value.
        let v = unsafe { (*g.cell(slot).get()).as_ref().expect("live slot has a value") };
        Ok(f(v))
    }

    /// The value behind `h`, borrowed: the lock is released before it is used.
    pub fn get(&self, h: i64) -> Result<Ref<'_, T>> {
        let mut g = self.lock();
        self.borrow_locked(&mut g, h)
    }

    /// Borrows `N` values under one lock; fails on the first bad handle.
    pub fn get_n<const N: usize>(&self, hs: [i64; N]) -> Result<[Ref<'_, T>; N]> {
        let mut g = self.lock();
        let mut slots = [0usize; N];
        for (s, &h) in slots.iter_mut().zip(&hs) {
            match self.live_slot(&g, h) {
                Some(slot) => *s = slot,
                None => return Err(self.explain(&g, h)),
            }
        }
        Ok(slots.map(|slot| self.borrow_slot(&mut g, slot)))
    }

    /// Borrows every value under one lock; fails on the first bad handle.
    pub fn get_many(&self, hs: &[i64]) -> Result<Vec<Ref<'_, T>>> {
        let mut out = Vec::with_capacity(hs.len());
        let mut g = self.lock();
        for &h in hs {
            match self.borrow_locked(&mut g, h) {
                Ok(r) => out.push(r),
                Err(e) => {
                    // End the borrows taken so far without re-locking.
                    let dead: Vec<_> = out.drain(..).map(|r: Ref<'_, T>| {
                        let slot = r.slot;
                        std::mem::forget(r);
                        g.unborrow(slot)
                    }).collect();
                    drop(g);
                    drop(dead);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    pub fn retain(&self, h: i64) -> Result<()> {
        let mut g = self.lock();
        let slot = self.check(&g, h)?;
        let m = &mut g.meta[slot];
        m.refs = m.refs.checked_add(1).ok_or_else(|| crate::err!(E_RESOURCE, "reference count of handle {h} overflows"))?;
        Ok(())
    }

    /// Drops one reference. The last one makes the handle stale at once (its
    /// generation moves on); the value is dropped now, or by the last call
    /// still using it, and the slot is then reused.
    pub fn release(&self, h: i64) -> Result<()> {
        let dead = {
            let mut g = self.lock();
            let slot = self.check(&g, h)?;
            let m = &mut g.meta[slot];
            m.refs -= 1;
            if m.refs > 0 {
                return Ok(());
            }
            // The last generation retires the slot instead of wrapping to 0,
            // which would bring every freed handle of the slot back to life.
            if m.generation == GEN_MASK {
                m.retired = true;
            } else {
                m.generation += 1;
            }
            let (borrowed, retired) = (m.borrows > 0, m.retired);
            g.live -= 1;
            if borrowed {
                None
            } else {
                if !retired {
                    g.free.push(slot);
                }
                // SAFETY: no borrows, lock held.
                unsafe { (*g.cell(slot).get()).take() }
            }
        };
        drop(dead);
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
    fn a_freed_slot_is_reused_under_a_new_generation() {
        let r: Registry<u8> = Registry::new(HandleKind::Tensor);
        let first = r.insert(1).unwrap();
        r.release(first).unwrap();
        let second = r.insert(2).unwrap();
        assert_eq!(second & SLOT_MASK, first & SLOT_MASK);
        assert_eq!(r.get(first).err().map(|e| e.code), Some(Code::E_HANDLE_STALE));
        assert_eq!(*r.get(second).unwrap(), 2);
    }

    #[test]
    fn a_slot_retires_instead_of_wrapping_its_generation() {
        let r: Registry<u8> = Registry::new(HandleKind::Tensor);
        let first = r.insert(1).unwrap();
        r.release(first).unwrap();
        let slot = (first & SLOT_MASK) as usize;
        // as after 2^26 - 1 owners of this slot: the next owner gets the last generation
        r.lock().meta[slot].generation = GEN_MASK;
        let last = r.insert(2).unwrap();
        assert_eq!(((last >> SLOT_BITS) as u32 & GEN_MASK, last & SLOT_MASK), (GEN_MASK, first & SLOT_MASK));
        r.release(last).unwrap();
        // every handle the slot ever issued stays stale, and the slot is not reused
        for h in [first, last, encode(HandleKind::Tensor, 12345, slot)] {
            assert_eq!(r.get(h).err().map(|e| e.code), Some(Code::E_HANDLE_STALE));
            assert_eq!(r.release(h).err().map(|e| e.code), Some(Code::E_HANDLE_STALE));
        }
        let next = r.insert(3).unwrap();
        assert_ne!(next & SLOT_MASK, first & SLOT_MASK);
        assert_eq!(r.live(), 1);
        // a last owner freed while borrowed retires the slot too
        let r2: Registry<u8> = Registry::new(HandleKind::Tensor);
        let a = r2.insert(1).unwrap();
        r2.lock().meta[(a & SLOT_MASK) as usize].generation = GEN_MASK;
        let a = encode(HandleKind::Tensor, GEN_MASK, (a & SLOT_MASK) as usize);
        let held = r2.get(a).unwrap();
        r2.release(a).unwrap();
        drop(held);
        assert_ne!(r2.insert(2).unwrap() & SLOT_MASK, a & SLOT_MASK);
    }

    #[test]
    fn a_value_freed_while_borrowed_lives_until_the_borrow_ends() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let r: Registry<Counted> = Registry::new(HandleKind::Tensor);
        let h = r.insert(Counted).unwrap();
        let borrowed = r.get(h).unwrap();
        r.release(h).unwrap();
        assert_eq!(r.live(), 0);
        assert_eq!(r.get(h).err().map(|e| e.code), Some(Code::E_HANDLE_STALE));
        assert_eq!(DROPS.load(Ordering::SeqCst), 0, "still borrowed");
        // the slot is not reused while borrowed
        let other = r.insert(Counted).unwrap();
        assert_ne!(other & SLOT_MASK, h & SLOT_MASK);
        drop(borrowed);
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        let again = r.insert(Counted).unwrap();
        assert_eq!(again & SLOT_MASK, h & SLOT_MASK, "slot reused after the borrow ended");
        assert_eq!(r.get_n([again, h]).err().map(|e| e.code), Some(Code::E_HANDLE_STALE));
        assert_eq!(r.get_many(&[other, again, 0]).err().map(|e| e.code), Some(Code::E_HANDLE_INVALID));
        r.release(other).unwrap();
        r.release(again).unwrap();
        assert_eq!(DROPS.load(Ordering::SeqCst), 3);
    }
}
