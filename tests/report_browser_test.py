#!/usr/bin/env python3
"""The report and the dashboard page in a real browser (headless Chromium).

Runs a small study with `hpsearch run` (3 workers, conditional params, a
scale_with param, ASHA pruning, failing trials), writes its report with
`hpsearch report`, opens it in headless Chromium and checks, from the DOM
Chromium dumps after the page's scripts ran:
  - the page got ready (#hps-ready) and listed no error (#hps-errors: script
    errors, failed plots, requests refused by its Content-Security-Policy);
  - no console error: none in Chromium's log ("Uncaught ..."), and the page
    lists console.error calls in #hps-errors;
  - no network request: Chromium's net log holds no http(s)/ws request, with
    every host name mapped to nowhere and a proxy that does not exist;
  - every plot drew, with one mark per trial, counted in the SVG Plotly drew
    and compared with the trials `hpsearch trials --format json` lists;
  - a screenshot of the page is saved (build dir: report_browser_test/).
Then serves the same study with `hpsearch dashboard` on a free loopback port
while the study continues (more trials), opens it and checks that trials the
page did not have when it loaded appear without a reload.

Then writes a study of 20,000 trials (MAKE_REPORT_STUDY, through the
storage API), opens its report and checks that the page says it is
downsampled and that no plot holds more marks than its cap
(report/page_data.h: PageOptions).

Usage: report_browser_test.py HPSEARCH_EXE WORK_DIR MAKE_REPORT_STUDY_EXE
Chromium is required: the test fails (it does not skip) without it;
scripts/install-deps.sh installs Debian's `chromium`.
"""
import html.parser
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

HPSEARCH = os.path.abspath(sys.argv[1])
WORK = os.path.abspath(sys.argv[2])
MAKE_STUDY = os.path.abspath(sys.argv[3])
# PageOptions' defaults (report/page_data.h): above DOWNSAMPLE_ABOVE trials
# the history shows at most MAX_POINTS COMPLETE trials, each slice plot and
# the contour MAX_SLICE_POINTS, the parallel coordinates MAX_PARCOORDS, the
# learning curves MAX_CURVES trials, the timeline MAX_TIMELINE.
DOWNSAMPLE_ABOVE = 2000
MAX_POINTS, MAX_SLICE_POINTS, MAX_PARCOORDS, MAX_CURVES, MAX_TIMELINE = 2000, 1000, 300, 150, 2000
LARGE_STUDY = 20000
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg, flush=True)
    return cond


def chromium_exe():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    print("FAIL: chromium is not installed (scripts/install-deps.sh installs Debian's chromium)")
    sys.exit(1)


CHROMIUM = chromium_exe()


def chromium(url, tag, extra=(), budget_ms=20000):
    """Runs headless Chromium on url; returns (dom, stderr, netlog text)."""
    profile = os.path.join(WORK, "profile-" + tag)
    netlog = os.path.join(WORK, "netlog-" + tag + ".json")
    shutil.rmtree(profile, ignore_errors=True)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
           "--enable-unsafe-swiftshader", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--user-data-dir=" + profile,
           "--enable-logging=stderr", "--v=0", "--log-net-log=" + netlog,
           f"--virtual-time-budget={budget_ms}", *extra, url]
    p = subprocess.run(cmd + ["--dump-dom"], capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"{tag}: chromium exited {p.returncode}: {p.stderr[-2000:]}")
    try:
        with open(netlog, encoding="utf-8", errors="replace") as f:
            log = f.read()
    except OSError:
        log = ""
    return p.stdout, p.stderr, log


class Dom(html.parser.HTMLParser):
    """Per plot element (id): the SVG marks Plotly drew inside it."""

    PLOT_IDS = re.compile(r"^(history-number|history-time|curves|parcoords|importance|slice-\d+|"
                          r"contour|timeline)$")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, plot id or None)
        self.plots = {}  # id -> {attrs, points, line_segments, bars, lines, ...}
        self.ids = {}    # id -> attrs
        self.text_of = {}  # id -> text
        self.capture = []  # [id, depth of its element, text so far]
        self.done = {}     # id -> its text
        self.legend_depth = None  # inside a legend (its line samples are no marks)
        self.xtick = None  # [plot, depth of its g.xtick] while inside an x tick label

    def current_plot(self):
        for _, pid in reversed(self.stack):
            if pid:
                return self.plots[pid]
        return None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        pid = None
        if "id" in a:
            self.ids[a["id"]] = a
            if self.PLOT_IDS.match(a["id"]):
                pid = a["id"]
                self.plots[pid] = {"attrs": a, "points": 0, "segments": 0, "bars": 0, "svg": 0,
                                   "dims": 0, "contour": 0, "traces": [], "trace_points": [],
                                   "xticks": []}
            if a["id"] in ("summary", "hps-errors", "downsampled", "importance-note", "curves-note",
                           "failed", "curves", "contour", "importance", "top", "settings"):
                self.capture.append([a["id"], len(self.stack), ""])
        plot = self.current_plot() if pid is None else self.plots[pid]
        cls = a.get("class", "").split()
        if tag == "g" and "legend" in cls:
            self.legend_depth = len(self.stack)
        if plot is not None and self.legend_depth is None:
            if tag == "svg" and "main-svg" in cls:
                plot["svg"] += 1
            if tag == "g" and "trace" in cls:
                plot["trace_points"].append(0)  # the points of each trace, in order
            if tag == "path" and "point" in cls:
                plot["points"] += 1
                if plot["trace_points"]:
                    plot["trace_points"][-1] += 1
            if tag == "g" and "point" in cls:
                plot["bars"] += 1
            if tag == "path" and "js-line" in cls:
                plot["segments"] += a.get("d", "").count("M")
                plot["traces"].append(a.get("d", "").count("M"))
            if tag == "g" and "y-axis" in cls:
                plot["dims"] += 1
            if tag == "g" and "xtick" in cls:
                plot["xticks"].append("")
                self.xtick = [plot, len(self.stack)]
            if tag == "g" and ("contourlevel" in cls or "hm" in cls):
                plot["contour"] += 1
        if tag not in ("meta", "br", "img", "input", "link", "hr", "path", "rect", "line", "circle",
                       "image", "stop", "use"):
            self.stack.append((tag, pid))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break
        depth = len(self.stack)
        if self.legend_depth is not None and depth <= self.legend_depth:
            self.legend_depth = None
        if self.xtick is not None and depth <= self.xtick[1]:
            self.xtick = None
        for c in self.capture:
            if c[1] is not None and depth <= c[1]:
                self.done[c[0]] = c[2]
                c[1] = None
        self.capture = [c for c in self.capture if c[1] is not None]

    def handle_data(self, data):
        for c in self.capture:
            c[2] += data
        if self.xtick is not None:
            self.xtick[0]["xticks"][-1] += data


def parse(dom_text):
    d = Dom()
    d.feed(dom_text)
    d.texts = dict(d.done)
    return d


def trials_json(db):
    out = subprocess.run([HPSEARCH, "trials", db, "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def console_errors(stderr):
    bad = []
    for line in stderr.splitlines():
        if "CONSOLE" in line and ("Uncaught" in line or "rror" in line or "Refused" in line):
            bad.append(line)
        if "Refused to" in line:
            bad.append(line)
    return bad


# Chromium's own background requests (update checks, account and time
# services) appear in its net log whatever the page does.
BROWSER_SERVICES = re.compile(r"^https?://([a-z0-9-]+\.)*(google\.com|googleapis\.com|gvt1\.com)/")


def network_requests(netlog):
    """URLs of the http(s)/ws requests in a Chromium net log, but the browser's own."""
    urls = set(re.findall(r'"url"\s*:\s*"((?:https?|wss?)://[^"]*)"', netlog))
    return {u for u in urls if not BROWSER_SERVICES.match(u)}


def write_space(path, name, n_trials, seconds, db):
    space = {
        "study": {"name": name, "direction": "minimize", "storage": db},
        "sampler": {"type": "random", "seed": 7},
        "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
        "budget": {"n_trials": n_trials},
        "objective": {"type": "sleep", "seconds": seconds, "steps": 6, "fail_param": "crash"},
        "space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True,
                   "scale_with": {"param": "batch_size", "reference": 64, "rule": "sqrt"}},
            "batch_size": {"type": "ordinal", "values": [16, 32, 64, 128]},
            "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
            "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
            "crash": {"type": "categorical", "choices": [False, True], "when": {"optimizer": "sgd"}},
            "hidden": {"type": "int", "low": 32, "high": 512, "log": True},
        },
    }
    with open(path, "w") as f:
        json.dump(space, f)


def check_report_page(dom_text, stderr, netlog, trials, tag):
    d = parse(dom_text)
    check("hps-ready" in d.ids, f"{tag}: the page never got ready (#hps-ready missing)")
    errors = d.texts.get("hps-errors", "").strip()
    check(errors == "", f"{tag}: the page listed errors: {errors}")
    bad = console_errors(stderr)
    check(not bad, f"{tag}: console errors: {bad[:5]}")

    complete = [t for t in trials if t["state"] == "COMPLETE" and isinstance(t["value"], (int, float))]
    with_curves = [t for t in trials if t["intermediate_values"]]
    timed = [t for t in trials if t["datetime_start"]]
    pruned = [t for t in trials if t["state"] == "PRUNED"]
    n_plots = int(d.ids.get("hps-ready", {}).get("data-plots", "0"))
    check(n_plots == len(d.plots), f"{tag}: {len(d.plots)} plot elements, the page drew {n_plots}")
    for pid, p in sorted(d.plots.items()):
        check(p["svg"] > 0, f"{tag}: plot {pid} drew no SVG")
        check("js-plotly-plot" in p["attrs"].get("class", ""), f"{tag}: {pid} is not a Plotly plot")
        marks = int(p["attrs"].get("data-marks", "-1"))
        check(marks > 0, f"{tag}: plot {pid} has no data (data-marks {marks})")
    # One mark per trial, counted in what Plotly drew.
    h = d.plots.get("history-number", {})
    check(h.get("points") == len(complete),
          f"{tag}: history by number drew {h.get('points')} points for {len(complete)} COMPLETE trials")
    h = d.plots.get("history-time", {})
    check(h.get("points") == len(complete),
          f"{tag}: history by time drew {h.get('points')} points for {len(complete)} COMPLETE trials")
    c = d.plots.get("curves", {})
    # One line per trial with intermediate values (one trace per state, a
    # subpath per trial), one 'pruned here' mark per pruned trial.
    curve_lines = c.get("segments")
    check(curve_lines == len(with_curves),
          f"{tag}: learning curves drew {curve_lines} lines for {len(with_curves)} trials with values")
    # The curves draw small markers too (a one-step curve is a point): the
    # 'pruned here' marks are the points of the last trace.
    pruned_marks = c.get("trace_points", [0])[-1] if pruned else 0
    check(pruned_marks == len(pruned),
          f"{tag}: {pruned_marks} 'pruned here' marks for {len(pruned)} PRUNED trials")
    t = d.plots.get("timeline", {})
    check(t.get("segments") == len(timed),
          f"{tag}: timeline drew {t.get('segments')} bars for {len(timed)} started trials")
    imp = d.plots.get("importance", {})
    check(imp.get("bars") == 6, f"{tag}: importance drew {imp.get('bars')} bars for 6 params")
    pc = d.plots.get("parcoords", {})
    check(int(pc.get("attrs", {}).get("data-marks", 0)) == len(complete),
          f"{tag}: parallel coordinates hold {pc.get('attrs', {}).get('data-marks')} lines for "
          f"{len(complete)} COMPLETE trials")
    check(pc.get("dims", 0) >= 7, f"{tag}: parallel coordinates drew {pc.get('dims')} axes, want 7")
    co = d.plots.get("contour", {})
    check(co.get("points", 0) > 0 and co.get("contour", 0) > 0,
          f"{tag}: the contour drew {co.get('contour')} levels and {co.get('points')} points")
    slices = [pid for pid in d.plots if pid.startswith("slice-")]
    check(len(slices) == 6, f"{tag}: {len(slices)} slice plots for 6 params")
    slice_points = sorted(d.plots[s]["points"] for s in slices)
    active_momentum = sum(1 for t in complete if "momentum" in t["params"])
    check(slice_points[-1] == len(complete) and active_momentum in slice_points,
          f"{tag}: slice plots drew {slice_points} points; want {len(complete)} per unconditional "
          f"param and {active_momentum} for momentum (active in those trials)")
    check_log_axis_ticks(d, slices, tag)
    reqs = network_requests(netlog)
    check(not reqs, f"{tag}: network requests: {sorted(reqs)[:5]}")
    check(netlog != "", f"{tag}: chromium wrote no net log")
    return d


def check_log_axis_ticks(d, slices, tag):
    """The x axes of the log params' slice plots (lr: 1e-4 to 1e-1, scaled by
    batch_size up to about 0.14; hidden: 32 to 512) label powers of ten,
    or 50, 100, 200, 500 over a range that holds only one: no crowded minor
    labels (issue #44: "2 3 ... 9 100 2")."""
    ticks = {s: [t.strip() for t in d.plots[s]["xticks"]] for s in slices}
    check(["1e-4", "1e-3", "1e-2", "1e-1"] in ticks.values(),
          f"{tag}: no slice plot labels lr's decades 1e-4 ... 1e-1; x tick labels: {ticks}")
    check(["50", "100", "200", "500"] in ticks.values(),
          f"{tag}: no slice plot labels hidden (32 to 512) with 50, 100, 200, 500; x tick labels: "
          f"{ticks}")
    for s, labels in ticks.items():
        minor = [t for t in labels if t in ("2", "3", "4", "5", "6", "7", "8", "9")]
        check(not minor, f"{tag}: {s} has minor tick labels {minor} (all: {labels})")


def check_failed_table(d, trials, tag):
    """The page lists the most recent FAIL trials (at most 20) with their reasons."""
    failed = sorted((t for t in trials if t["state"] == "FAIL"), key=lambda t: -t["number"])
    text = d.texts.get("failed", "")
    for t in failed[:20]:
        reason = (t.get("fail_reason") or "")[:40]
        check(reason and reason in text,
              f"{tag}: the failed trials table misses trial {t['number']}'s reason '{reason}'")


def small_report_page(name, seed, n_trials, space, before_report=None):
    """Runs a study `name` of `n_trials` sleep trials (one step, so no
    intermediate values) over `space`, calls before_report(db) if given,
    writes its report and opens it in Chromium; checks it got ready without
    errors. Returns (dom, parsed)."""
    db = os.path.join(WORK, name + ".db")
    space_file = os.path.join(WORK, name + ".json")
    with open(space_file, "w") as f:
        json.dump({"study": {"name": name, "direction": "minimize", "storage": db},
                   "sampler": {"type": "random", "seed": seed}, "budget": {"n_trials": n_trials},
                   "objective": {"type": "sleep", "seconds": 0.01, "steps": 1},
                   "space": space}, f)
    subprocess.run([HPSEARCH, "run", space_file, "--workers", "1"], check=True, cwd=WORK,
                   stdout=subprocess.DEVNULL, timeout=120)
    if before_report:
        before_report(db)
    report = os.path.join(WORK, name + ".html")
    subprocess.run([HPSEARCH, "report", db, "-o", report], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    dom, err, _ = chromium("file://" + report, name)
    d = parse(dom)
    check("hps-ready" in d.ids, f"{name}: the page never got ready (#hps-ready missing)")
    errors = d.texts.get("hps-errors", "").strip()
    check(errors == "", f"{name}: the page listed errors: {errors}")
    check(not console_errors(err), f"{name}: console errors: {console_errors(err)[:5]}")
    return dom, d


def check_empty_plots():
    """A study of two trials, one param, no intermediate values: the plots
    without data say why in words instead of drawing empty axes."""
    _, d = small_report_page("tiny", 3, 2, {"x": {"type": "float", "low": 0, "high": 1}})
    why = {"curves": "No trial reported intermediate values", "contour": "Needs two params",
           "importance": "Not computed: needs at least 3 COMPLETE trials"}
    for pid, words in why.items():
        p = d.plots.get(pid, {"attrs": {}, "svg": -1})
        check(p["svg"] == 0 and "empty" in p["attrs"].get("class", "").split(),
              f"tiny: plot {pid} without data drew {p['svg']} SVG elements (class "
              f"'{p['attrs'].get('class')}'), want none and the class 'empty'")
        check(words in d.texts.get(pid, ""), f"tiny: plot {pid} says '{d.texts.get(pid)}', "
              f"want '{words}'")
    for pid in ("history-number", "history-time", "parcoords", "slice-0", "timeline"):
        p = d.plots.get(pid, {"attrs": {}, "svg": 0})
        check(p["svg"] > 0 and int(p["attrs"].get("data-marks", "0")) == 2,
              f"tiny: plot {pid} drew {p['svg']} SVG elements with data-marks "
              f"{p['attrs'].get('data-marks')}, want 2 trials")
    check("No FAIL trial" in d.texts.get("failed", ""), "tiny: the failed trials table should "
          f"say there is none, says '{d.texts.get('failed')}'")


def check_names_are_text():
    """Names and labels that look like HTML show as written in the plots:
    Plotly reads <a href>, <b>, <br> in its strings; the page escapes them."""
    dom, _ = small_report_page(
        "names", 5, 6,
        {"<i>p</i>": {"type": "float", "low": 0, "high": 1},
         "c": {"type": "categorical", "choices": ['<a href="https://example.com/">x</a>', "<b>y</b>"]}})
    check('xlink:href="https://example.com/"' not in dom,
          "names: a choice written as a link became a link in a plot")
    check(not re.search(r"<tspan[^>]*font-weight:\s*bold", dom),
          "names: a choice written <b>y</b> became bold")
    check("&lt;b&gt;y&lt;/b&gt;</text>" in dom, "names: the choice '<b>y</b>' is not shown as written")
    check("&lt;i&gt;p&lt;/i&gt;" in dom, "names: the param '<i>p</i>' is not shown as written")


def check_damaged_settings():
    """A study whose stored settings (studies.config_json) no longer parse:
    the report still opens, draws the trials, and says the settings could
    not be read (with the reason) instead of "no stored space.json"."""
    def damage(db):
        con = sqlite3.connect(db)
        with con:
            con.execute("UPDATE studies SET config_json = '{\"space\": ' ")
        con.close()

    _, d = small_report_page("damaged", 7, 4, {"x": {"type": "float", "low": 0, "high": 1}}, damage)
    text = d.texts.get("settings", "")
    check("could not be read" in text and "config_json" in text,
          f"damaged: the settings section says '{text[:300]}', want that the stored settings "
          "could not be read, naming column config_json")
    check("no stored space.json" not in text,
          "damaged: the page calls damaged settings missing (a study made through the C++ API)")
    p = d.plots.get("history-number", {"attrs": {}, "svg": 0})
    check(p["svg"] > 0 and int(p["attrs"].get("data-marks", "0")) == 4,
          f"damaged: the history plot drew data-marks {p['attrs'].get('data-marks')}, want 4")


def check_large_report():
    """A study of LARGE_STUDY trials: downsampled, said so, each plot within its cap."""
    db = os.path.join(WORK, "large.db")
    subprocess.run([MAKE_STUDY, db, "large", str(LARGE_STUDY)], check=True, timeout=300)
    report = os.path.join(WORK, "large.html")
    subprocess.run([HPSEARCH, "report", db, "-o", report], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    dom, err, _ = chromium("file://" + report, "large", budget_ms=60000)
    d = parse(dom)
    check("hps-ready" in d.ids, "large: the page never got ready (#hps-ready missing)")
    errors = d.texts.get("hps-errors", "").strip()
    check(errors == "", f"large: the page listed errors: {errors}")
    bad = console_errors(err)
    check(not bad, f"large: console errors: {bad[:5]}")
    note = d.texts.get("downsampled", "")
    check(note.startswith(f"Downsampled for speed (above {DOWNSAMPLE_ABOVE} trials)"),
          f"large: the page does not say it is downsampled: '{note[:200]}'")
    for part in ("optimization history shows", "slice and contour points show",
                 "parallel coordinates show", "learning curves show", "timeline shows"):
        check(part in note, f"large: the downsampling note misses '{part}': '{note[:400]}'")
    n_plots = int(d.ids.get("hps-ready", {}).get("data-plots", "0"))
    check(n_plots == len(d.plots), f"large: {len(d.plots)} plot elements, the page drew {n_plots}")
    marks = {pid: int(p["attrs"].get("data-marks", "-1")) for pid, p in d.plots.items()}
    for pid in ("history-number", "history-time"):
        p = d.plots.get(pid, {})
        check(p.get("points") == marks.get(pid) == MAX_POINTS,
              f"large: {pid} drew {p.get('points')} points (data-marks {marks.get(pid)}), want "
              f"the cap {MAX_POINTS}")
    slices = [pid for pid in d.plots if pid.startswith("slice-")]
    check(len(slices) == 5, f"large: {len(slices)} slice plots for 5 params")
    for pid in slices + ["contour"]:
        p = d.plots[pid] if pid in d.plots else {}
        check(0 < p.get("points", 0) <= MAX_SLICE_POINTS,
              f"large: {pid} drew {p.get('points')} points, cap {MAX_SLICE_POINTS}")
    pc = d.plots.get("parcoords", {})
    check(marks.get("parcoords") == MAX_PARCOORDS and pc.get("segments") == MAX_PARCOORDS,
          f"large: parallel coordinates hold {marks.get('parcoords')} trials and drew "
          f"{pc.get('segments')} lines, want the cap {MAX_PARCOORDS}")
    c = d.plots.get("curves", {})
    pruned_marks = (c.get("trace_points") or [0])[-1]
    check(marks.get("curves") == MAX_CURVES and 0 < c.get("segments", 0) <= MAX_CURVES
          and pruned_marks <= MAX_CURVES,
          f"large: learning curves of {marks.get('curves')} trials, {c.get('segments')} lines, "
          f"{pruned_marks} 'pruned here' marks; cap {MAX_CURVES}")
    t = d.plots.get("timeline", {})
    check(marks.get("timeline") == MAX_TIMELINE and t.get("segments") == MAX_TIMELINE,
          f"large: timeline of {marks.get('timeline')} trials drew {t.get('segments')} bars, want "
          f"the cap {MAX_TIMELINE}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    db = os.path.join(WORK, "browser.db")
    space = os.path.join(WORK, "space.json")
    write_space(space, "browser", 45, 0.06, db)
    subprocess.run([HPSEARCH, "run", space, "--workers", "3"], check=True, cwd=WORK,
                   stdout=subprocess.DEVNULL, timeout=300)
    trials = trials_json(db)
    states = {t["state"] for t in trials}
    check({"COMPLETE", "PRUNED", "FAIL"} <= states, f"the study needs COMPLETE, PRUNED and FAIL "
          f"trials, has {sorted(states)}")
    workers = {t["worker"] for t in trials}
    check(len(workers) >= 2, f"the study ran on {len(workers)} workers")

    report = os.path.join(WORK, "report.html")
    subprocess.run([HPSEARCH, "report", db, "-o", report], check=True, timeout=120)
    with open(report, encoding="utf-8") as f:
        page = f.read()
    # Self-contained: no element loads anything by URL.
    refs = re.findall(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=', page[:4000] +
                      page[page.rfind("</script>", 0, page.find('id="hps-data"')):])
    check(not refs, f"report: elements load by URL: {refs[:3]}")
    check("connect-src 'none'" in page and "default-src 'none'" in page,
          "report: the Content-Security-Policy does not forbid requests")

    # Chromium with every host name unresolvable and a proxy that is not
    # there: a request the page made would fail and be logged.
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"]
    dom, err, netlog = chromium("file://" + report, "report", offline)
    d = check_report_page(dom, err, netlog, trials, "report")
    summary = d.texts.get("summary", "")
    check(f"{len(trials)} trials" in summary, f"report: summary '{summary}' misses the trial count")
    check_failed_table(d, trials, "report")
    shot = os.path.join(WORK, "report.png")
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
                    "--enable-unsafe-swiftshader", "--user-data-dir=" + os.path.join(WORK, "profile-shot"),
                    "--hide-scrollbars", "--window-size=1280,7000", "--virtual-time-budget=20000",
                    *offline, "--screenshot=" + shot, "file://" + report],
                   capture_output=True, timeout=240)
    check(os.path.exists(shot) and os.path.getsize(shot) > 10000, "report: no screenshot saved")

    check_large_report()
    check_empty_plots()
    check_names_are_text()
    check_damaged_settings()

    # The dashboard, while the study runs on: new trials appear without reload.
    # Slower trials than the first run's (0.1 s, not 0.06): another
    # objective section, so the run needs --allow-objective-change.
    write_space(space, "browser", 2000, 0.1, db)
    runner = subprocess.Popen([HPSEARCH, "run", space, "--workers", "2", "--allow-objective-change"],
                              cwd=WORK,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    dash = subprocess.Popen([HPSEARCH, "dashboard", db, "--port", "0", "--refresh-ms", "1000"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = dash.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        check(m is not None, f"dashboard: no address in '{line.strip()}'")
        if m:
            url = f"http://127.0.0.1:{m.group(1)}/"
            # Four polls (virtual time; each poll's fetch is real).
            dom, err, netlog = chromium(url, "dashboard", budget_ms=4500)
            d = parse(dom)
            check("hps-ready" in d.ids, "dashboard: the page never got ready (#hps-ready missing)")
            errors = d.texts.get("hps-errors", "").strip()
            check(errors == "", f"dashboard: the page listed errors: {errors}")
            bad = console_errors(err)
            check(not bad, f"dashboard: console errors: {bad[:5]}")
            for pid, p in sorted(d.plots.items()):
                check(p["svg"] > 0, f"dashboard: plot {pid} drew no SVG")
            # The trials the page loaded with (its embedded data) and those it shows now.
            m0 = re.search(r'<script type="application/json" id="hps-data">(.*?)</script>', dom, re.S)
            loaded = json.loads(m0.group(1))["n_trials"] if m0 else -1
            m1 = re.search(r"^(\d+) trials", d.texts.get("summary", ""))
            shown = int(m1.group(1)) if m1 else -1
            check(shown > loaded > 0, f"dashboard: the page loaded with {loaded} trials and shows "
                  f"{shown}: no new trial appeared without reload")
            rev = d.ids.get("hps-ready") and re.search(r'<body[^>]*data-rev="(\d+)"', dom)
            check(bool(rev), "dashboard: the page never merged an update (no body data-rev)")
            hosts = {u for u in network_requests(netlog) if not u.startswith(url)}
            check(not hosts, f"dashboard: requests elsewhere than the dashboard: {sorted(hosts)[:5]}")
    finally:
        for proc in (dash, runner):
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for proc in (dash, runner):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("report and dashboard pages checked in", CHROMIUM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
