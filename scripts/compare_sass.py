#!/usr/bin/env python3
"""Compare the SASS of every kernel/function in two sets of nvcc objects.

usage: compare_sass.py OLD_DIR NEW_DIR [--params]

OLD_DIR and NEW_DIR hold the objects of two builds ($OUT_DIR/device/*.o of nvshmem-sys). Needs
cuobjdump and nvdisasm on PATH (the toolchain of scripts/setup_env.sh has neither: pip download
the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels and take bin/ out of them).

Dumps `cuobjdump -sass` of every *.o (the device-link object separately), splits it into
functions per architecture, normalises the per-compile-unit anonymous-namespace id that nvcc
puts into internal names (it contains the source file name and a hash), and compares the
instruction text per (arch, function). With --params, also compares after replacing kernel
parameter operands c[0x0][0x...] by a placeholder.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

def anon_ids(text):
    ids = set()
    for m in re.finditer(r'__nv_static_(\d+)_', text):
        n = int(m.group(1))
        start = m.end()
        ids.add(text[start:start + n][1:])
    return ids

def normalise(text, ids):
    for i in sorted(ids, key=len, reverse=True):
        text = text.replace(i, '@')
    text = re.sub(r'__nv_static_\d+__@__', '', text)
    text = re.sub(r'\d+_GLOBAL__N__@', 'ANON', text)
    return text

def functions(obj):
    out = subprocess.run(['cuobjdump', '-sass', obj], capture_output=True, text=True, check=True).stdout
    ids = anon_ids(out)
    out = normalise(out, ids)
    funcs = {}
    arch = None
    cur = None
    body = []
    for line in out.splitlines():
        m = re.search(r'arch = (sm_\d+)', line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r'\s*Function : (\S+)', line)
        if m:
            if cur is not None:
                funcs[cur] = body
            cur = (arch, m.group(1))
            body = []
            continue
        # cuobjdump pads the columns to the widest instruction of the unit: compare tokens.
        if cur is not None and re.match(r'\s*/\*[0-9a-f]{4}\*/', line):
            body.append(' '.join(line.split()))
        elif cur is not None and re.match(r'\s*/\* 0x[0-9a-f]+ \*/', line):
            body.append(' '.join(line.split()))
    if cur is not None:
        funcs[cur] = body
    return funcs

def collect(d, dlink):
    res = {}
    for name in sorted(os.listdir(d)):
        if not name.endswith('.o'):
            continue
        if (name == 'nvshmem_rs_dlink.o') != dlink:
            continue
        # Weak functions (NVSHMEM's templates) may sit in several objects: keep every copy.
        for key, body in functions(os.path.join(d, name)).items():
            res.setdefault(key, []).append(body)
    # Compare the distinct bodies: how many units carry a copy of a helper is not code.
    return {k: sorted(set(tuple(b) for b in v)) for k, v in res.items()}

PARAM = re.compile(r'c\[0x0\]\[0x[0-9a-f]+\]')

def strip_params(bodies):
    # Encodings carry the offsets too: drop them, keep the instruction text.
    return sorted([PARAM.sub('c[0x0][PARAM]', l) for l in body if not l.startswith('/* 0x')]
                  for body in bodies)

def compare(old, new, label, params):
    same = differ = only_params = 0
    missing = sorted(set(old) - set(new))
    extra = sorted(set(new) - set(old))
    diffs = []
    for key in sorted(set(old) & set(new)):
        if old[key] == new[key]:
            same += 1
        elif params and strip_params(old[key]) == strip_params(new[key]):
            only_params += 1
            diffs.append(('params', key))
        else:
            differ += 1
            diffs.append(('code', key))
    print(f'{label}: {len(old)} old, {len(new)} new functions; identical {same}, '
          f'param offsets only {only_params}, different {differ}, missing {len(missing)}, '
          f'extra {len(extra)}')
    for k in missing:
        print('  missing:', k)
    for k in extra:
        print('  extra:', k)
    for kind, k in diffs[:50]:
        print(f'  {kind}:', k)
    return differ + len(missing) + len(extra)

def main():
    old_dir, new_dir = sys.argv[1], sys.argv[2]
    params = '--params' in sys.argv
    bad = 0
    bad += compare(collect(old_dir, False), collect(new_dir, False), 'compile-unit objects', params)
    bad += compare(collect(old_dir, True), collect(new_dir, True), 'device-link object', params)
    sys.exit(1 if bad else 0)

main()
