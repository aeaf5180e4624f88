#!/usr/bin/env python3
"""Every repository path that the documentation and the code's comments name must exist.
scripts/check.sh runs it (so CI does).

    scripts/paths.py [--list]

Reads the Markdown files (README.md, INSTALL.md, docs/*.md, gpt/README.md and every other
README.md) whole, code blocks included, and only the comments of the source files under
src/, nvsh/, gpt/, plot/, python/, nvshmem-sys/, device/, scripts/, tests/ and examples/
(Rust `//`, `/* */`; C++ and CUDA `//`, `/* */`; shell and Python `#`, and Python docstrings),
so that string literals and `#include` lines (which the compilers check) are left alone.

What counts as a path: a token with a `/` in it, such as `src/coll/allreduce/mod.rs`,
`device/prims/ll.cuh`, `scripts/run.sh`, `docs/measured.md` or `device/coll/`, that ends in a
file extension of the kind the repository holds (.rs, .cu, .md, .sh, ...), ends in `/`, or
starts with one of the repository's top-level entries. It is resolved against the repository
root, then against each folder above the file that names it: a comment in device/coll/ may say
`prims/ll.cuh` for device/prims/ll.cuh, one in src/ `coll/op.rs` for src/coll/op.rs; a Markdown
link is resolved from the file's own folder, as GitHub does, and its `#anchor` must be a
heading of the file it points to.

Not paths (skipped): URLs; placeholders (an all-caps name: `DIR/lib`, `FILE.png`); build
outputs and set-up prefixes (`target/`, `.deps/`, `.gpu/`); paths outside the repository
(`~/...`, `/tmp/...`, `../shared/...` and other absolute or parent paths in text); a name whose
first folder is nothing of ours (`include/host/nvshmemx_api.h` is NVSHMEM's install, `lib/` a
prefix's; a file extension that no file of ours has, as in NCCL's `src/enqueue.cc`); and the
folders of other projects' source trees listed in FOREIGN. A path is checked as written: if a
comment in src/ means a file under device/, it says device/.

Exits 1 listing each missing path as file:line, 0 otherwise. --list prints every path checked.
PATHS_ROOT: another tree to check (its tests give it fixture trees).
"""
import os
import re
import sys

ROOT = os.environ.get("PATHS_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Markdown read whole: these, plus every README.md and docs/*.md found in the tree.
MARKDOWN = ["README.md", "INSTALL.md", "gpt/README.md"]
# Folders whose source files' comments are read.
SOURCE_DIRS = ["src", "nvsh", "gpt", "plot", "python", "nvshmem-sys", "device", "scripts", "tests", "examples"]
SOURCE_FILES = ["build.rs"]
# Never read, never a path: build outputs and set-up prefixes (.gitignore's).
IGNORED = {"target", ".deps", ".gpu", ".git", "__pycache__", "node_modules"}

# File extensions a path of ours may end in: these, and every extension the tree holds (so
# NVIDIA's `mem_heap.cpp` or NCCL's `enqueue.cc` are not taken for files of ours).
EXTENSIONS = {"rs", "cu", "cuh", "h", "py", "sh", "md", "toml", "json"}
# All-caps file names that are real names, not placeholders.
REAL_CAPS = {"README", "INSTALL", "LICENSE", "LICENCE", "CHANGELOG", "KINDS"}
# Folders of other projects' source trees that comments cite (read there, not here), skipped
# while the repository has no folder of that name itself.
FOREIGN = [
    "src/include/",  # NVSHMEM's headers (NVIDIA/nvshmem, tag v3.4.5-0): src/core/registered.rs
    "src/device/",  # NCCL's device code (NCCL 2.28.9): nvsh/src/bench/render.rs
]

URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s)>\]`'\"]*")
# A path-like token: segments of name characters joined by '/', optionally ending in '/'. It
# may not start inside a word, a path, a URL or a variable ($DIR/x, ~/x, /abs/x, a.b/c).
TOKEN = re.compile(r"(?<![\w./~$@:%+=\\{*-])(\.?[A-Za-z0-9_][\w.+-]*(?:/[\w.+-]+)*/?)")
MD_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def rel(path):
    return os.path.relpath(path, ROOT).replace(os.sep, "/")


def exists(relpath):
    relpath = relpath.rstrip("/")
    first = relpath.split("/", 1)[0]
    return first not in IGNORED and os.path.exists(os.path.join(ROOT, relpath))


def walk(top):
    """Files under top (relative to ROOT), skipping IGNORED folders, in a stable order."""
    out = []
    base = os.path.join(ROOT, top)
    if os.path.isfile(base):
        return [top]
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in IGNORED)
        for f in sorted(files):
            out.append(rel(os.path.join(d, f)))
    return out


# --- comments of source files: (line number, text) pairs -------------------------------------


def c_like_comments(text, rust):
    """Comments of Rust or C/C++/CUDA source: // to the end of line and /* */ (nested in Rust),
    skipping string and character literals (Rust raw strings too)."""
    out = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2 : j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            start, start_line = j, line
            while j < n and depth:
                if rust and text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            body = text[start : j - 2 if depth == 0 else j]
            for k, part in enumerate(body.split("\n")):
                out.append((start_line + k, part))
            line += body.count("\n")
            i = j
        elif rust and re.match(r'b?r(#*)"', text[i : i + 40]) and not re.match(r"\w", text[i - 1 : i] or " "):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            line += text.count("\n", i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "'":
            # A character literal ('x', '\n', '"'); in Rust otherwise a lifetime or label.
            m = re.match(r"'(\\.[^']*|[^\\'\n])'", text[i:])
            i += m.end() if m else 1
        else:
            i += 1
    return out


def hash_comments(text, python):
    """# comments of shell or Python (outside quotes on their line), and Python docstrings."""
    out = []
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        s = lines[k]
        stripped = s.strip()
        if python and stripped[:3] in ('"""', "'''"):
            q = stripped[:3]
            body = [stripped[3:]]
            start = k
            if q in stripped[3:]:
                body = [stripped[3 : 3 + stripped[3:].index(q)]]
            else:
                k += 1
                while k < len(lines) and q not in lines[k]:
                    body.append(lines[k])
                    k += 1
                if k < len(lines):
                    body.append(lines[k][: lines[k].index(q)])
            out.extend((start + 1 + j, b) for j, b in enumerate(body))
            k += 1
            continue
        quote = None
        for j, ch in enumerate(s):
            if quote:
                if ch == "\\" and quote == '"':
                    continue
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and (j == 0 or s[j - 1] in " \t"):
                if not s.startswith("#!"):
                    out.append((k + 1, s[j + 1 :]))
                break
        k += 1
    return out


def comments(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    ext = path.rsplit(".", 1)[-1]
    if ext == "rs":
        return c_like_comments(text, rust=True)
    if ext in ("cu", "cuh", "h", "hpp", "c", "cc", "cpp"):
        return c_like_comments(text, rust=False)
    if ext == "sh":
        return hash_comments(text, python=False)
    if ext == "py":
        return hash_comments(text, python=True)
    return []


# --- Markdown anchors -----------------------------------------------------------------------


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


ANCHORS = {}


def anchors(path):
    if path in ANCHORS:
        return ANCHORS[path]
    found, seen, fence = set(), {}, False
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for s in f:
            if s.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else HEADING.match(s)
            if m:
                a = slug(m.group(2))
                k = seen.get(a, 0)
                seen[a] = k + 1
                found.add(a if k == 0 else f"{a}-{k}")
    ANCHORS[path] = found
    return found


# --- the check ------------------------------------------------------------------------------


def placeholder(token):
    for seg in token.strip("/").split("/"):
        stem = seg.split(".", 1)[0]
        if re.fullmatch(r"[A-Z][A-Z0-9_]*", stem) and stem not in REAL_CAPS:
            return True
    return False


def is_pathlike(token):
    """A token the check looks at (before resolution)."""
    if "/" not in token.rstrip("/") and not token.endswith("/"):
        return False
    t = token[2:] if token.startswith("./") else token
    if t.startswith("../"):
        return False
    last = t.rstrip("/").rsplit("/", 1)[-1]
    ext = last.rsplit(".", 1)[-1] if "." in last.lstrip(".") else ""
    first = t.split("/", 1)[0]
    if first in IGNORED:
        return False
    if placeholder(token):
        return False
    if any(t.startswith(p) and not exists(p) for p in FOREIGN):
        return False
    # An extension of no file of ours (NCCL's `src/enqueue.cc`) is someone else's file.
    return ext in EXTENSIONS if ext else token.endswith("/") or exists(first)


def resolve(token, path):
    """The path a token names from `path` (the file it is in), or None if it names nothing, or
    '' if it is not ours (its first folder is nowhere above the file)."""
    t = token[2:] if token.startswith("./") else token
    first = t.split("/", 1)[0]
    dirs = [""]
    d = os.path.dirname(path)
    while d:
        dirs.append(d)
        d = os.path.dirname(d)
    ours = False
    for base in dirs:
        cand = f"{base}/{t}" if base else t
        if exists(cand):
            return cand
        if exists(f"{base}/{first}" if base else first):
            ours = True
    return None if ours else ""


def check_text(path, line, text, md, missing, checked):
    text = URL.sub(" ", text)
    if md:
        for m in MD_LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            file, _, anchor = target.partition("#")
            where = path
            if file:
                where = os.path.normpath(os.path.join(os.path.dirname(path), file)).replace(os.sep, "/")
                checked.append((path, line, target))
                if where.startswith("..") or not exists(where):
                    missing.append(f"{path}:{line}: {target} (link: no such file)")
                    continue
            if anchor and where.endswith(".md") and anchor not in anchors(where):
                missing.append(f"{path}:{line}: {target} (link: no heading #{anchor} in {where})")
        text = MD_LINK.sub("]", text)
    for m in TOKEN.finditer(text):
        token = m.group(1).rstrip(".,:;")
        if not is_pathlike(token):
            continue
        found = resolve(token, path)
        if found == "":
            continue
        checked.append((path, line, token))
        if found is None:
            missing.append(f"{path}:{line}: {token}")


def main():
    listing = "--list" in sys.argv[1:]
    every = walk(".")
    for p in every:
        name = p.rsplit("/", 1)[-1]
        if "." in name.lstrip("."):
            EXTENSIONS.add(name.rsplit(".", 1)[-1])
    md_files = [p for p in MARKDOWN if exists(p)]
    md_files += [
        p
        for p in every
        if (p.endswith("/README.md") or (p.startswith("docs/") and p.endswith(".md"))) and p not in md_files
    ]
    src_files = [p for d in SOURCE_DIRS + SOURCE_FILES if exists(d) for p in walk(d)]
    missing, checked = [], []
    for p in md_files:
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            for k, s in enumerate(f, 1):
                check_text(p, k, s, True, missing, checked)
    for p in src_files:
        for k, s in comments(p):
            check_text(p, k, s, False, missing, checked)
    if listing:
        for p, k, t in checked:
            print(f"{p}:{k}: {t}")
    if missing:
        print(f"paths: {len(missing)} named path(s) that do not exist:")
        print("\n".join("  " + m for m in missing))
        return 1
    print(f"paths: all {len(checked)} paths named in {len(md_files)} docs and {len(src_files)} sources exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
