//! The error model at the boundary; runs with and without the torch feature.

mod common;

use std::ptr::null;

use common::*;
use enkai_tensor::error::Code;
use enkai_tensor::ffi::backend::*;
use enkai_tensor::ffi::library::*;
use enkai_tensor::ffi::tensor::*;
#[cfg(not(feature = "torch"))]
use enkai_tensor::ffi::typed::*;
use enkai_tensor::ffi::{guard, status};

#[test]
fn last_error_is_set_then_cleared_by_the_next_call() {
    let _s = serial();
    assert_eq!(unsafe { enkai_tensor_device(c("tpu").as_ptr()) }, 0);
    let msg = assert_err(Code::E_INVALID_ARG);
    assert!(msg.contains("\"tpu\""), "{msg}");
    // reading the error does not clear it
    assert_err(Code::E_INVALID_ARG);
    assert!(enkai_tensor_live_tensors() >= 0);
    assert_ok();
}

#[test]
fn last_error_is_per_thread() {
    let _s = serial();
    assert_eq!(unsafe { enkai_tensor_device(null()) }, 0);
    std::thread::spawn(|| assert_eq!(last().0, Code::E_OK)).join().unwrap();
    assert_err(Code::E_NULL_POINTER);
}

#[test]
fn panics_become_e_internal_with_the_sentinel() {
    let _s = serial();
    let h: i64 = guard(|| panic!("boom"));
    assert_eq!(h, 0);
    let msg = assert_err(Code::E_INTERNAL);
    assert!(msg.contains("boom"));
    let f: f64 = guard(|| -> enkai_tensor::Result<f64> { panic!("x") });
    assert!(f.is_nan());
    assert_eq!(status(|| Err(enkai_tensor::err!(E_SHAPE, "s"))), 1);
    assert_err(Code::E_SHAPE);
}

#[test]
fn null_and_invalid_utf8_strings_are_rejected() {
    let _s = serial();
    assert_eq!(unsafe { enkai_backend_set(null()) }, 1);
    assert_err(Code::E_NULL_POINTER);
    let bad = [b'c', 0xc3, 0x28, 0];
    assert_eq!(unsafe { enkai_tensor_device(bad.as_ptr().cast()) }, 0);
    let msg = assert_err(Code::E_INVALID_ARG);
    assert!(msg.contains("not valid UTF-8 (invalid byte at offset 1)"), "{msg}");
}

#[test]
fn null_out_pointers_write_nothing() {
    let _s = serial();
    let mut n = 77usize;
    assert_eq!(unsafe { enkai_backend_current(std::ptr::null_mut(), &mut n) }, 1);
    assert_err(Code::E_NULL_POINTER);
    assert_eq!(n, 77);
}

#[test]
fn unknown_backend_and_device_names() {
    let _s = serial();
    assert_eq!(unsafe { enkai_backend_set(c("Torch").as_ptr()) }, 1);
    assert_err(Code::E_BACKEND_UNKNOWN);
    for bad in ["", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1.5", "cuda:99999999999"] {
        assert_eq!(unsafe { enkai_tensor_device(c(bad).as_ptr()) }, 0, "{bad}");
        assert_err(Code::E_INVALID_ARG);
    }
}

#[test]
fn device_handles_count_and_go_stale() {
    let _s = serial();
    let base = enkai_tensor_live_devices();
    let d = unsafe { enkai_tensor_device(c("cpu").as_ptr()) };
    assert!(d > 0 && d < 1 << 53);
    assert_eq!(enkai_tensor_live_devices(), base + 1);
    assert_eq!(enkai_tensor_device_retain(d), 0);
    assert_eq!(enkai_tensor_device_free(d), 0);
    assert_eq!(enkai_tensor_device_free(d), 0);
    assert_eq!(enkai_tensor_live_devices(), base);
    assert_eq!(enkai_tensor_device_free(d), 1);
    assert_err(Code::E_HANDLE_STALE);
    assert_eq!(enkai_tensor_free(d), 1);
    assert_err(Code::E_HANDLE_KIND);
    for forged in [0, -1, 1, 1 << 60, i64::MAX] {
        assert_eq!(enkai_tensor_device_free(forged), 1);
        assert_err(Code::E_HANDLE_INVALID);
    }
}

#[test]
fn output_strings_free_with_each_release_function() {
    let _s = serial();
    let mut p = std::ptr::null_mut();
    let mut n = 0;
    for release in 0..3 {
        assert_eq!(unsafe { enkai_backend_current(&mut p, &mut n) }, 0);
        match release {
            0 => unsafe { enkai_tensor_string_free(p) },
            1 => unsafe { enkai_free(p.cast(), n) },
            _ => unsafe { libc::free(p.cast()) },
        }
    }
    unsafe { enkai_free(std::ptr::null_mut(), 5) };
    unsafe { enkai_tensor_string_free(std::ptr::null_mut()) };
}

#[test]
fn abi_version_is_1_x() {
    let _s = serial();
    assert_eq!(enkai_abi_version() >> 32, 1);
}

#[cfg(not(feature = "torch"))]
#[test]
fn without_torch_only_the_native_backend_exists() {
    let _s = serial();
    assert_eq!(out_string(|p, n| unsafe { enkai_backend_list(p, n) }).unwrap(), r#"["cpu"]"#);
    assert_eq!(out_string(|p, n| unsafe { enkai_backend_current(p, n) }).unwrap(), "cpu");
    assert_eq!(unsafe { enkai_backend_set(c("torch").as_ptr()) }, 1);
    assert_err(Code::E_BACKEND_UNAVAILABLE);
    assert_eq!(unsafe { enkai_backend_set(c("cpu").as_ptr()) }, 0);
    let d = unsafe { enkai_tensor_device(c("cpu").as_ptr()) };
    assert!(d > 0);
    let t = unsafe { enkai_tensor_ones(c("[2]").as_ptr(), c("fp32").as_ptr(), d) };
    assert!(t > 0, "{:?}", last());
    let s = enkai_tensor_add(t, t);
    let total = enkai_tensor_sum(s, -1, 0);
    assert_eq!(enkai_tensor_item(total), 4.0);
    assert_eq!(unsafe { enkai_tensor_to_backend(t, c("torch").as_ptr()) }, 0);
    assert_err(Code::E_BACKEND_UNAVAILABLE);
    assert_eq!(enkai_tensor_manual_seed(1), 0);
    assert_eq!(unsafe { enkai_tensor_device(c("cuda").as_ptr()) }, 0);
    assert_err(Code::E_DEVICE);
    for h in [t, s, total] {
        assert_eq!(enkai_tensor_free(h), 0);
    }
    enkai_tensor_device_free(d);
}
