"""init's refusals that need no GPU, raised as NvshmemError with the Rust error's text (the
phrases checked are those of src/bootstrap/mod.rs), and init itself where a GPU is. Each init
runs in a child interpreter (conftest.run_init), which must report, not abort."""

import pytest

import nvshmem_rs as nv
from conftest import run_init


def test_single_bootstrap_under_a_launch_of_several_processes_is_refused():
    got = run_init({"NVSH_BOOTSTRAP": "single", "OMPI_COMM_WORLD_RANK": "0",
                    "OMPI_COMM_WORLD_SIZE": "4"})
    assert (got["ok"], got["type"], got["kind"]) == (False, "NvshmemError", "BootstrapUnavailable")
    assert got["message"].startswith("bootstrap unavailable: NVSH_BOOTSTRAP=single, but "
                                     "mpirun (Open MPI) started this process as one of 4")
    assert "unset NVSH_BOOTSTRAP" in got["message"]


def test_torchrun_is_refused_with_the_library_text():
    got = run_init({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (got["ok"], got["kind"]) == (False, "BootstrapUnavailable")
    assert "started by torchrun as rank 1 of 4 (WORLD_SIZE)" in got["message"]
    assert "nvsh run -n 4 -- prog" in got["message"]


def test_torchrun_with_a_world_of_one_is_not_refused_as_torchrun(needs_no_gpu):
    got = run_init({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert got["ok"] is False and got["kind"] in ("NoCudaDriver", "NoCudaDevice"), got


def test_an_unknown_nvsh_bootstrap_is_refused():
    got = run_init({"NVSH_BOOTSTRAP": "pigeon"})
    assert (got["ok"], got["kind"]) == (False, "InvalidEnv")
    assert "NVSH_BOOTSTRAP=\"pigeon\" is not valid: expected auto, launcher, mpi, pmi or single" \
        in got["message"]


def test_incomplete_launcher_variables_name_the_missing_one():
    got = run_init({"NVSH_RANK": "0", "NVSH_UNIQUE_ID": "00"})
    assert (got["ok"], got["kind"]) == (False, "InvalidEnv")
    assert "NVSH_WORLD_SIZE" in got["message"] and "nvsh run" in got["message"]


def test_without_a_gpu_init_raises_instead_of_aborting(needs_no_gpu):
    got = run_init({})
    assert got["ok"] is False and got["type"] == "NvshmemError", got
    assert got["kind"] in ("NoCudaDriver", "NoCudaDevice"), got
    assert "INSTALL.md" in got["message"] or "nvidia-smi" in got["message"]


@pytest.mark.parametrize("bad", ["pmi", "", "Single"])
def test_an_unknown_bootstrap_argument_raises_value_error(bad):
    with pytest.raises(ValueError, match='is not one of "auto", "launcher", "mpi", "single"'):
        nv.init(bad)
    assert not nv.is_initialized()


def test_a_bootstrap_argument_of_another_type_raises_type_error():
    with pytest.raises(TypeError):
        nv.init(1)
    assert not nv.is_initialized()


def test_single_pe_on_a_gpu(needs_gpu):
    got = run_init({}, args=("single",))
    assert got["ok"] is True, got
    assert (got["rank"], got["world_size"]) == (0, 1)
    # NVSHMEM comes up once per process: the library refuses a second init after finalize.
    assert got["reinit"] == "InitAfterFinalize"
