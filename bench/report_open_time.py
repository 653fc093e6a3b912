#!/usr/bin/env python3
"""Opens a report page in headless Chromium in real time (no virtual time)
and prints, as one JSON line, when it got ready, read through the DevTools
protocol over a pipe (--remote-debugging-pipe; no extra Python package).

The page's #hps-ready element holds its own timings (ms since navigation
start, report/page_template.cpp); this script adds the wall time from the
navigation request to the moment #hps-ready appeared (polled every 50 ms),
which also counts the browser's own work between the page's tasks.

Usage: report_open_time.py CHROMIUM PAGE PROFILE_DIR [TIMEOUT_S] [READY_SELECTOR]
With READY_SELECTOR (a CSS selector, e.g. ".js-plotly-plot .main-svg" for
a page Optuna wrote), waits for that element instead and prints only
wall_ms (the time to the first answer in which it exists).
"""
import json
import os
import subprocess
import sys
import time

chromium, page, profile = sys.argv[1:4]
timeout_s = float(sys.argv[4]) if len(sys.argv) > 4 else 120.0
selector = sys.argv[5] if len(sys.argv) > 5 else None

to_browser_r, to_browser_w = os.pipe()
from_browser_r, from_browser_w = os.pipe()


def child_fds():
    os.dup2(to_browser_r, 3)
    os.dup2(from_browser_w, 4)


proc = subprocess.Popen(
    [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
     "--enable-unsafe-swiftshader", "--no-first-run", "--disable-extensions",
     "--disable-background-networking", "--disable-component-update", "--disable-sync",
     "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
    pass_fds=(3, 4), preexec_fn=child_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(to_browser_r)
os.close(from_browser_w)
buf = b""
next_id = 0


def call(method, params=None, session=None):
    global buf, next_id
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_browser_w, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buf:
            chunk = os.read(from_browser_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            buf += chunk
        raw, buf = buf.split(b"\0", 1)
        reply = json.loads(raw)
        if reply.get("id") == next_id:
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply["result"]


try:
    target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    call("Runtime.enable", session=session)
    t0 = time.monotonic()
    call("Page.navigate", {"url": "file://" + os.path.abspath(page)}, session=session)
    probe = ("(() => { const r = document.getElementById('hps-ready'); return r ? JSON.stringify("
             "Object.assign({}, r.dataset, {errors: document.getElementById('hps-errors').textContent,"
             " plot_ms: Object.fromEntries([...document.querySelectorAll('.plot[data-ms]')]"
             ".map(e => [e.id, +e.dataset.ms])) })) : null; })()")
    if selector:
        probe = ("document.readyState === 'complete' && document.querySelector(%s) ? '{}' : null"
                 % json.dumps(selector))
    while True:
        res = call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
        val = res.get("result", {}).get("value")
        if val:
            wall_ms = (time.monotonic() - t0) * 1000
            out = json.loads(val)
            out["wall_ms"] = round(wall_ms)
            print(json.dumps(out), flush=True)
            break
        if time.monotonic() - t0 > timeout_s:
            print(json.dumps({"error": "no #hps-ready within %g s" % timeout_s}), flush=True)
            sys.exit(1)
        time.sleep(0.05)
finally:
    proc.terminate()
    proc.wait(timeout=30)
