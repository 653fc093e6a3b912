#!/usr/bin/python3
"""HPO suite, pooled: our saved results against Optuna's over every seed both have.

bench/hpo_suite.py prints one block of seeds at a time; blocks of 20-40
seeds are noisy (on config_surrogate one seed that ends in another basin
moves a mean by 3%). This script pools the saved files of several blocks:
for each problem, each of our samplers (--load: files written by
hpo_suite.py --json) and each of Optuna's TPE modes (--reference: files
written by --optuna live), over the seeds that both have, it prints the
ratio of the mean best values (ours / Optuna; lower is better for us) with
a 95% paired bootstrap interval (seeds resampled with replacement, both
sides together, 2000 resamples, fixed seed), and the ratio of the medians.
"vs best mode" is the largest of the mean ratios (Optuna's best TPE mode by
mean on these seeds), with its interval, and the largest of the median
ratios (the best mode by median).

Usage (run with /usr/bin/python3):
  bench/hpo_suite_pooled.py --load OURS.json... --reference OPTUNA.jsonl...
                            [--problems a,b] [--samplers tpe,...]
"""
import argparse
import json
import random
import statistics

MODES = ("tpe", "tpe_mv", "tpe_mv_group")


def read_ours(ap, paths):
    """{(problem, sampler): {seed: best}} from hpo_suite.py --json files."""
    out = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
            seeds = data["seeds"]
            for r in data["results"]:
                if r.get("side", "ours") != "ours":
                    continue
                cell = out.setdefault((r["problem"], r["sampler"]), {})
                for s, b in zip(seeds, r["bests"]):
                    if b is not None:
                        cell[s] = b
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--load {path}: not a file written by hpo_suite.py --json ({e})")
    return out


def read_optuna(ap, paths):
    """{(problem, mode): {seed: best}} from hpo_suite.py --optuna live files."""
    out = {}
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    if not line.strip():
                        continue
                    row = json.loads(line)
                    if row.get("meta"):
                        continue
                    out.setdefault((row["problem"], row["sampler"]), {})[row["seed"]] = row["best"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            ap.error(f"--reference {path}: not a file written by hpo_suite.py --optuna live ({e})")
    return out


def mean_ratio_interval(ours, theirs, rng, resamples=2000):
    """2.5% and 97.5% quantiles of mean(ours) / mean(theirs) over paired resamples."""
    n = len(ours)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        a = sum(ours[i] for i in idx)
        b = sum(theirs[i] for i in idx)
        ratios.append(a / b if b else float("inf"))
    ratios.sort()
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--load", action="append", default=[], required=True, metavar="OURS.json")
    ap.add_argument("--reference", action="append", default=[], required=True, metavar="OPTUNA.jsonl")
    ap.add_argument("--problems", default="", help="comma-separated (default: all in the files)")
    ap.add_argument("--samplers", default="", help="our sampler labels (default: all in the files)")
    args = ap.parse_args()
    ours = read_ours(ap, args.load)
    optuna = read_optuna(ap, args.reference)
    problems = [p for p in args.problems.split(",") if p] or sorted({p for p, _ in ours})
    samplers = [s for s in args.samplers.split(",") if s] or sorted({s for _, s in ours})
    print("| problem | ours | Optuna mode | seeds | mean ours / Optuna | 95% interval | median ratio |")
    print("|---|---|---|---:|---:|---:|---:|")
    for p in problems:
        for label in samplers:
            mine = ours.get((p, label))
            if not mine:
                continue
            worst = worst_median = None
            for mode in MODES:
                theirs = optuna.get((p, mode), {})
                shared = sorted(set(mine) & set(theirs))
                if len(shared) < 2:
                    continue
                a = [mine[s] for s in shared]
                b = [theirs[s] for s in shared]
                ratio = statistics.mean(a) / statistics.mean(b)
                lo, hi = mean_ratio_interval(a, b, random.Random(0))
                med = statistics.median(a) / statistics.median(b)
                print(f"| {p} | {label} | {mode} | {len(shared)} | {ratio:.3f}x | "
                      f"{lo:.3f}..{hi:.3f} | {med:.3f}x |")
                if worst is None or ratio > worst[0]:
                    worst = (ratio, mode, lo, hi)
                if worst_median is None or med > worst_median[0]:
                    worst_median = (med, mode)
            if worst:
                print(f"| {p} | {label} | **vs best mode** (mean: {worst[1]}, median: "
                      f"{worst_median[1]}) | | **{worst[0]:.3f}x** | {worst[2]:.3f}..{worst[3]:.3f} | "
                      f"**{worst_median[0]:.3f}x** |")


if __name__ == "__main__":
    main()
