#!/usr/bin/env bash
# Tests of scripts/setup_env.sh and scripts/check.sh with stubs in place of pip, apt, sudo and
# cargo: no network, no root, no GPU. Run: bash scripts/tests/setup_scripts_test.sh
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REAL_PYTHON=$(command -v python3)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=scripts/tests/lib.sh
source "$ROOT/scripts/tests/lib.sh"

# Stubs: uname -m says $STUB_ARCH; "python3 -m pip download" writes a small valid wheel per
# requirement into --dest unless one is there (as pip does), or nothing when STUB_PIP=none, or a
# cut-off one when STUB_PIP=truncated; sudo only answers -n (with "password required").
STUBS="$WORK/stubs"
mkdir -p "$STUBS"
cat >"$STUBS/uname" <<'SH'
#!/bin/sh
if [ "${1:-}" = -m ]; then echo "${STUB_ARCH:-x86_64}"; else exec /bin/uname "$@"; fi
SH
cat >"$STUBS/python3" <<SH
#!/bin/sh
if [ "\${1:-} \${2:-}" = "-m pip" ]; then exec "$REAL_PYTHON" "$STUBS/pip.py" "\$@"; fi
exec "$REAL_PYTHON" "\$@"
SH
cat >"$STUBS/pip.py" <<'PY'
import os, sys, zipfile
args = sys.argv[3:]
if args[0] != "download":
    sys.exit(0)
with open(os.path.join(os.path.dirname(sys.argv[0]), "pip.args"), "a") as log:
    log.write(" ".join(args) + "\n")
dest = args[args.index("--dest") + 1]
mode = os.environ.get("STUB_PIP", "good")
arch = os.environ.get("STUB_ARCH", "x86_64")
for spec in [a for a in args if "==" in a]:
    name, version = spec.split("==")
    path = os.path.join(dest, f"{name.replace('-', '_')}-{version}-py3-none-manylinux_2_17_{arch}.whl")
    if mode == "none" or os.path.exists(path):
        continue
    print(f"  Downloading {os.path.basename(path)} (4.2 kB)")
    with zipfile.ZipFile(path, "w") as z:
        part = "nvshmem" if "nvshmem" in name else name
        z.writestr(f"nvidia/{part}/{arch}.txt", "x" * 4096)
    if mode == "truncated":
        with open(path, "r+b") as f:
            f.truncate(100)
PY
cat >"$STUBS/sudo" <<'SH'
#!/bin/sh
if [ "${1:-}" = -n ]; then echo "sudo: a password is required" >&2; exit 1; fi
echo "PASSWORD PROMPT" >&2
exit 1
SH
cat >"$STUBS/id" <<'SH'
#!/bin/sh
if [ "${1:-}" = -u ]; then echo "${STUB_UID:-0}"; else exec /usr/bin/id "$@"; fi
SH
cat >"$STUBS/dpkg-query" <<'SH'
#!/bin/sh
exit 1
SH
cat >"$STUBS/apt-get" <<'SH'
#!/bin/sh
echo "apt-get must not run here" >&2
exit 1
SH
chmod +x "$STUBS"/*

setup() { # prefix args...: runs setup_env.sh with the stubs, output in $WORK/out, $WORK/err
    local prefix=$1
    shift
    PATH="$STUBS:$PATH" NVSH_SETUP_WHEEL_HASHES=/dev/null \
        bash "$ROOT/scripts/setup_env.sh" --prefix "$prefix" "$@" >"$WORK/out" 2>"$WORK/err"
}

# Each test: name, then checks.
t_no_wheel_for_this_cpu_is_reported() {
    local p="$WORK/nowheel"
    STUB_PIP=none setup "$p" --no-apt
    local rc=$?
    [ $rc -ne 0 ] || fail "no wheel: exit status 0"
    grep -q "no x86_64 wheel of nvidia-nvshmem-cu13==3.4.5" "$WORK/err" ||
        fail "no wheel: no message (stderr: $(cat "$WORK/err"))"
}

t_downloads_show_their_progress() {
    local p="$WORK/progress"
    rm -f "$STUBS/pip.args"
    setup "$p" --no-apt || fail "progress: set-up failed ($(cat "$WORK/err"))"
    grep -q "Downloading nvidia_nvshmem_cu13-3.4.5-.*whl (4.2 kB)" "$WORK/out" ||
        fail "progress: pip's download lines are hidden ($(cat "$WORK/out"))"
    # Not a terminal here: pip's line per file, not its bar; and never --quiet.
    grep -q -- "--progress-bar off" "$STUBS/pip.args" || fail "progress: $(cat "$STUBS/pip.args")"
    ! grep -q -- "--quiet" "$STUBS/pip.args" || fail "progress: pip runs with --quiet"
}

t_a_truncated_wheel_is_removed_and_fetched_again() {
    local p="$WORK/trunc"
    # A download cut off by an earlier run, where this and the older layout keep wheels.
    local w=nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux_2_17_x86_64.whl
    mkdir -p "$p/wheels" "$p/x86_64/wheels"
    head -c 100 /dev/urandom >"$p/wheels/$w"
    cp "$p/wheels/$w" "$p/x86_64/wheels/$w"
    setup "$p" --no-apt || fail "truncated cached wheel: failed (stderr: $(cat "$WORK/err"))"
    grep -q "removing damaged $w" "$WORK/out" || fail "truncated cached wheel: not removed"
    # A download that arrives cut off: removed, with a message; the next run succeeds.
    local q="$WORK/trunc2"
    STUB_PIP=truncated setup "$q" --no-apt && fail "truncated download: exit status 0"
    grep -q "not a complete wheel" "$WORK/err" || fail "truncated download: no message ($(cat "$WORK/err"))"
    [ -z "$(ls "$q"/x86_64/wheels/ 2>/dev/null)" ] || fail "truncated download: file left: $(ls "$q"/x86_64/wheels/)"
    setup "$q" --no-apt || fail "rerun after truncated download failed ($(cat "$WORK/err"))"
}

t_a_wheel_with_another_sha256_than_pinned_is_refused() {
    local p="$WORK/pinned"
    local w=nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux_2_17_x86_64.whl
    echo "$w 0000000000000000000000000000000000000000000000000000000000000000" >"$WORK/pins"
    PATH="$STUBS:$PATH" NVSH_SETUP_WHEEL_HASHES="$WORK/pins" \
        bash "$ROOT/scripts/setup_env.sh" --prefix "$p" --no-apt >"$WORK/out" 2>"$WORK/err" &&
        fail "pin mismatch: exit status 0"
    grep -q "not the pinned 0000" "$WORK/err" || fail "pin mismatch: no message ($(cat "$WORK/err"))"
    grep -q "nvidia-cuda-nvcc==13.0.88 --hash\|nvidia_cuda_nvcc-13.0.88-.*x86_64.whl [0-9a-f]\{64\}" \
        "$ROOT/scripts/setup_env.sh" || fail "no pinned sha256 for the nvcc wheel in setup_env.sh"
}

t_each_cpu_type_gets_its_own_tree_and_env() {
    local p="$WORK/shared"
    STUB_ARCH=x86_64 setup "$p" --no-apt || fail "x86_64 set-up failed ($(cat "$WORK/err"))"
    STUB_ARCH=aarch64 setup "$p" --no-apt || fail "aarch64 set-up failed ($(cat "$WORK/err"))"
    for arch in x86_64 aarch64; do
        local home
        home=$(PATH="$STUBS:$PATH" STUB_ARCH=$arch bash -c ". '$p/env.sh' && echo \$NVSHMEM_HOME")
        [ -f "$home/$arch.txt" ] || fail "$arch: NVSHMEM_HOME=$home lacks the $arch wheel's files"
    done
    local other
    other=$(PATH="$STUBS:$PATH" STUB_ARCH=ppc64le bash -c ". '$p/env.sh'; echo rc=\$?" 2>&1)
    echo "$other" | grep -q "run scripts/setup_env.sh on this ppc64le machine" ||
        fail "another CPU type: no message ($other)"
}

t_env_file_is_readable_by_all_and_quoted() {
    local p="$WORK/it's a \$dir"
    setup "$p" --no-apt || fail "odd prefix: failed ($(cat "$WORK/err"))"
    local mode
    mode=$(stat -c %a "$p/env.sh")
    [ "$mode" = 644 ] || fail "env.sh mode is $mode, not 644"
    local home
    home=$(PATH="$STUBS:$PATH" bash -c '. "$1/env.sh" && echo "$NVSHMEM_HOME"' _ "$p")
    [ "$home" = "$p/x86_64/nvshmem-3.4.5-cu13/nvidia/nvshmem" ] || fail "NVSHMEM_HOME read back as '$home'"
}

t_sudo_never_waits_for_a_password() {
    local p="$WORK/sudo"
    STUB_UID=1000 setup "$p"
    grep -q "PASSWORD PROMPT" "$WORK/err" && fail "sudo was run without -n"
    grep -q "sudo wants a password" "$WORK/err" || fail "sudo: no message ($(cat "$WORK/err"))"
}

t_the_font_of_the_charts_is_among_the_packages() {
    # dpkg-query says nothing is installed: the refusal lists every package it would install.
    local p="$WORK/font"
    STUB_UID=1000 setup "$p"
    grep -q "installing .*fonts-dejavu-core.* needs root" "$WORK/err" ||
        fail "fonts-dejavu-core is not installed by the set-up ($(cat "$WORK/err"))"
}

t_check_sh_sources_the_env_file_of_the_prefix_it_set_up() {
    local repo="$WORK/repo"
    mkdir -p "$repo/scripts" "$WORK/bin"
    cp "$ROOT/scripts/check.sh" "$repo/scripts/"
    cat >"$repo/scripts/setup_env.sh" <<'SH'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --prefix) p=$2; shift ;; --prefix=*) p=${1#*=} ;; esac; shift; done
mkdir -p "$p" && echo "export FROM_PREFIX=$p" >"$p/env.sh"
SH
    for tool in cargo rustfmt cargo-clippy; do
        printf '#!/bin/sh\necho "$0 ${FROM_PREFIX:-unset}" >>"%s"\n' "$WORK/cargo.log" >"$WORK/bin/$tool"
    done
    # The stub cargo runs no tests: the floor is another test's subject.
    printf '#!/bin/sh\nexit 0\n' >"$repo/scripts/test_floor.sh"
    chmod +x "$repo/scripts/"*.sh "$WORK/bin/"*
    for arg in "--prefix=$WORK/p1" "--prefix $WORK/p2"; do
        rm -f "$WORK/cargo.log"
        # shellcheck disable=SC2086 # the second form is two words on purpose
        PATH="$WORK/bin:$PATH" bash "$repo/scripts/check.sh" $arg >"$WORK/out" 2>&1 ||
            fail "check.sh $arg failed: $(cat "$WORK/out")"
        grep -q "$WORK/p[12]$" "$WORK/cargo.log" 2>/dev/null ||
            fail "check.sh $arg: cargo ran without the prefix's env file"
    done
}

run_tests
