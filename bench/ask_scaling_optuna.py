#!/usr/bin/python3
"""Optuna's side of bench/ask_scaling: the time of study.ask + study.tell per
block of trials, in-memory storage, 6 float params on [0, 1] given as fixed
distributions to ask() (as hpsearch's declared space), value
sum((x_i - 0.5)^2).

Samplers: "random" (RandomSampler(seed=1)) and "tpe" (TPESampler(seed=1,
n_startup_trials=N + 1): every trial is a startup trial, so the time is the
history handling around the sampler, not TPE's model).

Prints one JSON line per sampler: {"optuna": version, "sampler", "n_trials",
"block", "block_s": [seconds of each block of `block` trials]}.

Usage: ask_scaling_optuna.py N_TRIALS BLOCK SAMPLER[,SAMPLER...]
"""
import json
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)

N_PARAMS = 6


def run(sampler_name, n, block):
    if sampler_name == "random":
        sampler = optuna.samplers.RandomSampler(seed=1)
    elif sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=1, n_startup_trials=n + 1)
    else:
        raise SystemExit("unknown sampler: " + sampler_name)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    dists = {f"x{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(N_PARAMS)}
    blocks = []
    start = time.perf_counter()
    for i in range(n):
        trial = study.ask(dists)
        value = sum((v - 0.5) ** 2 for v in trial.params.values())
        study.tell(trial, value)
        if (i + 1) % block == 0:
            now = time.perf_counter()
            blocks.append(now - start)
            start = now
    print(json.dumps({"optuna": optuna.__version__, "sampler": sampler_name, "n_trials": n,
                      "block": block, "block_s": blocks}), flush=True)


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    n, block = int(sys.argv[1]), int(sys.argv[2])
    for name in sys.argv[3].split(","):
        run(name, n, block)


if __name__ == "__main__":
    main()
