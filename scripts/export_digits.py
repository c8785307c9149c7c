"""Writes scikit-learn's handwritten digits (load_digits: 1,797 real 8x8
images, shipped inside the package) into the binary file that
examples-c/digits_cnn.c reads, so the C program needs no Python at run time.

The images are shuffled with a seeded permutation and split 80/20 into
training and held-out sets; pixels are scaled from 0..16 to 0..1.

Format (little-endian): b"EKDIGIT1", u32 n_train, u32 n_test, then
float32 train images [n_train, 1, 8, 8], int64 train labels [n_train],
float32 test images [n_test, 1, 8, 8], int64 test labels [n_test].

Usage: python scripts/export_digits.py OUT.bin [--seed 0]
"""

import argparse
import os
import struct

import numpy as np
from sklearn.datasets import load_digits


def split(seed=0):
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_train = int(round(0.8 * len(y)))
    tr, te = order[:n_train], order[n_train:]
    return x[tr], y[tr], x[te], y[te]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    xtr, ytr, xte, yte = split(a.seed)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"EKDIGIT1" + struct.pack("<II", len(ytr), len(yte)))
        for arr in (xtr, ytr, xte, yte):
            f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(ytr)} training and {len(yte)} held-out digits")


if __name__ == "__main__":
    main()
