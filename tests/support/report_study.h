// A synthetic study for the report tests: a space.json-like config (a log
// param with scale_with, an ordinal, a categorical, a conditional param, an
// ASHA pruner) and trials in every finished state, with learning curves,
// from several workers.
#pragma once

#include <cstdint>
#include <string>

#include "search/storage.h"

namespace hps::testsupport {

struct ReportStudyCounts {
  std::int64_t complete = 0, pruned = 0, fail = 0, running = 0;
  std::int64_t with_curves = 0;      // trials with intermediate values
  std::int64_t momentum_active = 0;  // COMPLETE trials where momentum is active
};

// The config of the study (its "space" has lr, batch_size, optimizer,
// momentum (when optimizer = sgd), dropout).
Json report_study_config(const std::string& name);

// Creates study `name` in `storage` with `n` trials drawn with `seed`: the
// value depends mostly on lr (plus a little dropout); every 5th trial is
// pruned (after 1..3 steps), every 7th (not pruned) fails, the last one is
// left RUNNING. Returns what was made.
ReportStudyCounts make_report_study(Storage& storage, const std::string& name, int n,
                                    std::uint64_t seed = 1);

}  // namespace hps::testsupport
