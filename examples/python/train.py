#!/usr/bin/env python3
"""A training program tuned by hpsearch's "command" objective.

Needs only Python's standard library. It trains a logistic-regression
classifier with mini-batch SGD (optionally with momentum) or Adam on a
seeded synthetic data set, and after every epoch prints its validation loss
as an intermediate value; at the end it prints the best validation loss as
the final value:

    hpsearch: {"step": 3, "value": 0.41}
    hpsearch: {"value": 0.38, "attrs": {"best_epoch": 3}}

Everything else it prints (and stderr) goes to the trial's log file. When
the pruner stops the trial, hpsearch sends SIGTERM to the program's process
group (SIGKILL after a grace period).

Run by hand:  python3 train.py --lr 0.05 --batch-size 32 --optimizer sgd --momentum 0.9
Tune:         hpsearch run space.json   (from this directory)
"""
import argparse
import json
import math
import os
import random
import sys


def report(value, step=None, **attrs):
    """Prints one report line for hpsearch (flushed: stdout is a pipe)."""
    message = {"value": value}
    if step is not None:
        message["step"] = step
    if attrs:
        message["attrs"] = attrs
    print("hpsearch: " + json.dumps(message), flush=True)


def make_data(n, dim, seed):
    """Two Gaussian classes whose means differ along a random direction."""
    rng = random.Random(seed)
    direction = [rng.gauss(0, 1) for _ in range(dim)]
    norm = math.sqrt(sum(d * d for d in direction))
    direction = [d / norm for d in direction]
    data = []
    for _ in range(n):
        label = rng.random() < 0.5
        shift = 0.8 if label else -0.8
        x = [rng.gauss(0, 1) + shift * d for d in direction]
        data.append((x, 1.0 if label else 0.0))
    return data


def sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def log_loss(w, b, data):
    total = 0.0
    for x, y in data:
        p = min(max(sigmoid(sum(wi * xi for wi, xi in zip(w, x)) + b), 1e-12), 1 - 1e-12)
        total -= y * math.log(p) + (1 - y) * math.log(1 - p)
    return total / len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # hpsearch also passes every param as JSON, and the trial number.
    params = json.loads(os.environ.get("HPSEARCH_PARAMS", "{}"))
    trial = os.environ.get("HPSEARCH_TRIAL_NUMBER", "-")
    print(f"trial {trial}: params {params}")

    dim = 8
    data = make_data(1200, dim, seed=12345)
    train, val = data[:1000], data[1000:]
    rng = random.Random(args.seed)
    w, b = [0.0] * dim, 0.0
    vel_w, vel_b = [0.0] * dim, 0.0  # momentum / Adam first moment
    sq_w, sq_b = [0.0] * dim, 0.0    # Adam second moment
    beta1, beta2, eps, t = 0.9, 0.999, 1e-8, 0

    best, best_epoch = math.inf, -1
    for epoch in range(1, args.epochs + 1):
        rng.shuffle(train)
        for start in range(0, len(train), args.batch_size):
            batch = train[start:start + args.batch_size]
            gw, gb = [args.weight_decay * wi for wi in w], 0.0
            for x, y in batch:
                err = sigmoid(sum(wi * xi for wi, xi in zip(w, x)) + b) - y
                for i in range(dim):
                    gw[i] += err * x[i] / len(batch)
                gb += err / len(batch)
            if args.optimizer == "sgd":
                vel_w = [args.momentum * v + g for v, g in zip(vel_w, gw)]
                vel_b = args.momentum * vel_b + gb
                w = [wi - args.lr * v for wi, v in zip(w, vel_w)]
                b -= args.lr * vel_b
            else:
                t += 1
                vel_w = [beta1 * v + (1 - beta1) * g for v, g in zip(vel_w, gw)]
                sq_w = [beta2 * s + (1 - beta2) * g * g for s, g in zip(sq_w, gw)]
                vel_b = beta1 * vel_b + (1 - beta1) * gb
                sq_b = beta2 * sq_b + (1 - beta2) * gb * gb
                c1, c2 = 1 - beta1 ** t, 1 - beta2 ** t
                w = [wi - args.lr * (v / c1) / (math.sqrt(s / c2) + eps)
                     for wi, v, s in zip(w, vel_w, sq_w)]
                b -= args.lr * (vel_b / c1) / (math.sqrt(sq_b / c2) + eps)
        loss = log_loss(w, b, val)
        print(f"epoch {epoch}: validation loss {loss:.6f}")
        if not math.isfinite(loss):
            print("diverged", file=sys.stderr)
            report(float("nan"))  # a NaN value ends the trial FAIL
            return 0
        if loss < best:
            best, best_epoch = loss, epoch
        report(loss, step=epoch)

    report(best, best_epoch=best_epoch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
