#!/usr/bin/python3
"""Input keys for clang-tidy's results (used by scripts/run-clang-tidy.sh).

clang-tidy is deterministic: the same translation unit, compile command,
.clang-tidy, clang-tidy version and system headers give the same findings.
This script computes, per source file, a SHA-256 over all of those:

  - the file's text and the text of every header of this repository it
    includes, directly or through other headers of ours (quoted includes,
    resolved against the repository root and the including file's folder;
    an #include inside #if counts as included, which can only add inputs);
  - its compile command from compile_commands.json, with the compiler
    launcher, the output path and the build and source folders taken out
    (so build/dev and build/release give the same key when their flags are
    the same, and a clean clone elsewhere gives the same key);
  - .clang-tidy, `clang-tidy --version`, the extra arguments the caller
    passes, and the versions of the Debian packages whose headers the
    sources include (dpkg-query), so an upgraded library reruns everything.

Commands:
  tidy-cache.py keys BUILD_DIR [--extra ARG]... -- FILE...
      prints "KEY FILE" per file.
A file whose key is listed in the cache file (.ci/clang-tidy-clean.txt) was
checked clean with exactly these inputs, by run-clang-tidy.sh on a run in
which every file was clean; the script only reads and writes that file.
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.M)
# Debian packages whose headers our sources include (install-deps.sh).
PACKAGES = [
    "libstdc++-12-dev", "nlohmann-json3-dev", "libspdlog-dev", "libfmt-dev", "cppzmq-dev",
    "libzmq3-dev", "libsqlite3-dev", "libcereal-dev", "libcli11-dev", "libboost-dev",
    "libre2-dev", "libcpp-httplib-dev", "zlib1g-dev", "libgtest-dev", "clang-tidy",
    "libclang-common-14-dev",
]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def project_includes(path, seen):
    """Adds to `seen` every header of the repository that `path` includes."""
    for name in INCLUDE.findall(read(path)):
        name = name.decode("utf-8", "replace")
        for base in (os.path.dirname(path), ROOT):
            candidate = os.path.normpath(os.path.join(base, name))
            if candidate.startswith(ROOT + os.sep) and os.path.isfile(candidate):
                if candidate not in seen:
                    seen.add(candidate)
                    project_includes(candidate, seen)
                break


def normalized_command(entry, build_dir):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if i == 0 and os.path.basename(a) in ("ccache", "sccache"):
            continue
        a = a.replace(build_dir, "<build>").replace(ROOT, "<src>")
        out.append(a)
    return "\0".join(out)


def environment_key(extra):
    h = hashlib.sha256()
    h.update(read(os.path.join(ROOT, ".clang-tidy")))
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    h.update(version.encode())
    h.update("\0".join(extra).encode())
    packages = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + PACKAGES,
        capture_output=True, text=True).stdout
    h.update(packages.encode())
    return h.digest()


def main(argv):
    if len(argv) < 3 or argv[0] != "keys" or "--" not in argv:
        sys.stderr.write("usage: tidy-cache.py keys BUILD_DIR [--extra ARG]... -- FILE...\n")
        return 2
    build_dir = os.path.abspath(argv[1])
    sep = argv.index("--")
    extra = [argv[i + 1] for i in range(2, sep) if argv[i] == "--extra" and i + 1 < sep]
    files = argv[sep + 1:]
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = {os.path.normpath(os.path.join(e["directory"], e["file"])): e
                   for e in json.load(f)}
    env = environment_key(extra)
    for name in files:
        path = os.path.normpath(os.path.join(ROOT, name))
        entry = entries.get(path)
        if entry is None:
            print("none " + name)  # not compiled in this build: always checked
            continue
        headers = set()
        project_includes(path, headers)
        h = hashlib.sha256(env)
        h.update(normalized_command(entry, build_dir).encode())
        for p in [path] + sorted(headers):
            h.update(os.path.relpath(p, ROOT).encode() + b"\0")
            h.update(hashlib.sha256(read(p)).digest())
        print(h.hexdigest() + " " + name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
