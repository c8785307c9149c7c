"""`make bench`: what gradient checkpointing saves on the Llama-style LM of
examples-c/llama_train.c, in one run: peak resident memory (VmHWM) and
training throughput with every decoder layer checkpointed
(`--checkpoint 1`, enkai_grad_checkpoint) and without, on the native and
torch backends; beside them PyTorch eager training the same model
(transformers' LlamaForCausalLM, same weights) without and with
`torch.utils.checkpoint` on every layer (`gradient_checkpointing_enable`,
use_reentrant=False), each in its own process, measured the same way.

The model: d_model 256, 8 layers, 8 query / 4 key-value heads, SwiGLU 688,
vocab 256 (bytes), batch 8 x 256 tokens; AdamW, 3 steps (the peak is
reached in the first). Peak RSS includes the process's fixed part (the
library, libtorch when loaded, the weights and AdamW's moments), printed
separately as the RSS after step 0's optimizer step is not measurable from
outside: the saving is the difference of the two peaks.

Usage: grad_checkpoint_compare.py LLAMA_TRAIN [NOTORCH_LIB]  (the program
linked with the libtorch build; with the libtorch-free library, the native
backend is also measured without libtorch loaded)."""

import os
import re
import subprocess
import sys
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

B, T, STEPS, THREADS = 8, 256, 3, 2
CONFIG = dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
              intermediate_size=688, vocab_size=256, max_position_embeddings=1024, rope_theta=10000.0,
              rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)

TORCH_SIDE = r"""
import re, sys, time, torch
from transformers import LlamaForCausalLM
torch.set_num_threads(int(sys.argv[3]))
model = LlamaForCausalLM.from_pretrained(sys.argv[1]).train()
if sys.argv[2] == "1":
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
g = torch.Generator().manual_seed(0)
B, T, steps = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
t0 = time.perf_counter()
for step in range(steps):
    ids = torch.randint(0, 256, (B, T + 1), generator=g)
    logits = model(ids[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
hwm = int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1))
print(f"{steps * B * T / dt:.1f} {hwm}")
"""


def ours(exe, model_dir, backend, checkpoint, lib_dir):
    env = dict(os.environ, ENKAI_BACKEND=backend)
    if lib_dir:
        env["LD_LIBRARY_PATH"] = lib_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    out = subprocess.run([exe, "--init", model_dir, "--steps", str(STEPS), "--batch", str(B), "--seq", str(T),
                          "--threads", str(THREADS), "--checkpoint", str(checkpoint)],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{exe} ({backend}) failed:\n{out.stderr}")
    m = re.search(r"\(([0-9.]+) tokens/s\), peak RSS ([0-9.]+) MiB", out.stderr)
    assert m, out.stderr
    losses = re.findall(r"^step \d+ loss (\S+)$", out.stdout, re.M)
    return float(m.group(1)), float(m.group(2)), losses


def pytorch(model_dir, checkpoint):
    out = subprocess.run([sys.executable, "-c", TORCH_SIDE, model_dir, str(checkpoint), str(THREADS), str(B), str(T),
                          str(STEPS)], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"PyTorch side failed:\n{out.stderr}")
    tps, hwm = out.stdout.split()
    return float(tps), int(hwm) / 1024


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    exe = sys.argv[1]
    notorch = os.path.dirname(os.path.abspath(sys.argv[2])) if len(sys.argv) == 3 else None
    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**CONFIG)).save_pretrained(d, safe_serialization=True)
        rows = []
        sides = [("torch", None), ("cpu", None)] + ([("cpu", notorch)] if notorch else [])
        for backend, lib in sides:
            name = f"ours, {backend} backend" + (" (no libtorch loaded)" if lib else "")
            plain = ours(exe, d, backend, 0, lib)
            ckpt = ours(exe, d, backend, 1, lib)
            assert plain[2] == ckpt[2] or all(abs(float(a) - float(b)) < 1e-5 for a, b in zip(plain[2], ckpt[2])), \
                (plain[2], ckpt[2])
            rows.append((name, plain[:2], ckpt[:2]))
        rows.append(("PyTorch eager (transformers)", pytorch(d, 0), pytorch(d, 1)))
    print(f"Gradient checkpointing on a Llama-style LM (d 256, 8 layers, batch {B} x {T}), {THREADS} threads, "
          f"{STEPS} AdamW steps; peak RSS of the whole process")
    print(f"{'':44} {'peak MiB':>9} {'ckpt MiB':>9} {'saved':>8} {'tok/s':>8} {'ckpt tok/s':>11}")
    for name, (tps, peak), (ctps, cpeak) in rows:
        print(f"{name:44} {peak:9.1f} {cpeak:9.1f} {peak - cpeak:8.1f} {tps:8.0f} {ctps:11.0f}")


if __name__ == "__main__":
    main()
