// Tests of the LibTorch Fashion-MNIST objective (objectives/torch_objectives.h).
// Tests that train read the real data set from /usr/share/datasets/fashion-mnist
// (Debian's dataset-fashion-mnist) and are skipped when it is absent.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <new>
#include <optional>
#include <thread>

#include "objectives/torch_objectives.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

bool have_data() {
  return std::filesystem::exists(std::string(kFashionMnistDefaultDir) +
                                 "/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists(std::string(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte");
}

#define REQUIRE_DATA() \
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed in " << kFashionMnistDefaultDir

// A trial backend that records reports and attrs and prunes at a set step.
class RecordingBackend : public TrialBackend {
 public:
  std::vector<std::pair<std::int64_t, double>> reports;
  Json attrs = Json::object();
  std::optional<std::int64_t> prune_at;

  Json suggest(Trial&, const std::string& name, const Distribution&) override {
    throw Error("unexpected suggest of " + name);
  }
  bool report(Trial&, std::int64_t step, double value) override {
    reports.emplace_back(step, value);
    return true;
  }
  bool should_prune(Trial& trial) override { return prune_at && trial.last_step() == *prune_at; }
  void set_user_attr(Trial&, const std::string& key, const Json& value) override {
    attrs[key] = value;
  }
};

Trial make_trial(RecordingBackend& backend, Params params = {}) {
  return Trial(&backend, 1, 0, std::move(params), {}, {}, nullptr);
}

// Removes the batch hook when a test ends, whatever happens.
struct HookGuard {
  ~HookGuard() { torch_testing::set_batch_hook({}); }
};

// ------------------------------------------------------------------ early stopping

TEST(TorchEarlyStopping, StopsAfterPatienceEpochsWithoutImprovementAndReturnsTheBest) {
  // val_loss per epoch; the best is 0.5 at epoch 3, then three epochs without
  // an improvement by more than min_delta = 0.01 (0.495 improves by 0.005).
  const std::vector<double> losses = {0.9, 0.7, 0.5, 0.6, 0.495, 0.55, 0.3, 0.2};
  RecordingBackend backend;
  Trial trial = make_trial(backend);
  std::vector<std::int64_t> ran;
  std::vector<std::int64_t> bests;
  TrainingOutcome out = run_epochs(
      &trial, 8, TrainMetric::kValLoss, {.patience = 3, .min_delta = 0.01},
      [&](std::int64_t epoch) {
        ran.push_back(epoch);
        EpochMetrics m;
        m.train_loss = 1.0;
        m.val_loss = losses.at(static_cast<std::size_t>(epoch - 1));
        m.val_accuracy = 1.0 - m.val_loss;
        return m;
      },
      [&](std::int64_t epoch) { bests.push_back(epoch); });

  EXPECT_EQ(ran, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(out.stopped_early);
  EXPECT_EQ(out.epochs_run, 6);
  // The best value ever reached (0.495 at epoch 5), not the last one, even
  // though 0.495 did not count as an improvement for the patience counter.
  EXPECT_DOUBLE_EQ(out.best_value, 0.495);
  EXPECT_EQ(out.best_epoch, 5);
  EXPECT_EQ(bests, (std::vector<std::int64_t>{1, 2, 3, 5}));
  ASSERT_EQ(backend.reports.size(), 6u);
  for (std::size_t i = 0; i < backend.reports.size(); ++i) {
    EXPECT_EQ(backend.reports[i].first, static_cast<std::int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(backend.reports[i].second, losses[i]);
  }
  EXPECT_EQ(backend.attrs["best_epoch"], 5);
  EXPECT_DOUBLE_EQ(backend.attrs["val_loss"].get<double>(), 0.495);
  EXPECT_DOUBLE_EQ(backend.attrs["val_accuracy"].get<double>(), 1.0 - 0.495);
  EXPECT_EQ(backend.attrs["stopped_early"], true);

  // Maximizing val_accuracy with the same patience: the reports are the
  // accuracies and the best is the highest.
  RecordingBackend backend2;
  Trial trial2 = make_trial(backend2);
  const std::vector<double> accs = {0.5, 0.8, 0.7, 0.75, 0.79, 0.9};
  TrainingOutcome out2 = run_epochs(&trial2, 6, TrainMetric::kValAccuracy,
                                    {.patience = 3, .min_delta = 0.0}, [&](std::int64_t epoch) {
                                      EpochMetrics m;
                                      m.val_accuracy = accs.at(static_cast<std::size_t>(epoch - 1));
                                      m.val_loss = 1.0 - m.val_accuracy;
                                      return m;
                                    });
  EXPECT_EQ(out2.epochs_run, 5);
  EXPECT_DOUBLE_EQ(out2.best_value, 0.8);
  EXPECT_EQ(out2.best_epoch, 2);
  EXPECT_DOUBLE_EQ(backend2.reports.back().second, 0.79);
}

// ------------------------------------------------------------------ real training

TEST(TorchObjective, ShortTrainingOnASubsetLearns) {
  REQUIRE_DATA();
  SearchSpace space =
      SearchSpace::from_json({{"lr", {{"type", "float"}, {"low", 1e-3}, {"high", 1e-3}}},
                              {"batch_size", {{"type", "ordinal"}, {"values", {64}}}},
                              {"hidden", {{"type", "ordinal"}, {"values", {128}}}}});
  Json config = {{"type", kFashionMnistType},
                 {"train_subset", 2000},
                 {"max_epochs", 2},
                 {"metric", "val_accuracy"}};
  ObjectiveContext context;
  context.direction = StudyDirection::kMaximize;
  Objective objective = make_fashion_mnist_objective(config, space, context);
  const Params params = {{"lr", 1e-3}, {"batch_size", 64}, {"hidden", 128}};

  RecordingBackend backend;
  Trial trial = make_trial(backend, params);
  double value = objective(trial);
  ASSERT_EQ(backend.reports.size(), 2u);
  EXPECT_EQ(backend.reports[1].first, 2);
  // Ten classes: chance is 0.1. Two epochs on 2,000 images reach ~0.7.
  EXPECT_GT(value, 0.5);
  EXPECT_LE(value, 1.0);
  EXPECT_EQ(backend.attrs["n_train"], 2000);
  EXPECT_GT(backend.attrs["val_loss"].get<double>(), 0.0);
  EXPECT_LT(backend.attrs["val_loss"].get<double>(), std::log(10.0));  // better than uniform

  // The same params give the same result (seeded per trial).
  RecordingBackend again;
  Trial trial2 = make_trial(again, params);
  EXPECT_EQ(objective(trial2), value);
  EXPECT_EQ(again.reports, backend.reports);
}

TEST(TorchObjective, PruneAnswerStopsTrainingAtThatEpoch) {
  REQUIRE_DATA();
  HookGuard guard;
  std::int64_t last_epoch_trained = 0;
  torch_testing::set_batch_hook(
      [&](std::int64_t epoch, std::int64_t) { last_epoch_trained = epoch; });
  SearchSpace space;
  Json config = {{"type", kFashionMnistType}, {"train_subset", 500}, {"max_epochs", 6}};
  Objective objective = make_fashion_mnist_objective(config, space, {});
  RecordingBackend backend;
  backend.prune_at = 2;
  Trial trial = make_trial(backend);
  EXPECT_THROW(objective(trial), TrialPruned);
  EXPECT_EQ(last_epoch_trained, 2);
  ASSERT_EQ(backend.reports.size(), 2u);
  EXPECT_EQ(backend.reports.back().first, 2);
  EXPECT_EQ(backend.attrs["epochs_run"], 2);
  EXPECT_TRUE(backend.attrs.contains("best_epoch"));
}

TEST(TorchObjective, OutOfMemoryFailsTheTrialWithReasonOomAndTheNextTrialRuns) {
  REQUIRE_DATA();
  HookGuard guard;
  // Four points: a FAIL point is not suggested again (search/sampler.h), so
  // each of the four trials needs a point of its own.
  SearchSpace space =
      SearchSpace::from_json({{"batch_size", {{"type", "ordinal"}, {"values", {16, 24, 32, 64}}}}});
  Json config = {{"type", kFashionMnistType}, {"train_subset", 300}, {"max_epochs", 1}};
  Objective objective = make_fashion_mnist_objective(config, space, {});

  // In the third batch: a host allocation failure (std::bad_alloc), then
  // LibTorch's out-of-memory errors as CUDA and as the CPU allocator raise
  // them; the fourth trial runs normally in the same process.
  int mode = 0;
  torch_testing::set_batch_hook([&](std::int64_t, std::int64_t batch) {
    if (batch != 2) return;
    if (mode == 0) throw std::bad_alloc();
    if (mode == 1)
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB");
    if (mode == 2)
      TORCH_CHECK(
          false,
          "DefaultCPUAllocator: can't allocate memory: you tried to allocate 17592186044416 bytes");
  });
  StudyOptions so;
  so.space = space;
  Study study = Study::create(open_storage("memory"), "oom", StudyDirection::kMinimize, so);
  OptimizeOptions opt;
  opt.n_trials = 1;
  opt.catch_exceptions = true;
  for (mode = 0; mode < 4; ++mode) study.optimize(objective, opt);

  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 4u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(trials[i]->state, TrialState::kFail) << "trial " << i;
    EXPECT_EQ(trials[i]->fail_reason, "oom") << "trial " << i;
  }
  EXPECT_EQ(trials[3]->state, TrialState::kComplete);
  EXPECT_TRUE(std::isfinite(*trials[3]->value));
}

// ------------------------------------------------------------------ end to end

// `hpsearch run space.json --workers 2`: a coordinator and two worker
// processes run six trials on a subset, then the best trial is scored on
// the test set.
TEST(TorchObjective, EndToEndThroughTheCoordinatorSixTrialsTwoWorkersOnSubsetData) {
  REQUIRE_DATA();
  testsupport::TempDir dir("torch_e2e");
  const Json document = {
      {"study", {{"name", "fmnist-e2e"}, {"direction", "maximize"}, {"storage", "e2e.db"}}},
      {"sampler", {{"type", "random"}, {"seed", 3}}},
      {"pruner", {{"type", "none"}}},
      {"budget", {{"n_trials", 6}}},
      {"objective",
       {{"type", kFashionMnistType},
        {"model", "mlp"},
        {"train_subset", 1000},
        {"val_fraction", 0.05},
        {"max_epochs", 3},
        {"early_stopping", {{"patience", 1}, {"min_delta", 0.0}}},
        {"metric", "val_accuracy"}}},
      {"space",
       {{"lr",
         {{"type", "float"},
          {"low", 1e-3},
          {"high", 3e-3},
          {"log", true},
          {"scale_with", {{"param", "batch_size"}, {"reference", 64}, {"rule", "sqrt"}}}}},
        {"batch_size", {{"type", "ordinal"}, {"values", {32, 128}}}},
        {"optimizer", {{"type", "categorical"}, {"choices", {"adam", "sgd"}}}},
        {"momentum",
         {{"type", "float"}, {"low", 0.8}, {"high", 0.95}, {"when", {{"optimizer", "sgd"}}}}},
        {"hidden", {{"type", "int"}, {"low", 32}, {"high", 128}, {"log", true}}},
        {"dropout", {{"type", "float"}, {"low", 0.0}, {"high", 0.3}}}}}};
  const std::string space_file = dir.write("space.json", document.dump(2));
  testsupport::ProcessResult r = testsupport::run_process(
      {HPSEARCH_CLI_PATH, "run", space_file, "--workers", "2"}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  StudyConfig config = StudyConfig::from_json(document);
  Study study = Study::load(open_storage(dir.file("e2e.db")), config.name);
  auto trials = study.trials();
  ASSERT_EQ(trials.size(), 6u);
  for (const auto& t : trials) {
    ASSERT_EQ(t->state, TrialState::kComplete) << t->fail_reason;
    const Json& a = t->user_attrs;
    // The value is the best validation accuracy reached, stored with its epoch.
    EXPECT_DOUBLE_EQ(*t->value, a.at("val_accuracy").get<double>());
    EXPECT_DOUBLE_EQ(*t->value, t->intermediate_values.at(a.at("best_epoch").get<std::int64_t>()));
    for (const auto& [step, v] : t->intermediate_values) EXPECT_LE(v, *t->value);
    EXPECT_GE(a.at("epochs_run").get<std::int64_t>(), 2);  // patience 1: at least 2 epochs
    EXPECT_EQ(a.at("n_train"), 1000);
    // lr_effective = lr * sqrt(batch_size / 64).
    const double lr = t->params.at("lr").get<double>();
    const double batch = t->params.at("batch_size").get<double>();
    EXPECT_NEAR(a.at("lr_effective").get<double>(), lr * std::sqrt(batch / 64.0), 1e-15);
  }
  auto best = study.best_trial();
  EXPECT_GT(*best->value, 0.5);  // ten classes: chance is 0.1

  // The test set was scored once, for the best trial only.
  for (const auto& t : trials)
    EXPECT_EQ(t->user_attrs.contains("test_accuracy"), t->number == best->number) << t->number;
  const double test_accuracy = best->user_attrs.at("test_accuracy").get<double>();
  EXPECT_GT(test_accuracy, 0.5);
  EXPECT_LE(test_accuracy, 1.0);
  EXPECT_NE(r.out.find("test_accuracy"), std::string::npos) << r.out;

  // Scoring in this process reproduces the trial trained in a worker.
  ObjectiveContext context;
  context.direction = config.direction;
  context.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  TestEvaluation test = evaluate_on_test_set(config.objective, config.space, best->params, context);
  EXPECT_NEAR(test.val_accuracy, *best->value, 0.02);
  EXPECT_NEAR(test.test_accuracy, test_accuracy, 0.02);
}

}  // namespace
}  // namespace hps
