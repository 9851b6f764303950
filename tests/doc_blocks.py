#!/usr/bin/env python3
"""The documentation's doc tests: its code blocks and the facts it states.

The user docs are README.md, docs/*.md, bindings/python/README.md and
bench/README.md. Every fenced code block in them carries a marker on the line
right above its fence:

    <!-- doc: c -->              a complete C program: compiled (-Wall -Wextra
                                 -Werror) against the library, run with a
                                 throwaway redis-server's port as argv[1]; it
                                 must exit 0
    <!-- doc: c-top -->          C declarations or functions (a signature, a
                                 loader, an event handler): compiled against the
                                 public headers after FRAGMENT_PRELUDE (the
                                 application names the docs' fragments use)
    <!-- doc: c-body -->         C statements: compiled as a function's body
                                 after FRAGMENT_PRELUDE, with BODY_LOCALS (the
                                 variables the docs' programs name) in scope
    <!-- doc: python -->         a complete Python script: run (by the Python
                                 tests, bindings/python/tests/test_docs.py) with
                                 a throwaway redis-server's URL as argv[1]; it
                                 must exit 0
    <!-- doc: sh -->             a shell script that changes nothing outside its
                                 working directory (a venv, a pip install): run
                                 (by test_docs.py, like the python blocks) with
                                 `sh -e` in a clean copy of the checkout, offline
    <!-- doc: skip: REASON -->   not runnable (a shell transcript, a fragment
                                 of a program shown whole elsewhere, a picture),
                                 and why

A block without a marker fails `markers`, so no block is added uncovered.

Commands:
    doc_blocks.py markers        every block has a valid marker
    doc_blocks.py facts          the docs agree with the code where a check can
                                 tell: the default entry format, the error
                                 lists, the option tables, links, and no test
                                 paths, issue numbers or history in user docs
                                 and public headers, the README's size and its
                                 Quick start
    doc_blocks.py run-c --cc CC --include DIR --lib LIB [--libs "A;B"]
                        --with-redis SCRIPT
                                 compiles and runs every `c` block, and
                                 compiles every `c-top` and `c-body` block
Standard library only.
"""
import argparse
import ast
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("XFETCH_DOC_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MARKER = re.compile(r"^\s*<!-- doc: (c-top|c-body|c|python|sh|skip)(?:: (.*?))? -->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


def doc_files(root=ROOT):
    """The user docs, relative to root."""
    files = ["README.md", "bindings/python/README.md", "bench/README.md"]
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return [f for f in files if os.path.exists(os.path.join(root, f))]


def read(path, root=ROOT):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


class Block:
    def __init__(self, path, line, lang, kind, reason, text):
        self.path, self.line, self.lang = path, line, lang
        self.kind, self.reason, self.text = kind, reason, text

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def blocks(path, root=ROOT):
    """Every fenced block of one file, with the marker above it (kind None
    when there is none)."""
    lines = read(path, root).split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3)
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        prev = lines[start - 1] if start > 0 else ""
        mk = MARKER.match(prev)
        kind, reason = (mk.group(1), mk.group(2)) if mk else (None, None)
        out.append(Block(path, start + 1, lang, kind, reason, "\n".join(body) + "\n"))
    return out


def all_blocks(root=ROOT):
    return [b for f in doc_files(root) for b in blocks(f, root)]


def check_markers(root=ROOT):
    errors = []
    for b in all_blocks(root):
        if b.kind is None:
            errors.append(f"{b.where}: a ```{b.lang} block without a marker "
                          "(<!-- doc: c|python|skip: reason --> on the line above its fence)")
        elif b.kind == "skip" and not (b.reason or "").strip():
            errors.append(f"{b.where}: `skip` needs a reason")
        elif b.kind in ("c", "c-top", "c-body") and b.lang != "c":
            errors.append(f"{b.where}: a `{b.kind}` marker on a ```{b.lang} block")
        elif b.kind == "sh" and b.lang != "sh":
            errors.append(f"{b.where}: a `sh` marker on a ```{b.lang} block")
        elif b.kind == "python" and b.lang != "python":
            errors.append(f"{b.where}: a `python` marker on a ```{b.lang} block")
    return errors


# --- facts -------------------------------------------------------------------


def strip_c_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def c_struct_fields(header, name, root=ROOT):
    """The field names of `typedef struct NAME {...} NAME;` in a public header."""
    text = strip_c_comments(read(header, root))
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S)
    if not m:
        raise SystemExit(f"doc_blocks: struct {name} not found in {header}")
    fields = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            fields.append(re.findall(r"[A-Za-z_]\w*", decl)[-1])
    return fields


def c_error_codes(root=ROOT):
    """{name: code} from the public error list (XF_ERRNO_MAP)."""
    text = read("include/xfetch/base.h", root)
    return {"XF_" + n: int(c) for n, c in re.findall(r"XF_ERR\((\w+), (-\d+),", text)}


def table_after(path, tag, root=ROOT):
    """The rows (lists of cells) of the table that follows `<!-- facts: TAG -->`.
    The table is the run of lines starting with '|' right after the tag (a
    blank line ends it: the rows after one are not part of the table)."""
    if not os.path.exists(os.path.join(root, path)):
        return None
    lines = read(path, root).split("\n")
    for i, line in enumerate(lines):
        if line.strip() == f"<!-- facts: {tag} -->":
            rows, j = [], i + 1
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    rows.append(cells)
                j += 1
            return rows[1:]  # without the header row
    return None


def names_in(cell):
    return re.findall(r"`([A-Za-z_][\w.]*)`", cell)


def compare(what, documented, actual):
    errors = []
    missing = sorted(set(actual) - set(documented))
    extra = sorted(set(documented) - set(actual))
    if missing:
        errors.append(f"{what}: not documented: {', '.join(missing)}")
    if extra:
        errors.append(f"{what}: documented but not in the code: {', '.join(extra)}")
    return errors


def python_params(path, cls, method, root=ROOT):
    """The parameter names (without self) of cls.method in a binding source."""
    tree = ast.parse(read(path, root))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == method:
                    a = fn.args
                    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs][1:]
    raise SystemExit(f"doc_blocks: {cls}.{method} not found in {path}")


def check_table(path, tag, what, actual, root=ROOT):
    rows = table_after(path, tag, root)
    if rows is None:
        return [f"{path}: no `<!-- facts: {tag} -->` table ({what})"]
    documented = [n for r in rows for n in names_in(r[0])]
    return [f"{path}, {what}: {e}" for e in compare("fields", documented, actual)]


def code_default_entry_format(root=ROOT):
    """The format a client writes when options.entry_format is 0, read from
    the code that decides it."""
    text = read("src/link/client_options.c", root)
    m = re.search(r"entry_format \? o->entry_format : (XF_ENTRY_\w+)", text)
    if not m:
        raise SystemExit("doc_blocks: the default entry format's line in "
                         "src/link/client_options.c changed: update this check")
    return {"XF_ENTRY_HASH": 1, "XF_ENTRY_STRING": 2}[m.group(1)]


DEFAULT_CLAIMS = [  # a sentence naming a format as the default
    re.compile(r"format[ -]([12])\b[^.;()]{0,12}\((?:is |= )?the default\b", re.I),
    re.compile(r"format[ -]([12])\b(?: entries| \(the \w+\))? (?:is|stays|remains) the default", re.I),
    re.compile(r"\bthe default\b[^.;]{0,40}\bwrites format[ -]([12])\b", re.I),
    re.compile(r"\bdefault(?: entry)? format(?: is|:)? (?:format )?([12])\b", re.I),
    re.compile(r"XF_ENTRY_(HASH|STRING)`?[^.;]{0,20}\bthe default\b"),
]


def check_default_format(root=ROOT):
    code = code_default_entry_format(root)
    py = read("bindings/python/src/xfetch/_core.py", root)
    errors = []
    if '"entry_format": entry_format or 0' not in py:
        errors.append("bindings/python/src/xfetch/_core.py: entry_format=None no longer "
                      "maps to the C default (0): update this check")
    for path in doc_files(root) + ["CHANGELOG.md"]:
        if not os.path.exists(os.path.join(root, path)):
            continue
        text = read(path, root)
        for rx in DEFAULT_CLAIMS:
            for m in rx.finditer(text):
                g = m.group(1)
                said = {"HASH": 1, "STRING": 2}.get(g) or int(g)
                if said != code:
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{path}:{line}: says format {said} is the default "
                                  f"(\"{m.group(0)}\"); the code writes format {code}")
    return errors


def check_errors(root=ROOT):
    codes = c_error_codes(root)
    errors = []
    rows = table_after("docs/c-guide.md", "c-errors", root)
    if rows is None:
        errors.append("docs/c-guide.md: no `<!-- facts: c-errors -->` table")
    else:
        documented = [n for r in rows for n in names_in(r[0]) if n.startswith("XF_E")]
        errors += [f"docs/c-guide.md, the error list: {e}"
                   for e in compare("codes", documented, codes)]
    rows = table_after("bindings/python/README.md", "python-errors", root)
    src = read("bindings/python/src/xfetch/_errors.py", root)
    by_code = dict(re.findall(r"lib\.(XF_E\w+): (\w+),", src))
    if rows is None:
        errors.append("bindings/python/README.md: no `<!-- facts: python-errors -->` table")
        return errors
    pairs = {}
    for r in rows:
        m = re.match(r"`(XF_E\w+)` (-\d+)", r[0])
        cls = names_in(r[1])
        if not m or not cls:
            errors.append(f"bindings/python/README.md, the error table: a row not of the "
                          f"form `XF_E...` CODE | `Class`: {r}")
            continue
        pairs[m.group(1)] = cls[0]
        if codes.get(m.group(1)) != int(m.group(2)):
            errors.append(f"bindings/python/README.md: {m.group(1)} is {codes.get(m.group(1))} "
                          f"in the header, {m.group(2)} in the table")
    errors += [f"bindings/python/README.md, the error table: {e}"
               for e in compare("codes", pairs, codes)]
    for code, cls in pairs.items():
        if by_code.get(code) not in (None, cls):
            errors.append(f"bindings/python/README.md: {code} raises {by_code[code]}, "
                          f"the table says {cls}")
    errors += [f"bindings/python/src/xfetch/_errors.py: {e}"
               for e in compare("codes mapped to a class", by_code, codes)]
    return errors


def check_events(root=ROOT):
    """Every XF_EV_* of the public header in docs/operations.md's event table,
    and nothing else."""
    text = strip_c_comments(read("include/xfetch/events.h", root))
    actual = re.findall(r"\b(XF_EV_\w+) = \d+", text)
    rows = table_after("docs/operations.md", "c-events", root)
    if rows is None:
        return ["docs/operations.md: no `<!-- facts: c-events -->` table"]
    documented = [n for r in rows for n in names_in(r[0])]
    return [f"docs/operations.md, the events: {e}" for e in compare("events", documented, actual)]


def check_options(root=ROOT):
    errors = []
    for tag, header, struct in [("xf_options", "include/xfetch/options.h", "xf_options"),
                                ("xf_tls_options", "include/xfetch/options.h", "xf_tls_options"),
                                ("xf_policy", "include/xfetch/policy.h", "xf_policy"),
                                ("xf_share_options", "include/xfetch/share.h", "xf_share_options")]:
        errors += check_table("docs/c-guide.md", tag, struct,
                              c_struct_fields(header, struct, root), root)
    # Both faces' constructor (and setup()) is LateSetup's: one keyword list.
    both = python_params("bindings/python/src/xfetch/_setup.py", "LateSetup", "__init__", root)
    errors += check_table("bindings/python/README.md", "python-cache", "Cache(...) keywords",
                          both, root)
    call = python_params("bindings/python/src/xfetch/_cache.py", "Cache", "get_or_compute", root)
    errors += check_table("bindings/python/README.md", "python-policy",
                          "get_or_compute keywords", call, root)
    return errors


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, root=ROOT):
    text = re.sub(r"```.*?```", "", read(path, root), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def check_links(root=ROOT):
    errors = []
    for path in doc_files(root) + ["CHANGELOG.md", "bench/README.md"]:
        if not os.path.exists(os.path.join(root, path)):
            continue
        text = re.sub(r"```.*?```", "", read(path, root), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(os.path.join(root, dest)):
                errors.append(f"{path}: link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest, root):
                errors.append(f"{path}: link to {target}: no such heading in {dest}")
    return errors


HISTORY = [  # what belongs in CHANGELOG.md or the tests, not in user docs
    (re.compile(r"\bissue \d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w/])(?:bindings/python/)?tests/[\w/.-]+\.(?:c|py|sh)\b"), "a test path"),
    (re.compile(r"\bchanged before 1\.0", re.I), "a change story"),
    (re.compile(r"\((?:before|until now)[,:]", re.I), "a \"before\" story"),
]


def check_history(root=ROOT):
    errors = []
    headers = sorted(os.path.relpath(p, root) for p in
                     glob.glob(os.path.join(root, "include", "**", "*.h"), recursive=True))
    for path in doc_files(root) + headers:
        text = read(path, root)
        if path.endswith(".h"):
            text = "\n".join(re.findall(r"/\*.*?\*/", text, re.S))
        rules = HISTORY + ([(re.compile(r"\bREADME\b"), "a README section (see docs/)")]
                           if path.endswith(".h") else [])
        for rx, what in rules:
            for m in rx.finditer(text):
                errors.append(f"{path}: {what}: \"{m.group(0)}\"")
    return errors


QUICK_START = ["./scripts/bench", "./scripts/test"]


def check_readme_shape(root=ROOT):
    """The README stays a user's first page: at most 300 lines, and its Quick
    start is the project's two commands, nothing else."""
    text = read("README.md", root)
    errors = []
    lines = text.count("\n")
    if lines > 300:
        errors.append(f"README.md: {lines} lines; keep it at most 300 (move detail to docs/)")
    quick = [b for b in blocks("README.md", root) if b.lang == "sh"
             and "./scripts/bench" in b.text]
    commands = [ln.split("#")[0].strip() for ln in quick[0].text.splitlines()] if quick else []
    if [c for c in commands if c] != QUICK_START:
        errors.append(f"README.md: the Quick start block must hold exactly {QUICK_START}, "
                      f"not {commands}")
    return errors


def check_facts(root=ROOT):
    return (check_default_format(root) + check_errors(root) + check_events(root)
            + check_options(root) + check_links(root) + check_history(root)
            + check_readme_shape(root))


# --- running the C blocks ------------------------------------------------------


# What the fragments (c-top, c-body) use that the application would define.
FRAGMENT_PRELUDE = """#include <stdatomic.h>
#include <stdint.h>
#include <xfetch.h>
struct histogram;
struct my_metrics {
  atomic_long calls[64], loads[2];
  struct histogram *load_seconds;
};
void histogram_observe(struct histogram **h, double seconds);
void log_warning(const char *fmt, ...);
void log_info(const char *fmt, ...);
int source_changed_since(void *source, const char *key, int64_t age_ms);
int fetch_report(void *source, const char *key, size_t keylen, xf_sink *sink);
"""
# The variables the docs' programs name, in scope of a c-body block.
BODY_LOCALS = """  xf_client *client = NULL;
  const char *key = "k";
  size_t keylen = 1;
  xf_policy policy = XF_POLICY_INIT, p = XF_POLICY_INIT;
  xf_loader_fn loader = NULL;
  void *loader_data = NULL;
  xf_value value;
  xf_options opts = XF_OPTIONS_INIT;
  int rc;
  void *ud = NULL;
  size_t n = 0;
  const char *const *keys = NULL;
  const size_t *keylens = NULL;
  xf_value *values = NULL;
  int *rcs = NULL;
  xf_pool_info info;
"""


def fragment_source(b):
    """The translation unit a c-top or c-body block is compiled in."""
    text = f'#line 1 "{b.where}"\n' + b.text
    if b.kind == "c-top":
        return FRAGMENT_PRELUDE + text
    return (FRAGMENT_PRELUDE + "void doc_fragment(void);\nvoid doc_fragment(void) {\n"
            + BODY_LOCALS + text + "}\n")


def compile_fragments(args, tmp):
    """Compiles (-fsyntax-only) every c-top and c-body block; the count failed."""
    failed = 0
    for n, b in enumerate(b for b in all_blocks() if b.kind in ("c-top", "c-body")):
        src = os.path.join(tmp, f"fragment{n}.c")
        with open(src, "w") as f:
            f.write(fragment_source(b))
        cc = [args.cc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror",
              "-Wno-unused-function", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
              "-fsyntax-only", "-I", args.include, src]
        r = subprocess.run(cc, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {b.where}: does not compile\n{r.stderr}")
            failed += 1
        else:
            print(f"ok   {b.where}: compiled (a {b.kind} block)")
    return failed


def run_c(args):
    cblocks = [b for b in all_blocks() if b.kind == "c"]
    if not cblocks:
        print("doc_blocks: no `c` block found")
        return 1
    libs = [x if x.startswith("-") or "/" in x else "-l" + x
            for x in (args.libs or "").split(";") if x]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="xfetch-doc-c.") as tmp:
        failed += compile_fragments(args, tmp)
        for n, b in enumerate(cblocks):
            src = os.path.join(tmp, f"block{n}.c")
            exe = os.path.join(tmp, f"block{n}")
            with open(src, "w") as f:
                f.write(f'#line 1 "{b.where}"\n' + b.text)
            cc = [args.cc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror",
                  "-I", args.include, src, "-o", exe, args.lib] + libs
            r = subprocess.run(cc, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {b.where}: does not compile\n{r.stderr}")
                failed += 1
                continue
            r = subprocess.run(["sh", args.with_redis, exe], capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0:
                print(f"FAIL {b.where}: exit {r.returncode}\n{r.stdout}{r.stderr}")
                failed += 1
            else:
                shown = " | ".join(r.stdout.split("\n"))[:160]
                print(f"ok   {b.where}: compiled and ran: {shown}")
    total = len([b for b in all_blocks() if b.kind in ("c", "c-top", "c-body")])
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("markers")
    sub.add_parser("facts")
    rc = sub.add_parser("run-c")
    rc.add_argument("--cc", required=True)
    rc.add_argument("--include", required=True)
    rc.add_argument("--lib", required=True)
    rc.add_argument("--libs")
    rc.add_argument("--with-redis", required=True)
    args = ap.parse_args()
    if args.cmd == "run-c":
        return run_c(args)
    errors = check_markers() if args.cmd == "markers" else check_facts()
    for e in errors:
        print(e)
    n = len(all_blocks()) if args.cmd == "markers" else 1
    print(f"{0 if errors else n} passed, {len(errors)} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
