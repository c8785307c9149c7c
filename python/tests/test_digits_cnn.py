"""examples-c/digits_cnn.c, a CNN trained from C on scikit-learn's real
handwritten digits, on both backends:
- it reaches at least 97% accuracy on the held-out 20%;
- started from PyTorch's initial weights (a safetensors file, by name) and
  the same data order, its first 5 steps' losses equal the same model's
  in PyTorch (`torch.nn` layers, `torch.optim.AdamW`).

Tolerance of the losses: 1e-4 relative. Both run fp32; after a few AdamW
steps the two differ by the rounding of differently ordered sums (convolution
as im2col + GEMM, batch statistics), measured at about 1e-6; a wrong op
(padding, batch-norm statistics, weight decay) moves the loss by 1e-2 or more."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("sklearn")
from safetensors.torch import save_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import export_digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("backend")
EXE = ROOT / "build" / "examples" / "digits_cnn"
LR, BATCH = 3e-3, 32


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.conv2, self.bn2 = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32)
        self.fc = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.reshape(x.shape[0], 128))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("digits")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_digits.py"), str(d / "digits.bin")], check=True,
                   capture_output=True)
    torch.manual_seed(0)
    net = Net()
    state = {k: v.contiguous() for k, v in net.state_dict().items() if "num_batches" not in k}
    save_file(state, str(d / "init.safetensors"))
    return d, net


def run(*args):
    if not EXE.exists():
        pytest.skip(f"{EXE} is not built (make build/examples/digits_cnn)")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(Path(env["ENKAI_TENSOR_PATH"]).resolve().parent) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    out = subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_trains_to_97_percent_and_its_first_losses_are_pytorchs(files):
    d, net = files
    net = copy.deepcopy(net)  # the fixture's, untrained, for each backend
    out = run(d / "digits.bin", "--init", d / "init.safetensors", "--print-losses", 5, "--epochs", 15,
              "--batch", BATCH, "--lr", LR)
    ours = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]
    acc = float(re.search(r"test accuracy (\S+)", out).group(1))
    assert acc >= 0.97, out
    assert "live tensors 0" in out

    # PyTorch from the same weights, on the same first 5 batches (file order).
    xtr, ytr, _, _ = export_digits.split(0)
    opt = torch.optim.AdamW(net.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ref = []
    for s in range(5):
        x, y = torch.from_numpy(xtr[s * BATCH:(s + 1) * BATCH]), torch.from_numpy(ytr[s * BATCH:(s + 1) * BATCH])
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    np.testing.assert_allclose(ours, ref, rtol=1e-4)


def test_refuses_a_file_that_is_not_digits(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"NOTDIGIT" + b"\0" * 16)
    if not EXE.exists():
        pytest.skip("not built")
    out = subprocess.run([str(EXE), str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "not a digits file" in out.stderr
