#!/usr/bin/python3
"""The XGBoost-style study of examples/persistent, three ways, side by side.

 - optuna      Optuna (Debian python3-optuna), in-process: one Python
               process, imports paid once; TPESampler(seed, n_startup_trials
               10) and MedianPruner(n_startup_trials 5), as space.json says.
 - per_trial   `hpsearch run` with objective.mode "per_trial": one Python
               process per trial (interpreter + numpy/scikit-learn imports
               every trial).
 - persistent  `hpsearch run` with objective.mode "persistent": one Python
               process per worker serves every trial.

All three run examples/persistent/train_gbt.py's train() on the same data,
N trials each (default 50), one after another in this run, one worker
(Optuna runs one trial at a time too). Prints a table: wall time (process
start to study end, imports included), best value, and the wall time as a
ratio to Optuna's. The goal of issue #18: persistent within 2x of Optuna.

Usage: bench/xgboost_study.py --hpsearch build/release/hpsearch [--n-trials 50]
                              [--modes optuna,per_trial,persistent]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "examples", "persistent"))

OPTUNA_STUDY = r"""
import json, os, sys, time
t0 = float(sys.argv[1])
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, sys.argv[2])
import optuna
from train_gbt import train
optuna.logging.set_verbosity(optuna.logging.WARNING)
space = json.load(open(os.path.join(sys.argv[2], "space.json")))["space"]

def objective(trial):
    params = {}
    for name, spec in space.items():
        if spec["type"] == "float":
            params[name] = trial.suggest_float(name, spec["low"], spec["high"], log=spec.get("log", False))
        else:
            params[name] = trial.suggest_int(name, spec["low"], spec["high"], log=spec.get("log", False))
    def report(step, value):
        trial.report(value, step)
    loss = train(params, report, trial.should_prune)
    if loss is None:
        raise optuna.TrialPruned()
    return loss

study = optuna.create_study(
    direction="minimize",
    sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=10),
    pruner=optuna.pruners.MedianPruner(n_startup_trials=5))
study.optimize(objective, n_trials=int(sys.argv[3]))
pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
print(json.dumps({"wall_s": time.time() - t0, "best": study.best_value, "pruned": pruned}))
"""


def run_optuna(n_trials):
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", OPTUNA_STUDY, repr(t0), EXAMPLE, str(n_trials)],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_s"] = time.time() - t0
    return result


def run_hpsearch(hpsearch, mode, n_trials, workdir):
    with open(os.path.join(EXAMPLE, "space.json")) as f:
        config = json.load(f)
    name = "bench-" + mode
    config["study"]["name"] = name
    config["study"]["storage"] = os.path.join(workdir, name + ".db")
    config["objective"]["mode"] = mode
    config["objective"]["cwd"] = EXAMPLE
    config["objective"]["argv"][0] = sys.executable
    config["objective"]["env"] = {"OMP_NUM_THREADS": "1"}
    config["budget"]["n_trials"] = n_trials
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    t0 = time.time()
    subprocess.run([hpsearch, "run", path, "--workers", "1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.time() - t0
    best, pruned = _summary(hpsearch, config["study"]["storage"], name)
    return {"wall_s": wall, "best": best, "pruned": pruned}


def _summary(hpsearch, storage, name):
    """Best value and pruned count, read with `hpsearch trials --format json`."""
    out = subprocess.run([hpsearch, "trials", storage, "--study", name, "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    trials = json.loads(out)
    if isinstance(trials, dict):
        trials = trials.get("trials", [])
    values = [t["value"] for t in trials if t.get("state") == "COMPLETE"]
    pruned = sum(1 for t in trials if t.get("state") == "PRUNED")
    return (min(values) if values else float("nan")), pruned


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hpsearch", required=True, help="the hpsearch executable")
    parser.add_argument("--n-trials", type=int, default=50)
    parser.add_argument("--modes", default="optuna,per_trial,persistent")
    args = parser.parse_args()
    hpsearch = os.path.abspath(args.hpsearch)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hps_xgb_bench_") as workdir:
        for mode in args.modes.split(","):
            if mode == "optuna":
                results[mode] = run_optuna(args.n_trials)
            else:
                results[mode] = run_hpsearch(hpsearch, mode, args.n_trials, workdir)
            print("%-11s done: %.1f s" % (mode, results[mode]["wall_s"]), file=sys.stderr)
    base = results.get("optuna", {}).get("wall_s")
    print("XGBoost-style study (examples/persistent/train_gbt.py), %d trials, 1 worker, "
          "%d cores" % (args.n_trials, os.cpu_count() or 0))
    print("%-22s %10s %12s %8s %14s" % ("run", "wall s", "best value", "pruned", "wall / optuna"))
    labels = {"optuna": "optuna in-process", "per_trial": "hpsearch per_trial",
              "persistent": "hpsearch persistent"}
    for mode, r in results.items():
        ratio = "%.2fx" % (r["wall_s"] / base) if base else "-"
        print("%-22s %10.1f %12.5f %8d %14s" % (labels.get(mode, mode), r["wall_s"], r["best"],
                                              r["pruned"], ratio))


if __name__ == "__main__":
    main()
