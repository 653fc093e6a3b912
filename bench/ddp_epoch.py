#!/usr/bin/python3
"""Epoch time of the torch.fashion_mnist MLP at 1 and 2 processes (issue #45).

One trial of the built-in MLP (fixed params: Adam, hidden 256, global batch
--batch) trains --epochs epochs on the training part of Fashion-MNIST
(--subset images, 0 = all 54,000) through `hpsearch run`, three ways:

  1 process,  1 thread    --workers 2, "processes": 1 (a worker gets
                          cores / 2 threads; the other worker idles)
  1 process,  all cores   --workers 1 (the worker gets every core; with
                          --all-cores only)
  2 processes, 1 thread   --workers 2, "processes": 2 (data parallel: each
                          rank half of every batch, gradients all-reduced
                          with Gloo over the loopback interface)

A trial's duration runs from rank 0's assignment to its end: each worker's
loading of the data set (rank 1's, after rank 0's rendezvous port is known,
is the trial's rendezvous_s), the process group set-up, and every epoch with
its validation pass. So that only epochs count, each configuration runs
twice, with 1 and with 1 + --epochs epochs: the epoch time is the difference
of the two durations over --epochs. The ratio printed is the
1-process-1-thread time over the 2-process time (the speed-up a second rank
gives at the same threads per rank).

  /usr/bin/python3 bench/ddp_epoch.py --hpsearch build/release/hpsearch
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run_one(hpsearch, tmp, name, processes, workers, epochs, args):
    fixed = {"optimizer": "adam", "lr": 1e-3, "batch_size": args.batch, "hidden": 256}
    space = {k: {"type": "categorical", "choices": [v]} for k, v in fixed.items()}
    study = {
        "study": {"name": name, "direction": "maximize", "storage": name + ".db"},
        "sampler": {"type": "random", "seed": 1},
        "budget": {"n_trials": 1},
        "objective": {"type": "torch.fashion_mnist", "model": "mlp",
                      "train_subset": args.subset, "max_epochs": epochs,
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
    if trial["user_attrs"]["epochs_run"] != epochs:
        sys.exit(f"{name}: {trial['user_attrs']['epochs_run']} epochs run, not {epochs}")
    return trial["duration_s"], trial["user_attrs"]["val_accuracy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hpsearch", default="build/release/hpsearch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--subset", type=int, default=0, help="training images (0: all)")
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--all-cores", action="store_true",
                    help="also 1 process with every core (--workers 1)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    hpsearch = os.path.abspath(args.hpsearch)
    tmp = tempfile.mkdtemp(prefix="hps-ddp-epoch-")
    try:
        rows = [("1 process, 1 thread", 1, 2), ("2 processes, 1 thread each", 2, 2)]
        if args.all_cores:
            rows.insert(1, ("1 process, all cores", 1, 1))
        results = {}
        print(f"MLP 784-256-10, Adam, global batch {args.batch}, {args.epochs} epochs timed, "
              f"{os.cpu_count()} cores")
        for label, processes, workers in rows:
            name = f"p{processes}w{workers}"
            short, _ = run_one(hpsearch, tmp, name + "e1", processes, workers, 1, args)
            long, acc = run_one(hpsearch, tmp, name, processes, workers, 1 + args.epochs, args)
            epoch_s = (long - short) / args.epochs
            print(f"  {label}: trial of 1 epoch {short:.2f} s, of {1 + args.epochs} epochs {long:.2f} s")
            results[label] = epoch_s
            print(f"{label:28s} {epoch_s:7.2f} s/epoch   "
                  f"val_accuracy after {1 + args.epochs} epochs {acc:.4f}")
        ratio = results["1 process, 1 thread"] / results["2 processes, 1 thread each"]
        print(f"speed-up of 2 processes over 1 (1 thread per rank): {ratio:.2f}x")
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
