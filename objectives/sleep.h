// The "sleep" objective: a stand-in for training, for tests and benchmarks
// of the coordinator. {"type": "sleep", "seconds": S, "steps": K,
// "fail_param": name}:
//  - sleeps S seconds in total (default 0), in K steps (default 1), and
//    when K > 1 reports after each step (step = 1..K, value = the final
//    value + (K - step) / K: a decreasing curve ending at the final value);
//  - returns the sum of all numeric params (bools and strings count 0);
//  - with "fail_param": throws hps::Error("fail_param set") when that param
//    is true, for tests of failure handling. The param must be able to be
//    true (a categorical or ordinal with true among its choices); any other
//    is refused when the config is validated (ConfigError
//    "objective.fail_param: must name a bool param ...").
// Checks should_prune() after every report and throws TrialPruned if asked.
// Sleeps in slices of at most 250 ms and throws Interrupted once the trial
// is interrupted (Trial::interrupted: a signal to its worker, a lost
// lease), so a trial ends within 250 ms of a stop even when it reports
// nothing (one step).
#pragma once

#include "objectives/objective.h"

namespace hps {

// The registry entry for "sleep".
ObjectiveType sleep_objective_type();

}  // namespace hps
