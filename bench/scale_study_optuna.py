#!/usr/bin/python3
"""Optuna's side of bench/scale_study: a study of N trials in an Optuna
SQLite file, and the time of the reads an Optuna user runs on it.

Builds the study fast: optuna.create_study makes the file and its schema
(Optuna 3.1's RDB tables), one trial is added through Study.add_trial (so
the rows are Optuna's own), and the other N - 1 are inserted with the
sqlite3 module's executemany into the same tables (trials, trial_params,
trial_values, trial_intermediate_values) in one transaction, copying the
columns of that first trial. 6 float params, every 10th trial with 3
intermediate values, about 5% PRUNED and 2% FAIL (as bench/scale_study).
Then, in this order in this process: optuna.load_study, study.best_trial,
study.trials_dataframe() (seconds of each, wall time).

Prints one JSON line: {"optuna": version, "n_trials", "build_s",
"load_study_s", "best_trial_s", "trials_dataframe_s", "best_number",
"peak_rss_mb" (of the whole process, build included)}.

Usage: scale_study_optuna.py FILE.db N_TRIALS
"""
import datetime
import json
import random
import resource
import sqlite3
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_PARAMS = 6


def build(path, n):
    url = "sqlite:///" + path
    study = optuna.create_study(study_name="scale", storage=url, direction="minimize")
    dists = {f"p{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(N_PARAMS)}
    study.add_trial(optuna.trial.create_trial(
        params={k: 0.5 for k in dists}, distributions=dists, value=1.0))
    dist_json = {k: optuna.distributions.distribution_to_json(d) for k, d in dists.items()}
    db = sqlite3.connect(path)
    study_id = db.execute("SELECT study_id FROM studies").fetchone()[0]
    rng = random.Random(1)
    now = datetime.datetime.now()
    trials, params, values, inter = [], [], [], []
    next_id = db.execute("SELECT max(trial_id) FROM trials").fetchone()[0] + 1
    for number in range(1, n):
        tid = next_id + number - 1
        r = rng.random()
        state = "PRUNED" if r < 0.05 else "FAIL" if r < 0.07 else "COMPLETE"
        trials.append((tid, number, study_id, state, now, now))
        for k in dists:
            params.append((tid, k, rng.random(), dist_json[k]))
        if state == "COMPLETE":
            values.append((tid, 0, rng.random(), "FINITE"))
        if number % 10 == 0:
            for step in range(3):
                inter.append((tid, step, rng.random(), "FINITE"))
    with db:
        db.executemany("INSERT INTO trials(trial_id, number, study_id, state, datetime_start, "
                       "datetime_complete) VALUES (?, ?, ?, ?, ?, ?)", trials)
        db.executemany("INSERT INTO trial_params(trial_id, param_name, param_value, "
                       "distribution_json) VALUES (?, ?, ?, ?)", params)
        db.executemany("INSERT INTO trial_values(trial_id, objective, value, value_type) "
                       "VALUES (?, ?, ?, ?)", values)
        db.executemany("INSERT INTO trial_intermediate_values(trial_id, step, "
                       "intermediate_value, intermediate_value_type) VALUES (?, ?, ?, ?)", inter)
    db.close()
    return url


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    t0 = time.perf_counter()
    url = build(path, n)
    out = {"optuna": optuna.__version__, "n_trials": n, "build_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    study = optuna.load_study(study_name="scale", storage=url)
    out["load_study_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    best = study.best_trial
    out["best_trial_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    df = study.trials_dataframe()
    out["trials_dataframe_s"] = time.perf_counter() - t0
    if len(df) != n:
        raise SystemExit(f"trials_dataframe has {len(df)} rows, expected {n}")
    out["best_number"] = best.number
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
