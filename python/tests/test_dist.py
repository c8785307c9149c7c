"""The distributed entry points: a one-rank world works; larger worlds are gated."""

import pytest

import enkai_tensor as et
from enkai_tensor._lib import lib


def call(rc):
    if rc != 0:
        et._raise()


def test_one_rank_world_allreduce_is_identity():
    t = et.randn([4])
    before = t.tolist()
    call(lib.enkai_dist_init(1, 0))
    try:
        with pytest.raises(et.EnkaiError) as ex:
            call(lib.enkai_dist_init(1, 0))
        assert ex.value.code == "E_DIST"
        call(lib.enkai_dist_allreduce_sum_multi(b"[%d,0]" % t.handle))
        call(lib.enkai_dist_allreduce_sum(b"[%d]" % t.handle))
        assert t.tolist() == before
    finally:
        call(lib.enkai_dist_shutdown())
    with pytest.raises(et.EnkaiError) as ex:
        call(lib.enkai_dist_allreduce_sum_multi(b"[%d]" % t.handle))
    assert ex.value.code == "E_DIST"


def test_multi_rank_needs_the_env_gate(monkeypatch):
    monkeypatch.delenv("ENKAI_ENABLE_DIST", raising=False)
    with pytest.raises(et.EnkaiError) as ex:
        call(lib.enkai_dist_init(2, 0))
    assert ex.value.code == "E_DIST_ENV_GATE"
    monkeypatch.setenv("ENKAI_ENABLE_DIST", "1")
    with pytest.raises(et.EnkaiError) as ex:
        call(lib.enkai_dist_init(2, 0))
    assert ex.value.code == "E_DIST"
    with pytest.raises(et.EnkaiError) as ex:
        call(lib.enkai_dist_init(2, 5))
    assert ex.value.code == "E_INVALID_ARG"
