"""examples-c/lstm_lm.c, a character LSTM language model trained from C on
the demo's text, on both backends: its loss falls, its weights (written
with `enkai_state_dict_save`) load unchanged into the PyTorch module the
program's comment spells out (`nn.Embedding`, `nn.LSTM(batch_first=True)`,
`nn.Linear`) with `load_state_dict(strict=True)`, and that module gives the
logits the program printed for its prompt.

Tolerance: 1e-4 absolute on logits of order 10, fp32 both sides (the same
products summed in another order through 2 layers x 14 steps: measured about
1e-6)."""

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / "build" / "examples" / "lstm_lm"
pytestmark = pytest.mark.usefixtures("backend")
PROMPT = "It is a truth "


class LM(torch.nn.Module):
    def __init__(self, v):
        super().__init__()
        self.embed = torch.nn.Embedding(v, 32)
        self.lstm = torch.nn.LSTM(32, 64, 2, batch_first=True)
        self.head = torch.nn.Linear(64, v)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


def test_weights_load_into_torch_lstm_and_give_the_same_logits(tmp_path):
    if not EXE.exists():
        pytest.skip(f"{EXE} is not built (make build/examples/lstm_lm)")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(Path(env["ENKAI_TENSOR_PATH"]).resolve().parent) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    path = tmp_path / "lstm.safetensors"
    out = subprocess.run([str(EXE), "--steps", "120", "--save", str(path), "--print-logits"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    first, last = map(float, re.search(r"loss (\S+) -> (\S+)", out.stdout).groups())
    assert last < 0.6 * first, out.stdout
    logits = np.array([float(v) for v in re.search(r"^logits: (.*)$", out.stdout, re.M).group(1).split()])
    vocab = bytes.fromhex(re.search(r"^vocab: (\S+)$", out.stdout, re.M).group(1)).decode()
    assert "live tensors 0" in out.stdout

    model = LM(len(vocab))
    model.load_state_dict(load_file(str(path)), strict=True)
    ids = torch.tensor([[vocab.index(c) for c in PROMPT]])
    with torch.no_grad():
        ref = model(ids)[0, -1].numpy()
    np.testing.assert_allclose(logits, ref, atol=1e-4, rtol=0)
