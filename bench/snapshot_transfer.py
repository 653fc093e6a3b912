#!/usr/bin/python3
"""Long trials: moving snapshots through the coordinator (issue #43).

Drives the real CLI (`hpsearch run` with --bind ipc://..., `hpsearch
worker`) in a temporary folder and prints, in one run:

1. The program's pause per reported step (SIGSTOP while the snapshot is
   taken), measured from the program's side: after its report line it
   sleeps 1 ms a fixed number of times, and that loop's wall time less the
   same loop run just before (nothing pauses it) is the pause.
     shared   a worker started with --log-dir <study>.logs (the
              coordinator's checkpoint root): copy + hash
     remote   a worker with its own --log-dir: copy + hash + upload
   Their difference is the upload. The remote pause is also split at the
   mtime of the snapshot's manifest (written when copy + hash end).
   Download: the remote worker is killed (SIGKILL) after its trial's
   snapshot was recorded; a second remote worker (another --log-dir) runs
   the retry, downloading and restoring the snapshot. Its start -> program
   start, less the same for the first worker's first trial (nothing to
   download), is download + restore.
2. Dispatch throughput of instant trials (`/bin/sh -c echo`, one local
   worker of the coordinator, --prefetch 1) while one remote worker runs
   the big program: completions per second before the big trial starts
   (instant trials alone), while the big program sleeps (no transfer),
   while its snapshot is copied and hashed, and while it is uploaded
   (windows from the program's own clock and the manifest's mtime; trials
   by datetime_complete). The goal: upload within 10% of no transfer.

The objective program writes a file of --mb MB of random bytes (one byte
changed each step, so no snapshot is a hard link to the previous one) into
$HPSEARCH_CHECKPOINT_DIR, then reports the step, for --steps steps.

  /usr/bin/python3 bench/snapshot_transfer.py --hpsearch build/release/hpsearch
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# The objective program (written to <tmp>/big.py). Stamps under
# $BENCH_STAMPS: start-<trial>.json at start, steps-<trial>.jsonl (one line
# a step), done-<trial> at the end.
BIG = r'''
import json, os, sys, time
t_start = time.time()
ck = os.environ["HPSEARCH_CHECKPOINT_DIR"]
stamps = os.environ["BENCH_STAMPS"]
trial = os.environ["HPSEARCH_TRIAL_NUMBER"]
mb, steps = int(os.environ["BENCH_MB"]), int(os.environ["BENCH_STEPS"])
loop, idle = int(os.environ["BENCH_LOOP"]), float(os.environ["BENCH_IDLE"])
resume = os.environ.get("HPSEARCH_RESUME_STEP")
path = os.path.join(ck, "state.bin")
with open(os.path.join(stamps, "start-%s.json" % trial), "w") as f:
    json.dump({"t": t_start, "pid": os.getpid(), "resume": resume, "ck": ck}, f)
if resume is not None:   # the retry: check what was restored, and end
    size = os.path.getsize(path) if os.path.exists(path) else -1
    print("hpsearch: " + json.dumps({"value": float(size == mb << 20)}), flush=True)
    sys.exit(0)

def sleeps():
    ts = [time.time()]
    for _ in range(loop):
        time.sleep(0.001)
        ts.append(time.time())
    return ts

data = bytearray(os.urandom(mb << 20))
log = open(os.path.join(stamps, "steps-%s.jsonl" % trial), "a")
for step in range(1, steps + 1):
    i0 = time.time()
    time.sleep(idle)                          # "training": nothing else happens
    i1 = time.time()
    data[step * 4099 % len(data)] ^= 0xFF     # a different byte each step
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    base = sleeps()                           # the loop when nothing pauses it
    t0 = time.time()
    print("hpsearch: " + json.dumps({"step": step, "value": 1.0 / step}), flush=True)
    ts = [t0] + sleeps()                      # ... and after the report: paused
    gaps = [(ts[k + 1] - ts[k], k) for k in range(len(ts) - 1)]
    gap, k = max(gaps)
    manifest = os.path.join(os.path.dirname(ck), "snapshot-%d.manifest" % step)
    try:
        mtime = os.stat(manifest).st_mtime_ns / 1e9
    except OSError:
        mtime = None
    log.write(json.dumps({"step": step, "idle": [i0, i1], "base": base[-1] - base[0],
                          "paused": ts[-1] - ts[0], "gap": [ts[k], ts[k + 1]],
                          "gap_index": k, "manifest_mtime": mtime}) + "\n")
    log.flush()
print("hpsearch: " + json.dumps({"value": 1.0}), flush=True)
open(os.path.join(stamps, "done-%s" % trial), "w").close()
'''


class Bench:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.hp = os.path.abspath(args.hpsearch)
        self.procs = []  # (Popen, stop signal)
        self.stamps = os.path.join(tmp, "stamps")
        os.makedirs(self.stamps)
        self.big = os.path.join(tmp, "big.py")
        with open(self.big, "w") as f:
            f.write(BIG)

    # ---------------------------------------------------------------- processes

    def start(self, argv, name, stop=signal.SIGTERM, cwd=None, cpus=None):
        """cpus: the CPUs the process (and what it starts) may run on."""
        out = open(os.path.join(self.tmp, name + ".out"), "w")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        p = subprocess.Popen(argv, cwd=cwd or self.tmp, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=pin)
        out.close()
        self.procs.append((p, stop))
        return p

    def stop(self, p, sig, wait=10.0):
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(wait)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_programs(self):
        # The objective programs (each its own process group) outlive a
        # killed worker: stop those still running, by the pid they wrote.
        for f in glob.glob(os.path.join(self.stamps, "start-*.json")):
            try:
                with open(f) as fh:
                    pid = json.load(fh)["pid"]
                with open("/proc/%d/cmdline" % pid, "rb") as fh:
                    if self.big.encode() not in fh.read():
                        continue
                os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass

    def stop_all(self):
        for p, sig in reversed(self.procs):
            self.stop(p, sig)
        self.stop_programs()

    def coordinator(self, phase, space, local_workers=0, prefetch=0, cpus=None):
        folder = os.path.join(self.tmp, phase)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "space.json"), "w") as f:
            json.dump(space, f)
        sock = os.path.join(folder, "sock")
        p = self.start([self.hp, "run", "space.json", "--workers", str(local_workers),
                        "--prefetch", str(prefetch), "--bind", "ipc://" + sock,
                        "--heartbeat-ms", "200", "--liveness", "3", "--no-fail-fast"],
                       phase + "-coordinator", stop=signal.SIGINT, cwd=folder, cpus=cpus)
        self.wait_for(lambda: os.path.exists(sock) or p.poll() is not None, 20,
                      phase + ": the coordinator's socket")
        if p.poll() is not None:
            sys.exit("%s: hpsearch run exited %d (see %s-coordinator.out)" %
                     (phase, p.returncode, phase))
        return folder, sock, p

    def worker(self, sock, log_dir, name, cpus=None):
        return self.start([self.hp, "worker", "--connect", "ipc://" + sock, "--log-dir", log_dir,
                           "--allow-command", "--id", name], name, cpus=cpus)

    def wait_for(self, cond, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = cond()
            if v:
                return v
            time.sleep(0.02)
        raise RuntimeError("timed out waiting for " + what)

    def trials(self, db):
        r = subprocess.run([self.hp, "trials", db, "--format", "json"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            return []
        try:
            return json.loads(r.stdout)
        except ValueError:
            return []

    def space(self, name, n_trials, argv):
        env = {"BENCH_STAMPS": os.path.join(self.stamps, name), "BENCH_MB": str(self.args.mb),
               "BENCH_STEPS": str(self.args.steps), "BENCH_LOOP": str(self.args.loop),
               "BENCH_IDLE": str(self.args.idle)}
        os.makedirs(env["BENCH_STAMPS"], exist_ok=True)
        return {"study": {"name": name, "direction": "minimize", "storage": name + ".db"},
                "sampler": {"type": "random", "seed": 1},
                "budget": {"n_trials": n_trials},
                "objective": {"type": "command", "argv": argv, "env": env},
                "space": {"x": {"type": "float", "low": 0, "high": 1}}}

    def steps_of(self, phase, trial):
        with open(os.path.join(self.stamps, phase, "steps-%d.jsonl" % trial)) as f:
            return [json.loads(l) for l in f]

    def start_stamp(self, phase, trial):
        with open(os.path.join(self.stamps, phase, "start-%d.json" % trial)) as f:
            return json.load(f)

    def done(self, phase, trial):
        return os.path.exists(os.path.join(self.stamps, phase, "done-%d" % trial))

    # ---------------------------------------------------------------- phases

    def shared(self):
        """A worker that shares the coordinator's checkpoint root."""
        folder, sock, coord = self.coordinator(
            "shared", self.space("shared", 1, ["python3", self.big]))
        self.worker(sock, os.path.join(folder, "shared.logs"), "shared-w")
        self.wait_for(lambda: coord.poll() is not None, 120, "the shared study's end")
        return self.steps_of("shared", 0)

    def remote(self):
        """Upload (trial 0, every step), then download (trial 1 killed after
        its first recorded snapshot; its retry on a fresh worker)."""
        folder, sock, coord = self.coordinator(
            "remote", self.space("remote", 2, ["python3", self.big]))
        db = os.path.join(folder, "remote.db")
        t_w1 = time.time()
        w1 = self.worker(sock, os.path.join(self.tmp, "remote1"), "remote-w1")
        self.wait_for(lambda: self.done("remote", 0), 120, "the remote worker's trial 0")
        steps = self.steps_of("remote", 0)
        first_start = self.start_stamp("remote", 0)["t"] - t_w1

        def recorded():
            for t in self.trials(db):
                if t["number"] == 1 and "checkpoint" in t["system_attrs"]:
                    return t["system_attrs"]["checkpoint"]
            return None
        ck = self.wait_for(recorded, 120, "trial 1's first snapshot")
        w1.kill()
        w1.wait()
        self.stop_programs()  # trial 1's program, orphaned

        def retry_waiting():
            return [t for t in self.trials(db) if t["number"] >= 2 and t["state"] == "WAITING"]
        self.wait_for(retry_waiting, 30, "the retry of trial 1")
        t_w2 = time.time()
        self.worker(sock, os.path.join(self.tmp, "remote2"), "remote-w2")
        retry = self.wait_for(
            lambda: [t for t in self.trials(db) if t["number"] >= 2 and t["state"] == "COMPLETE"],
            120, "the retry's end")[0]
        start = self.start_stamp("remote", retry["number"])
        resume_start = start["t"] - t_w2
        # The worker's log line (local time of day, ms) -> the program's start.
        log_to_start = None
        with open(os.path.join(self.tmp, "remote-w2.out")) as f:
            for line in f:
                if "downloading the snapshot" in line:
                    hms = line[1:13]
                    day = datetime.datetime.fromtimestamp(start["t"])
                    t = datetime.datetime.combine(
                        day.date(), datetime.datetime.strptime(hms, "%H:%M:%S.%f").time())
                    log_to_start = start["t"] - t.timestamp()
        restored = retry["value"] == 1.0 and start["resume"] is not None
        self.wait_for(lambda: coord.poll() is not None, 30, "the remote study's end")
        return {"steps": steps, "first_start": first_start, "resume_start": resume_start,
                "log_to_start": log_to_start, "restored": restored, "ck": ck,
                "resumed_from": retry["system_attrs"].get("resumed_from")}

    def pinning(self):
        """(coordinator's CPUs, remote worker's CPUs) for the dispatch
        measurement: with --pin and at least 2 CPUs, the remote worker and
        its program get the last CPU and the coordinator with its local
        worker the others, as a remote worker on its own machine would take
        no CPU from the coordinator; else (None, None)."""
        cpus = sorted(os.sched_getaffinity(0))
        if not self.args.pin or len(cpus) < 2:
            return None, None
        return set(cpus[:-1]), {cpus[-1]}

    def throughput(self):
        """Instant trials on the coordinator's local worker while a remote
        worker runs the big program."""
        folder = os.path.join(self.tmp, "dispatch")
        remote_dir = os.path.join(self.tmp, "remote3")
        mark = os.path.join(self.tmp, "big-taken")
        script = ('case "$HPSEARCH_CHECKPOINT_DIR" in %s/*) mkdir %s 2>/dev/null && '
                  'exec python3 %s;; esac; echo "hpsearch: {{\\"value\\": 1}}"'
                  % (remote_dir, mark, self.big))
        coord_cpus, remote_cpus = self.pinning()
        folder, sock, coord = self.coordinator(
            "dispatch", self.space("dispatch", 10 ** 9, ["/bin/sh", "-c", script]),
            local_workers=1, prefetch=1, cpus=coord_cpus)
        # Instant trials alone first (no big program): the baseline.
        time.sleep(0.5)
        b0 = time.time()
        time.sleep(self.args.baseline)
        b1 = time.time()
        self.worker(sock, remote_dir, "dispatch-remote", cpus=remote_cpus)
        start = self.wait_for(
            lambda: glob.glob(os.path.join(self.stamps, "dispatch", "start-*.json")), 60,
            "the big trial's start")[0]
        trial = int(os.path.basename(start)[6:-5])
        self.wait_for(lambda: self.done("dispatch", trial), 180, "the big trial")
        self.stop(coord, signal.SIGINT)
        steps = self.steps_of("dispatch", trial)
        ends = []
        for t in self.trials(os.path.join(folder, "dispatch.db")):
            if t["number"] != trial and t["state"] == "COMPLETE" and t["datetime_complete"]:
                d = datetime.datetime.strptime(t["datetime_complete"], "%Y-%m-%dT%H:%M:%S.%fZ")
                ends.append(d.replace(tzinfo=datetime.timezone.utc).timestamp())
        windows = {"alone": [(b0, b1)], "idle": [], "copy": [], "upload": []}
        for s in steps:
            windows["idle"].append(tuple(s["idle"]))
            a, b = s["gap"]
            m = s["manifest_mtime"]
            if m is not None and a <= m <= b:
                windows["copy"].append((a, m))
                windows["upload"].append((m, b))
        out = {}
        for k, ws in windows.items():
            secs = sum(b - a for a, b in ws)
            n = sum(1 for e in ends for a, b in ws if a <= e < b)
            out[k] = (secs, n, n / secs if secs > 0 else float("nan"))
        out["steps"] = steps
        return out


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hpsearch", default="build/release/hpsearch")
    ap.add_argument("--mb", type=int, default=100, help="snapshot size (MB = MiB)")
    ap.add_argument("--steps", type=int, default=4, help="reported steps a trial")
    ap.add_argument("--loop", type=int, default=300, help="1 ms sleeps after each report")
    ap.add_argument("--idle", type=float, default=1.0, help="seconds the program sleeps a step")
    ap.add_argument("--baseline", type=float, default=3.0,
                    help="seconds of instant trials alone before the big trial starts")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="dispatch part: do not give the remote worker a CPU of its own")
    args = ap.parse_args()

    def on_term(signum, frame):
        raise SystemExit("stopped by signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)

    tmp = tempfile.mkdtemp(prefix="snapshot_transfer.")
    bench = Bench(args, tmp)
    load0, t0 = load(), time.monotonic()
    try:
        shared = bench.shared()
        remote = bench.remote()
        disp = bench.throughput()
    except BaseException:
        print("failed; the processes' output is in " + tmp, file=sys.stderr)
        args.keep = True
        raise
    finally:
        bench.stop_all()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - t0

    mb = args.mb * (1 << 20) / 1e6  # MB/s below are 10^6 bytes
    print("snapshot_transfer: a %d MiB snapshot a step, %d steps, ipc transport, heartbeat 200 ms"
          % (args.mb, args.steps))
    print("(noisy: a shared machine; load average %s before, %s after; %.0f s in all)"
          % (load0, load(), wall))
    print()

    def pauses(steps):
        return [s["paused"] - s["base"] for s in steps]

    def caught(steps):
        return all(s["gap"][1] - s["gap"][0] > 0.005 for s in steps)

    ps, pr = pauses(shared), pauses(remote["steps"])
    print("1. The program's pause per reported step, s (its %d x 1 ms loop after the report"
          % args.loop)
    print("   less the same loop before it)")
    head = "   %-34s" % "worker" + "".join("%8s" % ("step %d" % s["step"]) for s in shared)
    print(head + "%9s" % "median")
    print("   %-34s" % "shared folder: copy + hash" + "".join("%8.3f" % p for p in ps)
          + "%9.3f" % statistics.median(ps))
    print("   %-34s" % "remote: copy + hash + upload" + "".join("%8.3f" % p for p in pr)
          + "%9.3f" % statistics.median(pr))
    up = statistics.median(pr) - statistics.median(ps)
    print("   %-34s%s%9.3f   = %.0f MB/s" % ("difference = upload", " " * 8 * len(ps), up,
                                             mb / up if up > 0 else float("nan")))
    split = [(s["manifest_mtime"] - s["gap"][0], s["gap"][1] - s["manifest_mtime"])
             for s in remote["steps"] if s["manifest_mtime"]]
    if split:
        c = statistics.median(x for x, _ in split)
        u = statistics.median(y for _, y in split)
        print("   remote pause split at the manifest's mtime (medians): copy + hash %.3f s,"
              " upload %.3f s = %.0f MB/s" % (c, u, mb / u if u > 0 else float("nan")))
    if not (caught(shared) and caught(remote["steps"])):
        print("   WARNING: a pause was not seen inside the loop (raise --loop)")
    print()
    d = remote["resume_start"] - remote["first_start"]
    print("   Download: the remote worker killed (SIGKILL) after snapshot %s was recorded;"
          % json.dumps(remote["ck"]))
    print("   the retry (resumed_from %s) on a fresh remote worker, --log-dir of its own"
          % json.dumps(remote["resumed_from"]))
    print("   %-56s%7.3f s" % ("worker start -> program start, nothing to download",
                               remote["first_start"]))
    print("   %-56s%7.3f s" % ("worker start -> program start, snapshot to download",
                               remote["resume_start"]))
    print("   %-56s%7.3f s   = %.0f MB/s" % ("difference = download + restore", d,
                                              mb / d if d > 0 else float("nan")))
    if remote["log_to_start"] is not None:
        print("   %-56s%7.3f s" % ('its log line "downloading the snapshot" -> program start',
                                   remote["log_to_start"]))
    print("   restored file checked by the retry: %s" % ("yes" if remote["restored"] else "NO"))
    print()
    print("2. Instant trials (/bin/sh echo) completed by the coordinator's local worker")
    print("   (--prefetch 1) while a remote worker runs the big program")
    coord_cpus, remote_cpus = bench.pinning()
    if remote_cpus:
        print("   pinned: the remote worker and its program on CPU %s, the coordinator and its"
              " local worker on CPU %s" % (",".join(map(str, sorted(remote_cpus))),
                                          ",".join(map(str, sorted(coord_cpus)))))
    else:
        print("   not pinned: the remote worker shares every CPU with the coordinator")
    print("   %-42s%9s%8s%10s" % ("window", "seconds", "trials", "trials/s"))
    names = {"alone": "no big trial yet (instant trials alone)",
             "idle": "the big program sleeps (no transfer)",
             "copy": "snapshot copy + hash (paused)", "upload": "snapshot upload (paused)"}
    for k in ("alone", "idle", "copy", "upload"):
        secs, n, rate = disp[k]
        print("   %-42s%9.2f%8d%10.1f" % (names[k], secs, n, rate))
    if disp["idle"][2] > 0 and disp["alone"][2] > 0:
        print("   upload / big program sleeping: %.2f; upload / no big trial: %.2f"
              " (goal: at least 0.90)" % (disp["upload"][2] / disp["idle"][2],
                                          disp["upload"][2] / disp["alone"][2]))
    pd = pauses(disp["steps"])
    print("   the remote pause in this run, median: %.3f s" % statistics.median(pd))


if __name__ == "__main__":
    main()
