#!/usr/bin/env python3
"""Train a small softmax classifier on a synthetic 3-class data set.

A training script in the usual style of public examples: argparse flags,
one line per epoch on stdout, an optional CSV log. It knows nothing about
hyperparameter search; hpsearch tunes it unchanged (see README.md here).

    python train.py --lr 0.1 --momentum 0.9 --batch-size 32 --epochs 20
    python train.py --lr 0.1 --csv-log runs/metrics.csv
"""
import argparse
import csv
import math
import os
import random


def make_data(n, dim, classes, seed):
    """Gaussian blobs around `classes` random centers."""
    rng = random.Random(seed)
    centers = [[rng.gauss(0, 0.6) for _ in range(dim)] for _ in range(classes)]
    data = []
    for _ in range(n):
        c = rng.randrange(classes)
        data.append(([m + rng.gauss(0, 1.2) for m in centers[c]], c))
    return data


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def forward(w, b, x):
    return softmax([sum(wi * xi for wi, xi in zip(row, x)) + bj for row, bj in zip(w, b)])


def evaluate(w, b, data):
    loss, correct = 0.0, 0
    for x, y in data:
        p = forward(w, b, x)
        loss -= math.log(max(p[y], 1e-12))
        correct += max(range(len(p)), key=p.__getitem__) == y
    return loss / len(data), correct / len(data)


def main():
    parser = argparse.ArgumentParser(description="softmax regression with SGD")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="L2 penalty")
    parser.add_argument("--batch-size", type=int, default=32, help="mini-batch size")
    parser.add_argument("--epochs", type=int, default=20, help="number of epochs")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--csv-log", default=None, help="also write metrics to this CSV file")
    args = parser.parse_args()

    dim, classes = 10, 3
    data = make_data(2000, dim, classes, seed=0)
    train, val = data[:1500], data[1500:]
    rng = random.Random(args.seed)
    w = [[rng.gauss(0, 0.01) for _ in range(dim)] for _ in range(classes)]
    b = [0.0] * classes
    vw = [[0.0] * dim for _ in range(classes)]
    vb = [0.0] * classes

    writer = None
    if args.csv_log:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv_log)), exist_ok=True)
        log_file = open(args.csv_log, "w", newline="")
        writer = csv.writer(log_file)
        writer.writerow(["epoch", "step", "train_loss", "val_loss", "val_acc"])

    print(f"Training on {len(train)} samples, validating on {len(val)}")
    step = 0
    for epoch in range(1, args.epochs + 1):
        rng.shuffle(train)
        total = 0.0
        for i in range(0, len(train), args.batch_size):
            batch = train[i:i + args.batch_size]
            gw = [[0.0] * dim for _ in range(classes)]
            gb = [0.0] * classes
            for x, y in batch:
                p = forward(w, b, x)
                total -= math.log(max(p[y], 1e-12))
                for j in range(classes):
                    g = p[j] - (1.0 if j == y else 0.0)
                    gb[j] += g
                    for k in range(dim):
                        gw[j][k] += g * x[k]
            n = len(batch)
            for j in range(classes):
                vb[j] = args.momentum * vb[j] + gb[j] / n
                b[j] -= args.lr * vb[j]
                for k in range(dim):
                    vw[j][k] = args.momentum * vw[j][k] + gw[j][k] / n + args.weight_decay * w[j][k]
                    w[j][k] -= args.lr * vw[j][k]
            step += 1
        train_loss = total / len(train)
        val_loss, val_acc = evaluate(w, b, val)
        if not math.isfinite(val_loss):
            val_loss = float("nan")
        print(f"epoch {epoch} train_loss={train_loss:.4f} val_loss={val_loss:.4f} "
              f"val_acc={val_acc:.4f}")
        if writer:
            writer.writerow([epoch, step, f"{train_loss:.6f}", f"{val_loss:.6f}", f"{val_acc:.4f}"])
            log_file.flush()
    print("Done.")


if __name__ == "__main__":
    main()
