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
    Safetensors = 5,
    /// A weight-only quantized tensor (`quant`): a tensor to the tensor
    /// functions that read it (shape, dtype, copy_to, free), refused by the rest.
    Quantized = 6,
}

impl HandleKind {
    pub fn name(self) -> &'static str {
        match self {
            HandleKind::Tensor => "tensor",
            HandleKind::Device => "device",
            HandleKind::Optimizer => "optimizer",
            HandleKind::Scaler => "scaler",
            HandleKind::Safetensors => "safetensors",
            HandleKind::Quantized => "quantized tensor",
        }
    }

    fn from_tag(tag: i64) -> Option<Self> {
        Some(match tag {
            1 => HandleKind::Tensor,
            2 => HandleKind::Device,
            3 => HandleKind::Optimizer,
            4 => HandleKind::Scaler,
            5 => HandleKind::Safetensors,
            6 => HandleKind::Quantized,
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

/// The kind a handle's tag names, live or not (`None`: no kind's tag).
#[inline]
pub fn kind_of(h: i64) -> Option<HandleKind> {
    decode(h).kind
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

/// One slot: its bookkeeping (only touched under the registry lock) next to
/// its value, so a lookup touches one place.
struct Slot<T> {
    /// Generation of the current occupant, or of the next one while free.
    generation: u32,
    /// Handle references (retain/free); the handle is live while > 0.
    refs: u32,
    /// Calls using the value right now, outside the lock.
    borrows: u32,
    /// Every generation has been handed out: the slot is never reused.
    retired: bool,
    value: UnsafeCell<Option<T>>,
}

const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

struct Inner<T> {
    /// Slots live in chunks of `CHUNK` that never move, so a borrowed value
    /// stays put while other threads grow the registry. Each chunk is
    /// allocated whole but filled a slot at a time (never past its
    /// capacity, so never reallocated): a process touches only the pages of
    /// the slots it uses. Writing a whole chunk up front cost the first
    /// handle of a kind with large values (a safetensors file's: 200 KiB)
    /// some 50 page faults, most of a fresh process's first open.
    chunks: Vec<Vec<Slot<T>>>,
    /// Slots handed out so far (all the slots made: the last chunk has room for the rest).
    len: usize,
    free: Vec<usize>,
    live: usize,
}

impl<T> Inner<T> {
    #[inline]
    fn slot(&self, slot: usize) -> &Slot<T> {
        debug_assert!(slot < self.len);
        // SAFETY: callers pass a slot below `len`, and every chunk below it exists.
        unsafe { self.chunks.get_unchecked(slot >> CHUNK_BITS).get_unchecked(slot & (CHUNK - 1)) }
    }

    #[inline]
    fn slot_mut(&mut self, slot: usize) -> &mut Slot<T> {
        debug_assert!(slot < self.len);
        // SAFETY: as `slot`.
        unsafe { self.chunks.get_unchecked_mut(slot >> CHUNK_BITS).get_unchecked_mut(slot & (CHUNK - 1)) }
    }

    /// Ends one borrow; returns the value to drop (outside the lock) when the
    /// handle was freed while it was borrowed.
    #[inline]
    fn unborrow(&mut self, slot: usize) -> Option<T> {
        let s = self.slot_mut(slot);
        s.borrows -= 1;
        if s.borrows > 0 || s.refs > 0 {
            return None;
        }
        self.vacate(slot)
    }

    /// Takes the value of a slot nobody references or borrows any more and
    /// makes the slot reusable (unless retired).
    fn vacate(&mut self, slot: usize) -> Option<T> {
        let s = self.slot_mut(slot);
        // SAFETY: no reference or borrow is left and the lock is held: nobody else can see the value.
        let v = unsafe { (*s.value.get()).take() };
        if !s.retired {
            self.free.push(slot);
        }
        v
    }
}

/// A registry of values of one kind, addressed by handles.
///
/// Lookups return a [`Ref`] that keeps the value in place without copying
/// it: the slot's borrow count is raised under the lock, and a value whose
/// handle is freed while borrowed is dropped by the last borrower. Values
/// are always dropped after the lock is released. The lock is a spin lock
/// taken once per lookup, once per registration and once per release: on
/// this path an uncontended lock costs one atomic, as a lock-free slot word
/// would, and a lock-free lookup would need a second atomic to end it.
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
        Registry { kind, inner: SpinLock::new(Inner { chunks: Vec::new(), len: 0, free: Vec::new(), live: 0 }) }
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

    #[inline]
    fn insert_locked(&self, g: &mut Inner<T>, value: T) -> Result<i64> {
        let slot = match g.free.pop() {
            Some(s) => s,
            None => self.grow(g)?,
        };
        let s = g.slot_mut(slot);
        // SAFETY: a free slot has no borrows and the lock is held.
        unsafe { *s.value.get() = Some(value) };
        s.refs = 1;
        let generation = s.generation;
        g.live += 1;
        Ok(encode(self.kind, generation, slot))
    }

    /// A never-used slot, adding a chunk when the last one is full.
    #[cold]
    fn grow(&self, g: &mut Inner<T>) -> Result<usize> {
        if g.len >= MAX_SLOTS {
            crate::bail!(E_RESOURCE, "too many live {} handles (limit {})", self.kind.name(), MAX_SLOTS);
        }
        if g.len == g.chunks.len() * CHUNK {
            g.chunks.push(Vec::with_capacity(CHUNK));
        }
        let chunk = g.chunks.last_mut().expect("a chunk with room");
        debug_assert!(chunk.len() < chunk.capacity());
        chunk.push(Slot { generation: 0, refs: 0, borrows: 0, retired: false, value: UnsafeCell::new(None) });
        g.len += 1;
        Ok(g.len - 1)
    }

    /// Ends the borrows in `done` and registers `value`, under one lock: the
    /// common tail of every op (inputs released, output registered).
    #[inline(always)]
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

    /// Registers `values` (each with a reference count of 1) and ends the
    /// borrows `done` under one lock, as `insert_after` for a call with any
    /// number of inputs and results. On failure (too many live handles)
    /// nothing stays registered.
    pub fn insert_all_after<'a, I: IntoIterator<Item = T>>(&'a self, values: I, done: impl IntoIterator<Item = Ref<'a, T>>) -> Result<smallvec::SmallVec<[i64; 4]>> {
        let mut dead: smallvec::SmallVec<[Option<T>; 4]> = smallvec::SmallVec::new();
        let mut hs = smallvec::SmallVec::new();
        let mut values = values.into_iter();
        let r = {
            let mut g = self.lock();
            for r in done {
                dead.push(g.unborrow(r.slot));
                std::mem::forget(r);
            }
            values.by_ref().try_for_each(|v| self.insert_locked(&mut g, v).map(|h| hs.push(h)))
        };
        drop(dead);
        drop(values);
        if let Err(e) = r {
            // Just registered with one reference and no borrows: releasing cannot fail.
            hs.iter().for_each(|&h| drop(self.release(h)));
            return Err(e);
        }
        Ok(hs)
    }

    /// The slot of a live handle `h`; `None` for anything else (the hot path
    /// builds no error).
    #[inline]
    fn live_slot(&self, g: &Inner<T>, h: i64) -> Option<usize> {
        // A negative `h` shifts to a negative tag, so one compare checks sign and kind.
        if h >> KIND_SHIFT != self.kind as i64 {
            return None;
        }
        let slot = (h & SLOT_MASK) as usize;
        if slot >= g.len {
            return None;
        }
        let s = g.slot(slot);
        (s.generation == ((h >> SLOT_BITS) as u32 & GEN_MASK) && s.refs > 0).then_some(slot)
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
            // A quantized tensor given where a plain one goes is a dtype the op does not take.
            Some(HandleKind::Quantized) if self.kind == HandleKind::Tensor => {
                return crate::err!(E_DTYPE, "tensor {h} is quantized (qint8 or q8_0): only dequantize, linear and matmul take it")
            }
            Some(k) if k != self.kind => {
                return crate::err!(E_HANDLE_KIND, "handle {h} is a {} handle, expected a {kind}", k.name())
            }
            Some(_) => {}
        }
        if d.slot >= g.len {
            return crate::err!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)");
        }
        let s = g.slot(d.slot);
        // Generations only move forward and never wrap: an earlier one was
        // issued and freed; a retired slot issued every one.
        if d.generation < s.generation || s.retired {
            return crate::err!(E_HANDLE_STALE, "{kind} handle {h} was already freed");
        }
        crate::err!(E_HANDLE_INVALID, "{h} is not a {kind} handle (never issued)")
    }

    /// Raises the borrow count of a live slot and points at its value.
    #[inline]
    fn borrow_slot<'a>(&'a self, g: &mut Inner<T>, slot: usize) -> Ref<'a, T> {
        let s = g.slot_mut(slot);
        s.borrows += 1;
        // SAFETY: the slot is live, so its cell holds a value; it cannot be
        // taken while the borrow we just added is outstanding.
        let value = match unsafe { &*s.value.get() } {
            Some(v) => v as *const T,
            None => unreachable!("live slot has a value"),
        };
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
        match unsafe { &*g.slot(slot).value.get() } {
            Some(v) => Ok(f(v)),
            None => unreachable!("live slot has a value"),
        }
    }

    /// The value behind `h`, borrowed: the lock is released before it is used.
    pub fn get(&self, h: i64) -> Result<Ref<'_, T>> {
        let mut g = self.lock();
        self.borrow_locked(&mut g, h)
    }

    /// Borrows `N` values under one lock; fails on the first bad handle.
    // Inlined into each op, so the borrows come back in registers: returned
    // through memory, they cost a store-forwarding stall per call.
    #[inline(always)]
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
    pub fn get_many(&self, hs: &[i64]) -> Result<smallvec::SmallVec<[Ref<'_, T>; 4]>> {
        let mut out = smallvec::SmallVec::with_capacity(hs.len());
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
        let s = g.slot_mut(slot);
        s.refs = s.refs.checked_add(1).ok_or_else(|| crate::err!(E_RESOURCE, "reference count of handle {h} overflows"))?;
        Ok(())
    }

    /// Drops one reference. The last one makes the handle stale at once (its
    /// generation moves on); the value is dropped now, or by the last call
    /// still using it, and the slot is then reused.
    pub fn release(&self, h: i64) -> Result<()> {
        let dead = {
            let mut g = self.lock();
            let slot = self.check(&g, h)?;
            let s = g.slot_mut(slot);
            s.refs -= 1;
            if s.refs > 0 {
                return Ok(());
            }
            // The last generation retires the slot instead of wrapping to 0,
            // which would bring every freed handle of the slot back to life.
            if s.generation == GEN_MASK {
                s.retired = true;
            } else {
                s.generation += 1;
            }
            let borrowed = s.borrows > 0;
            g.live -= 1;
            if borrowed {
                None
            } else {
                g.vacate(slot)
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
        r.lock().slot_mut(slot).generation = GEN_MASK;
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
        r2.lock().slot_mut((a & SLOT_MASK) as usize).generation = GEN_MASK;
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
