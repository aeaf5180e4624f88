#!/usr/bin/env bash
# Installs what building this workspace needs and writes one env file to source.
#
#   scripts/setup_env.sh [--cuda 12|13] [--nvshmem X.Y.Z] [--system] [--prefix DIR]
#                        [--no-apt] [--multi-node]
#
# - Debian/Ubuntu packages: a C++ compiler, libclang (bindgen), Open MPI headers and runtime,
#   pip (only to download wheels). Skipped when already installed, or with --no-apt.
# - From PyPI wheels, into a project-local prefix (default .deps/, ignored by git): the CUDA
#   compiler, headers and runtime pieces, and NVSHMEM. Skipped when already unpacked.
# - --system uses a CUDA and NVSHMEM already installed (CUDA_HOME / nvcc on PATH, NVSHMEM_HOME).
# - Writes <prefix>/env.sh: NVSHMEM_HOME, CUDA_HOME, PATH, LD_LIBRARY_PATH and the single-node
#   transport settings of INSTALL.md (left out with --multi-node).
#
# Idempotent and non-interactive; a second run only checks and takes seconds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Pinned versions. CUDA 13.0 is what the H100/H200 nodes run; CUDA 12.9's runtime runs on every
# CUDA 12 driver (minor-version compatibility).
CUDA13_NVCC=13.0.88
CUDA13_CCCL=13.0.85
CUDA13_RUNTIME=13.0.96
CUDA12_NVCC=12.9.86
CUDA12_CCCL=12.9.27
CUDA12_RUNTIME=12.9.79
NVSHMEM_VERSION=3.4.5

CUDA_MAJOR=13
SYSTEM=0
APT=1
SINGLE_NODE=1
PREFIX="$ROOT/.deps"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
    echo "setup_env.sh: error: $*" >&2
    exit 1
}
say() { echo "setup_env.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --cuda)
        [ $# -ge 2 ] || die "--cuda needs 12 or 13"
        CUDA_MAJOR=$2
        shift 2
        ;;
    --cuda=*) CUDA_MAJOR=${1#*=}; shift ;;
    --nvshmem)
        [ $# -ge 2 ] || die "--nvshmem needs a version such as 3.4.5"
        NVSHMEM_VERSION=$2
        shift 2
        ;;
    --nvshmem=*) NVSHMEM_VERSION=${1#*=}; shift ;;
    --system) SYSTEM=1; shift ;;
    --prefix)
        [ $# -ge 2 ] || die "--prefix needs a directory"
        PREFIX=$2
        shift 2
        ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --no-apt) APT=0; shift ;;
    --multi-node) SINGLE_NODE=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done
case "$CUDA_MAJOR" in 12 | 13) ;; *) die "--cuda takes 12 or 13, not '$CUDA_MAJOR'" ;; esac
[[ "$NVSHMEM_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--nvshmem takes X.Y.Z, not '$NVSHMEM_VERSION'"
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)

# ---------------------------------------------------------------- Debian/Ubuntu packages
install_packages() {
    local wanted=(g++ libclang-dev libopenmpi-dev openmpi-bin python3)
    python3 -m pip --version >/dev/null 2>&1 || wanted+=(python3-pip)
    local missing=()
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "packages: all present (${wanted[*]})"
        return
    fi
    command -v apt-get >/dev/null || die "no apt-get here: install ${missing[*]} by hand, then rerun with --no-apt"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need root to install ${missing[*]}: rerun as root, or install them and pass --no-apt"
        sudo=(sudo)
    fi
    say "packages: installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---------------------------------------------------------------- PyPI wheels
# Downloads the pinned wheels (pip download needs no virtualenv and touches no Python install)
# and unpacks them, keeping the executable bits that nvcc, ptxas and cicc need.
unpack_wheels() { # dest wheel...
    local dest=$1
    shift
    python3 - "$dest" "$@" <<'PY'
import os, sys, zipfile
dest = sys.argv[1]
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            path = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)
PY
}

fetch_wheels() { # dest spec...
    local dest=$1
    shift
    local stamp="$dest/.installed"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then
        say "wheels: $(basename "$dest") already unpacked"
        return
    fi
    local cache="$PREFIX/wheels"
    mkdir -p "$cache"
    say "wheels: downloading $*"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "$@" ||
        die "pip could not download $* (network, or no such version on PyPI?)"
    local files=()
    for spec in "$@"; do
        local name=${spec%%==*} version=${spec#*==}
        local f
        f=$(ls "$cache/${name//-/_}-${version}-"*.whl 2>/dev/null | head -n 1)
        [ -n "$f" ] || die "downloaded wheel for $spec not found in $cache"
        files+=("$f")
    done
    rm -rf "$dest"
    mkdir -p "$dest"
    unpack_wheels "$dest" "${files[@]}"
    echo "$*" >"$stamp"
}

# The CUDA 13 wheels form a complete toolkit under nvidia/cu13 (bin/nvcc, nvvm, include, lib).
install_cuda13() { # dest
    fetch_wheels "$1" \
        "nvidia-cuda-nvcc==$CUDA13_NVCC" "nvidia-cuda-crt==$CUDA13_NVCC" "nvidia-nvvm==$CUDA13_NVCC" \
        "nvidia-cuda-cccl==$CUDA13_CCCL" "nvidia-cuda-runtime==$CUDA13_RUNTIME"
}

# The CUDA 12 wheels carry headers, ptxas and the runtime but no nvcc driver, cudafe++ or cicc.
# Their pieces are gathered into one toolkit-shaped tree (include, lib, bin/ptxas); the compiler
# is CUDA 13.0's nvcc (NVSHMEM_RS_NVCC), which still builds sm_80 and sm_90 code.
install_cuda12() { # dest
    local dest=$1
    fetch_wheels "$dest/wheels" \
        "nvidia-cuda-nvcc-cu12==$CUDA12_NVCC" "nvidia-cuda-cccl-cu12==$CUDA12_CCCL" \
        "nvidia-cuda-runtime-cu12==$CUDA12_RUNTIME"
    local tk="$dest/toolkit" src="$dest/wheels/nvidia"
    if [ ! -f "$tk/.assembled" ]; then
        rm -rf "$tk"
        mkdir -p "$tk/include" "$tk/lib" "$tk/bin"
        cp -r "$src/cuda_runtime/include/." "$src/cuda_nvcc/include/." "$src/cuda_cccl/include/." "$tk/include/"
        cp -r "$src/cuda_runtime/lib/." "$tk/lib/"
        cp "$src/cuda_nvcc/bin/ptxas" "$tk/bin/"
        cp -r "$src/cuda_nvcc/nvvm" "$tk/nvvm"
        touch "$tk/.assembled"
    fi
    install_cuda13 "$PREFIX/cuda13-compiler"
}

# ---------------------------------------------------------------- env file
write_env_file() { # nvshmem_home cuda_home cuda_version(e.g. 13000) [nvcc]
    local nvshmem_home=$1 cuda_home=$2 cuda_version=$3 nvcc=${4:-}
    local tmp
    tmp=$(mktemp)
    {
        echo "# Written by scripts/setup_env.sh ($MODE). Source it: . .deps/env.sh"
        echo "export NVSHMEM_HOME=\"$nvshmem_home\""
        echo "export CUDA_HOME=\"$cuda_home\""
        echo "# CUDA API version the cudarc crate binds (the runtime linked into binaries)."
        echo "export CUDARC_CUDA_VERSION=$cuda_version"
        if [ -n "$nvcc" ]; then
            echo "# PyPI has no CUDA 12 nvcc: CUDA 13.0's compiler builds against the CUDA 12 runtime."
            echo "export NVSHMEM_RS_NVCC=\"$nvcc\""
            echo "export PATH=\"$(dirname "$nvcc"):\$PATH\""
        else
            echo "export PATH=\"\$CUDA_HOME/bin:\$PATH\""
        fi
        echo "export LD_LIBRARY_PATH=\"\$NVSHMEM_HOME/lib:\$CUDA_HOME/lib64:\$CUDA_HOME/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
        echo "# NVLink multicast (NVLS) stays off: on shared hosts it can take the GPUs out of service."
        echo "export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0"
        if [ "$SINGLE_NODE" = 1 ]; then
            echo "# One node, no InfiniBand: only the NVLink/PCIe (P2P) transport (INSTALL.md)."
            echo "# For multi-node runs rerun setup_env.sh with --multi-node."
            echo "export NVSHMEM_REMOTE_TRANSPORT=none"
        fi
    } >"$tmp"
    # Rewrite only on change: build.rs reruns nvcc when this file's timestamp moves.
    if cmp -s "$tmp" "$PREFIX/env.sh"; then
        rm -f "$tmp"
        say "env file: $PREFIX/env.sh unchanged"
    else
        mv "$tmp" "$PREFIX/env.sh"
        say "env file: wrote $PREFIX/env.sh"
    fi
}

# ---------------------------------------------------------------- main
if [ "$APT" = 1 ]; then install_packages; else say "packages: skipped (--no-apt)"; fi
command -v python3 >/dev/null || die "python3 is needed to fetch the wheels"

if [ "$SYSTEM" = 1 ]; then
    MODE="--system"
    cuda_home=${CUDA_HOME:-${CUDA_PATH:-}}
    if [ -z "$cuda_home" ] && command -v nvcc >/dev/null; then
        cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    fi
    [ -n "$cuda_home" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || cuda_home=/usr/local/cuda
    [ -n "$cuda_home" ] && [ -x "$cuda_home/bin/nvcc" ] ||
        die "--system: no CUDA toolkit found; set CUDA_HOME or load your cluster's CUDA module"
    nvshmem_home=${NVSHMEM_HOME:-}
    [ -n "$nvshmem_home" ] || die "--system: set NVSHMEM_HOME (load your cluster's NVSHMEM module)"
    [ -f "$nvshmem_home/include/nvshmem.h" ] && [ -f "$nvshmem_home/lib/libnvshmem_device.a" ] ||
        die "--system: NVSHMEM_HOME=$nvshmem_home lacks include/nvshmem.h or lib/libnvshmem_device.a"
    cuda_version=$(sed -nE 's/^#define CUDA_VERSION ([0-9]+).*/\1/p' "$cuda_home/include/cuda.h" 2>/dev/null | head -n 1)
    # cudarc knows versions in steps of 10 (12090, 13000): round down to one of those.
    [ -n "$cuda_version" ] || die "--system: cannot read CUDA_VERSION from $cuda_home/include/cuda.h"
    write_env_file "$nvshmem_home" "$cuda_home" "$((cuda_version / 10 * 10))"
    say "using the installed CUDA at $cuda_home and NVSHMEM at $nvshmem_home"
else
    MODE="--cuda $CUDA_MAJOR --nvshmem $NVSHMEM_VERSION"
    nvshmem_dir="$PREFIX/nvshmem-$NVSHMEM_VERSION-cu$CUDA_MAJOR"
    fetch_wheels "$nvshmem_dir" "nvidia-nvshmem-cu$CUDA_MAJOR==$NVSHMEM_VERSION"
    if [ "$CUDA_MAJOR" = 13 ]; then
        install_cuda13 "$PREFIX/cuda-$CUDA13_NVCC"
        write_env_file "$nvshmem_dir/nvidia/nvshmem" "$PREFIX/cuda-$CUDA13_NVCC/nvidia/cu13" 13000
    else
        install_cuda12 "$PREFIX/cuda-$CUDA12_RUNTIME"
        write_env_file "$nvshmem_dir/nvidia/nvshmem" "$PREFIX/cuda-$CUDA12_RUNTIME/toolkit" 12090 \
            "$PREFIX/cuda13-compiler/nvidia/cu13/bin/nvcc"
    fi
    say "CUDA $CUDA_MAJOR toolchain and NVSHMEM $NVSHMEM_VERSION in $PREFIX"
fi
say "done. Next: source $PREFIX/env.sh && cargo build --release"
