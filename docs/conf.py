# Sphinx configuration of the hpsearch documentation (`make docs`).
#
# Pages are Markdown (MyST). Two references are generated at build time, so
# they cannot drift from the code:
#   - the C++ API from the public headers (the list HPSEARCH_PUBLIC_HEADERS
#     in CMakeLists.txt), through Doxygen's XML and Breathe;
#   - the CLI from the hpsearch binary's own --help (scripts/
#     gen-cli-reference.py; binary: $HPSEARCH, default build/release/hpsearch);
#   - the space.json reference from its JSON Schema, search/space.schema.json
#     (scripts/gen-space-reference.py).
# contributing/docs.md says why Sphinx and how the docs are checked.
import os
import re
import subprocess
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)

project = "hpsearch"
author = "the hpsearch authors"
copyright = "the hpsearch authors"
release = version = "0.1.0"

extensions = ["myst_parser", "breathe"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated/**", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for headings down to level 3, so [text](page.md#a-heading) links
# are checked by the build like page links.
myst_heading_anchors = 3

html_theme = "sphinx_rtd_theme"
html_title = "hpsearch"
html_static_path = ["_static"]
html_css_files = ["hpsearch.css"]
html_show_sourcelink = False
html_copy_source = False
pygments_style = "friendly"

primary_domain = "cpp"
highlight_language = "text"


def public_headers():
    """The installed headers, as CMakeLists.txt lists them."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"set\(HPSEARCH_PUBLIC_HEADERS(.*?)\)", text, re.S)
    if not m:
        sys.exit("docs/conf.py: HPSEARCH_PUBLIC_HEADERS not found in CMakeLists.txt")
    return m.group(1).split()


def build_dir():
    # sphinx-build's output folder is build/docs/html (Makefile); Doxygen's
    # XML goes beside it. Overridable for other layouts.
    return os.environ.get("HPSEARCH_DOCS_WORK", os.path.join(ROOT, "build", "docs"))


def run_doxygen():
    out = os.path.join(build_dir(), "doxygen")
    os.makedirs(out, exist_ok=True)
    headers = [os.path.join(ROOT, h) for h in public_headers()]
    doxyfile = os.path.join(out, "Doxyfile")
    settings = {
        "PROJECT_NAME": "hpsearch",
        "OUTPUT_DIRECTORY": out,
        "INPUT": " ".join(headers),
        "STRIP_FROM_PATH": ROOT,
        "STRIP_FROM_INC_PATH": ROOT,
        "FULL_PATH_NAMES": "YES",
        "INPUT_FILTER": '"python3 %s"' % os.path.join(ROOT, "scripts", "doxygen-filter.py"),
        "FILTER_SOURCE_FILES": "NO",
        "GENERATE_XML": "YES",
        "GENERATE_HTML": "NO",
        "GENERATE_LATEX": "NO",
        "EXTRACT_ALL": "YES",
        "EXTRACT_PRIVATE": "NO",
        "EXTRACT_STATIC": "YES",
        "HIDE_UNDOC_MEMBERS": "NO",
        "JAVADOC_AUTOBRIEF": "YES",
        "MARKDOWN_SUPPORT": "NO",
        "ENABLE_PREPROCESSING": "YES",
        "MACRO_EXPANSION": "NO",
        "QUIET": "YES",
        "WARNINGS": "NO",
        "WARN_IF_UNDOCUMENTED": "NO",
        "WARN_LOGFILE": os.path.join(out, "warnings.log"),
        "CASE_SENSE_NAMES": "YES",
    }
    with open(doxyfile, "w", encoding="utf-8") as f:
        for k, v in settings.items():
            f.write(f"{k} = {v}\n")
    p = subprocess.run(["doxygen", doxyfile], cwd=out, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"docs/conf.py: doxygen failed ({p.returncode}): {p.stderr[-2000:]}")
    return os.path.join(out, "xml")


def run_cli_reference():
    exe = os.environ.get("HPSEARCH", os.path.join(ROOT, "build", "release", "hpsearch"))
    if not os.path.isabs(exe):
        exe = os.path.join(ROOT, exe)
    target = os.path.join(DOCS, "_generated", "cli.md")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-cli-reference.py"),
                        exe, target], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr.strip() or f"gen-cli-reference.py exited {p.returncode}")


def run_space_reference():
    target = os.path.join(DOCS, "_generated", "space-json.md")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-space-reference.py"),
                        os.path.join(ROOT, "search", "space.schema.json"), target],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr.strip() or f"gen-space-reference.py exited {p.returncode}")


def run_cpp_reference(xml_dir):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-cpp-reference.py"),
                        xml_dir, os.path.join(DOCS, "_generated"), *public_headers()],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr.strip() or f"gen-cpp-reference.py exited {p.returncode}")


breathe_projects = {"hpsearch": run_doxygen()}
run_cpp_reference(breathe_projects["hpsearch"])
breathe_default_project = "hpsearch"
breathe_default_members = ("members",)
breathe_show_include = True
run_cli_reference()
run_space_reference()
