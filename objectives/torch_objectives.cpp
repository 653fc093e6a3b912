// The LibTorch-free part of the LibTorch objectives: the objective section,
// the trial's params, the epoch loop with early stopping. Kept apart from
// torch_fashion_mnist.cpp so that it compiles fast.
#include "objectives/torch_objectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace hps {
namespace {

const std::set<std::string> kOptimizers = {"adam", "adamw", "sgd", "rmsprop"};
const std::set<std::string> kActivations = {"relu", "gelu", "tanh", "silu", "leaky_relu"};

std::string join_names(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Checks one value of a param; returns "" when valid, else the broken rule.
using ValueRule = std::string (*)(const Json& value);

bool is_integer(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9007199254740992.0;
}

std::string positive_number(const Json& v) {
  if (!v.is_number()) return "must be a number";
  double d = v.get<double>();
  return std::isfinite(d) && d > 0 ? "" : fmt::format("must be > 0, got {}", v.dump());
}
std::string non_negative_number(const Json& v) {
  if (!v.is_number()) return "must be a number";
  double d = v.get<double>();
  return std::isfinite(d) && d >= 0 ? "" : fmt::format("must be >= 0, got {}", v.dump());
}
std::string unit_fraction(const Json& v) {
  if (!v.is_number()) return "must be a number";
  double d = v.get<double>();
  return d >= 0 && d < 1 ? "" : fmt::format("must be in [0, 1), got {}", v.dump());
}
std::string positive_int(const Json& v) {
  if (!is_integer(v)) return fmt::format("must be an integer, got {}", v.dump());
  return v.get<double>() >= 1 ? "" : fmt::format("must be >= 1, got {}", v.dump());
}
std::string odd_positive_int(const Json& v) {
  if (std::string e = positive_int(v); !e.empty()) return e;
  return static_cast<std::int64_t>(v.get<double>()) % 2 == 1
             ? ""
             : fmt::format("must be odd (the padding keeps the image size), got {}", v.dump());
}
std::string optimizer_name(const Json& v) {
  if (v.is_string() && kOptimizers.count(v.get<std::string>())) return "";
  return fmt::format("must be one of {}, got {}", join_names(kOptimizers), v.dump());
}
std::string activation_name(const Json& v) {
  if (v.is_string() && kActivations.count(v.get<std::string>())) return "";
  return fmt::format("must be one of {}, got {}", join_names(kActivations), v.dump());
}
std::string boolean(const Json& v) {
  return v.is_boolean() ? "" : fmt::format("must be true or false, got {}", v.dump());
}

struct ParamRule {
  ValueRule rule;
  const char* model;  // "" = any model, else "mlp" or "cnn"
};

const std::map<std::string, ParamRule>& param_rules() {
  static const std::map<std::string, ParamRule> rules = {
      {"lr", {positive_number, ""}},         {"batch_size", {positive_int, ""}},
      {"optimizer", {optimizer_name, ""}},   {"momentum", {unit_fraction, ""}},
      {"nesterov", {boolean, ""}},           {"weight_decay", {non_negative_number, ""}},
      {"layers", {positive_int, "mlp"}},     {"hidden", {positive_int, "mlp"}},
      {"activation", {activation_name, ""}}, {"dropout", {unit_fraction, ""}},
      {"channels", {positive_int, "cnn"}},   {"kernel_size", {odd_positive_int, "cnn"}},
  };
  return rules;
}

// Checks every value `spec`'s distribution can produce against `rule`.
void check_distribution(const ParamSpec& spec, ValueRule rule) {
  const std::string path = join_path("space", spec.name);
  const Distribution& d = spec.distribution;
  if (d.is_indexed()) {
    for (const Json& v : d.choices())
      if (std::string e = rule(v); !e.empty())
        throw ConfigError(path, "choice " + v.dump() + ": " + e);
    return;
  }
  // Numeric: the kind must match and both ends of the range must pass.
  const bool is_int_kind = d.kind() == DistributionKind::kInt;
  const Json low = is_int_kind ? Json(static_cast<std::int64_t>(d.low())) : Json(d.low());
  const Json high =
      is_int_kind ? Json(static_cast<std::int64_t>(d.grid_high())) : Json(d.grid_high());
  if (rule == positive_int || rule == odd_positive_int) {
    if (!is_int_kind)
      throw ConfigError(path, "must be an int, ordinal or categorical param (it takes integers)");
  } else if (rule == optimizer_name || rule == activation_name || rule == boolean) {
    throw ConfigError(path, "must be a categorical or ordinal param (it takes names or booleans)");
  }
  if (std::string e = rule(low); !e.empty()) throw ConfigError(join_path(path, "low"), e);
  if (std::string e = rule(high); !e.empty()) throw ConfigError(join_path(path, "high"), e);
  if (rule == odd_positive_int && d.low() != d.grid_high() &&
      static_cast<std::int64_t>(d.step()) % 2 != 0)
    throw ConfigError(join_path(path, "step"),
                      "must be even so that every value is odd (or use an ordinal param)");
}

double number_or(const Params& p, const char* name, double fallback) {
  auto it = p.find(name);
  return it == p.end() ? fallback : it->second.get<double>();
}
std::int64_t int_or(const Params& p, const char* name, std::int64_t fallback) {
  auto it = p.find(name);
  return it == p.end() ? fallback : static_cast<std::int64_t>(it->second.get<double>());
}

// "early_stopping": {"patience": int >= 0, "min_delta": finite number >= 0}.
void parse_early_stopping(const Json& o, FashionMnistConfig& c) {
  if (auto it = o.find("early_stopping"); it != o.end()) {
    const std::string epath = "objective.early_stopping";
    if (!it->is_object())
      throw ConfigError(epath, "must be an object {\"patience\": ..., \"min_delta\": ...}, got " +
                                   quoted_value(*it));
    check_keys(*it, epath, {"patience", "min_delta"});
    if (auto v = optional_int(*it, epath, "patience")) {
      if (*v < 0)
        throw ConfigError(epath + ".patience",
                          "must be >= 0 (0 = never stop early), got " + std::to_string(*v));
      c.early_stopping.patience = *v;
    }
    if (auto v = optional_number(*it, epath, "min_delta")) {
      if (!(std::isfinite(*v) && *v >= 0))
        throw ConfigError(epath + ".min_delta",
                          fmt::format("must be a finite number >= 0, got {}", *v));
      c.early_stopping.min_delta = *v;
    }
  }
}

// The space: known params only, each able to produce valid values only,
// and the params of the other model refused.
void check_space(const SearchSpace& space, const std::string& model) {
  const auto& rules = param_rules();
  for (const ParamSpec& spec : space.params()) {
    auto it = rules.find(spec.name);
    if (it == rules.end()) {
      std::string known;
      for (const auto& [name, _] : rules) known += (known.empty() ? "" : ", ") + name;
      throw ConfigError(
          join_path("space", spec.name),
          "not a param of " + std::string(kFashionMnistType) + " (known: " + known + ")");
    }
    if (*it->second.model && model != it->second.model)
      throw ConfigError(join_path("space", spec.name),
                        "a param of the " + std::string(it->second.model) +
                            " model, but objective.model is \"" + model + "\"");
    check_distribution(spec, it->second.rule);
    if (spec.scale_with && spec.name != "lr")
      throw ConfigError(join_path(join_path("space", spec.name), "scale_with"),
                        "only lr can be scaled in " + std::string(kFashionMnistType));
  }
}

// "checkpoints" (bool) and "checkpoint_dir" (non-empty string).
void parse_checkpoint_options(const Json& o, const std::string& path, FashionMnistConfig& c) {
  if (auto v = optional_bool(o, path, "checkpoints")) c.checkpoints = *v;
  if (auto v = optional_string(o, path, "checkpoint_dir")) {
    if (v->empty())
      throw ConfigError("objective.checkpoint_dir",
                        "must not be empty (leave it out for <log_dir>/checkpoints)");
    c.checkpoint_dir = *v;
  }
}

}  // namespace

const char* to_string(TrainMetric metric) {
  return metric == TrainMetric::kValLoss ? "val_loss" : "val_accuracy";
}

FashionMnistConfig FashionMnistConfig::from_json(const Json& o, const SearchSpace& space) {
  const std::string path = "objective";
  check_keys(o, path,
             {"type", "model", "data_dir", "train_subset", "val_fraction", "max_epochs",
              "early_stopping", "metric", "seed", "eval_batch_size", "checkpoints",
              "checkpoint_dir", "process_group_timeout_s"});
  if (std::string type = require_string(o, path, "type"); type != kFashionMnistType)
    throw ConfigError("objective.type",
                      "expected \"" + std::string(kFashionMnistType) + "\", got \"" + type + "\"");
  FashionMnistConfig c;
  if (auto v = optional_string(o, path, "model")) {
    if (*v != "mlp" && *v != "cnn")
      throw ConfigError("objective.model", "must be \"mlp\" or \"cnn\", got \"" + *v + "\"");
    c.model = *v;
  }
  if (auto v = optional_string(o, path, "data_dir")) {
    if (v->empty()) throw ConfigError("objective.data_dir", "must not be empty");
    c.data_dir = *v;
  }
  if (auto v = optional_int(o, path, "train_subset")) {
    if (*v < 0)
      throw ConfigError("objective.train_subset",
                        "must be >= 0 (0 = all), got " + std::to_string(*v));
    c.train_subset = *v;
  }
  if (auto v = optional_number(o, path, "val_fraction")) {
    if (!(*v > 0 && *v < 1))
      throw ConfigError("objective.val_fraction", fmt::format("must be in (0, 1), got {}", *v));
    c.val_fraction = *v;
  }
  if (auto v = optional_int(o, path, "max_epochs")) {
    if (*v < 1)
      throw ConfigError("objective.max_epochs", "must be >= 1, got " + std::to_string(*v));
    c.max_epochs = *v;
  }
  parse_early_stopping(o, c);
  if (auto v = optional_string(o, path, "metric")) {
    if (*v == "val_loss")
      c.metric = TrainMetric::kValLoss;
    else if (*v == "val_accuracy")
      c.metric = TrainMetric::kValAccuracy;
    else
      throw ConfigError("objective.metric",
                        "must be \"val_loss\" or \"val_accuracy\", got \"" + *v + "\"");
  }
  if (auto v = optional_int(o, path, "seed")) {
    if (*v < 0) throw ConfigError("objective.seed", "must be >= 0, got " + std::to_string(*v));
    c.seed = static_cast<std::uint64_t>(*v);
  }
  if (auto v = optional_int(o, path, "eval_batch_size")) {
    if (*v < 1)
      throw ConfigError("objective.eval_batch_size", "must be >= 1, got " + std::to_string(*v));
    c.eval_batch_size = *v;
  }
  parse_checkpoint_options(o, path, c);
  if (auto v = optional_number(o, path, "process_group_timeout_s")) {
    if (!(*v > 0) || !std::isfinite(*v))
      throw ConfigError("objective.process_group_timeout_s",
                        fmt::format("must be > 0 (seconds), got {}", *v));
    c.process_group_timeout_s = *v;
  }

  check_space(space, c.model);
  return c;
}

TrainMetric FashionMnistConfig::resolve_metric(std::optional<StudyDirection> direction) const {
  if (!metric) {
    return direction == StudyDirection::kMaximize ? TrainMetric::kValAccuracy
                                                  : TrainMetric::kValLoss;
  }
  if (direction) {
    const StudyDirection wanted =
        *metric == TrainMetric::kValLoss ? StudyDirection::kMinimize : StudyDirection::kMaximize;
    if (*direction != wanted)
      throw ConfigError("objective.metric",
                        fmt::format("{} must be {}d, but study.direction is \"{}\"",
                                    to_string(*metric), to_string(wanted), to_string(*direction)));
  }
  return *metric;
}

TrainingParams TrainingParams::from_params(const Params& params, const SearchSpace& space) {
  const auto& rules = param_rules();
  for (const auto& [name, value] : params) {
    auto it = rules.find(name);
    if (it == rules.end())
      throw ConfigError(join_path("params", name),
                        "not a param of " + std::string(kFashionMnistType));
    if (std::string e = it->second.rule(value); !e.empty())
      throw ConfigError(join_path("params", name), e);
  }
  TrainingParams t;
  if (auto it = params.find("optimizer"); it != params.end())
    t.optimizer = it->second.get<std::string>();
  if (auto it = params.find("activation"); it != params.end())
    t.activation = it->second.get<std::string>();
  if (auto it = params.find("nesterov"); it != params.end()) t.nesterov = it->second.get<bool>();
  t.lr = number_or(params, "lr", t.lr);
  t.batch_size = int_or(params, "batch_size", t.batch_size);
  t.momentum = number_or(params, "momentum", t.optimizer == "sgd" ? 0.9 : 0.0);
  t.weight_decay = number_or(params, "weight_decay", t.weight_decay);
  t.layers = int_or(params, "layers", t.layers);
  t.hidden = int_or(params, "hidden", t.hidden);
  t.dropout = number_or(params, "dropout", t.dropout);
  t.channels = int_or(params, "channels", t.channels);
  t.kernel_size = int_or(params, "kernel_size", t.kernel_size);

  t.lr_effective = t.lr;
  if (const ParamSpec* spec = space.find("lr"); spec && spec->scale_with) {
    const ScaleWith& s = *spec->scale_with;
    auto it = params.find(s.param);
    if (it != params.end()) {
      if (!it->second.is_number() || !(it->second.get<double>() > 0))
        throw ConfigError(join_path("params", s.param),
                          "must be a positive number to scale lr with");
      t.lr_effective = t.lr * std::pow(it->second.get<double>() / s.reference, s.exponent());
    }
  }
  return t;
}

namespace {

// The user attrs of run_epochs() (the best epoch's only when `have_best`).
void set_outcome_attrs(Trial* trial, const TrainingOutcome& out, bool have_best) {
  if (!trial) return;
  if (have_best) {
    trial->set_user_attr("best_epoch", out.best_epoch);
    trial->set_user_attr("val_loss", out.best.val_loss);
    trial->set_user_attr("val_accuracy", out.best.val_accuracy);
    trial->set_user_attr("train_loss", out.best.train_loss);
  }
  trial->set_user_attr("epochs_run", out.epochs_run);
  trial->set_user_attr("stopped_early", out.stopped_early);
  if (out.diverged) trial->set_user_attr("diverged", true);
}

// Whether `value` beats `reference` by more than `delta` (lower when minimizing).
bool beats_by(double value, double reference, bool minimize, double delta) {
  return minimize ? value < reference - delta : value > reference + delta;
}

// Records epoch `epoch` (metrics `m`, metric value `value`) in `st`: the
// best so far (then on_best(epoch)) and early stopping's reference and
// counter.
void record_epoch(EpochLoopState& st, std::int64_t epoch, const EpochMetrics& m, double value,
                  bool minimize, double min_delta,
                  const std::function<void(std::int64_t epoch)>& on_best) {
  st.epoch = epoch;
  if (!st.have_best || (minimize ? value < st.best_value : value > st.best_value)) {
    st.have_best = true;
    st.best_value = value;
    st.best_epoch = epoch;
    st.best = m;
    if (on_best) on_best(epoch);
  }
  if (epoch == 1 || beats_by(value, st.reference, minimize, min_delta)) {
    st.reference = value;
    st.since_improvement = 0;
  } else {
    ++st.since_improvement;
  }
}

// The error of a first epoch whose loss is not finite.
Error diverged_error(const EpochMetrics& m, std::int64_t epoch) {
  const bool train_finite = std::isfinite(m.train_loss);
  return Error(fmt::format("diverged: {} is {} after epoch {} (learning rate too high?)",
                           train_finite ? "val_loss" : "train_loss",
                           train_finite ? m.val_loss : m.train_loss, epoch));
}

}  // namespace

TrainingOutcome run_epochs(Trial* trial, std::int64_t max_epochs, TrainMetric metric,
                           const EarlyStoppingOptions& early,
                           const std::function<EpochMetrics(std::int64_t epoch)>& run_epoch,
                           const std::function<void(std::int64_t epoch)>& on_best,
                           const EpochLoopResume& resume,
                           const std::function<EpochDecision(std::int64_t, EpochDecision)>& agree) {
  if (max_epochs < 1) throw ConfigError("max_epochs", "must be >= 1");
  if (early.patience < 0) throw ConfigError("early_stopping.patience", "must be >= 0");
  const bool minimize = metric == TrainMetric::kValLoss;
  auto patience_exhausted = [&](const EpochLoopState& s) {
    return early.patience > 0 && s.since_improvement >= early.patience && s.epoch < max_epochs;
  };

  // The patience counter compares with `reference`, which moves only on an
  // improvement by more than min_delta (Keras); the best value itself is the
  // best ever seen.
  EpochLoopState st;
  if (resume.from) {
    st = *resume.from;
    if (st.epoch < 1 || !st.have_best)
      throw Error(
          fmt::format("run_epochs: cannot resume from epoch {} without a best epoch", st.epoch));
  }
  TrainingOutcome out;
  auto sync_outcome = [&] {
    out.best_value = st.best_value;
    out.best_epoch = st.best_epoch;
    out.best = st.best;
    out.epochs_run = st.epoch;
  };
  sync_outcome();
  auto set_attrs = [&] { set_outcome_attrs(trial, out, st.have_best); };

  // A resumed loop whose last epoch ended training ends now, as it did.
  bool done = resume.from && patience_exhausted(st);
  out.stopped_early = done;
  for (std::int64_t epoch = st.epoch + 1; !done && epoch <= max_epochs; ++epoch) {
    EpochMetrics m = run_epoch(epoch);
    out.epochs_run = epoch;
    EpochDecision decision = EpochDecision::kContinue;
    // Whether an earlier epoch is the best so far (with `agree`, rank 0's
    // kDiverged may come for an epoch this loop found finite).
    const bool had_best = st.have_best;
    if (!std::isfinite(m.train_loss) || !std::isfinite(m.val_loss)) {
      decision = EpochDecision::kDiverged;
    } else {
      const double value = minimize ? m.val_loss : m.val_accuracy;
      record_epoch(st, epoch, m, value, minimize, early.min_delta, on_best);
      sync_outcome();
      // The rule for programs: the state of this epoch is saved before the
      // step is reported (Trial::report snapshots the checkpoint folder).
      if (resume.save_state) resume.save_state(st);
      if (trial) trial->report(epoch, value);
      if (trial && trial->should_prune())
        decision = EpochDecision::kPrune;
      else if (patience_exhausted(st))
        decision = EpochDecision::kStop;
    }
    if (agree) decision = agree(epoch, decision);
    if (decision == EpochDecision::kDiverged) {
      out.diverged = true;
      if (!had_best) {
        set_attrs();
        throw diverged_error(m, epoch);
      }
      break;
    }
    if (decision == EpochDecision::kPrune) {
      set_attrs();
      throw TrialPruned();
    }
    done = out.stopped_early = decision == EpochDecision::kStop;
  }
  set_attrs();
  return out;
}

Json TestEvaluation::to_user_attrs() const {
  return Json{{"test_accuracy", test_accuracy},
              {"test_loss", test_loss},
              {"test_scored_from", scored_from}};
}

bool is_torch_objective(const Json& config) {
  if (!config.is_object()) return false;
  auto it = config.find("type");
  return it != config.end() && it->is_string() && it->get<std::string>().rfind("torch.", 0) == 0;
}

}  // namespace hps
