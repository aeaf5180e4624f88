#!/usr/bin/env python3
"""The library's layers, and import cycles between the files of each crate (the library, nvsh,
nvsh-gpt, the plot crate, the Python extension). scripts/check.sh runs it (so CI does).

    scripts/imports.py [--graph]

Layers of the library (src/), lowest first: core; p2p, sync and bootstrap; team; proto; coll;
sparse; pipeline. A file imports only from its own layer or lower ones (LAYER_RULES), and
library code writes no eprintln! (the log facade instead).

Each crate is its root file (lib.rs, or main.rs: a binary beside a library is a crate of its
own) and the files its `mod` lines declare, test modules' excepted. Reads every `crate::`,
`$crate::`, `self::`, `super::` and child-module path of those files (not their test modules:
lines from a file's first `#[cfg(test)]` on), resolves each to the file of the module it names
(a name a module imports or re-exports, such as `crate::Error`, to the file it comes from;
`pub use` lines make no arrow of their own; an item of the root file itself, such as
`crate::sys`, to the root file), and prints every cycle of files (a strongly connected set of
two or more) with the imports that tie it. Exits 1 if there is one, 0 otherwise. --graph also
prints every file's imports. Text only, so a path built by a macro it cannot see is missed.
"""
import os
import re
import sys

# IMPORTS_ROOT: another tree to check (its tests give it fixture crates).
ROOT = os.environ.get("IMPORTS_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["src", "nvsh/src", "gpt/src", "plot/src", "python/src"]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"(\$crate|\bcrate|\bsuper(?:::super)*)::((?:" + IDENT + r"::)*" + IDENT + ")")
USE = re.compile(r"\buse\s+((?:\$crate|crate|super|self|" + IDENT + r")::[^;]*);", re.S)
CHILD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)


def source_lines(path):
    """The file's lines before its first #[cfg(test)], comments blanked."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "#[cfg(test)]" in line:
                break
            out.append(re.sub(r"//.*", "", line))
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (nested braces, `self`, renames)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+" + IDENT, "", tree))
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner, rest = tree[:start], tree[start + 1 : i], tree[i + 1 :]
                parts, d, cur = [], 0, ""
                for c in inner:
                    if c == "," and d == 0:
                        parts.append(cur)
                        cur = ""
                        continue
                    d += c == "{"
                    d -= c == "}"
                    cur += c
                if cur:
                    parts.append(cur)
                out = []
                for p in parts:
                    for e in expand(p):
                        out.append(prefix.rstrip(":") if e == "self" else prefix + e)
                return [o + rest for o in out]
    return [tree]


PUB_USE = re.compile(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]*);", re.S)


# A module's own `use` lines (not a function's): column 0 once rustfmt has run.
TOP_USE = re.compile(r"^use\s+([^;]*);", re.M | re.S)


class Crate:
    """One crate of a source folder: the modules its root file (lib.rs or main.rs) declares,
    found by their `mod` lines, so that a binary beside a library (nvsh's main.rs and its
    cli/) is a crate of its own, as rustc sees it: its `crate::` paths name its own modules."""

    def __init__(self, src, root="lib.rs"):
        self.src = src
        self.files = {}  # module path (tuple) -> file
        self.text, self.children, self.reexports = {}, {}, {}
        self.visit((), os.path.join(src, root), src)

    def visit(self, mod, f, kids):
        """Reads module `mod` from file `f`, then the children it declares (in folder `kids`).
        Children declared in a test module are not read, so neither are their files."""
        self.files[mod] = f
        text = source_lines(os.path.join(ROOT, f))
        self.children[mod] = set(CHILD.findall(text))
        # Re-exports (`pub use`) name what a module offers, not what it needs: they are
        # followed to the item's own module, and make no arrow of their own. A private `use`
        # makes an arrow, and is followed too: the root's `use cli::bench` is what
        # `crate::bench` names.
        self.reexports[mod] = {}
        for tree in PUB_USE.findall(text) + TOP_USE.findall(text):
            for p in expand(tree):
                target = self.absolute(mod, p.split("::"))
                if target and target[-1] != "*":
                    self.reexports[mod].setdefault(target[-1], target)
        self.text[mod] = PUB_USE.sub("", text)
        for name in sorted(self.children[mod]):
            for path, sub in ((name + ".rs", name), (os.path.join(name, "mod.rs"), name)):
                if os.path.isfile(os.path.join(ROOT, kids, path)):
                    self.visit(mod + (name,), os.path.join(kids, path), os.path.join(kids, sub))
                    break

    def absolute(self, mod, segs):
        """`segs` as written in module `mod`, from the crate root; None for another crate."""
        if segs[0] in ("crate", "$crate"):
            return segs[1:]
        if segs[0] == "self":
            return list(mod) + segs[1:]
        if segs[0] == "super":
            # super^k of module a::b::c is its k-th parent, whatever file holds it.
            ups = 0
            while ups < len(segs) and segs[ups] == "super":
                ups += 1
            return list(mod)[: max(0, len(mod) - ups)] + segs[ups:]
        if segs[0] in self.children.get(mod, ()):
            return list(mod) + segs
        return None

    def module_of(self, path, depth=0):
        """The file's module that holds what `path` names (re-exports followed)."""
        for n in range(len(path), -1, -1):
            prefix = tuple(path[:n])
            if prefix in self.files:
                rest = path[n:]
                again = self.reexports[prefix].get(rest[0]) if rest else None
                if again and depth < 20 and again != path:
                    return self.module_of(again + rest[1:], depth + 1)
                return prefix
        return None

    def edges(self):
        out = {}
        for mod, f in self.files.items():
            text = self.text[mod]
            children = self.children[mod]
            paths = []
            for tree in USE.findall(text):
                paths += expand(tree)
            paths += [m.group(1) + "::" + m.group(2) for m in PATH.finditer(text)]
            if children:
                child_path = re.compile(
                    r"(?<![A-Za-z0-9_:])((?:" + "|".join(sorted(children)) + r")::" + IDENT + ")"
                )
                paths += child_path.findall(text)
            for p in paths:
                segs = p.split("::")
                target = self.absolute(mod, segs)
                if target is None:
                    continue  # another crate (std, cudarc, nvshmem, ...)
                t = self.module_of(target)
                # The root too: an item of lib.rs itself (crate::sys) is a file like any other.
                if t is not None and t != mod:
                    out.setdefault(f, {}).setdefault(self.files[t], set()).add(segs[-1])
        return out


# (layer, layers it must not reach) of the library, by the top-level module of src/.
LAYER_RULES = [
    ("core", {"p2p", "sync", "bootstrap", "team", "proto", "coll", "sparse", "pipeline"}),
    ("p2p", {"team", "proto", "coll", "sparse", "pipeline"}),
    ("sync", {"team", "proto", "coll", "sparse", "pipeline"}),
    ("bootstrap", {"team", "proto", "coll", "sparse", "pipeline"}),
    ("team", {"proto", "coll", "sparse", "pipeline"}),
    ("proto", {"coll", "sparse", "pipeline"}),
    ("coll", {"sparse", "pipeline"}),
    ("sparse", {"pipeline"}),
]


def layer_of(src, path):
    """The library's top-level module of a file (src/coll/group.rs: coll; src/team.rs: team)."""
    rel = os.path.relpath(path, src).split(os.sep)
    return rel[0][:-3] if rel[0].endswith(".rs") else rel[0]


def layer_violations(graph):
    out = []
    rules = dict(LAYER_RULES)
    for f in sorted(graph):
        low = layer_of("src", f)
        for t in sorted(graph[f]):
            high = layer_of("src", t)
            if high in rules.get(low, ()):
                names = ", ".join(sorted(graph[f][t]))
                out.append(f"  {f} -> {t} ({low} must not reach {high}): {names}")
    for dirpath, _, names in os.walk(os.path.join(ROOT, "src")):
        for n in sorted(names):
            if n.endswith(".rs"):
                path = os.path.join(dirpath, n)
                for k, line in enumerate(source_lines(path).splitlines(), 1):
                    if "eprintln!" in line:
                        rel = os.path.relpath(path, ROOT)
                        out.append(f"  {rel}:{k}: eprintln! in library code (use the log facade)")
    return out


def cycles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def main():
    bad = 0
    for src, root in [(s, r) for s in CRATES for r in ("lib.rs", "main.rs")]:
        if not os.path.isfile(os.path.join(ROOT, src, root)):
            continue
        graph = Crate(src, root).edges()
        if src == "src" and root == "lib.rs":
            bad_layers = layer_violations(graph)
            if bad_layers:
                bad = 1
                print("-- layers of the library:")
                print("\n".join(bad_layers))
        if "--graph" in sys.argv:
            for f in sorted(graph):
                for t in sorted(graph[f]):
                    print(f"{f} -> {t}: {', '.join(sorted(graph[f][t]))}")
        name = src if root == "lib.rs" else os.path.join(src, root)
        for comp in cycles(graph):
            bad = 1
            print(f"-- import cycle of {len(comp)} files in {name}:")
            for f in comp:
                for t in sorted(graph.get(f, {})):
                    if t in comp:
                        print(f"  {f} -> {t}: {', '.join(sorted(graph[f][t]))}")
    if not bad:
        print("imports: layers kept, no cycles")
    return bad


if __name__ == "__main__":
    sys.exit(main())
