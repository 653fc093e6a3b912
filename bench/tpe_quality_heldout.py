#!/usr/bin/python3
"""Our default TPE against Optuna 3.1's TPE on the continuous functions of
bench/tpe_quality, on seeds of one's choice (held-out seeds: tpe_quality's
saved Optuna figures cover seeds 0..19 only), paired by seed.

Runs build/release/bench/tpe_quality (--optuna none, --json) for our
samplers, and Optuna's univariate and multivariate TPE with the functions and
domains of ../shared/bench/optuna_reference.py (the file tpe_quality's
"--optuna live" runs), one study per function, mode and seed; or reads
Optuna's rows saved by an earlier run (--load-optuna FILE). Prints, per
function, our default's mean and median best beside each Optuna mode's, the
paired difference of the means (ours - Optuna; lower is better for us: every
function is minimized) with a 95% bootstrap interval over seeds, and on how
many seeds ours is better.

Usage (run with /usr/bin/python3; nice -n 19 for long runs):
  bench/tpe_quality_heldout.py [--seeds 100] [--seed-offset 2000] [--trials 100]
                               [--funcs branin,hartmann6] [--save-optuna FILE]
                               [--load-optuna FILE] [--load-ours FILE]
Optuna's rows: one JSON line per function, mode and seed ({"func", "sampler",
"seed", "best"}). Branin and Hartmann6 at 100 seeds: about 25 minutes on a
2-core VM (Optuna's multivariate TPE on Hartmann6 is the slow part).
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hpo_suite import check_minimums, check_writable, parse_names  # noqa: E402 (the suite's argument rules)
ROOT = os.path.normpath(os.path.join(HERE, ".."))
REFERENCE_SCRIPT = os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "optuna_reference.py"))
BINARY = os.path.join(ROOT, "build", "release", "bench", "tpe_quality")
FUNCS = ("branin", "hartmann6", "styblinski10", "rosenbrock4", "ackley5")
# tpe_quality's names of the same functions.
OURS_NAME = {"branin": "branin", "hartmann6": "hartmann6", "styblinski10": "styblinski_tang",
             "rosenbrock4": "rosenbrock", "ackley5": "ackley"}
MODES = ("tpe", "tpe_multivariate")


def run_optuna(funcs, seeds, trials, out):
    spec = importlib.util.spec_from_file_location("optuna_reference", REFERENCE_SCRIPT)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    rows = []
    for f in funcs:
        for mode in MODES:
            for seed in seeds:
                study = optuna.create_study(sampler=ref.sampler(mode, seed))
                study.optimize(ref.FUNCS[f], n_trials=trials)
                row = {"func": f, "sampler": mode, "seed": seed, "best": study.best_value}
                rows.append(row)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--seed-offset", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--funcs", default="branin,hartmann6")
    ap.add_argument("--save-optuna", help="write Optuna's rows here as they come")
    ap.add_argument("--load-optuna", help="read Optuna's rows instead of running Optuna")
    ap.add_argument("--load-ours", help="a tpe_quality --json file of the same seeds instead of running it")
    ap.add_argument("--binary", default=BINARY)
    args = ap.parse_args()
    funcs = parse_names(ap, "--funcs", args.funcs, FUNCS, "function")
    check_minimums(ap, (("--seeds", args.seeds, 1), ("--seed-offset", args.seed_offset, 0),
                        ("--trials", args.trials, 1)))
    if args.load_optuna and args.save_optuna:
        ap.error("--save-optuna: not with --load-optuna")
    check_writable(ap, "--save-optuna", args.save_optuna)
    if not args.load_optuna and not os.path.isfile(REFERENCE_SCRIPT):
        ap.error(f"Optuna's functions are read from {REFERENCE_SCRIPT}, which is missing (or use --load-optuna)")
    if not args.load_ours and not os.access(args.binary, os.X_OK):
        ap.error(f"--binary: {args.binary} is not an executable (build target tpe_quality)")
    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))

    # Ours: tpe_quality's default multivariate TPE (its "tpe_multivariate" row).
    if args.load_ours:
        ours_rows = json.load(open(args.load_ours))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ours.json")
            cmd = [args.binary, "--trials", str(args.trials), "--seeds", str(args.seeds),
                   "--seed-offset", str(args.seed_offset), "--optuna", "none", "--json", path]
            for f in funcs:
                cmd += ["--func", OURS_NAME[f]]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            ours_rows = json.load(open(path))
    ours = {}
    for r in ours_rows:
        if r["sampler"] == "tpe_multivariate":
            ours[r["func"]] = r["bests"]
    # Optuna.
    if args.load_optuna:
        optuna_rows = [json.loads(line) for line in open(args.load_optuna) if line.strip()]
    else:
        out = open(args.save_optuna, "w") if args.save_optuna else None
        optuna_rows = run_optuna(funcs, seeds, args.trials, out)
    optuna = {}
    for r in optuna_rows:
        optuna.setdefault((r["func"], r["sampler"]), {})[r["seed"]] = r["best"]

    print(f"# tpe_quality_heldout: best value after {args.trials} trials, seeds {seeds[0]}..{seeds[-1]}"
          " (lower is better); ours: the default {\"type\": \"tpe\"} (multivariate)")
    print("| function | ours mean / median | Optuna mode | Optuna mean / median |"
          " paired diff of means (ours - Optuna) | 95% interval | seeds ours better |")
    print("|---|---:|---|---:|---:|---:|---:|")
    rng = random.Random(0)
    for f in funcs:
        a = ours.get(OURS_NAME[f])
        if a is None or len(a) != len(seeds) or any(v is None for v in a):
            sys.exit(f"ours: no complete row for {f} on seeds {seeds[0]}..{seeds[-1]}")
        for mode in MODES:
            by_seed = optuna.get((f, mode), {})
            missing = [s for s in seeds if s not in by_seed]
            if missing:
                sys.exit(f"Optuna {mode} on {f}: no row for seed {missing[0]} ({len(missing)} missing)")
            b = [by_seed[s] for s in seeds]
            d = [x - y for x, y in zip(a, b)]
            boots = sorted(statistics.mean(rng.choice(d) for _ in d) for _ in range(4000))
            print(f"| {f} | {statistics.mean(a):.4f} / {statistics.median(a):.4f} | {mode} |"
                  f" {statistics.mean(b):.4f} / {statistics.median(b):.4f} | {statistics.mean(d):+.4f} |"
                  f" {boots[100]:+.4f}..{boots[3899]:+.4f} | {sum(x < y for x, y in zip(a, b))} / {len(d)} |")


if __name__ == "__main__":
    main()
