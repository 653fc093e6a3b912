#!/usr/bin/python3
"""Epoch time of the torch.fashion_mnist MLP at 1 and 2 processes (issue #45).

One trial of the built-in MLP (fixed params: Adam, hidden 256, global batch
--batch) trains --epochs epochs on the training part of Fashion-MNIST
(--subset images, 0 = all 54,000) through `hpsearch run`, three ways:

  1 process,  1 thread    --workers 2, "processes": 1 (a worker gets
                          cores / 2 threads; the other worker idles)
  1 process,  all cores   --workers 1 (the worker gets every core)
  2 processes, 1 thread   --workers 2, "processes": 2 (data parallel: each
                          rank half of every batch, gradients all-reduced
                          with Gloo over the loopback interface)

The epoch time is the trial's duration (from its start on rank 0 to its end:
process group set-up and every epoch with its validation pass; the data are
loaded by each worker before the trial starts) divided by its epochs. The
ratio printed is 1-process-1-thread time / 2-process time (the speed-up of a
second rank with the same threads per rank).

  /usr/bin/python3 bench/ddp_epoch.py --hpsearch build/release/hpsearch
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run_one(hpsearch, tmp, name, processes, workers, args):
    fixed = {"optimizer": "adam", "lr": 1e-3, "batch_size": args.batch, "hidden": 256}
    space = {k: {"type": "categorical", "choices": [v]} for k, v in fixed.items()}
    study = {
        "study": {"name": name, "direction": "maximize", "storage": name + ".db"},
        "sampler": {"type": "random", "seed": 1},
        "budget": {"n_trials": 1},
        "objective": {"type": "torch.fashion_mnist", "model": "mlp",
                      "train_subset": args.subset, "max_epochs": args.epochs,
                      "checkpoints": False},
        "space": space,
    }
    if processes > 1:
        study["resources"] = {"processes": processes}
    with open(os.path.join(tmp, name + ".json"), "w") as f:
        json.dump(study, f)
    run = subprocess.run([hpsearch, "run", name + ".json", "--workers", str(workers)], cwd=tmp,
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hpsearch run {name} failed:\n" + run.stdout + run.stderr)
    out = subprocess.run([hpsearch, "trials", name + ".db", "--format", "json"], cwd=tmp,
                         capture_output=True, text=True, check=True).stdout
    trial = json.loads(out)[0]
    if trial["state"] != "COMPLETE":
        sys.exit(f"{name}: trial ended {trial['state']}: {json.dumps(trial)}")
    epochs = trial["user_attrs"]["epochs_run"]
    return trial["duration_s"] / epochs, trial["user_attrs"]["val_accuracy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hpsearch", default="build/release/hpsearch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--subset", type=int, default=0, help="training images (0: all)")
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    hpsearch = os.path.abspath(args.hpsearch)
    tmp = tempfile.mkdtemp(prefix="hps-ddp-epoch-")
    try:
        rows = [("1 process, 1 thread", 1, 2), ("1 process, all cores", 1, 1),
                ("2 processes, 1 thread each", 2, 2)]
        results = {}
        print(f"MLP 784-256-10, Adam, global batch {args.batch}, {args.epochs} epochs, "
              f"{os.cpu_count()} cores")
        for label, processes, workers in rows:
            name = f"p{processes}w{workers}"
            epoch_s, acc = run_one(hpsearch, tmp, name, processes, workers, args)
            results[label] = epoch_s
            print(f"{label:28s} {epoch_s:7.2f} s/epoch   val_accuracy {acc:.4f}")
        ratio = results["1 process, 1 thread"] / results["2 processes, 1 thread each"]
        print(f"speed-up of 2 processes over 1 (1 thread per rank): {ratio:.2f}x")
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
