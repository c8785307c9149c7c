//! A panic that unwinds out of a no-grad scope must not leave autograd off on
//! its thread (it once did: every later `backward` there failed). The backend's
//! clip_grad_norm on an int64 tensor still reaches tch's panicking Scalar path
//! (the C entry point now refuses int64 before it), so it unwinds from inside
//! the scope here.
#![cfg(feature = "torch")]

mod common;

use common::*;
use enkai_tensor::backend::imp;
use enkai_tensor::dtype::DType;
use enkai_tensor::ffi::autograd::*;
use enkai_tensor::ffi::backend::*;
use enkai_tensor::ffi::tensor::*;
use enkai_tensor::ffi::typed::*;

#[test]
fn autograd_works_after_a_panic_inside_a_no_grad_scope() {
    let _s = serial();
    let int = imp::from_bytes(enkai_tensor::backend::BackendId::Torch, &[0u8; 24], &[3], DType::I64, enkai_tensor::device::Device::Cpu).unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| imp::clip_grad_norm(&[&int], 1.0, 2.0)));
    std::panic::set_hook(hook);
    assert!(unwound.is_err() || unwound.as_ref().is_ok_and(|r| r.is_err()), "int64 clip must fail");
    let dev = unsafe { enkai_tensor_device(c("cpu").as_ptr()) };
    let x = unsafe { enkai_tensor_ones(c("[2]").as_ptr(), c("fp32").as_ptr(), dev) };
    assert_eq!(enkai_tensor_require_grad(x), x);
    let y = enkai_tensor_mul(x, x);
    let loss = enkai_tensor_sum(y, -1, 0);
    assert_eq!(enkai_tensor_backward(loss), 0, "{:?}", last());
    for h in [x, y, loss] {
        assert_eq!(enkai_tensor_free(h), 0);
    }
    assert_eq!(enkai_tensor_device_free(dev), 0);
}
