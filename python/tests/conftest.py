import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("ENKAI_TENSOR_PATH", str(ROOT / "target" / "release" / "libenkai_tensor.so"))
