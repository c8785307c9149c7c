//! Per-op cost through raw `tch` (the (b) column of `make bench`); prints
//! "<name> <ns per call>" lines, best of 7 rounds, same ops as ops_c.c.

use std::hint::black_box;
use std::time::Instant;

use tch::{Device, Kind, Tensor};

fn bench(name: &str, iters: u32, mut f: impl FnMut() -> Tensor) {
    for _ in 0..iters / 10 {
        drop(f());
    }
    let best = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                drop(black_box(f()));
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min);
    println!("{name} {best:.1}");
}

// `ops_tch count <n>`: each count_* loop n times untimed, for callgrind.
#[inline(never)]
fn count_zeros_4(n: u32, o: (Kind, Device)) {
    for _ in 0..n {
        drop(black_box(Tensor::f_zeros([4], o).unwrap()));
    }
}

#[inline(never)]
fn count_add_4(n: u32, a: &Tensor, b: &Tensor) {
    for _ in 0..n {
        drop(black_box(a.f_add(b).unwrap()));
    }
}

fn main() {
    let o = (Kind::Float, Device::Cpu);
    let (a, b) = (Tensor::randn([4], o), Tensor::randn([4], o));
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "count" {
        let n = args[2].parse().expect("count <n>");
        count_zeros_4(n, o);
        count_add_4(n, &a, &b);
        return;
    }
    let (m, n) = (Tensor::randn([64, 64], o), Tensor::randn([64, 64], o));
    let (x, w, bias) = (Tensor::randn([32, 256], o), Tensor::ones([256], o), Tensor::zeros([256], o));
    bench("zeros_4", 200_000, || Tensor::f_zeros([4], o).unwrap());
    bench("add_4", 200_000, || a.f_add(&b).unwrap());
    bench("matmul_64", 20_000, || m.f_matmul(&n).unwrap());
    bench("layernorm_gelu_32x256", 5_000, || {
        x.f_layer_norm([256], Some(&w), Some(&bias), 1e-5, true).unwrap().f_gelu("none").unwrap()
    });
}
