#!/usr/bin/env bash
# Tests of scripts/imports.py on fixture crates: a clean tree passes; a cycle (through a
# re-export, the crate root's own item or a binary's modules), a layer broken and an eprintln! in
# library code each fail it, naming what broke. Run: bash
# scripts/tests/imports_test.sh
set -uo pipefail

# shellcheck source=scripts/tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# A library of three layers: core/error.rs, core/buffer.rs (uses error), coll/mod.rs (uses
# buffer through a root re-export and a child module).
fixture() {
    rm -rf "$WORK/t"
    mkdir -p "$WORK/t/src/core" "$WORK/t/src/coll"
    cat >"$WORK/t/src/lib.rs" <<'RS'
pub mod coll;
pub mod core;
pub use crate::core::buffer::Buffer;
RS
    printf 'pub mod buffer;\npub mod error;\n' >"$WORK/t/src/core/mod.rs"
    printf 'pub struct Error;\n' >"$WORK/t/src/core/error.rs"
    printf 'use crate::core::error::Error;\npub struct Buffer(Error);\n' >"$WORK/t/src/core/buffer.rs"
    cat >"$WORK/t/src/coll/mod.rs" <<'RS'
mod ring;
pub use ring::Ring;
pub fn size(b: &crate::Buffer) -> usize { ring::width(b) }
RS
    cat >"$WORK/t/src/coll/ring.rs" <<'RS'
use super::super::core::buffer::Buffer;
pub struct Ring;
pub fn width(_: &Buffer) -> usize { 1 }
#[cfg(test)]
mod tests { use crate::coll::size; fn f() { eprintln!("fine in tests"); } }
RS
}

run() {
    IMPORTS_ROOT="$WORK/t" python3 "$ROOT/scripts/imports.py" >"$WORK/out" 2>&1
}

t_a_clean_tree_passes() {
    fixture
    run || fail "clean tree: $(cat "$WORK/out")"
    expect_out "no cycles" "clean tree: no verdict"
}

t_a_cycle_through_a_root_reexport_fails() {
    fixture
    # error -> buffer (by the root's re-export) while buffer -> error.
    printf 'pub struct Error(Box<crate::Buffer>);\n' >"$WORK/t/src/core/error.rs"
    run && fail "cycle passed: $(cat "$WORK/out")"
    expect_out "import cycle of 2 files in src" "cycle not named"
    expect_out "src/core/error.rs -> src/core/buffer.rs: Buffer" "cycle's import not named"
}

t_a_parent_and_child_that_use_each_other_fail() {
    fixture
    # ring.rs takes size() from coll/mod.rs, which calls ring::width.
    printf 'use super::size;\npub struct Ring;\npub fn width(b: &crate::Buffer) -> usize { size(b) }\n' \
        >"$WORK/t/src/coll/ring.rs"
    run && fail "parent/child cycle passed: $(cat "$WORK/out")"
    expect_out "src/coll/mod.rs -> src/coll/ring.rs: width" "child arrow not named"
}

t_a_lower_layer_reaching_up_fails() {
    fixture
    printf 'use crate::coll::Ring;\npub struct Error(Ring);\n' >"$WORK/t/src/core/error.rs"
    run && fail "layer break passed: $(cat "$WORK/out")"
    expect_out "src/core/error.rs -> src/coll/ring.rs (core must not reach coll): Ring" "layer break not named"
}

t_a_cycle_through_an_item_of_the_crate_root_fails() {
    fixture
    # lib.rs's own ROOT reads coll's WIDTH, and coll reads ROOT back.
    printf 'pub const ROOT: usize = coll::WIDTH;\n' >>"$WORK/t/src/lib.rs"
    printf 'pub const WIDTH: usize = 1;\npub fn root() -> usize { crate::ROOT }\n' \
        >>"$WORK/t/src/coll/mod.rs"
    run && fail "root cycle passed: $(cat "$WORK/out")"
    expect_out "src/coll/mod.rs -> src/lib.rs: ROOT" "arrow into the root not named"
}

# A binary beside the library is a crate of its own: its `crate::a` is the `a` its main.rs
# imports (cli::a), not a module of the library.
t_a_cycle_in_a_binary_beside_the_library_fails() {
    fixture
    mkdir -p "$WORK/t/src/cli"
    printf 'mod cli;\nuse cli::a;\nfn main() { a::f() }\n' >"$WORK/t/src/main.rs"
    printf 'pub mod a;\npub mod b;\n' >"$WORK/t/src/cli/mod.rs"
    printf 'pub fn f() {}\npub fn h() { super::b::g() }\n' >"$WORK/t/src/cli/a.rs"
    printf 'pub fn g() {}\n' >"$WORK/t/src/cli/b.rs"
    run || fail "clean binary: $(cat "$WORK/out")"
    printf 'pub fn g() { crate::a::f() }\n' >"$WORK/t/src/cli/b.rs"
    run && fail "binary's cycle passed: $(cat "$WORK/out")"
    expect_out "import cycle of 2 files in src/main.rs" "binary's cycle not named"
    expect_out "src/cli/b.rs -> src/cli/a.rs: f" "binary's crate:: path not followed"
}

t_eprintln_in_library_code_fails() {
    fixture
    printf 'pub struct Error;\npub fn warn() { eprintln!("no"); }\n' >"$WORK/t/src/core/error.rs"
    run && fail "eprintln! passed: $(cat "$WORK/out")"
    expect_out "src/core/error.rs:2: eprintln!" "eprintln! not named"
}

run_tests
