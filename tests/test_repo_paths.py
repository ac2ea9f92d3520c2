#!/usr/bin/env python3
"""test_repo_paths.py SOURCE_DIR -- committed text matches the tree.

Two checks over the files git tracks (STYLE.md, "Documentation": a comment
that points at something points at what exists; paths in committed text are
relative to the repository, nothing names the machine it was written on):

 1. Every repository path the documentation and the code's comments cite
    exists: in the Markdown pages (README.md, docs/, schema/FORMATS.md, every
    tracked *.md) their text and their relative links, and in the C, CUDA,
    Python and shell sources their comments.  A cited path is one that starts
    with a top-level folder of the repository (`evict/train_rl.c`,
    `tools/plot_evict.py`, `data/policies/...`, `docs/DESIGN.md`), not one
    inside another path (`/usr/share/scdb/models`, a URL).  Placeholders
    stand for any name: `<name>`, `NAME`-style capitals, `*`, `{a,b}`; such a
    path must match at least one tracked path.
 2. No tracked text file carries an absolute path of a build tree or a home
    directory: one under root's or a user's home, under the /work checkouts,
    or a build folder under /tmp.  The texts the model family trains and is
    measured on (data/heldout/, data/evict_suite/) are quoted third-party
    text (man pages, scripts) and are not checked.

Exit 0 when both hold; 1 with one line per finding; 77 (skipped) outside a
git checkout (a source package has no `git ls-files`).
"""

import fnmatch
import os
import re
import subprocess
import sys

# Quoted third-party text (Debian man pages, source files, prose): the
# family's training and evaluation corpora.
CORPORA = ("data/heldout/", "data/evict_suite/")
CORPUS_EXT = (".txt",)

# Capitals that stand for a value in a cited path (`data/models/NAME/`,
# `docs/X.md`): one letter, or a word of this list; any other capitals are
# a name to find (`docs/DESIGN.md`), so a misspelt page is still reported.
PLACEHOLDER_CAPS = re.compile(r"\b(?:[A-Z][0-9]?|NAME|TARGET|DIR|FILE|PATH|ID|MODEL|DOMAIN|"
                              r"ADAPTER|PRODUCER|CONSUMER|PAIR|TEXT|PREFIX)\b")


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "replace").split("\0") if p]


def read_text(root, path):
    """The file's text, or None for a binary file (a NUL byte) or a link."""
    full = os.path.join(root, path)
    if os.path.islink(full) or not os.path.isfile(full):
        return None
    with open(full, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


# ------------------------------------------------------------ comments

def c_comments(text):
    """(line, comment text) of each /* */ and // comment; strings skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            line += text.count("\n", i, j)
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        else:
            i += 1
    return out


def hash_comments(text, python):
    """(line, text) of # comments, and of docstrings in Python."""
    out = []
    if python:
        for m in re.finditer(r'("""|\'\'\')(.*?)\1', text, re.S):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    for k, ln in enumerate(text.split("\n"), 1):
        s = ln.lstrip()
        if s.startswith("#") and not s.startswith("#!"):
            out.append((k, s[1:]))
        else:
            # a trailing comment: ' # ...' outside quotes (good enough here)
            m = re.search(r"\s#\s(.*)$", ln)
            if m and ln.count('"') % 2 == 0 and ln.count("'") % 2 == 0:
                out.append((k, m.group(1)))
    return out


def sources(path, text):
    """(line, text) spans of path that cite paths."""
    if path.endswith(".md"):
        return [(1, text)]
    if path.endswith((".c", ".h", ".cu", ".cuh", ".proto")):
        return c_comments(text)
    if path.endswith((".py", ".pyi")):
        return hash_comments(text, True)
    if path.endswith(".sh") or path.endswith("CMakeLists.txt") or path.endswith(".cmake"):
        return hash_comments(text, False)
    return []


# ------------------------------------------------------------ check 1

def expand_braces(p):
    m = re.search(r"\{([^{}]*,[^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


class Tree:
    def __init__(self, files):
        self.files = set(files)
        self.dirs = set()
        for f in files:
            parts = f.split("/")
            for k in range(1, len(parts)):
                self.dirs.add("/".join(parts[:k]))
        self.top = sorted({f.split("/")[0] for f in files if "/" in f})
        self.all = sorted(self.files | self.dirs)

    def exists(self, p):
        p = p.rstrip("/")
        return p in self.files or p in self.dirs

    def matches(self, p):
        """p exists, or, with placeholders, matches a tracked path; every
        alternative of a {a,b} list must."""
        return all(self.matches_one(q) for q in expand_braces(p))

    def matches_one(self, p):
        if self.exists(p):
            return True
        g = re.sub(r"<[^<>/]*>", "*", p)
        g = PLACEHOLDER_CAPS.sub("*", g).replace("...", "*").rstrip("/")
        if "*" not in g and "?" not in g:
            return False
        # a placeholder stands for one path component or part of one
        rx = re.compile(fnmatch.translate(g).replace(".*", "[^/]*"))
        return any(rx.match(x) for x in self.all)


def cited_paths(tree, text):
    """(offset, path) of repository paths cited in text: a top-level folder
    not inside another path, a word or a Markdown link's target (those are
    relative to the page: md_links), nor another project's ("llama.cpp's
    common/log.h"), then its components.  A run of bare
    words outside backticks ("the model/codebook/pair") is prose, not a
    path: a path names a file (an extension), a folder (a trailing slash) or
    a placeholder, or stands alone in backticks."""
    top = "|".join(re.escape(t) for t in tree.top)
    rx = re.compile(r"(?<![\w./~$@:-])(?<!\]\()(?:" + top + r")/[\w.<>*?{},+@-]*(?:/[\w.<>*?{},+@-]*)*")
    for m in rx.finditer(text):
        if re.search(r"\w's `?$", text[max(0, m.start() - 4):m.start()]):
            continue                                  # another project's path

        p = re.sub(r"[.,;:)]+$", "", m.group(0))     # trailing punctuation
        p = re.sub(r":\d+(-\d+)?$", "", p)          # a :line suffix
        ticked = text[m.start() - 1:m.start()] == "`" and text[m.start() + len(p):m.start() + len(p) + 1] == "`"
        last = p.rstrip("/").rsplit("/", 1)[-1]
        if not (ticked or p.endswith("/") or "." in last[1:] or re.search(r"[<>*?{]", p)
                or PLACEHOLDER_CAPS.search(p)):
            continue
        yield m.start(), os.path.normpath(p) + ("/" if p.endswith("/") else "")


def md_links(text):
    """Relative Markdown link targets: (offset, target)."""
    for m in re.finditer(r"\]\(([^()\s]+)\)", text):
        t = m.group(1)
        if re.match(r"[a-z]+:", t) or t.startswith("#"):
            continue
        yield m.start(1), t.split("#", 1)[0]


def cites(path):
    """Whether path is documentation or code whose citations are checked.
    Under data/ only the READMEs: the rest are outputs of a run (a bench's
    tables name the files that run read, some since replaced) and corpora."""
    if path.startswith("data/"):
        return path.endswith("/README.md")
    return bool(re.search(r"\.(md|c|h|cu|cuh|proto|py|pyi|sh|cmake)$|(^|/)CMakeLists\.txt$", path))


def check_cited(root, files, tree):
    bad = []
    for path in files:
        if not cites(path):
            continue
        text = read_text(root, path)
        if text is None:
            continue
        for line, span in sources(path, text):
            for off, p in cited_paths(tree, span):
                if not tree.matches(p):
                    bad.append("%s:%d: cites %s, which is not in the tree"
                               % (path, line + span.count("\n", 0, off), p))
            if path.endswith(".md"):
                base = os.path.dirname(path)
                for off, t in md_links(span):
                    if not t:
                        continue
                    p = os.path.normpath(os.path.join(base, t))
                    if p.startswith("..") or not tree.matches(p):
                        bad.append("%s:%d: links %s, which is not in the tree"
                                   % (path, line + span.count("\n", 0, off), t))
    return bad


# ------------------------------------------------------------ check 2

# under root's or a user's home or the /work checkouts; a /tmp build folder
MACHINE = re.compile(r"(?<![\w.:/-])(?:/(?:root|home/[\w.-]+|work)/[\w.-]+"
                     r"|/tmp(?:/[\w.-]+)*?/[\w.-]*build\b[\w.-]*)")


def check_machine(root, files):
    bad = []
    for path in files:
        if path.startswith(CORPORA) and path.endswith(CORPUS_EXT):
            continue
        text = read_text(root, path)
        if text is None:
            continue
        for k, ln in enumerate(text.split("\n"), 1):
            for m in MACHINE.finditer(ln):
                bad.append("%s:%d: names a path of the machine it was written on: %s"
                           % (path, k, m.group(0)))
    return bad


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: test_repo_paths.py SOURCE_DIR\n")
        return 2
    root = argv[1]
    files = tracked(root)
    if files is None:
        print("not a git checkout: skipped")
        return 77
    tree = Tree(files)
    bad = check_cited(root, files, tree) + check_machine(root, files)
    for b in bad:
        print(b)
    print("%d finding(s) in %d tracked files" % (len(bad), len(files)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
