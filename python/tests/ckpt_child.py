"""Helper process for the checkpoint tests.

    ckpt_child.py loop DIR        save forever: every param filled with k, meta {"k": k}
    ckpt_child.py rank DIR R W S [META]  one rank of a ranked save of step S (meta {"step": S}
                                   unless given); prints the error code and exits 3 on failure
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import enkai_tensor as et  # noqa: E402


def loop(d):
    k = 0
    while True:
        k += 1
        params = [et.full([64, 256], k), et.full([1000], k, "fp64"), et.full([3], k, "int64")]
        et.checkpoint_save(d, params, None, '{"k": %d}' % k)
        print(k, flush=True)


def rank(d, r, w, step, meta=None):
    params = [et.full([8, 8], 10 * r + 1).require_grad(), et.full([5], r, "int32"), et.full([1], step, "int64")]
    opt = et.AdamW([params[0]])
    (params[0] * params[0]).sum().backward()
    opt.step()
    try:
        et.checkpoint_save_ranked(d, r, w, params, opt, meta if meta is not None else '{"step": %d}' % step)
    except et.EnkaiError as e:
        print(e.code, e, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        loop(sys.argv[2])
    else:
        rank(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:])
