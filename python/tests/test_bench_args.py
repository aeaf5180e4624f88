"""The bench's command line and report without a GPU or torch: sizes, refusals, and the
acceptance lines from made-up results (python -m nvshmem_rs.bench itself needs torch with
CUDA and one process per PE)."""

import io
import subprocess
import sys

import pytest

from nvshmem_rs import bench


def test_sizes_from_4k_to_256m_by_4():
    a = bench.arguments([])
    assert bench.sizes(a) == [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20,
                              16 << 20, 64 << 20, 256 << 20]
    assert a.dtypes == ["f32", "bf16"] and a.candidates == list(bench.CANDIDATES)
    assert a.slot == 8 << 20


@pytest.mark.parametrize("text,n", [("4K", 4096), ("256M", 256 << 20), ("1G", 1 << 30),
                                    ("100", 100), ("8MiB", 8 << 20), ("2KB", 2048)])
def test_size_syntax(text, n):
    assert bench.parse_size(text) == n


@pytest.mark.parametrize("argv,message", [
    (["-d", "f16"], "the bench runs f32, bf16"),
    (["--candidates", "ours,gloo"], "candidate 'gloo'"),
    (["-b", "1M", "-e", "4K"], "--begin <= --end"),
    (["-b", "lots"], "is not a size"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.arguments(argv)
    assert message in capsys.readouterr().err


def test_help_runs_without_torch():
    out = subprocess.run([sys.executable, "-m", "nvshmem_rs.bench", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SymmetricMemory" in out.stdout, out
    assert "torch" not in sys.modules


INFO = {"world_size": 2, "launch": "nvsh run", "gpu": "GPU", "torch": "2.11", "nccl": "2.28.9",
        "nvshmem": "3.4.5"}


def rec(cand, nbytes, us, after, dtype="f32", wrong=0):
    return {"candidate": cand, "bytes": nbytes, "dtype": dtype, "us": us,
            "us_after_compute": after, "host_us": 1.0, "wrong": wrong, "checked_calls": 10,
            "algo": "oneshot" if cand.startswith("ours") else None, "slots": 10}


def results(ours_us):
    out = []
    for nbytes in (4096, 16384):
        out += [rec("ours", nbytes, ours_us, ours_us), rec("nccl", nbytes, 10.0, 10.0),
                rec("symm-1shot", nbytes, 8.0, 8.0),
                {"candidate": "symm-2shot", "bytes": nbytes, "dtype": "f32",
                 "error": "RuntimeError: no"}]
    return out


def report(res, over=None):
    a = bench.arguments(["-b", "4K", "-e", "16K", "-d", "f32",
                         "--candidates", "ours,nccl,symm-1shot,symm-2shot"])
    out = io.StringIO()
    ok = bench.report(a, INFO, res, over, out)
    return ok, out.getvalue()


def test_report_when_ours_is_faster_everywhere():
    ok, text = report(results(4.0), {"python_us": 3.0, "extension_us": 2.5, "rust_us": 2.0,
                                     "overhead_us": 1.0, "calls": 200, "wrong": 0})
    assert ok
    assert "| 4K | 4.0 (4.0) | 10.0 (10.0) | 8.0 (8.0) | n/a | oneshot | 0.50 | 0.50 |" in text
    assert "every size and dtype, both timings: yes" in text
    assert "<= 2 us at 4 KiB: yes (1.00 us)" in text
    assert "n/a: symm-2shot at 4K: RuntimeError: no" in text
    assert "0 wrong element(s) in 60 checked call(s)" in text


def test_report_names_where_ours_is_slower_and_fails_on_wrong_outputs():
    res = results(9.0)
    res[0]["wrong"] = 3
    ok, text = report(res)
    assert not ok
    assert "timings: no; not at: 4K f32 back to back (1.12), 4K f32 after compute (1.12)" in text
    assert "every checked output right: no" in text
