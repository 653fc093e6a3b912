#!/usr/bin/python3
"""Optuna's side of bench/report_scale: the same trials, Optuna's plots.

Reads the trials bench/report_scale wrote (JSON: {"direction", "space":
{name: spec as in space.json}, "trials": [{"state", "value", "params",
"iv": [[step, value]]}]}), builds an Optuna study of them in an in-memory
storage (optuna.trial.create_trial + Study.add_trials), then writes
optuna.visualization.plot_optimization_history and plot_parallel_coordinate
with write_html (Plotly.js inlined, as our report). Prints one JSON line of
seconds: {"build_s", "history_s", "parcoords_s", "total_s", "files": [...]}.

Usage: report_scale_optuna.py TRIALS.json OUT_DIR
"""
import json
import os
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distribution(spec):
    kind = spec["type"]
    if kind == "float":
        return optuna.distributions.FloatDistribution(spec["low"], spec["high"],
                                                      log=spec.get("log", False),
                                                      step=spec.get("step"))
    if kind == "int":
        return optuna.distributions.IntDistribution(spec["low"], spec["high"],
                                                    log=spec.get("log", False),
                                                    step=spec.get("step", 1))
    if kind == "categorical":
        return optuna.distributions.CategoricalDistribution(spec["choices"])
    return optuna.distributions.CategoricalDistribution(spec["values"])  # ordinal


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        doc = json.load(f)
    dists = {name: distribution(spec) for name, spec in doc["space"].items()}
    states = {"COMPLETE": optuna.trial.TrialState.COMPLETE,
              "PRUNED": optuna.trial.TrialState.PRUNED,
              "FAIL": optuna.trial.TrialState.FAIL}
    t0 = time.perf_counter()
    frozen = []
    for t in doc["trials"]:
        params = t["params"]
        frozen.append(optuna.trial.create_trial(
            state=states[t["state"]],
            value=t["value"] if t["state"] == "COMPLETE" else None,
            params=params,
            distributions={k: dists[k] for k in params},
            intermediate_values={s: v for s, v in t["iv"]}))
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(),
                                direction=doc["direction"])
    study.add_trials(frozen)
    t1 = time.perf_counter()
    files = [os.path.join(out, "optuna_history.html"), os.path.join(out, "optuna_parcoords.html")]
    optuna.visualization.plot_optimization_history(study).write_html(files[0])
    t2 = time.perf_counter()
    optuna.visualization.plot_parallel_coordinate(study).write_html(files[1])
    t3 = time.perf_counter()
    print(json.dumps({"optuna": optuna.__version__, "build_s": t1 - t0, "history_s": t2 - t1,
                      "parcoords_s": t3 - t2, "total_s": t3 - t1, "files": files}), flush=True)


if __name__ == "__main__":
    main()
