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
import math
import random
import signal
import statistics
import sys

MODES = ("tpe", "tpe_mv", "tpe_mv_group")


def fail(message):
    """One line on stderr and exit status 2, as argparse's errors."""
    sys.exit(f"hpo_suite_pooled.py: error: {message}")


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_ours(paths):
    """{(problem, sampler): {seed: best}} and the trial count of each file,
    from hpo_suite.py --json files (checked: no row is taken on trust)."""
    out, trials = {}, {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"--load {path}: cannot read it as JSON ({e})")
        if (not isinstance(data, dict) or not isinstance(data.get("seeds"), list)
                or not isinstance(data.get("results"), list)):
            fail(f"--load {path}: not a file written by hpo_suite.py --json (it needs 'seeds' and "
                 "'results' lists)")
        if not is_number(data.get("trials")):
            fail(f"--load {path}: 'trials' must be a number, got {data.get('trials')!r}")
        trials[path] = data["trials"]
        seeds = data["seeds"]
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            fail(f"--load {path}: 'seeds' must be integers")
        for k, r in enumerate(data["results"]):
            where = f"--load {path}: results[{k}]"
            if not isinstance(r, dict):
                fail(f"{where}: must be an object, got {type(r).__name__}")
            if r.get("side", "ours") != "ours":
                continue
            if not isinstance(r.get("problem"), str) or not isinstance(r.get("sampler"), str):
                fail(f"{where}: 'problem' and 'sampler' must be strings")
            bests = r.get("bests")
            if not isinstance(bests, list) or len(bests) != len(seeds):
                fail(f"{where}: 'bests' must be a list with one entry per seed ({len(seeds)})")
            cell = out.setdefault((r["problem"], r["sampler"]), {})
            for s, b in zip(seeds, bests):
                if b is None:
                    continue  # a seed this run did not finish
                if not is_number(b):
                    fail(f"{where}: seed {s}: best must be a finite number or null, got {b!r}")
                cell[s] = b
    return out, trials


def read_optuna(paths):
    """{(problem, mode): {seed: best}} and the trial count of each file (its
    meta line's; None without one), from hpo_suite.py --optuna live files."""
    out, trials = {}, {}
    for path in paths:
        trials[path] = None
        try:
            with open(path, encoding="utf-8") as f:
                lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
        except (OSError, ValueError) as e:
            fail(f"--reference {path}: cannot read it ({e})")
        for n, line in lines:
            where = f"--reference {path}: line {n}"
            try:
                row = json.loads(line)
            except ValueError as e:
                fail(f"{where}: not JSON ({e})")
            if not isinstance(row, dict):
                fail(f"{where}: must be a JSON object")
            if row.get("meta"):
                trials[path] = row.get("trials")
                continue
            problem, sampler, seed, best = (row.get(k) for k in ("problem", "sampler", "seed", "best"))
            if not isinstance(problem, str) or not isinstance(sampler, str):
                fail(f"{where}: 'problem' and 'sampler' must be strings")
            if not isinstance(seed, int) or isinstance(seed, bool):
                fail(f"{where}: 'seed' must be an integer, got {seed!r}")
            if not is_number(best):
                fail(f"{where}: 'best' must be a finite number, got {best!r}")
            out.setdefault((problem, sampler), {})[seed] = best
        if not lines:
            fail(f"--reference {path}: the file is empty")
    return out, trials


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
    ours, our_trials = read_ours(args.load)
    optuna, their_trials = read_optuna(args.reference)
    counts = set(our_trials.values()) | {t for t in their_trials.values() if t is not None}
    if len(counts) > 1:
        named = [f"{p}: {t}" for p, t in list(our_trials.items()) + list(their_trials.items())]
        fail("the files hold bests after different numbers of trials (" + "; ".join(named) + ")")
    known_problems = sorted({p for p, _ in ours})
    known_samplers = sorted({s for _, s in ours})
    problems = [p for p in args.problems.split(",") if p] or known_problems
    samplers = [s for s in args.samplers.split(",") if s] or known_samplers
    for flag, names, known in (("--problems", problems, known_problems),
                               ("--samplers", samplers, known_samplers)):
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"{flag}: {', '.join(unknown)} not in the --load files (they have: "
                 f"{', '.join(known) or 'nothing'})")
    rows, table = 0, []
    table.append("| problem | ours | Optuna mode | seeds | mean ours / Optuna | 95% interval | median ratio |")
    table.append("|---|---|---|---:|---:|---:|---:|")
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
                if statistics.mean(b) <= 0 or statistics.median(b) <= 0:
                    table.append(f"| {p} | {label} | {mode} | {len(shared)} | n/a (Optuna's mean or "
                          "median is not positive) | | |")
                    continue
                ratio = statistics.mean(a) / statistics.mean(b)
                lo, hi = mean_ratio_interval(a, b, random.Random(0))
                med = statistics.median(a) / statistics.median(b)
                rows += 1
                table.append(f"| {p} | {label} | {mode} | {len(shared)} | {ratio:.3f}x | "
                      f"{lo:.3f}..{hi:.3f} | {med:.3f}x |")
                if worst is None or ratio > worst[0]:
                    worst = (ratio, mode, lo, hi)
                if worst_median is None or med > worst_median[0]:
                    worst_median = (med, mode)
            if worst:
                table.append(f"| {p} | {label} | **vs best mode** (mean: {worst[1]}, median: "
                      f"{worst_median[1]}) | | **{worst[0]:.3f}x** | {worst[2]:.3f}..{worst[3]:.3f} | "
                      f"**{worst_median[0]:.3f}x** |")
    if rows == 0:
        fail("no comparison: the --load and --reference files share no seeds of these problems "
             f"and samplers (Optuna's TPE modes: {', '.join(MODES)})")
    print("\n".join(table))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly
    main()
