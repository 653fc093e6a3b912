#!/usr/bin/env python3
"""Param importances of `hpsearch report` against Optuna's, on the same trials.

A synthetic study where the answer is known: the objective (the "sleep"
objective: the sum of the numeric params) is a + b + c + d with a in [0, 10]
(matters), b and c in [0, 1] (barely matter) and d in [0, 0.001] (does not
matter). `hpsearch run` runs it (random sampler), `hpsearch report` computes
PED-ANOVA importances in C++ (read from the page's data), and the same
trials, exported with `hpsearch trials --format json`, are built into an
Optuna study through its API (optuna.trial.create_trial + add_trials) whose
importances Optuna computes (fANOVA, its default evaluator; PED-ANOVA when
the installed Optuna has it). Both must rank a first and d last, and agree
on the ranking of the top param.

Usage: report_importance_optuna_test.py HPSEARCH_EXE WORK_DIR
Needs Debian's python3-optuna and python3-sklearn (fANOVA); fails without.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import optuna

HPSEARCH = os.path.abspath(sys.argv[1])
WORK = os.path.abspath(sys.argv[2])


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    db = os.path.join(WORK, "imp.db")
    space = {
        "study": {"name": "imp", "direction": "minimize", "storage": db},
        "sampler": {"type": "random", "seed": 11},
        "budget": {"n_trials": 300},
        "objective": {"type": "sleep", "seconds": 0},
        "space": {
            "a": {"type": "float", "low": 0, "high": 10},
            "b": {"type": "float", "low": 0, "high": 1},
            "c": {"type": "float", "low": 0, "high": 1},
            "d": {"type": "float", "low": 0, "high": 0.001},
        },
    }
    with open(os.path.join(WORK, "space.json"), "w") as f:
        json.dump(space, f)
    subprocess.run([HPSEARCH, "run", "space.json", "--workers", "2"], cwd=WORK, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    report = os.path.join(WORK, "imp.html")
    subprocess.run([HPSEARCH, "report", db, "-o", report], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    with open(report, encoding="utf-8") as f:
        page = f.read()
    m = re.search(r'<script type="application/json" id="hps-data">(.*?)</script>', page, re.S)
    data = json.loads(m.group(1))
    ours = {v["param"]: v["importance"] for v in data["importance"]["values"]}
    our_rank = sorted(ours, key=lambda k: -ours[k])

    trials = json.loads(subprocess.run([HPSEARCH, "trials", db, "--format", "json"],
                                       capture_output=True, text=True, check=True).stdout)
    dists = {k: optuna.distributions.FloatDistribution(v["low"], v["high"])
             for k, v in space["space"].items()}
    frozen = [optuna.trial.create_trial(params=t["params"], distributions=dists, value=t["value"])
              for t in trials if t["state"] == "COMPLETE"]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    study.add_trials(frozen)
    evaluator = (optuna.importance.PedAnovaImportanceEvaluator()
                 if hasattr(optuna.importance, "PedAnovaImportanceEvaluator")
                 else optuna.importance.FanovaImportanceEvaluator(seed=0))
    theirs = optuna.importance.get_param_importances(study, evaluator=evaluator)
    their_rank = list(theirs)
    print(f"{len(frozen)} COMPLETE trials")
    print(f"hpsearch ({data['importance']['method']}): " +
          ", ".join(f"{k} {ours[k]:.3f}" for k in our_rank))
    print(f"optuna {optuna.__version__} ({type(evaluator).__name__}): " +
          ", ".join(f"{k} {theirs[k]:.3f}" for k in their_rank))
    failures = []
    if len(frozen) < 250:
        failures.append(f"only {len(frozen)} COMPLETE trials")
    if our_rank[0] != "a" or their_rank[0] != "a":
        failures.append(f"the param that matters (a) is not first: ours {our_rank}, "
                        f"Optuna's {their_rank}")
    if our_rank[-1] != "d" or their_rank[-1] != "d":
        failures.append(f"the param that does not matter (d) is not last: ours {our_rank}, "
                        f"Optuna's {their_rank}")
    if set(our_rank[1:3]) != {"b", "c"} or set(their_rank[1:3]) != {"b", "c"}:
        failures.append(f"b and c are not second and third: ours {our_rank}, Optuna's {their_rank}")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
