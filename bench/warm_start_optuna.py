#!/usr/bin/python3
"""Optuna's side of bench/warm_start: the same tasks, Optuna's only way.

Optuna has no warm start from another study's trials; the usual habit is to
enqueue the earlier study's best params (Study.enqueue_trial) in the new
study. For each function and seed: an old study of OLD_TRIALS trials with
TPESampler(seed=seed) on f, then two new studies on the shifted copy of f:
"cold" (TPESampler(seed=seed)) and "enqueue" (the same, with the old best
params enqueued first). Each runs until the target is reached or MAX_TRIALS.
Prints one JSON line per (function, seed, mode): {"func", "seed", "mode",
"trials"} (trials: the 1-based number of the first trial at or below the
target, null if none).

Usage: warm_start_optuna.py SPEC.json
SPEC: {"seeds": [0, ...], "old_trials": 50, "max_trials": 100,
       "functions": [{"name", "dim", "low", "high", "shift", "target"}]}
"""
import json
import math
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def quadratic(x):
    centre = [1.0, -2.0, 0.5, 1.5]
    return sum((xi - c) ** 2 for xi, c in zip(x, centre))


def branin(x):
    a, b, c = 1.0, 5.1 / (4 * math.pi ** 2), 5.0 / math.pi
    r, s, t = 6.0, 10.0, 1.0 / (8 * math.pi)
    return a * (x[1] - b * x[0] ** 2 + c * x[0] - r) ** 2 + s * (1 - t) * math.cos(x[0]) + s


def styblinski_tang(x):
    return 0.5 * sum(xi ** 4 - 16 * xi ** 2 + 5 * xi for xi in x)


FUNCTIONS = {"quadratic4": quadratic, "branin": branin, "styblinski_tang4": styblinski_tang}


def objective_of(spec, shifted):
    f = FUNCTIONS[spec["name"]]
    shift = spec["shift"] if shifted else [0.0] * spec["dim"]

    def objective(trial):
        x = [trial.suggest_float(f"x{i}", spec["low"][i], spec["high"][i])
             for i in range(spec["dim"])]
        return f([xi - si for xi, si in zip(x, shift)])

    return objective


def trials_to_target(spec, seed, max_trials, enqueue=None):
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    if enqueue is not None:
        study.enqueue_trial(enqueue)
    target = spec["target"]
    reached = []

    def stop_at_target(st, trial):
        if trial.value is not None and trial.value <= target:
            reached.append(trial.number + 1)
            st.stop()

    study.optimize(objective_of(spec, True), n_trials=max_trials, callbacks=[stop_at_target])
    return reached[0] if reached else None


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    for fn in spec["functions"]:
        for seed in spec["seeds"]:
            old = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed + 1000))
            old.optimize(objective_of(fn, False), n_trials=spec["old_trials"])
            for mode, enqueue in (("cold", None), ("enqueue", old.best_params)):
                n = trials_to_target(fn, seed, spec["max_trials"], enqueue)
                print(json.dumps({"func": fn["name"], "seed": seed, "mode": mode, "trials": n}),
                      flush=True)


if __name__ == "__main__":
    main()
