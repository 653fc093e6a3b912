#!/usr/bin/env python3
"""Checks the documentation (run by `make check-docs`, part of `make test`).

1. Runnable blocks: every fenced block of README.md and docs/**/*.md that
   follows a `<!-- runnable -->` comment is run, the blocks of one page in
   order, in one bash session (`set -euo pipefail`; a `cd` carries over, as
   in the reader's shell), in a scratch folder of that page holding a copy
   of the repository's examples/, with the hpsearch binary's folder first
   on PATH. `<!-- runnable file=NAME -->` before a block writes the block
   to NAME (relative to the session's current folder) instead of running
   it. A page fails when its script exits non-zero or runs past
   --page-timeout seconds. (docs/contributing/docs.md)
2. Internal links of the built site (--html): every relative href/src
   names a file that exists, and a #fragment an id of the target page;
   relative links of README.md name files of the repository.
3. Every page of the site in headless Chromium (DevTools protocol over a
   pipe, no extra package): no console error, no uncaught exception, no
   failed load; the links of the page as the browser built them (the
   navigation included) resolve.

Usage: check-docs.py --hpsearch BIN --html DIR [--only runnable,links,browser]
                     [--screenshot PAGE=PNG ...] [--jobs N]
"""
import argparse
import concurrent.futures
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"^<!--\s*runnable(?:\s+file=(\S+))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


# ---------------------------------------------------------------- runnable blocks

def markdown_pages():
    pages = [os.path.join(ROOT, "README.md")]
    for base, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        pages += [os.path.join(base, f) for f in sorted(files) if f.endswith(".md")]
    return sorted(pages)


def runnable_blocks(path):
    """[(line number, file name or None, text)] of the marked blocks."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = MARK.match(lines[i].strip())
        if not m:
            fence = FENCE.match(lines[i])
            if fence:  # skip a block that is not marked (a mark inside it is text)
                ticks, i = fence.group(2), i + 1
                while i < len(lines) and not lines[i].strip().startswith(ticks):
                    i += 1
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if not fence:
            sys.exit(f"{os.path.relpath(path, ROOT)}:{i + 1}: a runnable mark must be followed "
                     "by a fenced code block")
        indent, ticks = fence.group(1), fence.group(2)
        body, k = [], j + 1
        while k < len(lines) and not lines[k].strip().startswith(ticks):
            body.append(lines[k][len(indent):] if lines[k].startswith(indent) else lines[k])
            k += 1
        blocks.append((j + 1, m.group(1), "\n".join(body) + "\n"))
        i = k + 1
    return blocks


def page_script(rel, blocks):
    out = ["set -euo pipefail\n"]
    for line, name, text in blocks:
        out.append(f"echo '== {rel}:{line}' >&2\n")
        if name:
            eof = "HPSEARCH_DOCS_EOF"
            out.append(f"cat > {name} <<'{eof}'\n{text}{eof}\n")
        else:
            out.append(text)
    return "".join(out)


def run_page(path, hpsearch, work, timeout_s):
    rel = os.path.relpath(path, ROOT)
    blocks = runnable_blocks(path)
    if not blocks:
        return rel, None, 0, ""
    scratch = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "-", rel))
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(scratch, "examples"),
                    ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.logs", "__pycache__"))
    env = dict(os.environ)
    # hpsearch's folder first, then the system's programs (Debian's python3,
    # with the packages scripts/install-deps.sh installs), as on a fresh
    # Debian machine: a python3 of pyenv or a virtualenv earlier on PATH
    # would lack them.
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(hpsearch)), "/usr/bin",
                                   env.get("PATH", "")])
    env.pop("HPSEARCH_KEYS_DIR", None)
    start = time.monotonic()
    try:
        p = subprocess.run(["bash", "-c", page_script(rel, blocks)], cwd=scratch, env=env,
                           capture_output=True, text=True, timeout=timeout_s,
                           start_new_session=True)
        rc, output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        output = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                  else (e.stdout or "")) + ((e.stderr or b"").decode(errors="replace")
                                            if isinstance(e.stderr, bytes) else (e.stderr or ""))
    return rel, rc, time.monotonic() - start, output if rc != 0 else ""


def check_runnable(hpsearch, jobs, timeout_s):
    if not (os.path.isfile(hpsearch) and os.access(hpsearch, os.X_OK)):
        return [f"runnable: no hpsearch executable at {hpsearch}"]
    failures = []
    work = tempfile.mkdtemp(prefix="hpsearch-docs-")
    pages = markdown_pages()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_page, p, hpsearch, work, timeout_s) for p in pages]
        for fut in futures:
            rel, rc, secs, output = fut.result()
            if rc is None:
                continue
            n = len(runnable_blocks(os.path.join(ROOT, rel)))
            print(f"runnable: {rel}: {n} block(s), {secs:.1f} s, "
                  f"{'ok' if rc == 0 else 'FAILED (' + str(rc) + ')'}", flush=True)
            if rc != 0:
                failures.append(f"runnable: {rel}: exit {rc}; the end of its output:\n"
                                + output[-3000:])
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"runnable: scratch folders kept in {work}")
    return failures


# ---------------------------------------------------------------- links

class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "name" in a:
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("preconnect",)):
                self.links.append(a[key])


def parse_html(path):
    p = Links()
    with open(path, encoding="utf-8", errors="replace") as f:
        p.feed(f.read())
    return p


def site_pages(html_dir):
    pages = []
    for base, dirs, files in os.walk(html_dir):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        pages += [os.path.join(base, f) for f in sorted(files) if f.endswith(".html")]
    return sorted(pages)


def resolve(page, link):
    """(target path, fragment) of a relative link, or None for an external one."""
    u = urllib.parse.urlsplit(link)
    if u.scheme or u.netloc or link.startswith(("mailto:", "javascript:", "data:")):
        return None
    path = urllib.parse.unquote(u.path)
    target = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
    if os.path.isdir(target):
        target = os.path.join(target, "index.html")
    return target, urllib.parse.unquote(u.fragment)


def check_links(html_dir):
    failures, ids, count = [], {}, 0
    for page in site_pages(html_dir):
        parsed = parse_html(page)
        ids[page] = parsed.ids
        for link in parsed.links:
            r = resolve(page, link)
            if r is None:
                continue
            target, fragment = r
            count += 1
            rel = os.path.relpath(page, html_dir)
            if not os.path.exists(target):
                failures.append(f"links: {rel}: '{link}': no such file")
                continue
            if fragment and target.endswith(".html"):
                if target not in ids:
                    ids[target] = parse_html(target).ids
                if fragment not in ids[target]:
                    failures.append(f"links: {rel}: '{link}': no id '{fragment}' in the target")
    # README.md is read on the forge: its relative links name repository files.
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for link in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"^[a-z]+:", link) or link.startswith("#"):
            continue
        path = link.split("#", 1)[0]
        count += 1
        if not os.path.exists(os.path.join(ROOT, path)):
            failures.append(f"links: README.md: '{link}': no such file in the repository")
    print(f"links: {count} internal links checked, {len(failures)} broken", flush=True)
    return failures


# ---------------------------------------------------------------- browser

def chromium_exe():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Headless Chromium driven over --remote-debugging-pipe (as
    bench/report_open_time.py does): JSON messages separated by NUL bytes."""

    def __init__(self, exe, profile):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def child_fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-default-apps",
             "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=child_fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.events = b"", 0, []

    def call(self, method, params=None, session=None, timeout_s=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" not in self.buf:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{method}: no answer in {timeout_s} s")
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            if "method" in reply:
                self.events.append(reply)

    def close(self):
        try:
            self.call("Browser.close", timeout_s=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def event_errors(events):
    bad = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            bad.append("uncaught exception: " + (d.get("exception", {}).get("description")
                                                  or d.get("text", "")))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            bad.append("console." + p["type"] + ": " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            bad.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return bad


LINKS_JS = """JSON.stringify({
  ready: document.readyState,
  title: document.title,
  nav: document.querySelectorAll('.wy-menu-vertical a.reference, .sidebar-tree a.reference').length,
  links: [...document.querySelectorAll('a[href]')].map(a => a.href)
})"""


def check_browser(html_dir, screenshots):
    exe = chromium_exe()
    if exe is None:
        return ["browser: chromium is not installed (scripts/install-deps.sh installs it)"]
    failures = []
    profile = tempfile.mkdtemp(prefix="hpsearch-docs-chromium-")
    browser = Browser(exe, profile)
    pages = site_pages(html_dir)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            browser.call(domain + ".enable", session=session)
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                     session=session)
        for page in pages:
            rel = os.path.relpath(page, html_dir)
            browser.events.clear()
            browser.call("Page.navigate", {"url": "file://" + page}, session=session)
            info, deadline = None, time.monotonic() + 30
            while time.monotonic() < deadline:
                r = browser.call("Runtime.evaluate", {"expression": LINKS_JS,
                                                      "returnByValue": True}, session=session)
                info = json.loads(r["result"]["value"])
                if info["ready"] == "complete":
                    break
                time.sleep(0.05)
            time.sleep(0.1)  # errors of the scripts that run at load
            browser.call("Runtime.evaluate", {"expression": "1"}, session=session)
            if info is None or info["ready"] != "complete":
                failures.append(f"browser: {rel}: did not finish loading in 30 s")
                continue
            for err in event_errors(browser.events):
                failures.append(f"browser: {rel}: {err}")
            if info["nav"] == 0:
                failures.append(f"browser: {rel}: no navigation links in the sidebar")
            for href in info["links"]:
                u = urllib.parse.urlsplit(href)
                if u.scheme != "file":
                    continue
                path = urllib.parse.unquote(u.path)
                if os.path.isdir(path):
                    path = os.path.join(path, "index.html")
                if not os.path.exists(path):
                    failures.append(f"browser: {rel}: link to a missing page: {href}")
            if rel in screenshots:
                shot = browser.call("Page.captureScreenshot", {"format": "png"},
                                    session=session)
                import base64
                with open(screenshots[rel], "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
                print(f"browser: screenshot of {rel}: {screenshots[rel]}")
    except RuntimeError as e:
        failures.append(f"browser: {e}")
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
    print(f"browser: {len(pages)} pages opened in headless Chromium", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hpsearch", default=os.path.join(ROOT, "build", "release", "hpsearch"))
    ap.add_argument("--html", default=os.path.join(ROOT, "build", "docs", "html"))
    ap.add_argument("--only", default="runnable,links,browser")
    ap.add_argument("--jobs", type=int, default=2, help="pages whose blocks run at once")
    ap.add_argument("--page-timeout", type=float, default=150)
    ap.add_argument("--screenshot", action="append", default=[],
                    help="PAGE=PNG: save a screenshot of the built page PAGE (e.g. index.html)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    html_dir = os.path.abspath(args.html)
    hpsearch = os.path.abspath(args.hpsearch)
    start = time.monotonic()
    failures = []
    if ({"links", "browser"} & only) and not os.path.isfile(os.path.join(html_dir, "index.html")):
        sys.exit(f"check-docs: no built site in {html_dir} (make docs)")
    if "links" in only:
        failures += check_links(html_dir)
    if "browser" in only:
        shots = dict(s.split("=", 1) for s in args.screenshot)
        failures += check_browser(html_dir, {k: os.path.abspath(v) for k, v in shots.items()})
    if "runnable" in only:
        failures += check_runnable(hpsearch, args.jobs, args.page_timeout)
    for f in failures:
        print("FAIL: " + f)
    print(f"check-docs: {'FAILED' if failures else 'ok'} in {time.monotonic() - start:.0f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
