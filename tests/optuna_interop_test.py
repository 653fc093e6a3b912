#!/usr/bin/env python3
"""hpsearch export --format optuna / hpsearch import, checked with Optuna itself.

1. Export: optuna_fixture writes a hpsearch study with every param kind, a
   conditional param, COMPLETE/PRUNED/FAIL/RUNNING/WAITING trials,
   intermediate values, unicode names, extreme floats and typed user attrs.
   `hpsearch export` writes it in Optuna's schema; optuna.load_study reads
   it, and every trial is compared field by field with `hpsearch trials
   --format json` (floats bit for bit via struct.pack); the best trial,
   get_param_importances and plot_optimization_history run on it.
2. Import: a study made by Optuna's own API (suggest_float/int/categorical,
   pruned and failed trials, inf attrs) is imported with `hpsearch import`
   and compared with `hpsearch trials --format json`.
3. Round trip: hpsearch -> Optuna -> hpsearch gives the same `trials
   --format json` output, byte for byte.

Usage: optuna_interop_test.py HPSEARCH_EXE OPTUNA_FIXTURE_EXE WORK_DIR
Needs Debian's python3-optuna; fails (never skips) without it.
"""
import csv
import datetime
import io
import json
import math
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import warnings

import optuna  # an ImportError fails the test: Optuna is required

HPSEARCH = os.path.abspath(sys.argv[1])
FIXTURE = os.path.abspath(sys.argv[2])
WORK = os.path.abspath(sys.argv[3])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def bits(x):
    return struct.pack("<d", float(x))


def from_json_float(v):
    """A float as `hpsearch trials --format json` writes it ("inf", "nan")."""
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
    return float(v)


def same_float(a, b):
    return bits(a) == bits(b) or (math.isnan(a) and math.isnan(b))


def same_json(ours, theirs):
    """Typed equality: 1, 1.0, "1", True differ; floats bit for bit."""
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, float):
        return same_float(ours, theirs)
    if isinstance(ours, dict):
        return ours.keys() == theirs.keys() and all(same_json(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, (list, tuple)):
        return len(ours) == len(theirs) and all(map(same_json, ours, theirs))
    return ours == theirs


def hps(*args, check_rc=True):
    r = subprocess.run([HPSEARCH, *args], capture_output=True, text=True, timeout=120, cwd=WORK)
    if check_rc and r.returncode != 0:
        raise SystemExit(f"hpsearch {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def trials_json(db, study):
    return json.loads(hps("trials", db, "--study", study, "--format", "json").stdout)


def utc(iso):
    if iso is None:
        return None
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ")


def optuna_distribution_matches(d, spec):
    od = optuna.distributions
    kind = spec["type"]
    if kind == "float":
        return (isinstance(d, od.FloatDistribution) and same_float(d.low, spec["low"])
                and d.log == spec.get("log", False)
                and (d.step is None) == ("step" not in spec))
    if kind == "int":
        return (isinstance(d, od.IntDistribution) and d.low == spec["low"]
                and d.high == spec["high"] and d.log == spec.get("log", False)
                and d.step == spec.get("step", 1))
    choices = spec["choices"] if kind == "categorical" else spec["values"]
    return isinstance(d, od.CategoricalDistribution) and same_json(list(d.choices), choices)


def test_export():
    db = os.path.join(WORK, "hps.db")
    name = subprocess.run([FIXTURE, db], capture_output=True, text=True,
                          check=True).stdout.strip()
    out = os.path.join(WORK, "optuna.db")
    hps("export", db, "--format", "optuna", "-o", out)
    # The file is Optuna 3.1's schema, upgradable: alembic head and version_info.
    con = sqlite3.connect(out)
    check(con.execute("SELECT version_num FROM alembic_version").fetchall() == [("v3.0.0.d",)],
          "alembic_version is v3.0.0.d")
    check(con.execute("SELECT schema_version, library_version FROM version_info").fetchall()
          == [(12, "3.1.0")], "version_info is (12, 3.1.0)")
    con.close()
    # A second export refuses to replace the file; --force replaces it.
    r = hps("export", db, "--format", "optuna", "-o", out, check_rc=False)
    check(r.returncode == 2 and "--force" in r.stderr, f"export over a file: {r.stderr}")
    hps("export", db, "--format", "optuna", "-o", out, "--force")

    ours = trials_json(db, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's note on step not dividing a range
        study = optuna.load_study(study_name=name, storage="sqlite:///" + out)
    theirs = study.get_trials(deepcopy=False)
    check(study.study_name == name, "unicode study name")
    check(study.direction == optuna.study.StudyDirection.MINIMIZE, "direction")
    check(same_json(study.user_attrs, {"owner": "ünïcode", "inf": math.inf}),
          f"study user attrs {study.user_attrs}")
    check(study.system_attrs.get("sampler_seed") == 7, "study system attrs")
    check(len(ours) == len(theirs), f"{len(ours)} trials vs {len(theirs)}")
    space = json.loads(json.dumps(study.system_attrs["hpsearch:config"]))["space"]
    for o, t in zip(ours, theirs):
        n = o["number"]
        check(t.number == n, f"trial {n}: number {t.number}")
        check(t.state.name == o["state"], f"trial {n}: state {t.state.name} vs {o['state']}")
        if o["value"] is None:
            check(t.value is None, f"trial {n}: value {t.value} vs none")
        else:
            check(t.value is not None and same_float(t.value, from_json_float(o["value"])),
                  f"trial {n}: value {t.value!r} vs {o['value']!r}")
        check(set(t.params) == set(o["params"]), f"trial {n}: param names")
        for k, v in o["params"].items():
            check(k in t.params and same_json(v, t.params[k]),
                  f"trial {n}: param {k} {t.params.get(k)!r} vs {v!r}")
            check(k in t.distributions and optuna_distribution_matches(t.distributions[k],
                                                                       space[k]),
                  f"trial {n}: distribution of {k}: {t.distributions.get(k)}")
        iv = {int(s): from_json_float(v) for s, v in o["intermediate_values"].items()}
        check(iv.keys() == t.intermediate_values.keys()
              and all(same_float(iv[s], t.intermediate_values[s]) for s in iv),
              f"trial {n}: intermediate values {t.intermediate_values} vs {iv}")
        check(t.datetime_start == utc(o["datetime_start"]), f"trial {n}: datetime_start")
        check(t.datetime_complete == utc(o["datetime_complete"]), f"trial {n}: datetime_complete")
        # Attrs: hpsearch's JSON shows non-finite floats as strings, so
        # compare finite ones here and the typed ones below.
        check(t.user_attrs.keys() == o["user_attrs"].keys(), f"trial {n}: user attr keys")
        if o["worker"]:
            check(t.system_attrs.get("hpsearch:worker") == o["worker"], f"trial {n}: worker")
        if o["fail_reason"]:
            check(t.system_attrs.get("hpsearch:fail_reason") == o["fail_reason"],
                  f"trial {n}: fail_reason")
    t0 = theirs[0]
    check(same_json(t0.user_attrs["int"], 1) and same_json(t0.user_attrs["float"], 1.0)
          and same_json(t0.user_attrs["string"], "1"), "user attrs 1, 1.0, '1' keep their types")
    check(same_json(t0.user_attrs["inf"], math.inf) and same_json(t0.user_attrs["ninf"], -math.inf)
          and isinstance(t0.user_attrs["nan"], float) and math.isnan(t0.user_attrs["nan"]),
          f"non-finite user attrs are floats: {t0.user_attrs}")
    check(same_json(t0.user_attrs["nested"], {"a": [1, 2.5, math.nan, "x"]}), "nested attr")
    check(bits(t0.value) == bits(-0.0), "-0.0 keeps its sign")
    check(bits(t0.params["x"]) == bits(-0.0), "param -0.0 keeps its sign")
    check(bits(theirs[1].value) == bits(5e-324), "denormal value")
    check("momentum" in t0.params and "momentum" not in theirs[1].params,
          "conditional param present only where active")
    best = trials_json(db, name)
    best_n = json.loads(hps("best", db, "--format", "json").stdout)["number"]
    check(study.best_trial.number == best_n, f"best trial {study.best_trial.number} vs {best_n}")
    del best
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # fANOVA's variances overflow on the largest double (a value the
        # fixture has on purpose); Optuna leaves out non-finite targets.
        imp = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
            target=lambda t: t.value if abs(t.value) < 1e300 else math.inf)
    check("x" in imp and list(imp)[0] == "x", f"importances rank x first: {imp}")
    fig = optuna.visualization.plot_optimization_history(study)
    check(len(fig.data) >= 1, "plot_optimization_history draws")
    return db, name


def test_import():
    src = os.path.join(WORK, "made_by_optuna.db")
    storage = "sqlite:///" + src
    study = optuna.create_study(study_name="from-optuna ✓", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=3))
    study.set_user_attr("dataset", "fashion-mnist")

    def objective(trial):
        x = trial.suggest_float("x", -2.0, 2.0)
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        drop = trial.suggest_float("dropout", 0.0, 0.5, step=0.1)
        n = trial.suggest_int("n", 1, 64, log=True)
        k = trial.suggest_int("k", 0, 8, step=2)
        opt = trial.suggest_categorical("opt", ["adam", 1, 2.5, None, True])
        if opt == "adam":
            trial.suggest_float("beta", 0.8, 0.999)
        trial.set_user_attr("inf", math.inf)
        trial.set_user_attr("one", 1)
        trial.set_user_attr("one_f", 1.0)
        trial.set_user_attr("one_s", "1")
        for step in range(3):
            trial.report(x * step, step)
        if trial.number % 5 == 3:
            raise optuna.TrialPruned()
        if trial.number % 7 == 6:
            raise RuntimeError("boom")
        return -(x ** 2) + math.log(lr) * 0.01 + drop + n * 0.001 + k

    study.optimize(objective, n_trials=20, catch=(RuntimeError,))
    db = os.path.join(WORK, "imported.db")
    if os.path.exists(db):
        os.remove(db)
    r = hps("import", src, "--study", "from-optuna ✓", "--into", db, "--as", "imported")
    check("20 trials" in r.stdout, f"import says what it did: {r.stdout}")
    ours = trials_json(db, "imported")
    # As a fresh load gives them (Optuna's own cache keeps a suggested True
    # where the file holds the index of the equal choice 1).
    theirs = optuna.load_study(study_name="from-optuna ✓", storage=storage).get_trials()
    check(len(ours) == 20, f"20 trials imported, got {len(ours)}")
    for o, t in zip(ours, theirs):
        n = t.number
        check(o["number"] == n and o["state"] == t.state.name, f"import trial {n}: number/state")
        if t.value is None:
            check(o["value"] is None, f"import trial {n}: no value")
        else:
            check(same_float(from_json_float(o["value"]), t.value), f"import trial {n}: value")
        check(set(o["params"]) == set(t.params)
              and all(same_json(o["params"][k], v) for k, v in t.params.items()),
              f"import trial {n}: params {o['params']} vs {t.params}")
        check(utc(o["datetime_start"]) == t.datetime_start.astimezone(datetime.timezone.utc)
              .replace(tzinfo=None) or utc(o["datetime_start"]) == t.datetime_start,
              f"import trial {n}: datetime_start")
        check({int(s): from_json_float(v) for s, v in o["intermediate_values"].items()}
              == t.intermediate_values, f"import trial {n}: intermediate values")
        check(o["user_attrs"]["inf"] == "inf" and same_json(o["user_attrs"]["one"], 1)
              and same_json(o["user_attrs"]["one_f"], 1.0), f"import trial {n}: user attrs")
        d = o["distributions"]
        check(d["lr"] == {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
              f"import trial {n}: lr distribution {d['lr']}")
        check(d["k"].get("step") == 2 and d["n"].get("log") is True
              and d["opt"]["type"] == "categorical", f"import trial {n}: distributions {d}")
    # The table shows 1, 1.0 and "1" differently.
    rows = list(csv.DictReader(io.StringIO(
        hps("trials", db, "--study", "imported", "--format", "csv").stdout)))
    cells = rows[0]
    check(cells["attr one"] == "1" and cells["attr one_f"] == "1.0"
          and cells["attr one_s"] == '"1"' and cells["attr inf"] == "inf",
          f"csv cells for 1, 1.0, \"1\", inf: {cells}")
    table = hps("trials", db, "--study", "imported").stdout
    check('"1"' in table.splitlines()[2] and "1.0" in table.splitlines()[2],
          f"table shows 1.0 and \"1\": {table.splitlines()[:3]}")
    # The same name twice is refused; nothing is stored.
    r = hps("import", src, "--study", "from-optuna ✓", "--into", db, "--as", "imported",
            check_rc=False)
    check(r.returncode == 2 and "imported" in r.stderr, f"existing target name: {r.stderr}")
    # A multi-objective study is refused with a clear message.
    optuna.create_study(study_name="mo", storage=storage, directions=["minimize", "maximize"])
    r = hps("import", src, "--study", "mo", "--into", db, check_rc=False)
    check(r.returncode == 2 and "objectives" in r.stderr, f"multi-objective: {r.stderr}")
    studies = json.loads(hps("studies", db, "--format", "json").stdout)
    check([s["name"] for s in studies] == ["imported"], f"nothing else stored: {studies}")


def test_round_trip(db, name):
    out = os.path.join(WORK, "rt.db")
    back = os.path.join(WORK, "back.db")
    for f in (out, back):
        if os.path.exists(f):
            os.remove(f)
    hps("export", db, "--study", name, "--format", "optuna", "-o", out)
    hps("import", out, "--study", name, "--into", back)
    a = hps("trials", db, "--study", name, "--format", "json").stdout
    b = hps("trials", back, "--study", name, "--format", "json").stdout
    check(a == b, "round trip hpsearch -> Optuna -> hpsearch keeps every trial")
    if a != b:
        for x, y in zip(json.loads(a), json.loads(b)):
            if x != y:
                print("first difference:\n", json.dumps(x), "\n", json.dumps(y))
                break
    sa = json.loads(hps("studies", db, "--format", "json").stdout)
    sb = json.loads(hps("studies", back, "--format", "json").stdout)
    check(sa == sb, f"study summary kept: {sa} vs {sb}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", FutureWarning)  # Study.system_attrs, deprecated in 3.1
    print(f"optuna {optuna.__version__}")
    db, name = test_export()
    test_import()
    test_round_trip(db, name)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
