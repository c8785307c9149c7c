//! Tensor storage: 64-byte-aligned buffers recycled through a per-thread,
//! size-bucketed cache (a fresh allocation per op costs page faults that
//! dominate small training steps), or foreign memory lent through DLPack.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

const ALIGN: usize = 64;
/// Buffers kept per size class, and bytes kept per thread in all.
const PER_CLASS: usize = 16;
const PER_THREAD_BYTES: usize = 512 << 20;

/// Where a storage's bytes live and how they go back.
enum Origin {
    /// From the allocator (or the cache), `cap` bytes.
    Owned { cap: usize },
    /// A producer's memory; `release(ctx)` runs once, when the storage dies.
    Foreign { release: unsafe extern "C" fn(*mut c_void), ctx: *mut c_void },
    /// Zero bytes: no allocation.
    Empty,
}

pub struct Storage {
    ptr: NonNull<u8>,
    len: usize,
    origin: Origin,
    /// PyTorch's version counter: bumped by every write into existing bytes
    /// (an in-place op, an optimizer step), so that a backward pass can tell
    /// that a tensor it saved was overwritten (`autograd`).
    version: AtomicU32,
    /// Bumped when an in-place op rewrites the autograd history of a tensor
    /// over these bytes: views made before then carry a stale history.
    history: AtomicU32,
}

// SAFETY: the bytes are plain data; ordering concurrent writes to one tensor
// is the caller's duty, as for libtorch tensors shared between threads.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

/// Rounds a request up to its size class: powers of two split in four steps,
/// so no buffer wastes more than a fifth of itself.
fn class(bytes: usize) -> usize {
    if bytes <= 256 {
        return bytes.div_ceil(ALIGN) * ALIGN;
    }
    let top = usize::BITS - 1 - bytes.leading_zeros();
    let step = 1usize << (top - 2);
    bytes.div_ceil(step) * step
}

struct Cache {
    free: Vec<(usize, Vec<NonNull<u8>>)>,
    bytes: usize,
}

impl Cache {
    fn take(&mut self, cap: usize) -> Option<NonNull<u8>> {
        let slot = self.free.iter_mut().find(|(c, _)| *c == cap)?;
        let p = slot.1.pop()?;
        self.bytes -= cap;
        Some(p)
    }

    /// Keeps `p` for reuse, or hands it back when the cache is full.
    fn keep(&mut self, p: NonNull<u8>, cap: usize) -> Option<NonNull<u8>> {
        if self.bytes + cap > PER_THREAD_BYTES {
            return Some(p);
        }
        let i = match self.free.iter().position(|(c, _)| *c == cap) {
            Some(i) => i,
            None => {
                self.free.push((cap, Vec::new()));
                self.free.len() - 1
            }
        };
        if self.free[i].1.len() >= PER_CLASS {
            return Some(p);
        }
        self.free[i].1.push(p);
        self.bytes += cap;
        None
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        for (cap, ps) in self.free.drain(..) {
            ps.into_iter().for_each(|p| dealloc(p, cap));
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { free: Vec::new(), bytes: 0 }) };
}

fn layout(cap: usize) -> Layout {
    Layout::from_size_align(cap, ALIGN).expect("capacity checked by Storage::new")
}

fn dealloc(p: NonNull<u8>, cap: usize) {
    // SAFETY: `p` came from `alloc_zeroed` with this layout.
    unsafe { std::alloc::dealloc(p.as_ptr(), layout(cap)) }
}

impl Storage {
    fn make(ptr: NonNull<u8>, len: usize, origin: Origin) -> Storage {
        Storage { ptr, len, origin, version: AtomicU32::new(0), history: AtomicU32::new(0) }
    }

    pub fn version(&self) -> u32 {
        self.version.load(Ordering::Acquire)
    }

    /// Marks the bytes as written in place.
    pub fn bump_version(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    pub fn history(&self) -> u32 {
        self.history.load(Ordering::Acquire)
    }

    /// Marks the autograd history of a tensor over these bytes as rewritten; returns the new mark.
    pub fn bump_history(&self) -> u32 {
        self.history.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// `len` bytes whose contents are unspecified (but initialised): a reused
    /// buffer or zeroed fresh memory. Fails cleanly when memory runs out.
    pub fn new(len: usize) -> crate::error::Result<Storage> {
        Storage::alloc(len, false)
    }

    fn alloc(len: usize, zero: bool) -> crate::error::Result<Storage> {
        if len == 0 {
            return Ok(Storage::make(NonNull::<u64>::dangling().cast(), 0, Origin::Empty));
        }
        if len > isize::MAX as usize - ALIGN {
            crate::bail!(E_RESOURCE, "cannot allocate {len} bytes");
        }
        let cap = class(len);
        let reused = CACHE.try_with(|c| c.borrow_mut().take(cap)).ok().flatten();
        let ptr = match reused {
            Some(p) => {
                if zero {
                    // SAFETY: a reused buffer of at least `len` bytes.
                    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, len) };
                }
                p
            }
            // SAFETY: a non-zero size with a valid alignment.
            None => NonNull::new(unsafe { std::alloc::alloc_zeroed(layout(cap)) })
                .ok_or_else(|| crate::err!(E_RESOURCE, "cannot allocate {len} bytes"))?,
        };
        Ok(Storage::make(ptr, len, Origin::Owned { cap }))
    }

    /// `len` zero bytes. Fresh memory is zero already (and untouched, so a
    /// large tensor costs no page until it is written); reused memory is cleared.
    pub fn zeroed(len: usize) -> crate::error::Result<Storage> {
        Storage::alloc(len, true)
    }

    /// Storage over a producer's memory, released once through `release(ctx)`.
    ///
    /// # Safety
    /// `ptr` is valid for `len` bytes until `release(ctx)` runs.
    pub unsafe fn foreign(ptr: *mut u8, len: usize, release: unsafe extern "C" fn(*mut c_void), ctx: *mut c_void) -> Storage {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::<u64>::dangling().cast());
        Storage::make(ptr, len, Origin::Foreign { release, ctx })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        match self.origin {
            Origin::Owned { cap } => {
                let spare = CACHE.try_with(|c| c.borrow_mut().keep(self.ptr, cap)).unwrap_or(Some(self.ptr));
                if let Some(p) = spare {
                    dealloc(p, cap);
                }
            }
            // SAFETY: the producer lent the memory until this one call.
            Origin::Foreign { release, ctx } => unsafe { release(ctx) },
            Origin::Empty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_the_request_and_waste_little() {
        for n in (1..5000).chain([1 << 20, (1 << 20) + 1, 3 << 30]) {
            let c = class(n);
            assert!(c >= n && c.is_multiple_of(ALIGN), "{n} -> {c}");
            assert!(n <= 256 || (c - n) * 4 <= c, "{n} -> {c}");
        }
    }

    #[test]
    fn buffers_are_reused_on_one_thread() {
        let a = Storage::new(1000).unwrap();
        let p = a.ptr();
        drop(a);
        let b = Storage::new(1000).unwrap();
        assert_eq!(b.ptr(), p);
        assert_eq!(b.ptr() as usize % ALIGN, 0);
    }
}
