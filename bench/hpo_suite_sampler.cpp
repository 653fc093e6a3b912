// hpo_suite_sampler: an ask/tell server over stdin/stdout for bench/hpo_suite.py,
// so that the Python side runs the objectives (scikit-learn, XGBoost,
// surrogates) and our sampler chooses the params. One study, in memory.
//
//   hpo_suite_sampler --space JSON --sampler JSON [--seed 0] [--direction minimize]
//                     [--budget N]
//
// --space: the "space" section of space.json (SearchSpace::from_json, with
// conditions ("when"), ordinals, log ints, ...); --sampler: the "sampler"
// section (make_sampler, algorithms/factory.h); --seed replaces the sampler's
// seed; --direction: minimize or maximize; --budget: the study's trial budget,
// given to the sampler as `hpsearch run` gives budget.n_trials
// (Sampler::plan_budget: TPE's "auto" startup size follows it).
//
// Protocol: one JSON object a line on stdin, one answer a line on stdout.
//   {"op":"ask"}                                -> {"number":N,"params":{...}}
//   {"op":"tell","number":N,"value":V}          -> {"ok":true}
//   {"op":"tell","number":N,"state":"FAIL"}     -> {"ok":true}   (also "PRUNED")
//   {"op":"best"}                               -> {"value":V,"number":N}
// A request that cannot be served answers {"error":"..."} and the server goes
// on (an exhausted space: {"error":"...","exhausted":true}). End of input ends
// the program. Bad command-line arguments: a message on stderr, exit code 2.
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "algorithms/factory.h"
#include "cli/commands.h"
#include "search/sampler.h"
#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

using hps::Json;

struct Args {
  Json space;
  Json sampler = Json{{"type", "tpe"}};
  std::uint64_t seed = 0;
  hps::StudyDirection direction = hps::StudyDirection::kMinimize;
  std::optional<std::int64_t> budget;
};

// --seed: cli::parse_whole_number's rule (the hpsearch flags' own).
std::uint64_t parse_seed(const std::string& text) {
  std::string error;
  auto v = hps::cli::parse_whole_number<std::uint64_t>(text, error);
  if (!v) throw std::runtime_error("--seed: " + error);
  return *v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool have_space = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
    std::string value = argv[++i];
    if (flag == "--space") {
      a.space = hps::parse_json_text(value, "--space");
      have_space = true;
    } else if (flag == "--sampler") {
      a.sampler = hps::parse_json_text(value, "--sampler");
    } else if (flag == "--seed") {
      a.seed = parse_seed(value);
    } else if (flag == "--budget") {
      std::string error;
      auto v = hps::cli::parse_whole_number<std::int64_t>(value, error);
      if (!v) throw std::runtime_error("--budget: " + error);
      a.budget = *v;
    } else if (flag == "--direction") {
      a.direction = hps::parse_direction(value, "--direction");
    } else {
      throw std::runtime_error("unknown argument " + flag);
    }
  }
  if (!have_space) throw std::runtime_error("--space is required");
  return a;
}

// Answers one request; `open` holds the asked trials not yet told.
Json serve(hps::Study& study, std::map<std::int64_t, hps::Trial>& open, const Json& req) {
  if (!req.is_object()) return {{"error", "request: must be a JSON object {\"op\": ...}"}};
  const std::string op = hps::optional_string(req, "request", "op").value_or("");
  if (op == "ask") {
    hps::Trial trial = study.ask();
    Json params = Json::object();
    for (const auto& [name, value] : trial.params()) params[name] = value;
    std::int64_t number = trial.number();
    open.emplace(number, std::move(trial));
    return {{"number", number}, {"params", params}};
  }
  if (op == "tell") {
    auto it = open.find(hps::require_int(req, "request", "number"));
    if (it == open.end()) return {{"error", "tell: no open trial with that number"}};
    const std::string state = hps::optional_string(req, "request", "state").value_or("COMPLETE");
    if (state == "COMPLETE")
      study.tell(it->second, hps::require_number(req, "request", "value"));
    else if (state == "FAIL")
      study.tell(it->second, hps::TrialState::kFail, std::nullopt, "objective failed");
    else if (state == "PRUNED")
      study.tell(it->second, hps::TrialState::kPruned,
                 hps::optional_number(req, "request", "value").value_or(0.0));
    else
      return {{"error", "tell: state must be COMPLETE, FAIL or PRUNED, got " + state}};
    open.erase(it);
    return {{"ok", true}};
  }
  if (op == "best") {
    auto best = study.best_trial();
    return {{"value", study.best_value()}, {"number", best->number}};
  }
  std::string shown = op.size() > 64 ? op.substr(0, 64) + "..." : op;
  return {{"error", "request.op: must be ask, tell or best, got '" + shown + "'"}};
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hpo_suite_sampler: " << e.what()
              << "\nusage: hpo_suite_sampler --space JSON --sampler JSON [--seed S] "
                 "[--direction minimize|maximize] [--budget N]\n";
    return 2;
  }
  hps::StudyOptions opt;
  std::optional<hps::Study> study;
  try {
    opt.space = hps::SearchSpace::from_json(args.space);
    opt.sampler = hps::make_sampler(args.sampler, args.seed);
    // Creating the study checks the sampler against the space (a grid
    // needs values for continuous params, ...).
    study.emplace(hps::Study::create(std::make_shared<hps::InMemoryStorage>(), "hpo_suite",
                                     args.direction, opt));
    if (args.budget) (void)study->sampler().plan_budget(*args.budget);
  } catch (const std::exception& e) {
    std::cerr << "hpo_suite_sampler: " << e.what() << "\n";
    return 2;
  }
  std::map<std::int64_t, hps::Trial> open;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line == "\r") continue;
    Json answer;
    try {
      answer = serve(*study, open, hps::parse_json_text(line, "request"));
    } catch (const hps::SearchSpaceExhausted& e) {
      answer = {{"error", e.what()}, {"exhausted", true}};
    } catch (const std::exception& e) {
      answer = {{"error", e.what()}};
    }
    // An error may quote the request's bytes, which need not be UTF-8.
    std::cout << answer.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}
