#!/usr/bin/python3
"""Differential check of our TPE estimators against Optuna 3.1's.

Feeds the SAME below/above split of the same history to Optuna 3.1's
_ParzenEstimator (optuna/samplers/_tpe/parzen_estimator.py) and to ours
(build/release/bench/parzen_diff, algorithms/parzen_estimator.h), and
compares log l(x), log g(x) and the acquisition log l - log g at the same
points, per param (univariate) and jointly (multivariate). Not a benchmark
and not a test: it prints what differs, with numbers.

The history: --n random points of a problem's space from bench/hpo_suite.py
(no conditional params: the problem's params without "when"), valued by the
problem's objective (or a fake quadratic with --fake, no scikit-learn or
XGBoost needed), split by Optuna's own rule (_split_observation_pairs,
default_gamma), weighted by Optuna's default_weights on its side and by ours
on ours. The points: candidates drawn from Optuna's l (what the acquisition
ranks) and uniform points.

Columns: "|d log l|" and "|d log g|": mean / max absolute difference of the
log densities; "d acq sd": the standard deviation over points of the
difference of the acquisitions (a constant shift does not change a choice);
"same pick": how often both pick the same of 24 candidates drawn from
Optuna's l (the acquisition's argmax), over --batches batches.

Usage: /usr/bin/python3 bench/parzen_diff.py [--problem xgb_cancer] [--n 100]
       [--seed 0] [--binary build/release/bench/parzen_diff] [--fake]
       [--ours JSON] (our sampler options, default {"type":"tpe"} with
       "multivariate" set per mode)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hpo_suite  # noqa: E402

warnings.simplefilter("ignore")
from optuna import distributions as od  # noqa: E402
from optuna.samplers._tpe import sampler as osampler  # noqa: E402
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator  # noqa: E402
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimatorParameters  # noqa: E402

DEFAULT_BIN = os.path.join(hpo_suite.ROOT, "build", "release", "bench", "parzen_diff")


def optuna_dist(spec):
    t = spec["type"]
    if t == "float":
        return od.FloatDistribution(spec["low"], spec["high"], log=spec.get("log", False),
                                    step=spec.get("step"))
    if t == "int":
        return od.IntDistribution(spec["low"], spec["high"], log=spec.get("log", False),
                                  step=spec.get("step", 1))
    if t == "categorical":
        return od.CategoricalDistribution(spec["choices"])
    return od.CategoricalDistribution(spec["values"])  # ordinal, as Optuna users write it


def random_point(space, rng):
    p = {}
    for name, spec in space.items():
        d = optuna_dist(spec)
        if isinstance(d, od.CategoricalDistribution):
            p[name] = d.choices[rng.randint(len(d.choices))]
        elif isinstance(d, od.IntDistribution):
            if d.log:
                v = math.exp(rng.uniform(math.log(d.low - 0.5), math.log(d.high + 0.5)))
                p[name] = int(min(max(round(v), d.low), d.high))
            else:
                p[name] = int(rng.randint(d.low, d.high + 1))
        else:
            p[name] = float(math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
                            if d.log else rng.uniform(d.low, d.high))
    return p


def optuna_estimators(space, below, above, multivariate):
    dists = {n: optuna_dist(s) for n, s in space.items()}
    params = _ParzenEstimatorParameters(
        consider_prior=True, prior_weight=1.0, consider_magic_clip=True,
        consider_endpoints=False, weights=osampler.default_weights, multivariate=multivariate)

    def obs(rows):
        return {n: np.asarray([dists[n].to_internal_repr(r[n]) for r in rows], dtype=float)
                for n in space}

    return (dists, _ParzenEstimator(obs(below), dists, params),
            _ParzenEstimator(obs(above), dists, params))


def optuna_log_pdf(est, dists, points):
    x = {n: np.asarray([dists[n].to_internal_repr(p[n]) for p in points], dtype=float)
         for n in dists}
    for n, d in dists.items():
        if isinstance(d, od.CategoricalDistribution):
            x[n] = x[n].astype(int)
    return est.log_pdf(x)


def ours(binary, space, sampler, below, above, points):
    req = {"space": space, "sampler": sampler, "below": below, "above": above, "points": points}
    out = subprocess.run([binary], input=json.dumps(req), capture_output=True, text=True)
    ans = json.loads(out.stdout)
    if "error" in ans:
        raise RuntimeError(ans["error"])
    return ans


def external(dists, samples, j):
    p = {}
    for n, d in dists.items():
        v = samples[n][j]
        p[n] = d.to_external_repr(int(v) if isinstance(d, od.CategoricalDistribution) else v)
        if isinstance(d, od.IntDistribution):
            p[n] = int(p[n])
        elif isinstance(d, od.FloatDistribution):
            p[n] = float(p[n])
    return p


def compare(label, space, below, above, binary, sampler, multivariate, rng, batches):
    dists, ol, og = optuna_estimators(space, below, above, multivariate)
    cand = []
    for _ in range(batches):
        s = ol.sample(rng, 24)
        cand += [external(dists, s, j) for j in range(24)]
    uniform = [random_point(space, rng) for _ in range(200)]
    points = cand + uniform
    a = ours(binary, space, sampler, below, above, points)
    o_l, o_g = optuna_log_pdf(ol, dists, points), optuna_log_pdf(og, dists, points)
    u_l, u_g = np.asarray(a["log_l"]), np.asarray(a["log_g"])
    dl, dg = np.abs(u_l - o_l), np.abs(u_g - o_g)
    dacq = (u_l - u_g) - (o_l - o_g)
    nc = len(cand)
    same = 0
    for b in range(batches):
        sl = slice(24 * b, 24 * b + 24)
        same += int(np.argmax((u_l - u_g)[sl]) == np.argmax((o_l - o_g)[sl]))
    print(f"| {label} | {dl.mean():.3g} / {dl.max():.3g} | {dg.mean():.3g} / {dg.max():.3g} "
          f"| {np.std(dacq[:nc]):.3g} | {same}/{batches} |")
    return a, (ol, og)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", default="xgb_cancer")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--binary", default=DEFAULT_BIN)
    ap.add_argument("--fake", action="store_true", help="a quadratic instead of the objective")
    ap.add_argument("--ours", default='{"type":"tpe"}')
    ap.add_argument("--params", help="comma-separated subset of the params")
    ap.add_argument("--modes", default="uni,mv")
    args = ap.parse_args()

    space, objective = hpo_suite.PROBLEMS[args.problem]
    space = {n: s for n, s in space.items() if "when" not in s}
    if args.params:
        space = {n: space[n] for n in args.params.split(",")}
    rng = np.random.RandomState(args.seed)
    hist = [random_point(space, rng) for _ in range(args.n)]
    if args.fake:
        def objective(p):  # noqa: E306
            v = 0.0
            for n, s in space.items():
                d = optuna_dist(s)
                if isinstance(d, od.CategoricalDistribution):
                    v += 0.1 * d.choices.index(p[n])
                else:
                    lo, hi, x = d.low, d.high, p[n]
                    if d.log:
                        lo, hi, x = math.log(lo), math.log(hi), math.log(x)
                    v += ((x - lo) / (hi - lo) - 0.3) ** 2
            return v
    values = [objective(p) for p in hist]
    scores = [(-float("inf"), [v]) for v in values]
    ib, ia = osampler._split_observation_pairs(scores, osampler.default_gamma(len(values)), None)
    below, above = [hist[i] for i in ib], [hist[i] for i in ia]
    print(f"{args.problem}: {len(below)} below, {len(above)} above "
          f"({args.n} random points, seed {args.seed})\n")
    print("| estimator | \\|d log l\\| mean / max | \\|d log g\\| mean / max | d acq sd | same pick |")
    print("|---|---:|---:|---:|---:|")
    base = json.loads(args.ours)
    modes = args.modes.split(",")
    if "uni" in modes:
        for name in space:
            sub = {name: space[name]}
            sampler = dict(base, multivariate=False)
            compare(f"uni {name} ({space[name]['type']}{' log' if space[name].get('log') else ''})",
                    sub, [{name: r[name]} for r in below], [{name: r[name]} for r in above],
                    args.binary, sampler, False, rng, args.batches)
    if "mv" in modes:
        sampler = dict(base, multivariate=True)
        compare(f"joint ({len(space)} params)", space, below, above, args.binary, sampler, True,
                rng, args.batches)


if __name__ == "__main__":
    main()
