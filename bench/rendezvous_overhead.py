#!/usr/bin/python3
"""Rendezvous overhead of multi-process trials (issue #45; goal under 1 s).

A study of --trials trials of 2 processes ("resources": {"processes": 2})
runs on 2 local workers (`hpsearch run --workers 2`). Each rank's program
is a small Python script (no torch: what is measured is hpsearch's part)
that writes the wall-clock time it started and exits after --hold s. Two
figures per trial:

  rendezvous_s   the coordinator's: from rank 0's assignment to the last
                 rank's RankReady (sent as its worker starts its program),
                 the trial's system attr
  rank spread    the programs': the start of the last rank's program minus
                 the start of rank 0's; the time a 2-process trial waits
                 beyond a 1-process one (rank 0 picks the port, tells the
                 coordinator, which assigns rank 1, whose worker starts it)

  /usr/bin/python3 bench/rendezvous_overhead.py --hpsearch build/release/hpsearch
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

PROGRAM = r"""import os, sys, time
start = time.time()
with open(sys.argv[1], "a") as f:
    f.write("%s %s %.6f\n" % (os.environ["HPSEARCH_TRIAL_NUMBER"], os.environ["RANK"], start))
time.sleep(float(sys.argv[2]))
print('hpsearch: {"value": 1}')
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hpsearch", default="build/release/hpsearch")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--hold", type=float, default=0.2, help="seconds each program runs")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    hpsearch = os.path.abspath(args.hpsearch)
    tmp = tempfile.mkdtemp(prefix="hps-rendezvous-")
    try:
        prog = os.path.join(tmp, "rank.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        record = os.path.join(tmp, "starts.txt")
        space = {
            "study": {"name": "rdv", "direction": "minimize", "storage": "rdv.db"},
            "sampler": {"type": "random", "seed": 1},
            "budget": {"n_trials": args.trials},
            "resources": {"processes": 2},
            "objective": {"type": "command",
                          "argv": ["/usr/bin/python3", prog, record, str(args.hold)]},
            "space": {"x": {"type": "float", "low": 0, "high": 1}},
        }
        with open(os.path.join(tmp, "space.json"), "w") as f:
            json.dump(space, f)
        run = subprocess.run([hpsearch, "run", "space.json", "--workers", "2"], cwd=tmp,
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("hpsearch run failed:\n" + run.stdout + run.stderr)
        out = subprocess.run([hpsearch, "trials", "rdv.db", "--format", "json"], cwd=tmp,
                             capture_output=True, text=True, check=True).stdout
        trials = json.loads(out)
        rdv = [t["system_attrs"]["rendezvous_s"] for t in trials
               if "rendezvous_s" in t.get("system_attrs", {})]
        starts = {}
        with open(record) as f:
            for line in f:
                n, rank, t = line.split()
                starts.setdefault(int(n), {})[int(rank)] = float(t)
        spread = [s[max(s)] - s[0] for s in starts.values() if 0 in s and len(s) == 2]
        complete = sum(1 for t in trials if t["state"] == "COMPLETE")
        print(f"{complete}/{len(trials)} trials COMPLETE, 2 processes each, 2 local workers")
        for name, xs in (("rendezvous_s (coordinator)", rdv), ("rank spread (programs)", spread)):
            if not xs:
                print(f"{name}: no data")
                continue
            print(f"{name}: median {statistics.median(xs) * 1000:.1f} ms, "
                  f"max {max(xs) * 1000:.1f} ms over {len(xs)} trials")
        worst = max(rdv + spread) if rdv or spread else float("inf")
        print(f"goal: under 1 s per trial: {'met' if worst < 1.0 else 'NOT met'}")
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
