#!/usr/bin/python3
"""HPO suite: our samplers beside Optuna 3.1 on mixed, conditional spaces.

Each problem is a search space (the "space" section of space.json: float,
log float, log int, int, ordinal, categorical, "when" conditions) and an
objective of a params dict (minimized), used identically by both sides:

  train_surrogate  a training run: lr (log float), batch_size (log int),
                   layers (int), optimizer {adam, rmsprop, sgd}, momentum
                   (float, only when optimizer == sgd). adam is good at once
                   over a broad lr range (best 0.10); sgd is bad unless lr
                   AND momentum are right, then best (0.005): a sampler that
                   commits to adam early stays 20x worse (issue #17).
  cash_surrogate   CASH-like: model {knn, tree, linear}, each with its own
                   conditional params (ordinal k, log-int depth, log-float C,
                   categoricals); tree is good at once (0.09), linear best
                   (0.005) in a narrow C window.
  config_surrogate an ordinal (width) and five categoricals with pairwise
                   interactions (act x norm, init x act), plus a float.
  xgb_cancer       xgboost.train (binary:logistic, hist, nthread 1, seed 0) on
                   scikit-learn's breast cancer data: eta (log), max_depth,
                   min_child_weight (log), subsample, colsample_bytree,
                   n_estimators (log int); validation log-loss.
  svc_digits       SVC on digits (pixels / 16; 400 train, 400 validation): kernel {rbf, poly, sigmoid},
                   C and gamma (log), degree (poly only), coef0 (poly and
                   sigmoid); validation error.
  et_cancer        ExtraTreesClassifier (10 trees, random_state 0) on breast
                   cancer: max_features {sqrt, log2, all}, criterion {gini,
                   entropy}, bootstrap {true, false}, max_depth (log int),
                   min_samples_leaf (log int); validation log-loss.
  sgd_cancer       SGDClassifier(loss log_loss) on standardized breast cancer:
                   penalty {l2, l1, elasticnet}, alpha (log), l1_ratio (only
                   for elasticnet), learning_rate {optimal, adaptive} with
                   eta0 (log, only for adaptive); validation log-loss.

Real models use FIXED train/validation splits (half/half, stratified,
random_state 0) and fixed model seeds, so only the sampler differs. The
continuous functions (branin, hartmann6, ...) stay in the suite through
build/release/bench/tpe_quality (not duplicated here).

Samplers. Optuna 3.1: tpe (TPESampler defaults: univariate), tpe_mv
(multivariate=True), tpe_mv_group (multivariate=True, group=True), random.
Optuna's conditional params are suggested define-by-run (momentum only
inside `if optimizer == "sgd"`), as Optuna users write them; ordinals are
suggest_categorical. Ours, through build/release/bench/hpo_suite_sampler (an
ask/tell server): tpe ({"type":"tpe"}, our default), random, and any
--ours LABEL=JSON. Our sampler is told the budget (--trials) as `hpsearch run`
tells it budget.n_trials (TPE's "auto" startup size follows it: 10 at 100
trials); Optuna's TPE has no such input (its startup size is 10).

Usage (run with /usr/bin/python3; `nice -n 19` for long runs):
  bench/hpo_suite.py [--trials 100] [--seeds 20] [--seed-offset 0]
                     [--problems a,b] [--jobs 1] [--optuna saved|live|none]
                     [--ours LABEL=JSON]... [--no-default-ours]
                     [--json FILE] [--trace FILE] [--time] [--load FILE]...
                     [--reference FILE]...
                     [--save-optuna FILE] [--append]
--optuna live runs Optuna now and saves bench/reference/optuna_hpo_suite.jsonl
(or --save-optuna FILE; one line per problem/sampler/seed with the best
value, and a meta line whose seeds_complete names the seeds that have every
problem and sampler); with --append it adds to that file: rows already there
are not run again, the rows of a seed present only in part are dropped and
the seed is run whole, and the meta line lists each appending run;
saved (default) reads it, or the files named by --reference FILE
(repeatable: the saved runs of other seeds, e.g. bench/reference/
optuna_hpo_suite_heldout_2026-12-03.jsonl). --time prints each problem's time per trial.
--load FILE (a --json output) prints those results of ours instead of
running. Ctrl-C ends a run early with tables over the seeds finished.
Default problems: all but et_cancer (its 10-tree fits cost the most time).
The table: mean and median best per problem and sampler; for ours the ratio
to Optuna's best TPE mode (the mode with the lowest mean, and separately the
lowest median); "stuck": seeds whose best is worse than 10x the median of all
seeds of all samplers on that problem (a wrong categorical branch).
"""
import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
REFERENCE = os.path.join(HERE, "reference", "optuna_hpo_suite.jsonl")
DEFAULT_BIN = os.path.join(ROOT, "build", "release", "bench", "hpo_suite_sampler")


def bowl(x, center, width):
    """0 at center, rising to 1 away from it (1 - Gaussian)."""
    return 1.0 - math.exp(-0.5 * ((x - center) / width) ** 2)


# ---- surrogates -------------------------------------------------------------

TRAIN_SPACE = {
    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "batch_size": {"type": "int", "low": 16, "high": 1024, "log": True},
    "layers": {"type": "int", "low": 1, "high": 8},
    "optimizer": {"type": "categorical", "choices": ["adam", "rmsprop", "sgd"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
}


def train_surrogate(p):
    u = math.log10(p["lr"])
    common = 0.01 * ((math.log2(p["batch_size"]) - 6) / 4) ** 2 + 0.01 * ((p["layers"] - 4) / 4) ** 2
    if p["optimizer"] == "adam":
        return 0.10 + 0.5 * bowl(u, -3.3, 1.2) + common
    if p["optimizer"] == "rmsprop":
        return 0.16 + 0.5 * bowl(u, -3.8, 0.9) + common
    return 0.005 + 0.35 * bowl(u, -1.5, 0.7) + 0.35 * bowl(p["momentum"], 0.9, 0.12) + common


CASH_SPACE = {
    "model": {"type": "categorical", "choices": ["knn", "tree", "linear"]},
    "k": {"type": "ordinal", "values": [1, 2, 4, 8, 16, 32, 64, 128], "when": {"model": "knn"}},
    "weights": {"type": "categorical", "choices": ["uniform", "distance"], "when": {"model": "knn"}},
    "depth": {"type": "int", "low": 1, "high": 64, "log": True, "when": {"model": "tree"}},
    "min_frac": {"type": "float", "low": 0.0, "high": 0.5, "when": {"model": "tree"}},
    "C": {"type": "float", "low": 1e-4, "high": 1e4, "log": True, "when": {"model": "linear"}},
    "penalty": {"type": "categorical", "choices": ["l1", "l2"], "when": {"model": "linear"}},
}


def cash_surrogate(p):
    m = p["model"]
    if m == "knn":
        return 0.14 + 0.05 * ((math.log2(p["k"]) - 3) / 2) ** 2 + (0.02 if p["weights"] == "uniform" else 0)
    if m == "tree":
        return 0.09 + 0.3 * bowl(math.log2(p["depth"]), 3.5, 1.2) + 0.3 * p["min_frac"]
    return 0.005 + 0.6 * bowl(math.log10(p["C"]), 1.7, 0.6) + (0.03 if p["penalty"] == "l2" else 0)


CONFIG_SPACE = {
    "width": {"type": "ordinal", "values": [16, 32, 64, 128, 256, 512, 1024]},
    "act": {"type": "categorical", "choices": ["relu", "tanh", "gelu", "sigmoid"]},
    "norm": {"type": "categorical", "choices": ["none", "batch", "layer"]},
    "init": {"type": "categorical", "choices": ["xavier", "he", "orthogonal"]},
    "schedule": {"type": "categorical", "choices": ["constant", "cosine", "step"]},
    "augment": {"type": "categorical", "choices": ["none", "flip", "crop", "both"]},
    "dropout": {"type": "float", "low": 0.0, "high": 0.6},
}
_ACT = {"relu": 0.05, "tanh": 0.10, "gelu": 0.03, "sigmoid": 0.25}
_NORM = {"none": 0.08, "batch": 0.02, "layer": 0.04}
_ACT_NORM = {("gelu", "layer"): -0.04, ("relu", "batch"): -0.02, ("sigmoid", "none"): 0.10}
_INIT_ACT = {("he", "relu"): -0.02, ("he", "gelu"): -0.01, ("xavier", "tanh"): -0.03}
_SCHED = {"constant": 0.04, "cosine": 0.0, "step": 0.02}
_AUG = {"none": 0.05, "flip": 0.03, "crop": 0.02, "both": 0.0}


def config_surrogate(p):
    w = math.log2(p["width"])
    v = 0.01 + 0.006 * (w - 8) ** 2 + _ACT[p["act"]] + _NORM[p["norm"]]
    v += _ACT_NORM.get((p["act"], p["norm"]), 0.0) + _INIT_ACT.get((p["init"], p["act"]), 0.03)
    v += _SCHED[p["schedule"]] + _AUG[p["augment"]]
    # dropout helps wide nets, hurts narrow ones
    v += 0.2 * (p["dropout"] - 0.05 * (w - 4)) ** 2
    return v


# ---- real models on scikit-learn's bundled data -----------------------------

_DATA = {}


def _data(name):
    """Fixed half/half stratified split (random_state 0), cached per process."""
    if name not in _DATA:
        from sklearn import datasets
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler

        if name == "digits":
            X, y = datasets.load_digits(return_X_y=True)
            X = X / 16.0
        else:
            X, y = datasets.load_breast_cancer(return_X_y=True)
        # digits: 400 + 400 images (SVC time per trial); cancer: half/half
        size = 400 if name == "digits" else None
        Xtr, Xva, ytr, yva = train_test_split(X, y, train_size=size, test_size=size or 0.5,
                                              random_state=0, stratify=y)
        if name == "cancer_std":
            s = StandardScaler().fit(Xtr)
            Xtr, Xva = s.transform(Xtr), s.transform(Xva)
        _DATA[name] = (Xtr, Xva, ytr, yva)
    return _DATA[name]


XGB_SPACE = {
    "eta": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
    "max_depth": {"type": "int", "low": 1, "high": 8},
    "min_child_weight": {"type": "float", "low": 0.1, "high": 20.0, "log": True},
    "subsample": {"type": "float", "low": 0.5, "high": 1.0},
    "colsample_bytree": {"type": "float", "low": 0.3, "high": 1.0},
    "n_estimators": {"type": "int", "low": 5, "high": 60, "log": True},
}


def xgb_cancer(p):
    import xgboost
    from sklearn.metrics import log_loss

    Xtr, Xva, ytr, yva = _data("cancer")
    if "xgb" not in _DATA:  # the DMatrix once per process (native API: less overhead)
        _DATA["xgb"] = (xgboost.DMatrix(Xtr, label=ytr), xgboost.DMatrix(Xva))
    dtrain, dvalid = _DATA["xgb"]
    booster = xgboost.train(
        {"objective": "binary:logistic", "eta": p["eta"], "max_depth": p["max_depth"],
         "min_child_weight": p["min_child_weight"], "subsample": p["subsample"],
         "colsample_bytree": p["colsample_bytree"], "tree_method": "hist", "nthread": 1,
         "seed": 0}, dtrain, num_boost_round=p["n_estimators"])
    return float(log_loss(yva, booster.predict(dvalid)))


SVC_SPACE = {
    "kernel": {"type": "categorical", "choices": ["rbf", "poly", "sigmoid"]},
    "C": {"type": "float", "low": 1e-2, "high": 1e3, "log": True},
    "gamma": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "degree": {"type": "int", "low": 2, "high": 5, "when": {"kernel": "poly"}},
    "coef0": {"type": "float", "low": -1.0, "high": 1.0, "when": {"kernel": ["poly", "sigmoid"]}},
}


def svc_digits(p):
    from sklearn.svm import SVC

    Xtr, Xva, ytr, yva = _data("digits")
    kw = {}
    if p["kernel"] == "poly":
        kw = {"degree": p["degree"], "coef0": p["coef0"]}
    elif p["kernel"] == "sigmoid":
        kw = {"coef0": p["coef0"]}
    m = SVC(kernel=p["kernel"], C=p["C"], gamma=p["gamma"], **kw)
    m.fit(Xtr, ytr)
    return float(1.0 - m.score(Xva, yva))


ET_SPACE = {
    "max_features": {"type": "categorical", "choices": ["sqrt", "log2", "all"]},
    "criterion": {"type": "categorical", "choices": ["gini", "entropy"]},
    "bootstrap": {"type": "categorical", "choices": [True, False]},
    "max_depth": {"type": "int", "low": 1, "high": 32, "log": True},
    "min_samples_leaf": {"type": "int", "low": 1, "high": 32, "log": True},
}


def et_cancer(p):
    from sklearn.ensemble import ExtraTreesClassifier
    from sklearn.metrics import log_loss

    Xtr, Xva, ytr, yva = _data("cancer")
    mf = None if p["max_features"] == "all" else p["max_features"]
    m = ExtraTreesClassifier(
        n_estimators=10, max_features=mf, criterion=p["criterion"], bootstrap=p["bootstrap"],
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"], random_state=0, n_jobs=1)
    m.fit(Xtr, ytr)
    return float(log_loss(yva, m.predict_proba(Xva)))


SGD_SPACE = {
    "penalty": {"type": "categorical", "choices": ["l2", "l1", "elasticnet"]},
    "alpha": {"type": "float", "low": 1e-6, "high": 1.0, "log": True},
    "l1_ratio": {"type": "float", "low": 0.0, "high": 1.0, "when": {"penalty": "elasticnet"}},
    "learning_rate": {"type": "categorical", "choices": ["optimal", "adaptive"]},
    "eta0": {"type": "float", "low": 1e-4, "high": 1.0, "log": True,
             "when": {"learning_rate": "adaptive"}},
}


def sgd_cancer(p):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import log_loss

    Xtr, Xva, ytr, yva = _data("cancer_std")
    kw = {"l1_ratio": p["l1_ratio"]} if p["penalty"] == "elasticnet" else {}
    if p["learning_rate"] == "adaptive":
        kw["eta0"] = p["eta0"]
    m = SGDClassifier(loss="log_loss", penalty=p["penalty"], alpha=p["alpha"],
                      learning_rate=p["learning_rate"], max_iter=30, tol=None, random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(Xtr, ytr)
    return float(log_loss(yva, m.predict_proba(Xva)))


PROBLEMS = {
    "train_surrogate": (TRAIN_SPACE, train_surrogate),
    "cash_surrogate": (CASH_SPACE, cash_surrogate),
    "config_surrogate": (CONFIG_SPACE, config_surrogate),
    "xgb_cancer": (XGB_SPACE, xgb_cancer),
    "svc_digits": (SVC_SPACE, svc_digits),
    "et_cancer": (ET_SPACE, et_cancer),
    "sgd_cancer": (SGD_SPACE, sgd_cancer),
}

OPTUNA_SAMPLERS = ["tpe", "tpe_mv", "tpe_mv_group", "random"]


# ---- running ----------------------------------------------------------------

def _active(spec, params):
    when = spec.get("when")
    if not when:
        return True
    ((parent, values),) = when.items()
    values = values if isinstance(values, list) else [values]
    return parent in params and params[parent] in values


def optuna_params(trial, space):
    """Define-by-run: a conditional param is suggested only when its parent
    has the right value (dict order is parents first in every space here)."""
    p = {}
    for name, spec in space.items():
        if not _active(spec, p):
            continue
        t = spec["type"]
        if t == "float":
            p[name] = trial.suggest_float(name, spec["low"], spec["high"], log=spec.get("log", False))
        elif t == "int":
            p[name] = trial.suggest_int(name, spec["low"], spec["high"], log=spec.get("log", False))
        elif t == "categorical":
            p[name] = trial.suggest_categorical(name, spec["choices"])
        else:  # ordinal: as Optuna users write it
            p[name] = trial.suggest_categorical(name, spec["values"])
    return p


def make_optuna_sampler(label, seed):
    import optuna

    if label == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    kw = {"tpe": {}, "tpe_mv": {"multivariate": True},
          "tpe_mv_group": {"multivariate": True, "group": True}}[label]
    return optuna.samplers.TPESampler(seed=seed, **kw)


def run_optuna(problem, label, seed, n_trials, trace):
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    space, objective = PROBLEMS[problem]
    study = optuna.create_study(sampler=make_optuna_sampler(label, seed))
    rows = []
    for _ in range(n_trials):
        trial = study.ask()
        params = optuna_params(trial, space)
        value = objective(params)
        study.tell(trial, value)
        if trace:
            rows.append({"params": params, "value": value})
    return study.best_value, rows


def run_ours(problem, config, seed, n_trials, trace, binary):
    space, objective = PROBLEMS[problem]
    proc = subprocess.Popen(
        [binary, "--space", json.dumps(space), "--sampler", json.dumps(config), "--seed", str(seed),
         "--budget", str(n_trials)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def call(req):
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"{problem} seed {seed}: {answer['error']}")
        return answer

    best, rows = math.inf, []
    try:
        for _ in range(n_trials):
            a = call({"op": "ask"})
            value = objective(a["params"])
            call({"op": "tell", "number": a["number"], "value": value})
            best = min(best, value)
            if trace:
                rows.append({"params": a["params"], "value": value})
    finally:
        proc.stdin.close()
        proc.wait()
    return best, rows


def run_task(task):
    side, problem, label, config, seed, n_trials, trace, binary = task
    if side == "optuna":
        best, rows = run_optuna(problem, label, seed, n_trials, trace)
    else:
        best, rows = run_ours(problem, config, seed, n_trials, trace, binary)
    return side, problem, label, seed, best, rows


def fmt(v):
    return f"{v:.4g}"


def parse_names(ap, flag, text, known, what):
    """The comma-separated names of `text`, each one of `known`; otherwise
    ap.error naming `flag` (also for a list that names nothing)."""
    names = [n for n in text.split(",") if n]
    if not names:
        ap.error(f"{flag}: names no {what} (known: {', '.join(known)})")
    for n in names:
        if n not in known:
            ap.error(f"{flag}: unknown {what} '{n}' (known: {', '.join(known)})")
    return names


def check_minimums(ap, items):
    """ap.error for the first (flag, value, low) of `items` with value < low."""
    for flag, value, low in items:
        if value < low:
            ap.error(f"{flag}: must be >= {low}, got {value}")


def check_writable(ap, flag, path):
    """ap.error unless the folder of `path` exists and this user may write it
    (checked before a long run, not after it)."""
    if path:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            ap.error(f"{flag}: cannot write {path} (its folder is missing or not writable)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--problems", default=",".join(p for p in PROBLEMS if p != "et_cancer"),
                    help="comma-separated, of: " + ", ".join(PROBLEMS) + " (default: all but et_cancer)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--optuna", choices=["saved", "live", "none"], default="saved")
    ap.add_argument("--ours", action="append", default=[], metavar="LABEL=JSON",
                    help="one of our sampler configs (the space.json 'sampler' section)")
    ap.add_argument("--no-default-ours", action="store_true",
                    help="run only the --ours configs (not tpe and random)")
    ap.add_argument("--binary", default=DEFAULT_BIN)
    ap.add_argument("--reference", action="append", default=[], metavar="FILE",
                    help="with --optuna saved: read Optuna's results from FILE (repeatable) instead of "
                    f"{os.path.relpath(REFERENCE, ROOT)}")
    ap.add_argument("--save-optuna", default=REFERENCE,
                    help="with --optuna live: where to write Optuna's results")
    ap.add_argument("--append", action="store_true",
                    help="with --optuna live: add to the --save-optuna file instead of replacing it; "
                    "(problem, sampler, seed) rows already there are not run again, and the rows of "
                    "a seed that the file has only in part are dropped and that seed is run whole")
    ap.add_argument("--json", help="write every raw best value here")
    ap.add_argument("--trace", help="write every trial's params and value here (JSON)")
    ap.add_argument("--time", action="store_true", help="print each problem's time per trial")
    ap.add_argument("--load", action="append", default=[], help="a FILE written by --json (repeatable): print its ours "
                    "results (beside --optuna saved) instead of running ours")
    args = ap.parse_args()

    problems = parse_names(ap, "--problems", args.problems, list(PROBLEMS), "problem")
    ours = [] if args.no_default_ours else [("tpe", {"type": "tpe"}), ("random", {"type": "random"})]
    for item in args.ours:
        label, sep, text = item.partition("=")
        if not sep or not label:
            ap.error(f"--ours: expected LABEL=JSON, got '{item}'")
        try:
            ours.append((label, json.loads(text)))
        except json.JSONDecodeError as e:
            ap.error(f"--ours {label}: not JSON: {e}")
    check_minimums(ap, (("--trials", args.trials, 1), ("--seeds", args.seeds, 1),
                        ("--seed-offset", args.seed_offset, 0), ("--jobs", args.jobs, 1)))
    check_writable(ap, "--json", args.json)
    check_writable(ap, "--trace", args.trace)
    loaded_files = [(path, _read_loaded(ap, path, args.trials)) for path in args.load]
    if args.reference and args.optuna != "saved":
        ap.error("--reference: only with --optuna saved")
    for path in args.reference:
        if not os.path.isfile(path):
            ap.error(f"--reference: {path} is not a file")
    saved, ref_note = {}, ("run now" if args.optuna == "live" else "not run (--optuna none)")
    if args.optuna == "saved":  # read (and checked) before anything runs
        ref_note = _load_reference(ap, args.reference or [REFERENCE], saved, problems,
                                   range(args.seed_offset, args.seed_offset + args.seeds), args.trials)
    if args.load:
        ours = []
    elif not ours and args.optuna != "live":
        ap.error("nothing to run: --no-default-ours without --ours or --load (and no --optuna live)")
    if args.append and args.optuna != "live":
        ap.error("--append: only with --optuna live (it adds Optuna's results to --save-optuna)")
    if ours and not os.access(args.binary, os.X_OK):
        ap.error(f"--binary: {args.binary} is not an executable (build target hpo_suite_sampler)")
    for label, cfg in ours:  # a bad sampler config: one clear error now, not one per task
        check = subprocess.run([args.binary, "--space", json.dumps(PROBLEMS[problems[0]][0]),
                                "--sampler", json.dumps(cfg)], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True)
        if check.returncode != 0:
            why = check.stderr.strip() or f"{args.binary} exited with status {check.returncode} and no message"
            ap.error(f"--ours {label}: {why}")

    if args.time:
        import random
        for p in problems:
            space, objective = PROBLEMS[p]
            import optuna
            optuna.logging.set_verbosity(optuna.logging.ERROR)
            study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
            objective(optuna_params(study.ask(), space))  # warm caches and imports
            t0 = time.perf_counter()
            for _ in range(20):
                objective(optuna_params(study.ask(), space))
            print(f"# {p}: {(time.perf_counter() - t0) / 20 * 1000:.1f} ms per trial (random params)")
        del random

    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    tasks = []
    trace = bool(args.trace)
    kept_meta, kept_rows = None, []
    if args.append:
        kept_meta, kept_rows = _read_for_append(args.save_optuna)
    have = {(r["problem"], r["sampler"], r["seed"]) for r in kept_rows}
    if args.optuna == "live":
        tasks += [("optuna", p, s, None, seed, args.trials, trace, None)
                  for p in problems for s in OPTUNA_SAMPLERS for seed in seeds
                  if (p, s, seed) not in have]
    tasks += [("ours", p, label, cfg, seed, args.trials, trace, args.binary)
              for p in problems for label, cfg in ours for seed in seeds]
    # Seed by seed (a run cut short keeps whole seeds of every problem and
    # sampler); within a seed the slow problems first.
    slow = {"xgb_cancer": 0, "et_cancer": 1, "svc_digits": 2}
    tasks.sort(key=lambda t: (t[4], slow.get(t[1], 9)))

    t0 = time.time()
    results = {}  # (side, problem, label) -> {seed: best}
    traces = []
    ref = None
    if args.optuna == "live":  # written as results come (a cut run keeps its part)
        os.makedirs(os.path.dirname(os.path.abspath(args.save_optuna)), exist_ok=True)
        run_meta = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
            "versions": _versions(), "trials": args.trials,
            "seeds": f"{args.seed_offset}..{args.seed_offset + args.seeds - 1}",
            "command": " ".join(sys.argv)}
        if kept_meta is not None:
            if kept_meta.get("versions") != run_meta["versions"] or kept_meta.get("trials") != args.trials:
                sys.exit(f"--append: {args.save_optuna} was written with {kept_meta.get('versions')} and "
                         f"{kept_meta.get('trials')} trials; this run has {run_meta['versions']} and "
                         f"{args.trials} trials (use a new --save-optuna file)")
            meta = dict(kept_meta)
            meta["appended"] = kept_meta.get("appended", []) + [run_meta]
        else:
            meta = {"meta": True, **run_meta}
        ref = open(args.save_optuna, "w")
        ref.write(json.dumps(meta) + "\n")
        for r in kept_rows:
            ref.write(json.dumps(r) + "\n")
        ref.flush()
    # SIGINT (Ctrl-C, or kill -INT of this process) ends the run early: the
    # tables then cover the seeds finished so far.
    pool = multiprocessing.Pool(args.jobs, initializer=_ignore_sigint)
    try:
        for side, p, label, seed, best, rows in pool.imap_unordered(run_task, tasks):
            results.setdefault((side, p, label), {})[seed] = best
            if ref and side == "optuna":
                ref.write(json.dumps({"problem": p, "sampler": label, "seed": seed,
                                      "best": best}) + "\n")
                ref.flush()
            if trace:
                traces.append({"side": side, "problem": p, "sampler": label, "seed": seed,
                               "trials": rows})
        pool.close()
    except KeyboardInterrupt:
        print("# interrupted: tables over the seeds finished", file=sys.stderr)
        pool.terminate()
    pool.join()
    elapsed = time.time() - t0

    if ref:
        ref.close()
        _update_seeds_complete(args.save_optuna)
    for path, loaded in loaded_files:
        for r in loaded["results"]:
            if r["side"] == "ours" and r["problem"] in problems:
                by_seed = dict(zip(loaded["seeds"], r["bests"]))
                results[("ours", r["problem"], r["sampler"])] = {
                    s: v for s, v in by_seed.items() if v is not None and s in seeds}
    results.update(saved)

    print(f"# hpo_suite: best value after {args.trials} trials, seeds {seeds.start}..{seeds.stop - 1}"
          f" (lower is better); {datetime.date.today().isoformat()}, {platform.machine()},"
          f" {os.cpu_count()} cores; {elapsed:.0f} s")
    print(f"# Optuna {ref_note}; ours: " + "; ".join(f"{l}={json.dumps(c)}" for l, c in ours))
    raw = []
    for p in problems:
        print(_table(p, results, seeds))
        for (side, pp, label), by_seed in sorted(results.items()):
            if pp == p:
                raw.append({"problem": p, "side": side, "sampler": label,
                            "bests": [by_seed.get(s) for s in seeds]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seeds": list(seeds), "trials": args.trials, "results": raw}, f, indent=1)
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(traces, f)


def _ignore_sigint():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _versions():
    import numpy
    import optuna
    import scipy
    import sklearn
    import xgboost

    return {"python": platform.python_version(), "optuna": optuna.__version__,
            "numpy": numpy.__version__, "scipy": scipy.__version__,
            "sklearn": sklearn.__version__, "xgboost": xgboost.__version__}


def _complete_seeds(rows):
    """Seeds that have a row for every (problem, sampler) pair seen in rows."""
    pairs = {(r["problem"], r["sampler"]) for r in rows}
    by_seed = {}
    for r in rows:
        by_seed.setdefault(r["seed"], set()).add((r["problem"], r["sampler"]))
    return sorted(s for s, got in by_seed.items() if got == pairs)


def _read_for_append(path):
    """The meta line and the rows of an Optuna reference file, less the rows
    of seeds that it has only in part (a run cut short); (None, []) when the
    file does not exist."""
    if not os.path.exists(path):
        return None, []
    meta, rows = None, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("meta"):
                meta = row
            else:
                rows.append(row)
    complete = set(_complete_seeds(rows))
    dropped = sorted({r["seed"] for r in rows} - complete)
    if dropped:
        print(f"# --append: dropping the rows of partial seeds {dropped} (run again whole)", file=sys.stderr)
    return meta, [r for r in rows if r["seed"] in complete]


def _seed_ranges(seeds):
    out, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            out.append(f"{start}..{s}" if s != start else f"{s}")
            start = None
    return ", ".join(out)


def _update_seeds_complete(path):
    """Rewrites the meta line's seeds_complete from the rows in the file."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in lines if not r.get("meta")]
    metas = [r for r in lines if r.get("meta")]
    meta = metas[0] if metas else {"meta": True}
    meta["seeds_complete"] = _seed_ranges(_complete_seeds(rows))
    with open(path, "w") as f:
        f.write(json.dumps(meta) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _read_loaded(ap, path, n_trials):
    """A --load file (written by --json), checked: readable JSON of the right
    shape, with results after the same number of trials as this run."""
    try:
        with open(path) as f:
            loaded = json.load(f)
    except (OSError, ValueError) as e:
        ap.error(f"--load {path}: {e}")
    if (not isinstance(loaded, dict) or not isinstance(loaded.get("results"), list)
            or not isinstance(loaded.get("seeds"), list)):
        ap.error(f"--load {path}: not a file written by --json (needs 'seeds' and 'results')")
    if loaded.get("trials") != n_trials:
        ap.error(f"--load {path}: its results are after {loaded.get('trials')} trials, this run "
                 f"compares after {n_trials} (--trials)")
    return loaded


def _load_reference(ap, paths, results, problems, seeds, n_trials):
    """Optuna's saved bests from the reference files `paths` (lines written by
    --optuna live) into `results`; a note naming their dates and versions."""
    notes = []
    for path in paths:
        if not os.path.exists(path):
            notes.append(f"{os.path.basename(path)}: not available (run --optuna live)")
            continue
        try:
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            ap.error(f"--optuna saved: cannot read {path}: {e}")
        for row in rows:
            if not isinstance(row, dict):
                ap.error(f"--optuna saved: {path}: a line is not a JSON object")
            if row.get("meta"):
                if row.get("trials", n_trials) != n_trials:
                    ap.error(f"--optuna saved: {path} holds Optuna's bests after "
                             f"{row.get('trials')} trials, this run compares after {n_trials} "
                             f"(use --trials {row.get('trials')}, or --optuna live or none)")
                versions = row.get("versions", {})
                notes.append(f"saved {row.get('date', '?')} ({versions.get('optuna', '?')}, "
                             f"{row.get('machine', '?')})")
                continue
            try:
                problem, sampler, seed, best = row["problem"], row["sampler"], row["seed"], row["best"]
            except KeyError as e:
                ap.error(f"--optuna saved: {path}: a row without {e}")
            if not isinstance(best, (int, float)) or isinstance(best, bool) or not math.isfinite(best):
                ap.error(f"--optuna saved: {path}: {problem} {sampler} seed {seed}: best must be a "
                         f"finite number, got {best!r}")
            if problem in problems and seed in seeds:
                results.setdefault(("optuna", problem, sampler), {})[seed] = best
    names = ", ".join(os.path.relpath(p) for p in paths)
    return "; ".join(dict.fromkeys(notes)) or f"saved in {names} (no meta line)"


def _table(problem, results, seeds):
    # Only the seeds that every sampler finished (a run cut short, a partial
    # reference file), so that the figures compare the same seeds.
    runs = [(side, label, by_seed) for (side, p, label), by_seed
            in sorted(results.items(), key=lambda kv: kv[0][0] != "ours") if p == problem]
    common = [s for s in seeds if all(s in by_seed for _, _, by_seed in runs)]
    rows = [(side, label, [by_seed[s] for s in common]) for side, label, by_seed in runs]
    everything = [v for _, _, b in rows for v in b]
    if not everything:
        return f"\n{problem}: no results"
    overall = statistics.median(everything)
    tpe_modes = [(statistics.mean(b), statistics.median(b)) for side, label, b in rows
                 if side == "optuna" and label.startswith("tpe") and b]
    best_mean = min((m for m, _ in tpe_modes), default=None)
    best_median = min((md for _, md in tpe_modes), default=None)
    seeds_note = f"seeds {common[0]}..{common[-1]}" if common == list(range(common[0], common[-1] + 1)) else f"seeds {common}"
    out = [f"\n**{problem}** ({seeds_note}; stuck: best > 10x the median of all runs, {fmt(overall)})\n",
           "| sampler | seeds | mean best | median best | vs Optuna best TPE: mean | median | stuck |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for side, label, b in rows:
        if not b:
            continue
        m, md = statistics.mean(b), statistics.median(b)
        stuck = sum(1 for v in b if v > 10 * overall)
        vm = vmd = "-"
        if side == "ours" and best_mean:
            vm = f"{m / best_mean:.2f}x"
            vmd = f"{md / best_median:.2f}x" if best_median else "-"
        out.append(f"| {'Optuna' if side == 'optuna' else 'ours'} {label} | {len(b)} | {fmt(m)} | {fmt(md)} |"
                   f" {vm} | {vmd} | {stuck} |")
    return "\n".join(out)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the tables quietly
    main()
