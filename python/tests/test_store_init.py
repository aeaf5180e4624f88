"""init_with_store without a GPU: rank 0 makes NVSHMEM's unique ID and sets it in the store,
the others read it there; the launcher variables it sets for init are gone again afterwards,
whatever init did; wrong ranks and missing variables raise before the store is touched. Each
case runs in a child interpreter (init comes once per process), with nvshmem_rs.init replaced
by a stand-in that records the variables it saw, or left as it is where init must fail."""

import json
import os
import subprocess
import sys

import pytest

import nvshmem_rs as nv
from conftest import LAUNCH_VARS

CHILD = r"""
import json, os, sys
import nvshmem_rs as nv
case = json.loads(sys.argv[1])

class Store:
    # A dict with a torch Store's set/get (get returns bytes, as torch's stores do).
    def __init__(self, items):
        self.items = {k: v.encode() for k, v in items.items()}
    def set(self, key, value):
        self.items[key] = value.encode() if isinstance(value, str) else value
    def get(self, key):
        return self.items[key]

seen = {}
if case.get("fake_init"):
    def fake_init(bootstrap=None):
        seen["bootstrap"] = bootstrap
        seen["env"] = {k: os.environ.get(k) for k in nv._LAUNCH_VARS}
    nv.init = fake_init
store = Store(case.get("store", {}))
out = {}
try:
    nv.init_with_store(store, **case.get("kwargs", {}))
    out["ok"] = True
except Exception as err:
    out.update(ok=False, type=type(err).__name__, kind=getattr(err, "kind", None),
               message=str(err))
out["seen"] = seen
out["store"] = {k: v.decode() for k, v in store.items.items()}
out["after"] = {k: os.environ.get(k) for k in nv._LAUNCH_VARS}
print("RESULT " + json.dumps(out))
"""


def run(case, env=None):
    child_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], env=child_env,
                          capture_output=True, text=True, timeout=120)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(lines[-1][len("RESULT "):])


def test_unique_id_is_128_bytes_of_hex_and_fresh_each_time():
    a, b = nv.unique_id(), nv.unique_id()
    assert len(a) == 256 and int(a, 16) >= 0
    assert a != b


def test_rank_0_makes_the_id_and_sets_it_in_the_store():
    got = run({"fake_init": True, "kwargs": {"rank": 0, "world_size": 2}})
    assert got["ok"], got
    uid = got["store"]["nvshmem_rs/unique_id"]
    assert len(uid) == 256
    assert got["seen"]["bootstrap"] == "launcher"
    assert got["seen"]["env"] == {"NVSH_RANK": "0", "NVSH_LOCAL_RANK": "0",
                                  "NVSH_WORLD_SIZE": "2", "NVSH_LOCAL_WORLD_SIZE": "2",
                                  "NVSH_UNIQUE_ID": uid}
    assert all(v is None for v in got["after"].values()), got["after"]


def test_other_ranks_read_the_id_from_the_store_with_torchruns_variables():
    uid = "ab" * 128
    got = run({"fake_init": True, "store": {"nvshmem_rs/unique_id": uid}},
              env={"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert got["ok"], got
    assert got["seen"]["env"] == {"NVSH_RANK": "3", "NVSH_LOCAL_RANK": "1",
                                  "NVSH_WORLD_SIZE": "4", "NVSH_LOCAL_WORLD_SIZE": "2",
                                  "NVSH_UNIQUE_ID": uid}


def test_variables_set_before_are_restored():
    got = run({"fake_init": True, "kwargs": {"rank": 0, "world_size": 1, "key": "k"}},
              env={"NVSH_UNIQUE_ID": "leftover"})
    assert got["ok"] and got["after"]["NVSH_UNIQUE_ID"] == "leftover", got
    assert got["seen"]["env"]["NVSH_UNIQUE_ID"] == got["store"]["k"]


@pytest.mark.parametrize("kwargs,message", [
    ({"rank": 2, "world_size": 2}, "expected 0 <= rank < world_size"),
    ({"rank": 0, "world_size": 2, "local_rank": 1, "local_world_size": 1},
     "0 <= local_rank < local_world_size"),
    ({"world_size": 2}, "RANK is not set and no value was passed"),
])
def test_wrong_places_raise_before_the_store_is_touched(kwargs, message):
    got = run({"fake_init": True, "kwargs": kwargs})
    assert (got["ok"], got["type"]) == (False, "ValueError"), got
    assert message in got["message"]
    assert got["store"] == {} and got["seen"] == {}


def test_without_a_gpu_init_raises_and_the_variables_go_again(needs_no_gpu):
    got = run({"kwargs": {"rank": 0, "world_size": 1}})
    assert (got["ok"], got["type"]) == (False, "NvshmemError"), got
    assert got["kind"] in ("NoCudaDriver", "NoCudaDevice"), got
    assert all(v is None for v in got["after"].values()), got["after"]
