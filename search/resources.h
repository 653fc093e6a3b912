// Trial resources: how many processes (ranks) one trial runs as. A trial
// of size N runs on N workers reserved together (gang scheduling, docs
// "Multi-process trials"); every rank's command program gets the torchrun
// environment (RANK, WORLD_SIZE, MASTER_ADDR, ...). space.json's
// "resources" section, or TrialResources set on the coordinator's options
// from C++ (CoordinatorOptions::resources).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "search/json_util.h"
#include "search/params.h"
#include "search/search_space.h"

namespace hps {

struct TrialResources {
  // The most ranks one trial may have.
  static constexpr int kMaxProcesses = 1024;

  // Ranks per trial (processes), >= 1 and <= kMaxProcesses. Default 1: a
  // trial runs on one worker, as without this section. Ignored when
  // processes_param is set.
  int processes = 1;
  // When not empty: the name of a param of the space whose value is each
  // trial's number of ranks (an int param, or an ordinal/categorical param
  // of integers, every value in [1, kMaxProcesses]); trials of different
  // sizes then share one study. Default "".
  std::string processes_param{};
  // Seconds every rank of a trial has, from the first rank's assignment, to
  // be ready (its worker started it); past it the trial ends FAIL naming
  // the rank and its host. Default 60; > 0.
  double rendezvous_timeout_s = 60.0;

  // Parses space.json's "resources" ({"processes": N} or {"processes":
  // {"param": "name"}}, "rendezvous_timeout_s": seconds) against `space`
  // (the param must exist and have integer values in [1, kMaxProcesses]).
  // null gives the defaults. Throws ConfigError naming the field
  // ("resources.processes: must be an integer >= 1, got 0").
  static TrialResources from_json(const Json& section, const SearchSpace& space);
  // Throws ConfigError naming the field unless the settings are valid
  // (processes in [1, kMaxProcesses], rendezvous_timeout_s > 0).
  void validate() const;

  // The ranks of a trial with `params`: processes, or the value of
  // processes_param clamped to [1, kMaxProcesses] (1 when the trial lacks
  // it, e.g. an inactive conditional param). Never throws.
  int size_of(const Params& params) const;
  // The largest size any trial can have: processes, or the largest value
  // of processes_param's distribution in `space` (1 if absent).
  int max_size(const SearchSpace& space) const;
  // Whether a trial may have more than one rank.
  bool multi_process(const SearchSpace& space) const { return max_size(space) > 1; }
};

}  // namespace hps
