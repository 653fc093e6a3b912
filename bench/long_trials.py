#!/usr/bin/python3
"""Long trials: epochs trained when workers are killed, with and without
checkpoints, beside an uninterrupted study of the same trials (one run).

A Fashion-MNIST study (the built-in torch.fashion_mnist objective, MLP, a
training subset, no early stopping so that every trial trains exactly
--epochs epochs) runs three times with `hpsearch run --workers W`:

  uninterrupted   no kills
  checkpoints     a random worker killed (SIGKILL) every --kill-every s;
                  retries continue from their last epoch (the default)
  from scratch    the same kills with "artifacts": {"checkpoints": false}:
                  retries train again from epoch 1 (hpsearch before issue #43)

"Epochs trained" counts every epoch a trial reported, minus the epochs a
retry carried from the trial it continued (they were not trained again); an
epoch cut short by a kill is not counted (so the waste shown is a lower
bound for both interrupted modes alike). The goal of issue #43: checkpoints
at most 1.1x the uninterrupted epochs.

  /usr/bin/python3 bench/long_trials.py --hpsearch build/release/hpsearch
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def space(name, trials, epochs, subset, checkpoints):
    return {
        "study": {"name": name, "direction": "minimize", "storage": name + ".db"},
        "sampler": {"type": "random", "seed": 11},
        "budget": {"n_trials": trials},
        "artifacts": {"checkpoints": checkpoints},
        "objective": {"type": "torch.fashion_mnist", "model": "mlp", "max_epochs": epochs,
                      "train_subset": subset, "early_stopping": {"patience": epochs}},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                  "hidden": {"type": "int", "low": 32, "high": 128, "log": True}},
    }


def worker_pids(run_pid):
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(run_pid)],
                         capture_output=True, text=True).stdout
    return [int(l.split()[0]) for l in out.splitlines() if " worker " in l]


def run(binary, folder, name, args, kill_every, seed):
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump(space(name, args.trials, args.epochs, args.subset, name != "from_scratch"), f)
    rng = random.Random(seed)
    start = time.monotonic()
    proc = subprocess.Popen([binary, "run", name + ".json", "--workers", str(args.workers),
                             "--max-retries", "1000"],
                            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    kills = 0
    next_kill = start + kill_every if kill_every else None
    while proc.poll() is None:
        time.sleep(0.1)
        if next_kill and time.monotonic() >= next_kill:
            pids = worker_pids(proc.pid)
            if pids:
                try:
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
            next_kill = time.monotonic() + kill_every
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{name}: hpsearch run exited {proc.returncode}")
    trials = json.loads(subprocess.run([binary, "trials", name + ".db", "--format", "json"],
                                       cwd=folder, capture_output=True, text=True,
                                       check=True).stdout)
    trained = 0
    for t in trials:
        carried = (t["system_attrs"].get("resumed_from") or {}).get("step", 0)
        trained += len(t["intermediate_values"]) - carried
    complete = sum(t["state"] == "COMPLETE" for t in trials)
    return {"mode": name, "wall_s": wall, "kills": kills, "epochs": trained,
            "complete": complete, "retries": sum("retry_of" in t["system_attrs"] for t in trials)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hpsearch", default="build/release/hpsearch")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--subset", type=int, default=6000, help="training images per epoch")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--kill-every", type=float, default=6.0, help="seconds between worker kills")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    binary = os.path.abspath(args.hpsearch)
    folder = tempfile.mkdtemp(prefix="hps_long_trials_")
    try:
        rows = [run(binary, folder, "uninterrupted", args, 0, args.seed),
                run(binary, folder, "checkpoints", args, args.kill_every, args.seed),
                run(binary, folder, "from_scratch", args, args.kill_every, args.seed)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = rows[0]["epochs"]
    print(f"{args.trials} trials x {args.epochs} epochs, MLP on {args.subset} images, "
          f"{args.workers} workers, a worker killed every {args.kill_every} s")
    print(f"{'mode':<14} {'kills':>5} {'retries':>7} {'COMPLETE':>8} {'epochs':>7} "
          f"{'epochs / uninterrupted':>22} {'wall s':>7}")
    for r in rows:
        print(f"{r['mode']:<14} {r['kills']:>5} {r['retries']:>7} {r['complete']:>8} "
              f"{r['epochs']:>7} {r['epochs'] / base:>21.2f}x {r['wall_s']:>7.1f}")


if __name__ == "__main__":
    main()
