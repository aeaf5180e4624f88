#!/usr/bin/env bash
# Installs what building this workspace needs and writes one env file to source.
#
#   scripts/setup_env.sh [--cuda 12|13] [--nvshmem X.Y.Z] [--system] [--prefix DIR]
#                        [--no-apt] [--multi-node]
#
# - Debian/Ubuntu packages: a C++ compiler, make (the mpi crate builds libffi with it),
#   libclang (bindgen), Open MPI headers and runtime, pip (only to download wheels), DejaVu
#   fonts (read at run time for the text of `--plot` charts; not needed to build). Skipped
#   when already installed, or with --no-apt.
# - From PyPI wheels, into a project-local prefix (default .deps/, ignored by git), under a
#   directory per CPU type (x86_64, aarch64: one checkout can serve both): the CUDA compiler,
#   headers and runtime pieces, and NVSHMEM. Each wheel is checked against its pinned sha256;
#   a damaged one is removed. Skipped when already unpacked.
# - --system uses a CUDA and NVSHMEM already installed (CUDA_HOME / nvcc on PATH, NVSHMEM_HOME).
# - Writes <prefix>/<cpu>/env.sh and <prefix>/env.sh (readable by all; on another CPU type it
#   sources that type's file): NVSHMEM_HOME, CUDA_HOME, PATH, LD_LIBRARY_PATH and the
#   single-node transport settings of INSTALL.md (left out with --multi-node).
#
# Idempotent and non-interactive; a second run only checks and takes seconds.
set -euo pipefail
# A glob that matches nothing is empty, not itself (the wheel look-up below).
shopt -s nullglob

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

# sha256 of every pinned wheel, x86_64 and aarch64, from PyPI. NVSH_SETUP_WHEEL_HASHES names a
# file of the same "wheel-file sha256" lines to use instead (a mirror, the script's tests).
WHEEL_SHA256='
nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl c7ff28f86a24effdc6c034fa15230c549a273e4771b10a7fec14996f8cf3307f
nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl ee2ea2a97073e02ee62bb27841f437332be2c248e3eac013df07997ada39c003
nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia_nvvm-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl c4376a291d72d22a315d9d2f69bdae8f8cd83a627f75bad395cee49a0fe65dc1
nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl 6f0203e29fed809ee2b7fe9b1344df66ecab990c37d6a2e0e189b26d6c97ed7c
nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649
nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55
nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl 6dc2a197f38e5d0376ad52cd1a2a3617d3cdc150fd5966f4aee9bcebb1d68fe9
nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80
nvidia_cuda_nvcc_cu12-12.9.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl 5d6a0d32fdc7ea39917c20065614ae93add6f577d840233237ff08e9a38f58f0
nvidia_cuda_nvcc_cu12-12.9.86-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl 44e1eca4d08926193a558d2434b1bf83d57b4d5743e0c431c0c83d51da1df62b
nvidia_cuda_cccl_cu12-12.9.27-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl d7898b38aa68beaa234d48f0868273702342a196d6e2e9d0ef058dca2390ebea
nvidia_cuda_cccl_cu12-12.9.27-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 37869e17ce2e1ecec6eddf1927cca0f8c34e64fd848d40453df559091e2d7117
nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl 83469a846206f2a733db0c42e223589ab62fd2fabac4432d2f8802de4bded0a4
nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
nvidia_nvshmem_cu12-3.4.5-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl 0b48363fc6964dede448029434c6abed6c5e37f823cb43c3bcde7ecfc0457e15
nvidia_nvshmem_cu12-3.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 042f2500f24c021db8a06c5eec2539027d57460e1c1a762055a6554f72c369bd
'
if [ -n "${NVSH_SETUP_WHEEL_HASHES:-}" ]; then
    WHEEL_SHA256=$(cat "$NVSH_SETUP_WHEEL_HASHES")
fi
export WHEEL_SHA256
ARCH=$(uname -m)

CUDA_MAJOR=13
SYSTEM=0
APT=1
SINGLE_NODE=1
PREFIX="$ROOT/.deps"

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
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
    local wanted=(g++ make libclang-dev libopenmpi-dev openmpi-bin python3 fonts-dejavu-core)
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
        # Never wait on a password prompt (batch jobs, CI): -n fails at once instead.
        sudo -n true 2>/dev/null ||
            die "installing ${missing[*]} needs root and sudo wants a password: rerun as root or after 'sudo -v', or install them yourself and pass --no-apt"
        sudo=(sudo -n)
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

# Exit status 0 when the wheel is complete and, if pinned, has its pinned sha256 (else says
# why on stderr, unless "quiet").
check_wheel() { # file [quiet]
    python3 - "$1" "${2:-}" <<'PY'
import hashlib, os, sys, zipfile
path, quiet = sys.argv[1], sys.argv[2] == "quiet"
name = os.path.basename(path)
pins = dict(l.split() for l in os.environ["WHEEL_SHA256"].splitlines() if len(l.split()) == 2)
def fail(why):
    if not quiet:
        print(f"setup_env.sh: error: {name}: {why}", file=sys.stderr)
    sys.exit(1)
digest = hashlib.sha256()
with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
want = pins.get(name)
if want is not None and digest.hexdigest() != want:
    fail(f"sha256 is {digest.hexdigest()}, not the pinned {want} (cut-off or altered download)")
try:
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
except (zipfile.BadZipFile, OSError) as e:
    fail(f"not a complete wheel ({e})")
if bad is not None:
    fail(f"damaged member {bad}")
if want is None and not quiet:
    print(f"setup_env.sh: warning: {name} has no pinned sha256; checked only that it is complete",
          file=sys.stderr)
PY
}

# The cached wheel of "name==version" for this CPU, or nothing.
cached_wheel() { # cache spec
    local name=${2%%==*} version=${2#*==}
    local found=("$1/${name//-/_}-${version}-"*"_$ARCH.whl")
    [ ${#found[@]} -eq 0 ] || echo "${found[0]}"
}

fetch_wheels() { # dest spec...
    local dest=$1
    shift
    local stamp="$dest/.installed"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then
        say "wheels: $(basename "$dest") already unpacked"
        return
    fi
    local cache="$PREFIX/$ARCH/wheels"
    mkdir -p "$cache"
    local spec f
    # pip keeps a file it finds in --dest, even one that an interrupted run left cut off.
    for spec in "$@"; do
        f=$(cached_wheel "$cache" "$spec")
        if [ -n "$f" ] && ! check_wheel "$f" quiet; then
            say "wheels: removing damaged $(basename "$f") to download it again"
            rm -f "$f"
        fi
    done
    say "wheels: downloading $* (hundreds of MB the first time; kept in $cache)"
    # pip shows its progress: a bar on a terminal, its "Downloading NAME (SIZE)" lines in a log.
    local bar=off
    [ -t 1 ] && bar=on
    python3 -m pip download --progress-bar "$bar" --no-deps --only-binary=:all: --dest "$cache" "$@" ||
        die "pip could not download $* (network, or no such version on PyPI?)"
    local files=()
    for spec in "$@"; do
        f=$(cached_wheel "$cache" "$spec")
        [ -n "$f" ] || die "no $ARCH wheel of $spec in $cache after pip download: PyPI may have none for this CPU type ($ARCH); use --system with a CUDA and NVSHMEM installed here"
        check_wheel "$f" || {
            rm -f "$f"
            die "removed $f; rerun to download it again (if it fails again, the file on PyPI is not the pinned one)"
        }
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
    install_cuda13 "$PREFIX/$ARCH/cuda13-compiler"
}

# ---------------------------------------------------------------- env file
# The value single-quoted for sh: paths may hold spaces, $ or quotes.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# Replaces the file only when its content changes (build.rs reruns nvcc when its timestamp
# moves); readable by everyone, so that group members can source it.
install_file() { # tmp dest
    chmod 0644 "$1"
    if cmp -s "$1" "$2"; then
        rm -f "$1"
        say "env file: $2 unchanged"
    else
        mv "$1" "$2"
        say "env file: wrote $2"
    fi
}

write_env_file() { # nvshmem_home cuda_home cuda_version(e.g. 13000) [nvcc]
    local nvshmem_home=$1 cuda_home=$2 cuda_version=$3 nvcc=${4:-}
    local tmp body
    body=$(mktemp)
    {
        echo "export NVSHMEM_HOME=$(sq "$nvshmem_home")"
        echo "export CUDA_HOME=$(sq "$cuda_home")"
        echo "# CUDA API version the cudarc crate binds (the runtime linked into binaries)."
        echo "export CUDARC_CUDA_VERSION=$cuda_version"
        if [ -n "$nvcc" ]; then
            echo "# PyPI has no CUDA 12 nvcc: CUDA 13.0's compiler builds against the CUDA 12 runtime."
            echo "export NVSHMEM_RS_NVCC=$(sq "$nvcc")"
            echo "export PATH=$(sq "$(dirname "$nvcc")")\":\$PATH\""
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
    } >"$body"
    mkdir -p "$PREFIX/$ARCH"
    tmp=$(mktemp)
    {
        echo "# Written by scripts/setup_env.sh ($MODE) for $ARCH. Source it: . $(sq "$PREFIX/env.sh")"
        cat "$body"
    } >"$tmp"
    install_file "$tmp" "$PREFIX/$ARCH/env.sh"
    # The top-level file: this CPU type's settings (what build.rs reads), and on a machine of
    # another type sharing the checkout, that type's own file instead.
    tmp=$(mktemp)
    {
        echo "# Written by scripts/setup_env.sh ($MODE) on $ARCH. Source it: . $(sq "$PREFIX/env.sh")"
        echo "# Other CPU types sharing this prefix source their own $(sq "$PREFIX")/<cpu>/env.sh."
        echo "if [ \"\$(uname -m)\" != $(sq "$ARCH") ]; then"
        echo "    if [ -r $(sq "$PREFIX")/\"\$(uname -m)\"/env.sh ]; then"
        echo "        . $(sq "$PREFIX")/\"\$(uname -m)\"/env.sh"
        echo "    else"
        echo "        echo \"env.sh: set up for $ARCH only; run scripts/setup_env.sh on this \$(uname -m) machine\" >&2"
        echo "        false"
        echo "    fi"
        echo "    return \$? 2>/dev/null || exit \$?"
        echo "fi"
        cat "$body"
    } >"$tmp"
    rm -f "$body"
    install_file "$tmp" "$PREFIX/env.sh"
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
    # Per CPU type: an NFS checkout may serve x86_64 and aarch64 (GH200) nodes.
    tree="$PREFIX/$ARCH"
    nvshmem_dir="$tree/nvshmem-$NVSHMEM_VERSION-cu$CUDA_MAJOR"
    fetch_wheels "$nvshmem_dir" "nvidia-nvshmem-cu$CUDA_MAJOR==$NVSHMEM_VERSION"
    if [ "$CUDA_MAJOR" = 13 ]; then
        install_cuda13 "$tree/cuda-$CUDA13_NVCC"
        write_env_file "$nvshmem_dir/nvidia/nvshmem" "$tree/cuda-$CUDA13_NVCC/nvidia/cu13" 13000
    else
        install_cuda12 "$tree/cuda-$CUDA12_RUNTIME"
        write_env_file "$nvshmem_dir/nvidia/nvshmem" "$tree/cuda-$CUDA12_RUNTIME/toolkit" 12090 \
            "$tree/cuda13-compiler/nvidia/cu13/bin/nvcc"
    fi
    say "CUDA $CUDA_MAJOR toolchain and NVSHMEM $NVSHMEM_VERSION in $PREFIX"
fi
say "done. Next: source $PREFIX/env.sh && cargo build --release"
