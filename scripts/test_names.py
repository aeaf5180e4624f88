#!/usr/bin/env python3
"""Every GPU test that a script names by its exact name must exist. scripts/check.sh runs it
(so CI does): a renamed test would otherwise be found only on a GPU machine, after its device
time was spent (scripts/sanitize.sh then reports the case as an error that ran nothing).

    scripts/test_names.py

Reads the shell scripts under scripts/ (lines joined across trailing backslashes) for a test
binary followed by `--exact NAME` (`"$bin/test-exchange" --ignored --exact pe2_...`), and
tests/X.rs for the tests of test-X: those declared by `gpu_test!(N, name)` (named peN_name,
tests/common/mod.rs) and plain `fn peN_...` functions. A NAME that is a variable is left alone.

Exits 1 listing each missing test as file:line, 0 otherwise. TEST_NAMES_ROOT overrides the
repository root (the script's tests run it on a fixture tree).
"""

import functools
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(
    os.environ.get("TEST_NAMES_ROOT", pathlib.Path(__file__).resolve().parent.parent)
)
# A test binary, then (after other options) --exact and a literal test name.
USE = re.compile(
    r'test-([A-Za-z0-9_]+)"?(?:\s+--?[A-Za-z-]+)*?\s+--exact\s+([A-Za-z_][A-Za-z0-9_]*)'
)
DECLARED = re.compile(r"gpu_test!\s*\(\s*(\d+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
PLAIN = re.compile(r"\bfn\s+(pe\d+_[A-Za-z0-9_]+)\s*\(")


def joined_lines(text):
    """(first line number, line) per logical line, continuations joined."""
    out, buf, start = [], "", None
    for n, line in enumerate(text.splitlines(), 1):
        if start is None:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf, start = "", None
    if start is not None:
        out.append((start, buf))
    return out


@functools.cache
def tests_of(binary):
    """The test names of test-`binary`, or None without tests/`binary`.rs."""
    src = ROOT / "tests" / f"{binary}.rs"
    if not src.is_file():
        return None
    text = src.read_text()
    return {f"pe{n}_{name}" for n, name in DECLARED.findall(text)} | set(PLAIN.findall(text))


def main():
    missing, checked = [], 0
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        rel = script.relative_to(ROOT)
        for n, line in joined_lines(script.read_text()):
            if line.lstrip().startswith("#"):
                continue
            for binary, name in USE.findall(line):
                checked += 1
                names = tests_of(binary)
                if names is None:
                    missing.append(f"{rel}:{n}: test-{binary} (no tests/{binary}.rs)")
                elif name not in names:
                    missing.append(f"{rel}:{n}: {name} (not a test of tests/{binary}.rs)")
    if missing:
        print("test_names: tests named by scripts that do not exist:")
        print("\n".join(missing))
        return 1
    print(f"test_names: all {checked} tests named by scripts exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
