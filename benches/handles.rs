//! Per-call cost of the handle layer, measured through the real C ABI: the
//! bench `dlopen`s target/release/libenkai_tensor.so and calls its exported
//! symbols, next to the same work done with raw `tch`, in one run.
//! Run with `make bench`. Prints ns/call (best of 7 rounds) and the ratio.

use std::ffi::{c_char, c_void, CString};
use std::hint::black_box;
use std::time::Instant;

type Retain = unsafe extern "C" fn(i64) -> i32;
type Create = unsafe extern "C" fn(*const c_char, *const c_char, i64) -> i64;
type Device = unsafe extern "C" fn(*const c_char) -> i64;

struct Lib(*mut c_void);

impl Lib {
    fn open() -> Lib {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/libenkai_tensor.so");
        let p = CString::new(path).unwrap();
        let h = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {path} failed: run `cargo build --release` first");
        Lib(h)
    }

    fn sym<T: Copy>(&self, name: &str) -> T {
        let n = CString::new(name).unwrap();
        let p = unsafe { libc::dlsym(self.0, n.as_ptr()) };
        assert!(!p.is_null(), "missing symbol {name}");
        unsafe { std::mem::transmute_copy(&p) }
    }
}

/// Best-of-7 nanoseconds per iteration of `f`.
fn time(iters: u32, mut f: impl FnMut()) -> f64 {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn row(name: &str, ours: f64, raw: f64) {
    println!("{name:<34} {ours:>10.1} {raw:>10.1} {:>8.2}", ours / raw);
}

fn main() {
    tch::set_num_threads(1);
    let lib = Lib::open();
    let retain: Retain = lib.sym("enkai_tensor_retain");
    let free: Retain = lib.sym("enkai_tensor_free");
    let zeros: Create = lib.sym("enkai_tensor_zeros");
    let device: Device = lib.sym("enkai_tensor_device");
    let (shape, dtype, cpu) = (CString::new("[4]").unwrap(), CString::new("fp32").unwrap(), CString::new("cpu").unwrap());
    let dev = unsafe { device(cpu.as_ptr()) };
    let t = unsafe { zeros(shape.as_ptr(), dtype.as_ptr(), dev) };
    assert!(t > 0);
    let raw = tch::Tensor::zeros([4], (tch::Kind::Float, tch::Device::Cpu));

    println!("{:<34} {:>10} {:>10} {:>8}", "per call (ns)", "C ABI", "raw tch", "ratio");
    let n = 200_000;
    let ours = time(n, || unsafe {
        black_box(retain(black_box(t)));
        black_box(free(black_box(t)));
    });
    let base = time(n, || drop(black_box(black_box(&raw).shallow_clone())));
    row("retain+free vs shallow_clone+drop", ours, base);

    let n = 50_000;
    let ours = time(n, || unsafe {
        let h = zeros(shape.as_ptr(), dtype.as_ptr(), dev);
        black_box(free(black_box(h)));
    });
    let base = time(n, || drop(black_box(tch::Tensor::f_zeros([4], (tch::Kind::Float, tch::Device::Cpu)).unwrap())));
    row("zeros([4],fp32)+free vs f_zeros+drop", ours, base);
    unsafe { free(t) };
}
