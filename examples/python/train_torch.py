#!/usr/bin/env python3
"""The PyTorch variant of train.py: an MLP classifier tuned by hpsearch.

Needs PyTorch (pip install torch); not run in CI. The data set is a seeded
synthetic classification problem generated on the fly (no download), so the
script runs anywhere; swap make_data() for your own DataLoader.

hpsearch gives each trial one GPU through CUDA_VISIBLE_DEVICES (the program
sees it as cuda:0) or none (CPU), and the thread budget through
OMP_NUM_THREADS. After every epoch the validation loss is printed as an
intermediate value, so the pruner can stop a poor trial; hpsearch then sends
SIGTERM (SIGKILL after grace_s), which the handler below turns into a clean
exit after the current batch.

Run by hand:  python3 train_torch.py --lr 1e-3 --hidden 128 --dropout 0.1 --optimizer adam
Tune:         hpsearch run space_torch.json   (from this directory)
"""
import argparse
import json
import math
import signal
import sys

import torch
from torch import nn


def report(value, step=None, **attrs):
    """Prints one report line for hpsearch (flushed: stdout is a pipe)."""
    message = {"value": value}
    if step is not None:
        message["step"] = step
    if attrs:
        message["attrs"] = attrs
    print("hpsearch: " + json.dumps(message), flush=True)


stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True


def make_data(n, dim, classes, seed):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 1.5
    labels = torch.randint(0, classes, (n,), generator=g)
    x = centers[labels] + torch.randn(n, dim, generator=g) * 2.0
    return x, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="adam")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    x, y = make_data(12000, 32, 10, seed=1234)
    x_train, y_train = x[:10000].to(device), y[:10000].to(device)
    x_val, y_val = x[10000:].to(device), y[10000:].to(device)

    model = nn.Sequential(
        nn.Linear(32, args.hidden), nn.ReLU(), nn.Dropout(args.dropout),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Dropout(args.dropout),
        nn.Linear(args.hidden, 10)).to(device)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    print(f"device {device}, {sum(p.numel() for p in model.parameters())} parameters")

    best, best_epoch = math.inf, -1
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(x_train.shape[0], device=device)
        for start in range(0, x_train.shape[0], args.batch_size):
            if stop_requested:
                print("stopped by hpsearch (pruned or timed out)", file=sys.stderr)
                return 0
            idx = perm[start:start + args.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_loss = loss_fn(logits, y_val).item()
            accuracy = (logits.argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch}: val loss {val_loss:.4f}, accuracy {accuracy:.4f}")
        if not math.isfinite(val_loss):
            report(float("nan"))  # diverged: the trial ends FAIL
            return 0
        if val_loss < best:
            best, best_epoch = val_loss, epoch
        report(val_loss, step=epoch)

    report(best, best_epoch=best_epoch, device=str(device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
