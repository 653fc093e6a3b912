// Live progress of a run: one self-overwriting line on a terminal, plain log
// lines (at most one a second, plus every state change) otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "search/search_space.h"
#include "search/study.h"

namespace hps::cli {

struct ProgressState {
  std::int64_t finished = 0;             // trials counting towards the budget
  std::int64_t finished_before = 0;      // of them, those finished before this run
  std::optional<std::int64_t> n_trials;  // the budget, if any
  std::optional<double> timeout_s;       // the time budget, if any
  // Seconds into the run when its first trial was dispatched (nullopt:
  // none yet). The estimate of the time left counts the trials' rate from
  // here: the wait for the first worker to join is no trial's time.
  std::optional<double> work_started_s;
  std::optional<double> best_value;
  std::optional<std::int64_t> best_number;
  std::string extra;  // e.g. "workers 6 busy / 2 idle"
};

class Progress {
 public:
  // tty: draw a live line on `out` (else plain lines). `direction` only
  // labels the best value. Writing to `out` never throws: a line that
  // cannot be written (its reader gone, a full disk) is dropped.
  Progress(std::FILE* out, bool tty);
  ~Progress();
  // Redraws (tty) or logs (plain: a line when the finished count changed,
  // at most one a second, else one every 30 s, unless `force`). `last` describes the trial that
  // just finished, if any.
  void update(const ProgressState& state, const std::string& last = "", bool force = false);
  // Ends the live line (tty) so normal output can follow.
  void finish();
  double elapsed_s() const;

 private:
  // Writes `text` to out_ and flushes it. A failed write (EPIPE, ENOSPC) is
  // ignored: the progress is lost, the run is not stopped. Never throws.
  void write(const std::string& text);

  std::FILE* out_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_plain_;
  std::chrono::steady_clock::time_point last_draw_;  // tty: at most 10 redraws a second
  std::int64_t last_plain_finished_ = -1;
};

// The estimate of the time left, in seconds, of a run `elapsed_s` seconds
// in: this run's rate so far (its `s.finished - s.finished_before` finished
// trials over the seconds since `s.work_started_s`, or since its start)
// times the trials left of `s.n_trials`, and at most what is left of
// `s.timeout_s`. nullopt without a budget, or with only a trial budget
// before one of this run's trials finished.
std::optional<double> time_left_s(const ProgressState& s, double elapsed_s);

// The end-of-run summary: best trial, its params and user attrs, counts by
// state, elapsed time (seconds), and why the run ended when `end_reason` is
// not empty (Coordinator::done_reason(): "budget reached", "search space
// exhausted", ...).
std::string summary(const Study& study, double elapsed_s, const std::string& end_reason = "");

}  // namespace hps::cli
