#!/usr/bin/python3
"""evict_suite.py — build the eviction bench's multi-domain text suite.

`scdb bench evict` and `scdb train-policy` measure and train the eviction
policy on text domains taken from files of installed Debian packages.  This
script picks the files, cuts the texts and writes, under --out (default
data/evict_suite/):

  <domain>.eval.txt     every domain: what `scdb bench evict` measures on
  <domain>.train.txt    training domains only: what `scdb train-policy`
  <domain>.val.txt      trains on, and its validation windows
  manifest.json         the rule, the split, and for every text the files it
                        was cut from (path, Debian package and version, the
                        byte range taken, the chunk's place in the text and
                        its crc32), so the texts are reproducible and
                        checkable whatever package versions a machine has

The rule (also in manifest.json, and checked by tests/test_evict_suite.c):

  * candidates: the domain's globs over the files of the Debian packages the
    project installs (scripts/install-deps.sh, any option, and what those
    depend on), each as its package shipped it (dpkg's md5sums),
    decompressed if .gz, text (no NUL,
    < 1% control bytes), at least MIN_BYTES long, never a file the model
    family was trained or held out on (data/models/TRAINING.json), never
    under /usr/lib/python3.11 (the `python` model's corpus) or /usr/local;
  * portion of a file: b = crc32(path) % 8; b in {0, 1}: eval, b == 2: val,
    b >= 3: train (so the portions are disjoint by construction);
  * order within a portion: ascending crc32("order:" + path), then path;
  * each file gives one chunk of at most CHUNK bytes from its middle (the
    start moved forward to the next line start, so licence headers and
    boilerplate at the top of a file weigh little); files are taken in that
    order, at most PER_PACKAGE per package, until the chunks reach the
    portion's size (eval and train 96 KiB, val 32 KiB, like
    data/heldout/*.txt); if they do not, a second pass in the same order
    takes the files the package cap skipped; the chunks are then joined
    with "\\n" in that order, the last one cut to fit;
  * a file is used by one domain only (the first domain in DOMAINS that
    lists it).

The split is by domain and fixed here, before any measurement: the policy
trains on the `seen` domains only; the others are never trained on and are
reported apart.  Every family of text has an unseen member that is not a
near copy of a seen one: prose (seen) / changelogs (unseen), man section 1
(seen) / sections 5 and 8 (unseen), C sources (seen) / C headers (unseen),
Python and shell (seen) / Perl (unseen), configuration files and HTML (seen)
/ CMake and Vim script (unseen): three of the unseen domains are languages
no seen domain is written in.

  /usr/bin/python3 tools/evict_suite.py            # write data/evict_suite
  /usr/bin/python3 tools/evict_suite.py --check    # compare with the shipped
                                                    # suite (differences come
                                                    # from package versions)
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import zlib

CHUNK = 4096
PER_PACKAGE = 6
MIN_BYTES = 512
SIZES = {"eval": 96 << 10, "train": 96 << 10, "val": 32 << 10}
EXCLUDE_PREFIXES = ("/usr/local/", "/usr/lib/python3.11/", "/usr/share/doc/debian/",
                    "/usr/share/common-licenses/", "/usr/share/games/fortunes/",
                    "/usr/include/", "/etc/ssl/", "/etc/ssh/")


def portion_of(path):
    b = zlib.crc32(path.encode()) % 8
    return "eval" if b < 2 else ("val" if b == 2 else "train")


def order_key(path):
    return (zlib.crc32(("order:" + path).encode()), path)


# ---------------------------------------------------------------- domains

OWNED = []      # every path a Debian package owns (filled by build())


def glob_re(pattern):
    """A glob as a regular expression over whole paths: ** any depth, * and ?
    within one path component."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:[^/]*/)*"
            i += 3
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def g(*patterns):
    """Package-owned paths matching any of the globs (dpkg's file lists, not
    the file system: only what a package installed counts)."""
    rx = [glob_re(p) for p in patterns]
    return [p for p in OWNED if any(r.match(p) for r in rx)]


def first_line(path):
    try:
        with open(path, "rb") as f:
            return f.readline(200)
    except OSError:
        return b""


SHELLS = (b"/bin/sh", b"/bin/bash", b"/bin/dash", b"/usr/bin/sh", b"/usr/bin/bash",
          b"env sh", b"env bash")


def is_shell_script(path):
    if path.endswith(".sh"):
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not st.st_mode & 0o111 or st.st_size > (1 << 20):
        return False      # scripts are executable (or named *.sh)
    l = first_line(path)
    return l.startswith(b"#!") and any(s in l.split(b"\n")[0] for s in SHELLS)


def shipped_md5():
    """path -> md5 of the file as its package shipped it (dpkg's md5sums, and
    the conffile records for /etc)."""
    md5 = {}
    for f in glob.glob("/var/lib/dpkg/info/*.md5sums"):
        with open(f, errors="replace") as h:
            for line in h:
                parts = line.rstrip("\n").split("  ", 1)
                if len(parts) == 2:
                    md5["/" + parts[1]] = parts[0]
    out = subprocess.run(["dpkg-query", "-W", "-f=${Conffiles}\n", "*"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("/"):
            md5[parts[0]] = parts[1]
    return md5


def man(section):
    return g("/usr/share/man/man%s/*.%s*.gz" % (section, section))


DOMAINS = [
    # name, seen, what, candidate function
    ("prose", True, "English prose documentation: README, FAQ, *.txt, *.md under /usr/share/doc",
     lambda: [p for p in g("/usr/share/doc/*/README*", "/usr/share/doc/*/FAQ*",
                          "/usr/share/doc/**/*.txt", "/usr/share/doc/**/*.txt.gz",
                          "/usr/share/doc/**/*.md", "/usr/share/doc/**/*.md.gz")
              if "changelog" not in os.path.basename(p).lower()]),
    ("changelog", False, "Debian and upstream changelogs: /usr/share/doc/*/changelog*.gz",
     lambda: g("/usr/share/doc/*/changelog.Debian.gz", "/usr/share/doc/*/changelog.gz")),
    ("man1", True, "troff man pages, section 1 (user commands): /usr/share/man/man1",
     lambda: man(1)),
    ("man5", False, "troff man pages, section 5 (file formats): /usr/share/man/man5",
     lambda: man(5)),
    ("man8", False, "troff man pages, section 8 (administration): /usr/share/man/man8",
     lambda: man(8)),
    ("c-source", True, "C sources (*.c, *.c.gz) shipped by packages (examples, tests, tools)",
     lambda: g("/usr/**/*.c", "/usr/**/*.c.gz")),
    ("c-header", False, "C headers outside /usr/include (compiler, Perl, NumPy, ...)",
     lambda: g("/usr/lib/**/*.h", "/usr/share/**/*.h", "/usr/src/**/*.h")),
    ("python", True, "Python modules of /usr/lib/python3/dist-packages (not the standard library)",
     lambda: g("/usr/lib/python3/dist-packages/**/*.py")),
    ("shell", True, "shell scripts (#! sh/bash/dash, or *.sh) in /usr and /etc",
     lambda: [p for p in g("/usr/bin/*", "/usr/sbin/*", "/usr/lib/**/*", "/usr/share/**/*.sh",
                          "/usr/libexec/**/*", "/etc/**/*")
              if os.path.isfile(p) and is_shell_script(p)]),
    ("config", True, "configuration files: /etc as packages ship it, and *.conf, *.ini, "
     "*.cfg, *.toml, *.yaml under /usr/share",
     lambda: [p for p in g("/etc/**/*", "/usr/share/**/*.conf", "/usr/share/**/*.conf.gz",
                          "/usr/share/**/*.ini", "/usr/share/**/*.cfg", "/usr/share/**/*.toml",
                          "/usr/share/**/*.yaml", "/usr/share/**/*.yml")
              if os.path.isfile(p) and not is_shell_script(p)]),
    ("perl", False, "Perl modules (*.pm)",
     lambda: g("/usr/share/perl5/**/*.pm", "/usr/share/perl/**/*.pm",
               "/usr/lib/x86_64-linux-gnu/perl*/**/*.pm")),
    ("cmake", False, "CMake modules (*.cmake)",
     lambda: g("/usr/share/cmake*/**/*.cmake", "/usr/lib/**/*.cmake")),
    ("vim", False, "Vim script (*.vim) under /usr/share/vim",
     lambda: g("/usr/share/vim/**/*.vim")),
    ("html", True, "HTML documentation under /usr/share/doc",
     lambda: g("/usr/share/doc/**/*.html", "/usr/share/doc/**/*.html.gz",
               "/usr/share/doc/**/*.htm")),
]

# ---------------------------------------------------------------- files


def owners():
    """path -> (package, version) for every file dpkg knows."""
    ver = {}
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\\t${Version}\\n"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p, v = line.split("\t")
        ver[p] = v
    own = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        with open(lst, errors="replace") as f:
            for line in f:
                own.setdefault(line.rstrip("\n"), (pkg, ver.get(pkg, "?")))
    return own


def project_packages(repo):
    """The packages scripts/install-deps.sh installs (every option's list) and
    what they depend on (Depends, Pre-Depends; the script installs without
    recommends), plus the essential / required ones every Debian has."""
    with open(os.path.join(repo, "scripts", "install-deps.sh")) as f:
        script = f.read()
    roots = []
    for body in re.findall(r"pkgs\+?=\(([^)]*)\)", script):
        roots += body.split()
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends},"
                          "${Pre-Depends}\t${Provides}\t${Essential}\t${Priority}\n"],
                         capture_output=True, text=True, check=True).stdout
    deps, prov, inst, base = {}, {}, set(), set()
    for line in out.splitlines():
        p, st, d, pr, ess, prio = line.split("\t")
        if "install ok installed" not in st:
            continue
        inst.add(p)
        deps[p] = d
        for x in pr.split(","):
            x = x.strip().split(" ")[0]
            if x:
                prov.setdefault(x, []).append(p)
        if ess == "yes" or prio == "required":
            base.add(p)

    def resolve(name):
        name = re.sub(r"\(.*?\)", "", name).strip().split(":")[0]
        if name in inst:
            return [name]
        return [q for q in prov.get(name, []) if q in inst]

    seen, todo = set(base), [r for r in roots]
    while todo:
        for q in resolve(todo.pop()):
            if q in seen and q not in base:
                continue
            if q in seen and q in base and q not in roots:
                pass
            seen.add(q)
            for alt in deps.get(q, "").split(","):
                for a in alt.split("|"):
                    r = resolve(a) if a.strip() else []
                    if r:
                        todo += [x for x in r if x not in seen]
                        break
    PROJECT_ROOTS[:] = roots
    return seen


PROJECT_ROOTS = []


MD5 = {}


def read_any(path):
    """The file's (decompressed) bytes, or None where it is not as its package
    shipped it (md5 differs or unknown) or not readable."""
    try:
        with open(path, "rb") as f:
            data = f.read(16 << 20)
    except OSError:
        return None
    if MD5.get(path) != hashlib.md5(data).hexdigest():
        return None
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
    return data


CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13))


def is_text(data):
    if b"\0" in data:
        return False
    ctl = len(data) - len(data.translate(None, CONTROL))
    return ctl * 100 < len(data)


def chunk_of(data):
    """(offset, bytes): at most CHUNK bytes from the middle, from a line start."""
    if len(data) <= CHUNK:
        return 0, data
    off = (len(data) - CHUNK) // 2
    nl = data.find(b"\n", off, off + 512)
    if nl >= 0:
        off = nl + 1
    return off, data[off:off + CHUNK]


def cut(paths, size, own, used):
    """The text of one portion and the chunks it is made of (rule above)."""
    ordered = sorted(paths, key=order_key)
    chunks, total, per_pkg, bad = {}, 0, {}, set()
    for capped in (True, False):
        for p in ordered:
            if total >= size:
                break
            if p in used or p in chunks or p in bad:
                continue
            pkg = own[p][0]
            if capped and per_pkg.get(pkg, 0) >= PER_PACKAGE:
                continue
            data = read_any(p)
            if data is None or len(data) < MIN_BYTES or not is_text(data):
                bad.add(p)
                continue
            chunks[p] = chunk_of(data)
            per_pkg[pkg] = per_pkg.get(pkg, 0) + 1
            total += len(chunks[p][1]) + 1
    blob, files = bytearray(), []
    for p in ordered:
        if p not in chunks or len(blob) + (1 if blob else 0) >= size:
            continue
        off, chunk = chunks[p]
        if blob:
            blob += b"\n"
        at = len(blob)
        chunk = chunk[:size - at]
        blob += chunk
        pkg, ver = own[p]
        files.append({"path": p, "package": pkg, "version": ver, "offset": off,
                      "bytes": len(chunk), "at": at, "crc32": zlib.crc32(chunk)})
        used.add(p)
    return bytes(blob), files


def training_files(repo):
    p = os.path.join(repo, "data", "models", "TRAINING.json")
    with open(p) as f:
        t = json.load(f)
    s = set()
    for d in t["domains"].values():
        s |= set(d.get("train_files", [])) | set(d.get("heldout_files", []))
    return s


def build(repo):
    own = owners()
    allowed = project_packages(repo)
    own = {p: o for p, o in own.items() if o[0] in allowed}
    OWNED[:] = sorted(own)
    MD5.update(shipped_md5())
    banned = training_files(repo)
    used = set()
    domains = []
    texts = {}
    for name, seen, what, fn in DOMAINS:
        cand = sorted(set(fn()))
        cand = [p for p in cand if os.path.isfile(p) and not os.path.islink(p) and
                p in own and p not in banned and p not in used and
                not p.startswith(EXCLUDE_PREFIXES)]
        by_portion = {"eval": [], "val": [], "train": []}
        for p in cand:
            by_portion[portion_of(p)].append(p)
        dom = {"name": name, "seen": seen, "what": what, "candidates": len(cand),
               "portions": {}}
        portions = ("train", "val", "eval") if seen else ("eval",)
        for part in portions:
            blob, files = cut(by_portion[part], SIZES[part], own, used)
            fname = "%s.%s.txt" % (name, part)
            texts[fname] = blob
            dom["portions"][part] = {"file": fname, "bytes": len(blob),
                                     "crc32": zlib.crc32(blob),
                                     "candidates": len(by_portion[part]), "files": files}
        domains.append(dom)
        sys.stderr.write("evict_suite: %-10s %s %5d candidates, %s\n" % (
            name, "seen  " if seen else "unseen", len(cand),
            ", ".join("%s %d B from %d files" % (k, v["bytes"], len(v["files"]))
                      for k, v in dom["portions"].items())))
    manifest = {
        "suite": "scdb-evict-suite",
        "version": 1,
        "rule": {
            "portion": "b = crc32(path) % 8: b < 2 eval, b == 2 val, b >= 3 train",
            "order": "ascending crc32('order:' + path), then path",
            "chunk": "at most %d bytes from the middle of the (decompressed) file, "
                     "from the next line start; chunks joined with '\\n'" % CHUNK,
            "chunk_bytes": CHUNK,
            "min_file_bytes": MIN_BYTES,
            "sizes": SIZES,
            "excluded": "files of data/models/TRAINING.json, paths under " +
                        ", ".join(EXCLUDE_PREFIXES) + ", files no Debian package owns, "
                        "binary files, a file already used by an earlier domain",
            "packages": "files of the packages scripts/install-deps.sh installs (any option) "
                        "and of what they depend on (Depends, Pre-Depends), plus the "
                        "essential / required packages; each file as its package shipped "
                        "it (dpkg md5sums)",
            "package_roots": PROJECT_ROOTS,
            "split": "by domain, fixed in tools/evict_suite.py: seen domains have train, "
                     "val and eval texts; unseen domains only eval and are never trained on",
        },
        "domains": domains,
    }
    return manifest, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data/evict_suite")
    ap.add_argument("--check", action="store_true",
                    help="compare a fresh selection with the shipped suite; write nothing")
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    manifest, texts = build(repo)
    if a.check:
        with open(os.path.join(a.out, "manifest.json")) as f:
            old = json.load(f)
        diff = 0
        for d_old, d_new in zip(old["domains"], manifest["domains"]):
            for part, p_new in d_new["portions"].items():
                p_old = d_old["portions"].get(part, {})
                same = p_old.get("crc32") == p_new["crc32"]
                diff += not same
                print("%-10s %-5s %s" % (d_new["name"], part, "same" if same else "DIFFERS"))
        return 1 if diff else 0
    os.makedirs(a.out, exist_ok=True)
    for fname, blob in texts.items():
        with open(os.path.join(a.out, fname), "wb") as f:
            f.write(blob)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
