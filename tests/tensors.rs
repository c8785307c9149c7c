//! Tensor creation and data in/out through the C entry points (needs libtorch).
#![cfg(feature = "torch")]

mod common;

use common::*;
use enkai_tensor::error::Code;
use enkai_tensor::ffi::backend::*;
use enkai_tensor::ffi::library::*;
use enkai_tensor::ffi::typed::*;
use enkai_tensor::ffi::tensor::*;

fn cpu() -> i64 {
    unsafe { enkai_tensor_device(c("cpu").as_ptr()) }
}

fn read_f32(t: i64) -> Vec<f32> {
    let n = enkai_tensor_numel(t) as usize;
    let mut v = vec![0f32; n];
    assert_eq!(unsafe { enkai_tensor_copy_to(t, v.as_mut_ptr().cast(), n * 4) }, 0);
    v
}

fn shape(t: i64) -> String {
    let s = enkai_tensor_shape(t);
    let text = String::from_utf8(unsafe { std::slice::from_raw_parts(s.ptr, s.len) }.to_vec()).unwrap();
    unsafe { enkai_free(s.ptr, s.len) };
    text
}

fn make(f: unsafe extern "C" fn(*const i8, *const i8, i64) -> i64, shape: &str, dt: &str, d: i64) -> i64 {
    unsafe { f(c(shape).as_ptr(), c(dt).as_ptr(), d) }
}

#[test]
fn constructors_fill_as_torch_does() {
    let _s = serial();
    let d = cpu();
    let base = enkai_tensor_live_tensors();
    let z = make(enkai_tensor_zeros, "[2,3]", "fp32", d);
    let o = make(enkai_tensor_ones, "[2,3]", "f64", d);
    let f = unsafe { enkai_tensor_full(c("[4]").as_ptr(), 1.5, c("bf16").as_ptr(), d) };
    assert_eq!(read_f32(z), vec![0.0; 6]);
    assert_eq!(shape(o), "[2,3]");
    assert_eq!(out_string(|p, n| unsafe { enkai_tensor_dtype(o, p, n) }).unwrap(), "fp64");
    assert_eq!(out_string(|p, n| unsafe { enkai_tensor_dtype(f, p, n) }).unwrap(), "bf16");
    assert_eq!(enkai_tensor_live_tensors(), base + 3);
    for t in [z, o, f] {
        assert_eq!(enkai_tensor_free(t), 0);
    }
    assert_eq!(enkai_tensor_live_tensors(), base);
    enkai_tensor_device_free(d);
}

#[test]
fn randn_is_seeded_and_matches_libtorch() {
    let _s = serial();
    let d = cpu();
    assert_eq!(enkai_tensor_manual_seed(7), 0);
    let a = make(enkai_tensor_randn, "[16]", "fp32", d);
    tch::manual_seed(7);
    let expected: Vec<f32> = Vec::try_from(tch::Tensor::randn([16], (tch::Kind::Float, tch::Device::Cpu))).unwrap();
    assert_eq!(read_f32(a), expected);
    enkai_tensor_free(a);
    assert_eq!(make(enkai_tensor_randn, "[2]", "uint8", d), 0);
    let msg = assert_err(Code::E_DTYPE);
    assert!(msg.contains("uint8"));
    enkai_tensor_device_free(d);
}

#[test]
fn item_needs_exactly_one_element() {
    let _s = serial();
    let d = cpu();
    let t = unsafe { enkai_tensor_full(c("[1,1,1]").as_ptr(), 3.0, c("int64").as_ptr(), d) };
    assert_eq!(enkai_tensor_item(t), 3.0);
    assert_ok();
    let b = unsafe { enkai_tensor_full(c("[]").as_ptr(), 1.0, c("bool").as_ptr(), d) };
    assert_eq!(enkai_tensor_item(b), 1.0);
    let e = make(enkai_tensor_zeros, "[0]", "fp32", d);
    assert!(enkai_tensor_item(e).is_nan());
    let msg = assert_err(Code::E_SHAPE);
    assert_eq!(msg, "E_SHAPE: item needs exactly one element, tensor has shape [0]");
    for h in [t, b, e] {
        enkai_tensor_free(h);
    }
    enkai_tensor_device_free(d);
}

#[test]
fn from_data_checks_sizes_and_round_trips() {
    let _s = serial();
    let d = cpu();
    let data: Vec<f64> = (0..6).map(|i| i as f64 * 0.5 - 1.0).collect();
    let bytes = 6 * 8;
    let t = unsafe { enkai_tensor_from_data(data.as_ptr().cast(), bytes, c("[3,2]").as_ptr(), c("fp64").as_ptr(), d) };
    let mut back = vec![0f64; 6];
    assert_eq!(unsafe { enkai_tensor_copy_to(t, back.as_mut_ptr().cast(), bytes) }, 0);
    assert_eq!(back, data);
    let short = unsafe { enkai_tensor_copy_to(t, back.as_mut_ptr().cast(), bytes - 1) };
    assert_eq!(short, 1);
    let msg = assert_err(Code::E_SHAPE);
    assert_eq!(msg, "E_SHAPE: copy_to: buffer of 47 bytes is too small for fp64 [3,2] (48 bytes)");
    let wrong = unsafe { enkai_tensor_from_data(data.as_ptr().cast(), bytes, c("[7]").as_ptr(), c("fp64").as_ptr(), d) };
    assert_eq!(wrong, 0);
    let msg = assert_err(Code::E_SHAPE);
    assert_eq!(msg, "E_SHAPE: from_data: 48 bytes given, shape [7] of fp64 needs 56");
    let huge = unsafe {
        enkai_tensor_from_data(data.as_ptr().cast(), bytes, c("[4294967296,4294967296]").as_ptr(), c("fp64").as_ptr(), d)
    };
    assert_eq!(huge, 0);
    assert_err(Code::E_SHAPE);
    enkai_tensor_free(t);
    enkai_tensor_device_free(d);
}

#[test]
fn huge_allocations_fail_cleanly() {
    let _s = serial();
    let d = cpu();
    assert_eq!(make(enkai_tensor_zeros, "[9223372036854775807,2]", "fp32", d), 0);
    assert_err(Code::E_SHAPE);
    assert_eq!(make(enkai_tensor_zeros, "[1000000000000]", "fp32", d), 0);
    assert_err(Code::E_TORCH);
    enkai_tensor_device_free(d);
}

#[test]
fn cpu_backend_keeps_tensors_on_the_cpu_and_refuses_mixing() {
    let _s = serial();
    let d = cpu();
    let a = make(enkai_tensor_ones, "[2,2]", "fp32", d);
    assert_eq!(unsafe { enkai_backend_set(c("cpu").as_ptr()) }, 0);
    let b = make(enkai_tensor_ones, "[2,2]", "fp32", d);
    assert_eq!(unsafe { enkai_backend_set(c("torch").as_ptr()) }, 0);
    assert_eq!(enkai_tensor_matmul(a, b), 0);
    let msg = assert_err(Code::E_BACKEND_MISMATCH);
    assert!(msg.contains("torch and cpu"), "{msg}");
    enkai_tensor_free(a);
    enkai_tensor_free(b);
    enkai_tensor_device_free(d);
}

#[test]
fn matmul_checks_shapes_and_computes() {
    let _s = serial();
    let d = cpu();
    let a = make(enkai_tensor_randn, "[2,3]", "fp32", d);
    let b = make(enkai_tensor_randn, "[4,5]", "fp32", d);
    assert_eq!(enkai_tensor_matmul(a, b), 0);
    assert_eq!(assert_err(Code::E_SHAPE), "E_SHAPE: matmul [2,3] x [4,5]");
    let b2 = make(enkai_tensor_ones, "[3,2]", "fp32", d);
    let p = enkai_tensor_matmul(a, b2);
    assert_eq!(shape(p), "[2,2]");
    let av = read_f32(a);
    let expect: Vec<f32> = (0..2).flat_map(|r| [0, 1].map(|_| av[r * 3..r * 3 + 3].iter().sum::<f32>())).collect();
    for (x, y) in read_f32(p).iter().zip(&expect) {
        assert!((x - y).abs() < 1e-5);
    }
    let i = make(enkai_tensor_ones, "[3,2]", "f64", d);
    assert_eq!(enkai_tensor_matmul(a, i), 0);
    assert_err(Code::E_DTYPE);
    for h in [a, b, b2, p, i] {
        enkai_tensor_free(h);
    }
    enkai_tensor_device_free(d);
}
