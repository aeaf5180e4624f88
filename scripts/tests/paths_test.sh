#!/usr/bin/env bash
# Tests of scripts/paths.py on a fixture tree: a clean tree passes; a missing path named in a
# doc, in a Rust, CUDA, shell or Python comment, a dead Markdown link or anchor each fail it,
# naming file:line; names that are not ours (URLs, placeholders, build outputs, other projects'
# files, string literals) are left alone. Run: bash scripts/tests/paths_test.sh
set -uo pipefail

# shellcheck source=scripts/tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# A small repository: a library (src/), device code (device/), scripts and docs that name each
# other, relative names included (device/ comments say prims/ll.cuh for device/prims/ll.cuh).
fixture() {
    rm -rf "$WORK/t"
    mkdir -p "$WORK/t/src/coll" "$WORK/t/device/prims" "$WORK/t/device/coll" "$WORK/t/scripts" \
        "$WORK/t/docs" "$WORK/t/target/release"
    cat >"$WORK/t/README.md" <<'MD'
# demo

## Two commands

Run `scripts/run.sh`; the library is in src/coll/op.rs, its kernels under `device/`.
See [the measurements](docs/measured.md#allreduce) and [below](#two-commands).
Builds land in `target/release/demo`; plots go to `FILE.png` or `DIR/out.png`; caches in
`~/.cache/demo/tuning.json`; sources at https://github.com/example/demo/blob/main/src/gone.rs.
NVSHMEM's `include/host/nvshmemx_api.h`, NCCL's `src/enqueue.cc`; and/or, send/recv, f32/bf16.
MD
    printf '# Measured\n\n## Allreduce\n\nSee [the README](../README.md).\n' >"$WORK/t/docs/measured.md"
    cat >"$WORK/t/src/coll/op.rs" <<'RS'
//! Reduction ops; the kernels are in device/prims/ll.cuh (`device/coll/launch.cuh` launches them).
/// Codes from device/abi.h.
pub const PATH: &str = "src/not_a_comment.rs"; // a string literal is not checked
pub fn f() -> char { '"' } // src/coll/op.rs, after a char literal
RS
    cat >"$WORK/t/device/coll/launch.cuh" <<'CU'
// Launched by src/coll/op.rs; steps in prims/ll.cuh.
#include "missing_is_the_compilers_job.h"
/* The layout: coll/launch.cuh,
 * and abi.h. */
CU
    printf '// Low-latency protocol.\n' >"$WORK/t/device/prims/ll.cuh"
    printf '/* codes */\n' >"$WORK/t/device/abi.h"
    printf '#!/usr/bin/env bash\n# Runs scripts/run.sh itself? No: this is it.\necho "src/gone.rs"\n' \
        >"$WORK/t/scripts/run.sh"
    printf '"""Checks docs/measured.md."""\nX = "src/gone.rs"  # and src/coll/op.rs\n' \
        >"$WORK/t/scripts/check.py"
}

run() {
    PATHS_ROOT="$WORK/t" python3 "$ROOT/scripts/paths.py" >"$WORK/out" 2>&1
}

t_a_clean_tree_passes() {
    fixture
    run || fail "clean tree: $(cat "$WORK/out")"
    expect_out "paths: all [0-9]* paths named" "clean tree: no verdict"
}

t_a_missing_path_in_a_doc_fails() {
    fixture
    rm "$WORK/t/scripts/run.sh"
    run && fail "missing script passed: $(cat "$WORK/out")"
    expect_out "README.md:5: scripts/run.sh$" "missing script not named"
}

t_a_moved_file_named_in_comments_fails() {
    fixture
    mv "$WORK/t/device/prims/ll.cuh" "$WORK/t/device/prims/lowlat.cuh"
    run && fail "moved file passed: $(cat "$WORK/out")"
    # Named as device/prims/ll.cuh in src/, as prims/ll.cuh in device/.
    expect_out "src/coll/op.rs:1: device/prims/ll.cuh$" "rust comment"
    expect_out "device/coll/launch.cuh:1: prims/ll.cuh$" "cuda comment"
}

t_a_missing_path_in_a_block_comment_fails() {
    fixture
    mv "$WORK/t/device/coll/launch.cuh" "$WORK/t/device/coll/launch.cu"
    run && fail "block comment passed: $(cat "$WORK/out")"
    expect_out "device/coll/launch.cu:3: coll/launch.cuh$" "block comment"
    expect_out "src/coll/op.rs:1: device/coll/launch.cuh$" "rust comment"
}

t_missing_paths_in_shell_and_python_comments_fail() {
    fixture
    rm "$WORK/t/docs/measured.md"
    printf '# see docs/measured.md\n' >>"$WORK/t/scripts/run.sh"
    run && fail "python and shell comments passed: $(cat "$WORK/out")"
    expect_out "scripts/check.py:1: docs/measured.md$" "docstring"
    expect_out "scripts/run.sh:4: docs/measured.md$" "shell comment"
}

t_dead_links_and_anchors_fail() {
    fixture
    printf '# Measured\n\n## Broadcast\n\nSee [setup](../INSTALL.md).\n' >"$WORK/t/docs/measured.md"
    run && fail "dead links passed: $(cat "$WORK/out")"
    grep -q "README.md:6: docs/measured.md#allreduce (link: no heading #allreduce in docs/measured.md)" \
        "$WORK/out" || fail "dead anchor not named: $(cat "$WORK/out")"
    expect_out "docs/measured.md:5: ../INSTALL.md (link: no such file)" "dead link not named"
}

t_string_literals_and_foreign_names_are_not_checked() {
    fixture
    run || fail "clean tree: $(cat "$WORK/out")"
    PATHS_ROOT="$WORK/t" python3 "$ROOT/scripts/paths.py" --list >"$WORK/list" 2>&1
    for name in src/gone.rs src/not_a_comment.rs target/release FILE.png DIR/out.png .cache \
        nvshmemx_api.h src/enqueue.cc and/or send/recv missing_is; do
        grep -qF "$name" "$WORK/list" && fail "$name was checked: $(cat "$WORK/list")"
    done
    grep -q "src/coll/op.rs:4: src/coll/op.rs$" "$WORK/list" ||
        fail "the comment after a char literal was not read: $(cat "$WORK/list")"
}

run_tests
