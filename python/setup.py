"""Puts the built libenkai_tensor.so inside the package, so that after
`pip install ./python` the package finds its library with no environment
variable (the library itself finds libtorch through its RUNPATH).

The library is taken from ENKAI_TENSOR_PATH when set, else from
../target/release/ (run `make build` first)."""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


def built_library():
    env = os.environ.get("ENKAI_TENSOR_PATH")
    path = Path(env) if env else HERE.parent / "target" / "release" / "libenkai_tensor.so"
    if path.is_dir():
        path = path / "libenkai_tensor.so"
    if not path.is_file():
        raise SystemExit(f"enkai_tensor: {path} is not built; run `make build` in the repository first "
                         "(or point ENKAI_TENSOR_PATH at a libenkai_tensor.so)")
    return path.resolve()


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "enkai_tensor" / "libenkai_tensor.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built_library(), dest)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not `any`."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
