#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for our headers (used by `make docs`, docs/conf.py).

Our headers document declarations with plain `//` comments (the project's
style), which Doxygen ignores. This filter prints the header with:
  - the file's first comment block as the file's description (`/// @file`);
  - every other whole-line `//` comment as a `///` doc comment (it documents
    the declaration that follows);
  - a trailing `// ...` after a declaration on the same line as `///< ...`
    (it documents that member).
Line numbers are kept (one line out per line in), so Doxygen's locations
stay right.

Usage: doxygen-filter.py HEADER
"""
import os
import re
import sys

WHOLE = re.compile(r"^(\s*)//(?!/)(.*)$")
TRAILING = re.compile(r"^(.*?[;,{)])(\s*)//(?!/)\s?(.*)$")


def doc(text):
    """Comment text with "--" kept as written (Doxygen would print a dash)."""
    return re.sub(r"(?<!\\)--", r"\\--", text)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    in_header = True  # the file's first comment block, before any code
    first = True
    for line in lines:
        m = WHOLE.match(line)
        if in_header:
            if m and not m.group(1):
                text = m.group(2)
                # "@file NAME" names this file; the rest of the line (and
                # the block) is its description.
                out.append(("/// @file " + os.path.basename(sys.argv[1]) + doc(text))
                           if first else ("///" + doc(text)))
                first = False
                continue
            in_header = False
        if m:
            out.append(m.group(1) + "///" + doc(m.group(2)))
            continue
        t = TRAILING.match(line)
        if t and '"' not in t.group(1):
            out.append(t.group(1) + t.group(2) + "///< " + doc(t.group(3)))
            continue
        out.append(line)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
