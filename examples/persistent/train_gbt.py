"""Gradient-boosted trees on scikit-learn's bundled breast cancer data, tuned
by hpsearch in persistent mode: the imports and the data load happen once,
then this one process serves every trial its worker runs.

The model is XGBoost-style (histogram gradient boosting, scikit-learn's
HistGradientBoostingClassifier; Debian 12 does not package xgboost). The
trial's value is the validation log loss after the last boosting round; the
loss every 10 rounds is reported as an intermediate value, so pruners work.

    hpsearch run space.json --workers 2

train() is also what bench/xgboost_study.py runs in-process with Optuna.
"""

import os
import sys

# One thread per trial process: hpsearch already runs one worker per core
# slot (HPSEARCH_THREADS), and OpenMP's busy threads slow a shared machine.
os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("HPSEARCH_THREADS", "1"))

import numpy as np  # noqa: E402  (imported once, after OMP_NUM_THREADS)
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.metrics import log_loss  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

ROUNDS = 50        # boosting rounds per trial
REPORT_EVERY = 10  # rounds between intermediate values

_X, _y = load_breast_cancer(return_X_y=True)
X_TRAIN, X_VALID, Y_TRAIN, Y_VALID = train_test_split(
    _X, _y, test_size=0.25, random_state=0, stratify=_y)


def train(params, report=None, should_prune=None):
    """Trains with `params` (learning_rate, max_depth, max_leaf_nodes,
    min_samples_leaf, l2_regularization) and returns the validation log loss.
    report(step, value) receives the loss every REPORT_EVERY rounds; when
    should_prune() then returns True, training stops and None is returned."""
    model = HistGradientBoostingClassifier(
        learning_rate=float(params["learning_rate"]),
        max_depth=int(params["max_depth"]),
        max_leaf_nodes=int(params["max_leaf_nodes"]),
        min_samples_leaf=int(params["min_samples_leaf"]),
        l2_regularization=float(params["l2_regularization"]),
        max_iter=ROUNDS, early_stopping=False, random_state=0)
    model.fit(X_TRAIN, Y_TRAIN)
    loss = float("nan")
    for rounds, proba in enumerate(model.staged_predict_proba(X_VALID), start=1):
        if rounds % REPORT_EVERY and rounds != ROUNDS:
            continue
        loss = float(log_loss(Y_VALID, np.clip(proba, 1e-15, 1 - 1e-15)))
        if report is not None and rounds != ROUNDS:
            report(rounds, loss)
            if should_prune is not None and should_prune():
                return None
    return loss


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hpsearch_trials import trials

    for trial in trials():
        loss = train(trial.params, trial.report, trial.should_prune)
        if loss is None:
            trial.prune()
        else:
            trial.finish(loss, pid=os.getpid())


if __name__ == "__main__":
    main()
