"""Serve hpsearch trials from one long-lived Python process.

The "command" objective's persistent mode ("mode": "persistent") starts the
program once per worker and hands it one trial at a time on stdin, so that
imports (numpy, scikit-learn, xgboost, torch) and data loading are paid once
instead of once per trial. This module is the program's side of that
contract; it needs nothing but the standard library:

    from hpsearch_trials import trials

    import xgboost  # imported once, used by every trial

    for trial in trials():
        lr = trial.params["lr"]
        for step in range(100):
            loss = ...
            trial.report(step, loss)      # an intermediate value
            if trial.should_prune():      # the pruner said stop
                trial.prune()             # acknowledge: the trial ends PRUNED
                break
        else:
            trial.finish(loss)            # the trial's final value

The contract (objectives/command.h in hpsearch):
  stdin   one JSON line per trial:
              {"type": "trial", "number": 3, "params": {"lr": 0.01, ...}}
          (with "trial_dir": the trial's own folder, when the objective
          reads a metrics file from {trial_dir}; "checkpoint_dir": the
          folder the trial and its retries share for checkpoints, and on
          a retry that continues a trial "resume_step": the last step
          reported with its checkpoint)
          one JSON line when the pruner stops the running trial:
              {"type": "prune", "number": 3}
          end of file: no more trials, exit.
  stdout  'hpsearch: {"step": s, "value": v}'    an intermediate value
          'hpsearch: {"value": v}'               the final value; ends the trial
          'hpsearch: {"status": "pruned"}'       ends a trial after the notice
          'hpsearch: {"status": "fail", "reason": "..."}'   ends it FAIL
          'hpsearch: {"status": "done"}'         ends it; the value is the
                                                 one objective.metrics read
          each with "number": the trial's number (a line for another trial
          is ignored), which this module adds.
  Other output (yours, print()) goes to the trial's log file.

The same script also runs in hpsearch's per-trial mode (one process per
trial, params in the HPSEARCH_PARAMS environment variable): trials() then
yields that one trial and should_prune() is always False (hpsearch stops a
pruned program with SIGTERM there).
"""

import json
import math
import os
import select
import sys

__all__ = ["Trial", "trials"]


def _number(value):
    """A float for JSON: NaN and infinities as the strings hpsearch reads."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _emit(message):
    """Prints one report line and flushes stdout (a pipe buffers otherwise)."""
    sys.stdout.write("hpsearch: " + json.dumps(message) + "\n")
    sys.stdout.flush()


class _Stdin:
    """Line reader on file descriptor 0 that can also be polled without
    blocking (sys.stdin's own buffer would hide lines from select())."""

    def __init__(self):
        self._buffer = b""
        self._eof = False
        self._pending = []  # lines read ahead while polling

    def _fill(self, timeout):
        """Reads what is there within `timeout` seconds (None: wait)."""
        if self._eof:
            return
        ready, _, _ = select.select([0], [], [], timeout)
        if not ready:
            return
        chunk = os.read(0, 65536)
        if not chunk:
            self._eof = True
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                self._pending.append(line)

    def next_message(self, block):
        """The next JSON message, or None (no line now, or end of file)."""
        while not self._pending:
            if self._eof:
                return None
            self._fill(None if block else 0)
            if not block:
                break
        if not self._pending:
            return None
        line = self._pending.pop(0)
        try:
            message = json.loads(line)
        except ValueError:
            sys.stderr.write("hpsearch_trials: ignored a line on stdin that is not JSON\n")
            return self.next_message(block)
        return message if isinstance(message, dict) else self.next_message(block)

    def push_back(self, message):
        self._pending.insert(0, json.dumps(message).encode())


class Trial:
    """One trial: its number and params; report, prune and finish it."""

    def __init__(self, number, params, stdin=None, trial_dir=None, checkpoint_dir=None,
                 resume_step=None):
        self.number = number
        self.params = params
        # The trial's own folder (persistent mode, when the objective reads
        # a metrics file under {trial_dir}); None otherwise.
        self.trial_dir = trial_dir
        # Long trials: the lineage's checkpoint folder (save there, then
        # report), and on a retry the step it was restored to (None on a
        # first run). None when the study keeps no checkpoints.
        self.checkpoint_dir = checkpoint_dir
        self.resume_step = resume_step
        self._stdin = stdin  # None in per-trial mode
        self._pruned = False
        self.ended = False

    def report(self, step, value):
        """Reports an intermediate value (a float) at `step` (an int >= 0)."""
        self._emit({"step": int(step), "value": _number(value)})

    def should_prune(self):
        """True once hpsearch sent the prune notice for this trial. Does not
        block. Call prune() then (or finish()) to end the trial."""
        if self._stdin is None or self._pruned:
            return self._pruned
        while True:
            message = self._stdin.next_message(block=False)
            if message is None:
                return False
            if message.get("type") == "prune":
                if message.get("number") == self.number:
                    self._pruned = True
                    return True
                continue  # a late notice for an earlier trial
            # The next trial came early (not expected): keep it for trials().
            self._stdin.push_back(message)
            return False

    def set_attrs(self, **attrs):
        """Stores user attrs (JSON values) on the trial."""
        self._emit({"attrs": attrs})

    def finish(self, value, **attrs):
        """Ends the trial with its final value (and optional user attrs)."""
        message = {"value": _number(value)}
        if attrs:
            message["attrs"] = attrs
        self._end(message)

    def done(self):
        """Ends the trial without a value of its own: hpsearch takes the one
        objective.metrics read (from the output lines or the metrics file)."""
        self._end({"status": "done"})

    def prune(self):
        """Ends the trial as pruned (after should_prune() said so)."""
        self._end({"status": "pruned"})

    def fail(self, reason):
        """Ends the trial as failed, with a reason."""
        self._end({"status": "fail", "reason": str(reason)})

    def _end(self, message):
        if self.ended:
            raise RuntimeError("trial %s has already ended" % self.number)
        self.ended = True
        if self._stdin is None and "value" not in message:
            return  # per-trial mode: the exit status (or SIGTERM) says it
        self._emit(message)

    def _emit(self, message):
        # The trial's number goes with every report: hpsearch ignores a line
        # meant for another trial (one printed after its trial ended).
        if self.number is not None:
            message["number"] = self.number
        _emit(message)


def trials():
    """Yields the trials hpsearch hands this process, until end of file on
    stdin (persistent mode), or the one trial of HPSEARCH_PARAMS (per-trial
    mode). A trial the loop body left without finish(), prune() or fail()
    ends FAIL."""
    if "HPSEARCH_PARAMS" in os.environ and os.environ.get("HPSEARCH_MODE") != "persistent":
        number = os.environ.get("HPSEARCH_TRIAL_NUMBER")
        resume = os.environ.get("HPSEARCH_RESUME_STEP")
        yield Trial(int(number) if number else None, json.loads(os.environ["HPSEARCH_PARAMS"]),
                    checkpoint_dir=os.environ.get("HPSEARCH_CHECKPOINT_DIR"),
                    resume_step=int(resume) if resume is not None else None)
        return
    stdin = _Stdin()
    while True:
        message = stdin.next_message(block=True)
        if message is None:
            return
        if message.get("type") != "trial":
            continue  # a prune notice for a trial that has ended
        trial = Trial(message["number"], message.get("params", {}), stdin,
                      message.get("trial_dir"), message.get("checkpoint_dir"),
                      message.get("resume_step"))
        yield trial
        if not trial.ended:
            trial.fail("the program's loop went on without finish(), prune() or fail()")
