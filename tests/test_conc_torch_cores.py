"""torch on the CPU records the cores it may run on (bug bash, concurrency: a `taskset -c 0` run with
OMP_NUM_THREADS=2 recorded what a run on both cores did, and shared its per-layer cache folder)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_torch_cpu_environment_records_the_usable_cores_and_they_split_the_layer_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import deployopt.environment as environment
    from deployopt.backends.torch_worker import Worker
    from deployopt.lut import device_fingerprint

    worker = Worker({"device": "cpu", "dtype": "fp32", "runs": 3, "warmup": 1})
    envs = {}
    for cores in (1, 2):
        monkeypatch.setattr(environment, "usable_cores", lambda cores=cores: cores)
        envs[cores] = worker.environment()
    assert envs[1]["cpu_cores"] == 1 and envs[2]["cpu_cores"] == 2
    # the threads are the same (OMP_NUM_THREADS), the cores not: two tables, not one
    assert envs[1]["cpu_threads"] == envs[2]["cpu_threads"]
    assert device_fingerprint("torch", envs[1]) != device_fingerprint("torch", envs[2])
