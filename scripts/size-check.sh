#!/usr/bin/env bash
# The size check: each helper's audit surface in non-test Rust lines, against DESIGN's target
# ("under about 2,000 lines" for the helper itself) and a ratchet per helper, and each helper's
# page (docs/<helper>.md, section "Audit surface") against the list of files counted.
#
#   scripts/size-check.sh               check (CI runs this after fmt and clippy)
#   scripts/size-check.sh --write-docs  rewrite the "Audit surface" sections from the code
#
# A script, not a Rust test: it reads the sources as text, needs no build, and so runs in the
# lint step, seconds after a push, and on a tree that does not compile yet.
#
# What counts: a line of a .rs file that is not blank and not only a comment. A helper's audit
# surface is
#   - its own crate: every such line under <helper>/src on every OS it builds for, that is
#     including items and modules built only on Windows or macOS (#[cfg(windows)],
#     #[cfg(target_os = "macos")], `#[cfg(not(target_os = "linux"))] mod x;`, ...), since a
#     reviewer of the helper reads all of its code, not only Linux's. Left out: items marked
#     #[cfg(test)] (or #[cfg(all(test, ...))]) and binaries built only for tests
#     (required-features = ["test-hooks"]). This is what the budget and the ratchet are about;
#   - ipc-schema: lib.rs and the modules the helper's code names (`ipc_schema::fs`, ...),
#     and what those name in turn (`crate::...`, `super::...`);
#   - sandbox: the files the helper's code reaches the same way from `sandbox::...` paths
#     (lib.rs, the lockdown and its layers, and for the exec-helper the exec sandbox).
# The fs-helper on Windows is its own crate, fs-helper-windows (the `fs-helper` binary's `main`
# there): it shares no system call with the Unix helper, so each is a program read on its own,
# with its own row, budget and ratchet (its reach into ipc-schema and sandbox/src/windows/ is not
# counted: the shared crates are counted as built on Linux, where it is empty).
# The shared crates are counted as built on Linux: reaching starts from the helper's code built
# there, goes by path at file granularity (a file is in if some counted file names an item in
# it), and leaves out items built only off Linux (#[cfg(windows)] or its spelling
# #[cfg(target_os = "windows")], #[cfg(not(unix))], #[cfg(target_os = "macos")],
# #[cfg(not(target_os = "linux"))], #[cfg(not(any(target_os = "linux", ...)))],
# #[cfg(any(windows, target_os = "macos"))]) and the files sandbox/src/macos.rs and
# sandbox/src/windows/, which are not built there. They are shared by every helper and shown as
# context; the budget is the helper's own crate.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

TARGET = 2000
# The ratchet: each helper's own-crate count may not grow past this. Set from the counts of
# 2026-12 rounded up a little, when the own-crate count came to include the code built only on
# Windows and macOS (the method changed, not the budget: exec-helper's ratchet rose from 445 for
# its windows.rs and macOS code, which were always there); only ever lower it (when a helper
# shrinks, the check says to). One rise since, for new code of another OS, never to fit growth
# on one already counted: servers-helper 900 -> 1125 when it came to run on Windows (its tokio
# loop, serve_windows.rs; the request handling both loops share moved to requests.rs); and when
# the Unix fs- and net-helper came to build for macOS: fs-helper 3100 -> 3150 (kernel.rs: what
# stands for O_PATH there, reading a link through its parent, the stat fields' widths),
# net-helper 1985 -> 1990 (adopting a passed socket without SO_DOMAIN and SO_ACCEPTCONN).
# And exec-helper 1235 -> 1250 when macOS came to run an agent's session, a third-party stdio
# server and a command's egress proxy (what needs a connector there): the listeners and their
# checks went to sandbox/src/bridge.rs, shared and tested on Linux, and its PATH lookup to
# sandbox::program_path::which, shared with `gatehouse run`; what stays is the wiring (the
# connector taken with the Start, the bridge held until the main process is reaped).
RATCHET = {
    "fs-helper": 3150,
    "fs-helper-windows": 2400,
    "net-helper": 1990,
    "exec-helper": 1250,
    "secrets-helper": 1975,
    "servers-helper": 1125,
}
# Crates a helper's budget counts as its own: code only the file helpers use (what a change is,
# on every OS), read by whoever audits either of them.
OWN_EXTRA = {"fs-helper": ["fs-change"], "fs-helper-windows": ["fs-change"]}
HELPERS = ["fs-helper", "fs-helper-windows", "net-helper", "exec-helper", "secrets-helper", "servers-helper"]
SHARED = {"ipc_schema": "ipc-schema", "sandbox": "sandbox"}
NOT_ON_LINUX = ("sandbox/src/macos.rs", "sandbox/src/windows/")
# Items left out of a helper's own count: tests only (every OS's code counts).
TEST_ONLY = r'#\[cfg\((test|all\(test.*)\)\]'
# Items left out of the shared crates' counts and of reaching: tests, and what is built only on
# other OSes.
NOT_BUILT_HERE = r'#\[cfg\((test|all\(test.*|windows|target_os = "windows"|not\(unix\)|target_os = "macos"|not\(target_os = "linux"\)|not\(any\(target_os = "linux", .*\)\)|any\((windows|target_os = "windows"|target_os = "macos")(, (windows|target_os = "windows"|target_os = "macos"))*\))\)\]'

# ---- counting ---------------------------------------------------------------------------

def strip_comments(text):
    """The code of `text` with comments and string contents blanked, lines kept."""
    out, i, n = [], 0, len(text)
    depth = 0  # nested block comments
    while i < n:
        c = text[i]
        if depth:
            if text.startswith("*/", i):
                depth -= 1; i += 2; continue
            if text.startswith("/*", i):
                depth += 1; i += 2; continue
            out.append("\n" if c == "\n" else " "); i += 1; continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j; continue
        if text.startswith("/*", i):
            depth = 1; out.append("  "); i += 2; continue
        m = re.match(r'r(#*)"', text[i:i + 10]) if c == "r" and (i == 0 or not (text[i-1].isalnum() or text[i-1] == "_")) else None
        if m:
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "".join("\n" if ch == "\n" else "" for ch in text[i:j])); i = j; continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "".join("\n" if ch == "\n" else "" for ch in text[i:j + 1])); i = j + 1; continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '"); i += len(m.group(0)); continue
        out.append(c); i += 1
    return "".join(out)

def code_lines(path, left_out=NOT_BUILT_HERE):
    """The code lines of `path` outside comments and the items whose attribute matches
    `left_out` (by default: tests and what is built only on other OSes, i.e. Linux's code;
    with TEST_ONLY: every OS's code)."""
    raw = open(path, encoding="utf-8").read()
    code = strip_comments(raw).split("\n")
    keep, skip_depth, pending, depth = [], None, False, 0
    for line, raw_line in zip(code, raw.split("\n")):
        s = line.strip()
        # (matched on the raw line: the stripped one has its strings blanked)
        if skip_depth is None and re.match(left_out, raw_line.strip()):
            pending = True
            continue
        opens, closes = s.count("{"), s.count("}")
        if pending and skip_depth is None:
            if s.startswith("#["):
                continue
            # the item under #[cfg(test)]: skipped to its end (a `;` item ends on its line)
            if opens == 0 and s.endswith(";"):
                pending = False
                continue
            if opens:
                skip_depth = depth
                depth += opens - closes
                pending = False
                if depth <= skip_depth:
                    skip_depth = None
                continue
            continue
        depth += opens - closes
        if skip_depth is not None:
            if depth <= skip_depth:
                skip_depth = None
            continue
        if s:
            keep.append(s)
    return keep

# ---- which files a helper reaches -------------------------------------------------------

def required_test_bins(crate):
    """Binaries of `crate` built only with the test-hooks feature."""
    out, cur = set(), None
    for line in open(os.path.join(crate, "Cargo.toml")):
        line = line.strip()
        if line == "[[bin]]":
            cur = {}
        elif line.startswith("[") and cur is not None:
            if "path" in cur and "test-hooks" in cur.get("required-features", ""):
                out.add(os.path.join(crate, cur["path"]))
            cur = None
        elif cur is not None and "=" in line:
            k, v = line.split("=", 1)
            cur[k.strip()] = v.strip().strip('"')
    if cur and "path" in cur and "test-hooks" in cur.get("required-features", ""):
        out.add(os.path.join(crate, cur["path"]))
    return out

def off_linux_modules(path):
    """The modules `path` declares under a cfg not built on Linux (`#[cfg(windows)] mod x;`)."""
    names, gated = set(), False
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return names
    for line in lines:
        t = line.strip()
        if re.match(NOT_BUILT_HERE, t):
            gated = True
            continue
        m = re.match(r"(pub(\([a-z]+\))?\s+)?mod\s+(" + r"[A-Za-z_][A-Za-z0-9_]*" + r")\s*;", t)
        if gated and m:
            names.add(m.group(3))
        if not (t.startswith("#[") or t.startswith("//")):
            gated = False
    return names

def own_files(helper, every_os):
    """The helper's source files (and its crates in OWN_EXTRA) but its test-only binaries; with
    `every_os` false, only those built on Linux."""
    return sorted(f for c in [helper] + OWN_EXTRA.get(helper, []) for f in crate_files(c, every_os))

def crate_files(crate, every_os):
    skip = required_test_bins(crate)
    files = []
    for d, _, names in os.walk(os.path.join(crate, "src")):
        for f in names:
            p = os.path.join(d, f)
            if not f.endswith(".rs") or p in skip:
                continue
            # A file whose module is declared only off Linux (exec-helper/src/windows.rs) is
            # another OS's code, as `#[cfg(windows)]` items are.
            up = parent(p)
            name = f[:-3] if f != "mod.rs" else os.path.basename(d)
            if not every_os and up is not None and name in off_linux_modules(up):
                continue
            files.append(p)
    return sorted(files)

def module_dir(path):
    """The directory holding the child modules of the module in `path`."""
    d, f = os.path.split(path)
    if f in ("lib.rs", "main.rs", "mod.rs"):
        return d
    return os.path.join(d, f[:-3])

def child(path, name):
    base = module_dir(path)
    for p in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.exists(p) and not p.startswith(NOT_ON_LINUX):
            return p
    return None

def parent(path):
    d, f = os.path.split(path)
    if f in ("lib.rs", "main.rs"):
        return None
    if f == "mod.rs":
        d = os.path.dirname(d)
    for p in (os.path.join(d, "mod.rs"), os.path.join(d, "lib.rs"), os.path.join(d, "main.rs")):
        if os.path.exists(p):
            return p
    up = d + ".rs"
    return up if os.path.exists(up) else None

def resolve(start, segments):
    """The file the path `segments` (relative to the module in `start`) lands in."""
    cur = start
    for s in segments:
        if s == "super":
            cur = parent(cur) or cur
            continue
        if s == "self":
            continue
        nxt = child(cur, s)
        if nxt is None:
            break
        cur = nxt
    return cur

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

def use_paths(code):
    """Every path a `use` declaration in `code` names, braces expanded."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths += expand(re.sub(r"\s+", "", m.group(1)))
    return paths

def expand(tree):
    tree = re.sub(r"\bas" + IDENT, "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree.split("::")]
    prefix, body = tree[:i], tree[i + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p:
            out += [prefix.rstrip(":").split("::") + q if prefix else q for q in expand(p)]
    return [[s for s in p if s] for p in out]

def references(path, crate_root, local_mods):
    """(crate, segments) of every path `path` names: `ipc_schema::`, `sandbox::`,
    `crate::`, `super::`, and its own child modules."""
    code = "\n".join(code_lines(path))
    refs = []
    paths = use_paths(code) + [p.split("::") for p in re.findall(IDENT + r"(?:::" + IDENT + r")+", code)]
    for segs in paths:
        segs = [s for s in segs if s and s != "*"]
        if not segs:
            continue
        head = segs[0].lstrip(":")
        if head in SHARED:
            refs.append((SHARED[head], None, segs[1:]))
        elif head == "crate" and crate_root:
            refs.append((None, crate_root, segs[1:]))
        elif head in ("super", "self") and crate_root:
            refs.append((None, path, segs))
        elif head in local_mods and crate_root:
            refs.append((None, path, segs))
    return refs

def declared_mods(path):
    code = "\n".join(code_lines(path))
    return set(re.findall(r"\bmod\s+(" + IDENT + r")\s*;", code))

def root_of(crate):
    return os.path.join(crate, "src", "lib.rs")

def surface(helper):
    """The helper's own files (every OS), and the shared files its Linux code reaches."""
    own = own_files(helper, every_os=True)
    reached, todo = set(), []
    def visit(crate, start, segs):
        f = resolve(start or root_of(crate), segs)
        if f not in reached:
            reached.add(f); todo.append(f)
    for f in own_files(helper, every_os=False):
        for crate, start, segs in references(f, None, set()):
            if crate:
                visit(crate, None, segs)
    while todo:
        f = todo.pop()
        crate = f.split(os.sep)[0]
        for c, start, segs in references(f, root_of(crate), declared_mods(f)):
            visit(c, start, segs) if c else visit(crate, start, segs)
    shared = {c: sorted(p for p in reached if p.startswith(c + os.sep)) for c in SHARED.values()}
    return own, shared

def count(files, left_out=NOT_BUILT_HERE):
    return sum(len(code_lines(f, left_out)) for f in files)

# ---- the pages --------------------------------------------------------------------------

BEGIN = "## Audit surface"

def section(helper, own, shared):
    lines = [BEGIN, "",
             "What a reviewer reads to audit this helper: its own crate, all of it (the code built only on",
             "Windows or macOS included), and the ipc-schema and sandbox files its Linux code reaches by",
             "path (and those reach in turn; ipc-schema's `Body` names every role's messages, so every",
             "helper links them all). `scripts/size-check.sh` counts their non-test lines in CI, holds the",
             "helper's own crate to its budget, and fails when this list and the code disagree",
             "(`scripts/size-check.sh --write-docs` rewrites it).", ""]
    for title, files in (("Own crate", own), ("ipc-schema", shared["ipc-schema"]), ("sandbox", shared["sandbox"])):
        lines.append(f"{title}:")
        lines.append("")
        lines += [f"- `{f}`" for f in files] or [
            "- none counted: this helper's code is built only on Windows, and the shared crates are",
            "  counted as built on Linux (its reach there is in its page, above)"]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"

def page_section(text):
    i = text.find("\n" + BEGIN + "\n")
    if i < 0:
        return None, None, None
    i += 1
    j = text.find("\n## ", i + len(BEGIN))
    j = len(text) if j < 0 else j + 1
    return text[:i], text[i:j], text[j:]

def main():
    write = "--write-docs" in sys.argv[1:]
    failures, over = [], []
    print(f"== size check: non-test Rust lines (target: the helper's own crate under {TARGET:,})")
    print(f"{'helper':<16}{'own crate':>10}{'ratchet':>9}{'target':>8}{'ipc-schema':>12}{'sandbox':>9}{'surface':>9}")
    for h in HELPERS:
        own, shared = surface(h)
        n_own, n_ipc, n_sb = count(own, TEST_ONLY), count(shared["ipc-schema"]), count(shared["sandbox"])
        ratchet = RATCHET[h]
        state = "within target" if n_own < TARGET else "OVER TARGET"
        print(f"{h:<16}{n_own:>10}{ratchet:>9}{TARGET:>8}{n_ipc:>12}{n_sb:>9}{n_own + n_ipc + n_sb:>9}   {state}")
        if n_own >= TARGET:
            over.append(f"{h} ({n_own - TARGET + 1:,} lines over)")
        if n_own > ratchet:
            failures.append(f"{h}: {n_own} lines in its own crate, over its ratchet of {ratchet}: "
                            f"shrink it (or move code to where it belongs); the ratchet only goes down")
        elif ratchet - n_own > 100:
            print(f"  {h} is {ratchet - n_own} lines under its ratchet: lower RATCHET[\"{h}\"] in scripts/size-check.sh to {-(-(n_own + 25) // 50) * 50}")
        page = os.path.join("docs", h + ".md")
        text = open(page, encoding="utf-8").read()
        want = section(h, own, shared)
        before, have, after = page_section(text)
        if write:
            if have is None:
                text = text.rstrip("\n") + "\n\n" + want
            else:
                text = before + want + ("\n" + after if after else "")
            open(page, "w", encoding="utf-8").write(text)
        elif have is None:
            failures.append(f"{page} has no \"{BEGIN}\" section: run scripts/size-check.sh --write-docs")
        elif have.rstrip("\n") != want.rstrip("\n"):
            failures.append(f"{page}: its \"{BEGIN}\" list differs from what the size check counts: "
                            f"run scripts/size-check.sh --write-docs and commit the page")
    if over:
        print(f"over the {TARGET:,}-line target: " + ", ".join(over) + " (held by their ratchets; not yet meeting DESIGN)")
    else:
        print(f"every helper is under the {TARGET:,}-line target")
    if failures:
        print("\n".join("size check FAILED: " + f for f in failures), file=sys.stderr)
        sys.exit(1)

main()
PY
