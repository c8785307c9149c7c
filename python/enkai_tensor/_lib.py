"""Loading libenkai_tensor.so and declaring every C signature of the header."""

import ctypes
import os
from pathlib import Path
from typing import Iterator

c_int, c_i64, c_u64, c_f64, c_size = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double, ctypes.c_size_t
c_str, c_void_p = ctypes.c_char_p, ctypes.c_void_p
c_u8_p = ctypes.POINTER(ctypes.c_uint8)
c_char_pp = ctypes.POINTER(ctypes.c_char_p)
c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_f64_p = ctypes.POINTER(ctypes.c_double)
c_u32_p = ctypes.POINTER(ctypes.c_uint32)


# enkai_grad_checkpoint's span function and release callback.
CHECKPOINT_FN = ctypes.CFUNCTYPE(c_i64, c_void_p, ctypes.POINTER(c_i64), c_size, ctypes.POINTER(c_i64), c_size)
RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p)


class EnkaiSlice(ctypes.Structure):
    _fields_ = [("ptr", c_u8_p), ("len", c_size)]


# name -> (restype, argtypes); tests/test_header.py checks this against include/enkai_tensor.h.
SIGNATURES = {
    "enkai_abi_version": (c_u64, []),
    "enkai_tensor_last_error": (c_str, []),
    "enkai_tensor_last_error_code": (c_int, []),
    "enkai_free": (None, [c_u8_p, c_size]),
    "enkai_tensor_string_free": (None, [c_void_p]),
    "enkai_tensor_live_tensors": (c_i64, []),
    "enkai_tensor_live_devices": (c_i64, []),
    "enkai_tensor_live_opts": (c_i64, []),
    "enkai_tensor_live_scalers": (c_i64, []),
    "enkai_tensor_live_safetensors": (c_i64, []),
    "enkai_backend_list": (c_int, [c_char_pp, c_size_p]),
    "enkai_backend_set": (c_int, [c_str]),
    "enkai_backend_current": (c_int, [c_char_pp, c_size_p]),
    "enkai_tensor_device": (c_i64, [c_str]),
    "enkai_tensor_device_retain": (c_int, [c_i64]),
    "enkai_tensor_device_free": (c_int, [c_i64]),
    "enkai_tensor_manual_seed": (c_int, [c_i64]),
    "enkai_set_num_threads": (c_int, [c_i64]),
    "enkai_get_num_threads": (c_i64, []),
    "enkai_set_grad_enabled": (c_int, [c_int]),
    "enkai_is_grad_enabled": (c_int, []),
    "enkai_op": (c_i64, [c_str, ctypes.POINTER(c_i64), c_size, c_str, ctypes.POINTER(c_i64), c_size]),
    "enkai_op_schema": (EnkaiSlice, []),
    "enkai_einsum_path": (c_int, [c_str, c_str, c_char_pp, c_size_p]),
    "enkai_grad_checkpoint": (c_i64, [CHECKPOINT_FN, RELEASE_FN, c_void_p, ctypes.POINTER(c_i64), c_size,
                                      ctypes.POINTER(c_i64), c_size]),
    "enkai_tensor_retain": (c_int, [c_i64]),
    "enkai_tensor_free": (c_int, [c_i64]),
    "enkai_quantize_per_channel": (c_i64, [c_i64, c_i64]),
    "enkai_quantize_q8_0": (c_i64, [c_i64]),
    "enkai_dequantize": (c_i64, [c_i64]),
    "enkai_quantized_scales": (c_i64, [c_i64]),
    "enkai_tensor_randn": (c_i64, [c_str, c_str, c_i64]),
    "enkai_tensor_zeros": (c_i64, [c_str, c_str, c_i64]),
    "enkai_tensor_ones": (c_i64, [c_str, c_str, c_i64]),
    "enkai_tensor_full": (c_i64, [c_str, c_f64, c_str, c_i64]),
    "enkai_tensor_from_data": (c_i64, [c_void_p, c_size, c_str, c_str, c_i64]),
    "enkai_tensor_copy_to": (c_int, [c_i64, c_void_p, c_size]),
    "enkai_tensor_ids_u32": (c_i64, [c_u32_p, c_size, c_i64, c_i64, c_i64]),
    "enkai_tensor_item": (c_f64, [c_i64]),
    "enkai_tensor_shape": (EnkaiSlice, [c_i64]),
    "enkai_tensor_dtype": (c_int, [c_i64, c_char_pp, c_size_p]),
    "enkai_tensor_device_name": (c_int, [c_i64, c_char_pp, c_size_p]),
    "enkai_tensor_to_dlpack": (c_void_p, [c_i64]),
    "enkai_tensor_from_dlpack": (c_i64, [c_void_p]),
    "enkai_tensor_numel": (c_i64, [c_i64]),
    "enkai_tensor_matmul": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_add": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_sub": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_mul": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_div": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_reshape": (c_i64, [c_i64, c_str]),
    "enkai_tensor_view": (c_i64, [c_i64, c_str]),
    "enkai_tensor_transpose": (c_i64, [c_i64, c_i64, c_i64]),
    "enkai_tensor_concat": (c_i64, [c_str, c_i64]),
    "enkai_tensor_slice": (c_i64, [c_i64, c_i64, c_i64, c_i64, c_i64]),
    "enkai_tensor_sum": (c_i64, [c_i64, c_i64, c_int]),
    "enkai_tensor_mean": (c_i64, [c_i64, c_i64, c_int]),
    "enkai_tensor_softmax": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_masked_softmax": (c_i64, [c_i64, c_i64, c_i64, c_i64]),
    "enkai_tensor_masked_softmax_backward": (c_i64, [c_i64, c_i64, c_i64, c_i64]),
    "enkai_tensor_relu": (c_i64, [c_i64]),
    "enkai_tensor_sigmoid": (c_i64, [c_i64]),
    "enkai_tensor_tanh": (c_i64, [c_i64]),
    "enkai_tensor_gelu": (c_i64, [c_i64]),
    "enkai_tensor_dropout": (c_i64, [c_i64, c_f64, c_int]),
    "enkai_tensor_layernorm": (c_i64, [c_i64, c_i64, c_i64, c_f64]),
    "enkai_tensor_layernorm_backward": (EnkaiSlice, [c_i64, c_i64, c_i64, c_f64, c_i64]),
    "enkai_tensor_embedding": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_linear": (c_i64, [c_i64, c_i64, c_i64]),
    "enkai_tensor_cross_entropy": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_to_device": (c_i64, [c_i64, c_i64]),
    "enkai_tensor_to_dtype": (c_i64, [c_i64, c_str]),
    "enkai_tensor_to_backend": (c_i64, [c_i64, c_str]),
    "enkai_tensor_detach": (c_i64, [c_i64]),
    "enkai_tensor_require_grad": (c_i64, [c_i64]),
    "enkai_tensor_requires_grad_": (c_int, [c_i64, c_int]),
    "enkai_tensor_requires_grad": (c_int, [c_i64]),
    "enkai_tensor_backward": (c_int, [c_i64]),
    "enkai_tensor_grad": (c_i64, [c_i64]),
    "enkai_tensor_grad_multi": (c_int, [c_str, c_char_pp, c_size_p]),
    "enkai_tensor_zero_grad": (c_int, [c_i64]),
    "enkai_tensor_zero_grad_multi": (c_int, [c_str]),
    "enkai_tensor_check_finite_multi": (c_int, [c_str]),
    "enkai_tensor_scale_grads_multi": (c_int, [c_str, c_f64]),
    "enkai_tensor_clip_grad_norm_multi": (c_int, [c_str, c_f64, c_f64, c_f64_p]),
    "enkai_opt_adamw_create": (c_i64, [c_str, c_f64, c_f64, c_f64, c_f64, c_f64]),
    "enkai_opt_adamw_step": (c_int, [c_i64]),
    "enkai_opt_sgd_create": (c_i64, [c_str, c_f64, c_f64, c_f64, c_f64, c_int]),
    "enkai_opt_adam_create": (c_i64, [c_str, c_f64, c_f64, c_f64, c_f64, c_f64, c_int]),
    "enkai_opt_step": (c_int, [c_i64]),
    "enkai_lr_schedule": (c_int, [c_str, c_i64, c_f64, c_f64_p]),
    "enkai_opt_shard": (c_int, [c_i64]),
    "enkai_opt_state_bytes": (c_i64, [c_i64]),
    "enkai_opt_retain": (c_int, [c_i64]),
    "enkai_tensor_opt_free": (c_int, [c_i64]),
    "enkai_tensor_adamw_step": (c_i64, [c_i64, c_i64, c_i64, c_f64, c_f64, c_f64, c_f64, c_f64]),
    "enkai_tensor_adamw_step_multi": (c_i64, [c_str, c_str, c_i64, c_f64, c_f64, c_f64, c_f64, c_f64]),
    "enkai_opt_add_param_group": (c_int, [c_i64, c_str, c_f64, c_f64]),
    "enkai_opt_set_lr": (c_int, [c_i64, c_i64, c_f64]),
    "enkai_opt_param_group_step": (c_int, [c_i64, c_i64]),
    "enkai_amp_scaler_create": (c_i64, [c_f64, c_f64, c_f64, c_i64]),
    "enkai_amp_scaler_retain": (c_int, [c_i64]),
    "enkai_amp_scaler_free": (c_int, [c_i64]),
    "enkai_amp_scale_loss": (c_i64, [c_i64, c_i64]),
    "enkai_amp_unscale_grads": (c_int, [c_str, c_i64, ctypes.POINTER(c_int)]),
    "enkai_amp_scaler_update": (c_int, [c_i64, c_int]),
    "enkai_amp_scaler_get_scale": (c_f64, [c_i64]),
    "enkai_autocast_enter": (c_int, []),
    "enkai_autocast_exit": (c_int, []),
    "enkai_autocast_enter_device": (c_int, [c_i64, c_str]),
    "enkai_amp_step": (c_int, [c_i64, c_i64, c_str, c_i64]),
    "enkai_tensor_tinylm_init": (c_int, [c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_char_pp, c_size_p]),
    "enkai_tensor_forward_tinylm": (c_i64, [c_str, c_u32_p, c_size, c_u32_p, c_size, c_i64, c_i64, c_i64]),
    "enkai_tensor_lm_init": (c_int, [c_str, c_i64, c_i64, c_char_pp, c_size_p]),
    "enkai_tensor_forward_lm": (c_i64, [c_str, c_str, c_u32_p, c_size, c_u32_p, c_size, c_i64, c_i64, c_int]),
    "enkai_tensor_lm_logits": (c_i64, [c_str, c_str, c_u32_p, c_size, c_i64, c_i64]),
    "enkai_checkpoint_save": (c_int, [c_str, c_str, c_i64, c_str]),
    "enkai_checkpoint_save_amp": (c_int, [c_str, c_str, c_i64, c_i64, c_str]),
    "enkai_checkpoint_load": (c_int, [c_str, c_char_pp, c_size_p, ctypes.POINTER(c_i64), c_char_pp, c_size_p]),
    "enkai_checkpoint_load_scaler": (c_i64, [c_str]),
    "enkai_checkpoint_save_ranked": (c_int, [c_str, c_i64, c_i64, c_str, c_i64, c_str]),
    "enkai_checkpoint_save_ranked_amp": (c_int, [c_str, c_i64, c_i64, c_str, c_i64, c_i64, c_str]),
    "enkai_checkpoint_load_ranked_scaler": (c_i64, [c_str, c_i64]),
    "enkai_checkpoint_load_ranked": (c_int, [c_str, c_i64, c_char_pp, c_size_p, ctypes.POINTER(c_i64), c_char_pp,
                                             c_size_p]),
    "enkai_safetensors_open": (c_i64, [c_str]),
    "enkai_safetensors_free": (c_int, [c_i64]),
    "enkai_safetensors_names": (c_int, [c_i64, c_char_pp, c_size_p]),
    "enkai_safetensors_info": (c_int, [c_i64, c_str, c_char_pp, c_size_p]),
    "enkai_safetensors_get": (c_i64, [c_i64, c_str, c_i64]),
    "enkai_safetensors_get_all": (c_i64, [c_i64, c_i64, ctypes.POINTER(c_i64), c_size, c_char_pp, c_size_p]),
    "enkai_safetensors_metadata": (c_int, [c_i64, c_char_pp, c_size_p]),
    "enkai_safetensors_save": (c_int, [c_str, c_str, c_str, c_str]),
    "enkai_onnx_trace_begin": (c_int, []),
    "enkai_onnx_trace_end": (c_int, []),
    "enkai_onnx_trace_clear": (c_int, []),
    "enkai_onnx_export": (c_int, [c_str, c_str, c_str, c_str, c_i64]),
    "enkai_state_dict_save": (c_int, [c_str, c_str, c_str, c_str]),
    "enkai_dist_config": (c_int, [c_i64, c_i64, c_i64, c_i64]),
    "enkai_dist_device": (c_i64, []),
    "enkai_dist_init": (c_int, [ctypes.c_int32, ctypes.c_int32]),
    "enkai_dist_init_method": (c_int, [c_str, c_i64, c_i64, c_f64]),
    "enkai_dist_rank": (c_i64, []),
    "enkai_dist_world_size": (c_i64, []),
    "enkai_dist_barrier": (c_int, []),
    "enkai_dist_allreduce_sum": (c_int, [c_str]),
    "enkai_dist_allreduce_sum_multi": (c_int, [c_str]),
    "enkai_dist_allreduce": (c_int, [c_str, c_str]),
    "enkai_dist_allreduce_grads": (c_int, [c_str, c_f64]),
    "enkai_dist_broadcast": (c_int, [c_str, c_i64]),
    "enkai_dist_all_gather": (c_i64, [c_i64]),
    "enkai_dist_shutdown": (c_int, []),
}


def _candidates() -> Iterator[Path]:
    env = os.environ.get("ENKAI_TENSOR_PATH")
    if env:
        p = Path(env)
        yield p / "libenkai_tensor.so" if p.is_dir() else p
    here = Path(__file__).resolve().parent
    yield here / "libenkai_tensor.so"
    for root in [here.parent.parent, Path.cwd()]:
        yield root / "target" / "release" / "libenkai_tensor.so"


def load() -> ctypes.CDLL:
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            for name, (res, args) in SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = res, args
            return lib
    raise OSError("libenkai_tensor.so not found; set ENKAI_TENSOR_PATH. Tried: " + ", ".join(tried))


lib = load()
