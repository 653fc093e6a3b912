// Tests of the LibTorch Fashion-MNIST objective (objectives/torch_objectives.h).
// Tests that train read the real data set from /usr/share/datasets/fashion-mnist
// (Debian's dataset-fashion-mnist) and are skipped when it is absent.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <new>
#include <optional>
#include <sstream>
#include <thread>

#include "objectives/objective.h"
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

// ------------------------------------------------------------------ checkpoints

namespace fs = std::filesystem;

// A one-trial study of a small MLP whose objective keeps its checkpoints
// under `log_dir`/checkpoints.
struct CheckpointStudy {
  SearchSpace space = SearchSpace::from_json({{"hidden", {{"type", "ordinal"}, {"values", {64}}}}});
  Json config = {{"type", kFashionMnistType},
                 {"train_subset", 600},
                 {"max_epochs", 3},
                 {"metric", "val_accuracy"}};
  ObjectiveContext context;
  std::optional<Study> study;

  explicit CheckpointStudy(const std::string& log_dir) {
    context.direction = StudyDirection::kMaximize;
    context.log_dir = log_dir;
  }
  // Runs one trial; returns it.
  FrozenTrial run() {
    StudyOptions so;
    so.space = space;
    study.emplace(Study::create(open_storage("memory"), "ckpt", StudyDirection::kMaximize, so));
    OptimizeOptions opt;
    opt.n_trials = 1;
    study->optimize(make_fashion_mnist_objective(config, space, context), opt);
    return *study->best_trial();
  }
  // The post-study hook's output and the best trial's attrs afterwards;
  // *batches counts the training batches the hook ran.
  std::pair<std::string, Json> score(std::int64_t* batches) {
    HookGuard guard;
    *batches = 0;
    torch_testing::set_batch_hook([batches](std::int64_t, std::int64_t) { ++*batches; });
    std::ostringstream out;
    AfterStudyOutcome o = run_after_study(config, space, *study, context, out);
    EXPECT_TRUE(o.ran);
    EXPECT_EQ(o.error, "");
    return {out.str(), study->best_trial()->user_attrs};
  }
};

TEST(TorchCheckpoint, BestEpochIsSavedOwnerOnlyAndTheTestScoringLoadsItWithoutRetraining) {
  REQUIRE_DATA();
  register_torch_objectives();
  testsupport::TempDir dir("torch_ckpt");
  CheckpointStudy s(dir.file("study.logs"));
  const FrozenTrial t = s.run();
  ASSERT_EQ(t.state, TrialState::kComplete);
  const std::string path = t.user_attrs.at("checkpoint").get<std::string>();
  EXPECT_EQ(
      path,
      fs::absolute(dir.file("study.logs/checkpoints/trial-0.pt")).lexically_normal().string());
  ASSERT_TRUE(fs::is_regular_file(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(fs::path(path).parent_path()).permissions() & fs::perms::all,
            fs::perms::owner_all);

  // The file holds the best epoch's weights: scored again they give the
  // trial's value (its best validation accuracy), not the last epoch's.
  TestEvaluation e = evaluate_checkpoint_on_test_set(s.config, s.space, t.params, path, s.context);
  EXPECT_EQ(e.scored_from, "checkpoint");
  EXPECT_EQ(e.best_epoch, t.user_attrs.at("best_epoch").get<std::int64_t>());
  EXPECT_DOUBLE_EQ(e.val_accuracy, *t.value);
  EXPECT_DOUBLE_EQ(e.val_accuracy, t.intermediate_values.at(e.best_epoch));
  EXPECT_GT(e.test_accuracy, 0.5);

  // The post-study scoring uses it: no training batch, the same figures.
  std::int64_t batches = -1;
  auto [out, attrs] = s.score(&batches);
  EXPECT_EQ(batches, 0);
  EXPECT_NE(out.find("from its checkpoint " + path), std::string::npos) << out;
  EXPECT_EQ(out.find("retrain"), std::string::npos) << out;
  EXPECT_EQ(attrs.at("test_scored_from"), "checkpoint");
  EXPECT_DOUBLE_EQ(attrs.at("test_accuracy").get<double>(), e.test_accuracy);
  EXPECT_DOUBLE_EQ(attrs.at("test_loss").get<double>(), e.test_loss);
}

TEST(TorchCheckpoint, MissingOrCorruptCheckpointFallsBackToRetrainingWithAWarning) {
  REQUIRE_DATA();
  register_torch_objectives();
  testsupport::TempDir dir("torch_ckpt_fallback");
  for (const std::string damage : {"missing", "corrupt", "truncated"}) {
    SCOPED_TRACE(damage);
    CheckpointStudy s(dir.file(damage + ".logs"));
    const FrozenTrial t = s.run();
    const std::string path = t.user_attrs.at("checkpoint").get<std::string>();
    const TestEvaluation from_file =
        evaluate_checkpoint_on_test_set(s.config, s.space, t.params, path, s.context);
    if (damage == "missing") {
      fs::remove(path);  // as a file on another worker's machine
    } else if (damage == "corrupt") {
      (void)dir.write(damage + ".logs/checkpoints/trial-0.pt", "not a LibTorch archive");
    } else {
      fs::resize_file(path, fs::file_size(path) / 2);
    }
    EXPECT_THROW(evaluate_checkpoint_on_test_set(s.config, s.space, t.params, path, s.context),
                 Error);
    std::int64_t batches = 0;
    auto [out, attrs] = s.score(&batches);
    EXPECT_GT(batches, 0);  // retrained
    EXPECT_NE(out.find("Checkpoint not usable: checkpoint " + path + ": "), std::string::npos)
        << out;
    EXPECT_NE(out.find("on the test set by retraining it"), std::string::npos) << out;
    EXPECT_EQ(attrs.at("test_scored_from"), "retrain");
    // The retrained model is the trial's own (same seed, threads, device).
    EXPECT_DOUBLE_EQ(attrs.at("test_accuracy").get<double>(), from_file.test_accuracy);
  }
}

TEST(TorchCheckpoint, CheckpointOfAnotherModelIsRefused) {
  REQUIRE_DATA();
  testsupport::TempDir dir("torch_ckpt_other");
  CheckpointStudy s(dir.file("logs"));
  const FrozenTrial t = s.run();
  const std::string path = t.user_attrs.at("checkpoint").get<std::string>();
  const Params other = {{"hidden", 32}};
  const SearchSpace space =
      SearchSpace::from_json({{"hidden", {{"type", "ordinal"}, {"values", {32}}}}});
  try {
    (void)evaluate_checkpoint_on_test_set(s.config, space, other, path, s.context);
    FAIL() << "loaded the weights of another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint " + path + ": "), std::string::npos)
        << e.what();
  }
}

TEST(TorchCheckpoint, PrunedAndFailedTrialsLeaveNoFile) {
  REQUIRE_DATA();
  HookGuard guard;
  testsupport::TempDir dir("torch_ckpt_pruned");
  SearchSpace space;
  Json config = {{"type", kFashionMnistType}, {"train_subset", 500}, {"max_epochs", 4}};
  ObjectiveContext context;
  context.log_dir = dir.file("logs");
  Objective objective = make_fashion_mnist_objective(config, space, context);
  const fs::path folder = dir.file("logs/checkpoints");
  ASSERT_TRUE(fs::is_directory(folder));

  // Pruned at epoch 2: epoch 1 wrote the file (seen during epoch 2); it is gone.
  const fs::path file = folder / "trial-0.pt";
  std::int64_t epochs = 0;
  bool written = false;
  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t) {
    epochs = epoch;
    if (epoch == 2) written = fs::is_regular_file(file);
  });
  RecordingBackend pruned;
  pruned.prune_at = 2;
  Trial trial = make_trial(pruned);  // trial number 0
  EXPECT_THROW(objective(trial), TrialPruned);
  EXPECT_EQ(epochs, 2);
  EXPECT_TRUE(written);
  EXPECT_FALSE(pruned.attrs.contains("checkpoint"));
  EXPECT_TRUE(fs::is_empty(folder));

  // Failed in epoch 3, after epochs 1-2 wrote the file.
  written = false;
  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t) {
    if (epoch == 3) {
      written = fs::is_regular_file(file);
      throw std::runtime_error("data loader crashed");
    }
  });
  RecordingBackend failed;
  Trial trial2 = make_trial(failed);
  EXPECT_THROW(objective(trial2), std::runtime_error);
  EXPECT_TRUE(written);
  EXPECT_TRUE(fs::is_empty(folder));

  // A finished trial keeps its file.
  torch_testing::set_batch_hook({});
  RecordingBackend complete;
  Trial trial3 = make_trial(complete);
  (void)objective(trial3);
  EXPECT_EQ(complete.attrs.at("checkpoint"), file.lexically_normal().string());
  EXPECT_TRUE(fs::is_regular_file(file));
}

TEST(TorchCheckpoint, OptionsOffAndBadValues) {
  REQUIRE_DATA();
  testsupport::TempDir dir("torch_ckpt_options");
  SearchSpace space;
  ObjectiveContext context;
  context.log_dir = dir.file("logs");
  // "checkpoints": false: no folder, no file, no attr.
  Json off = {{"type", kFashionMnistType},
              {"train_subset", 300},
              {"max_epochs", 1},
              {"checkpoints", false}};
  RecordingBackend backend;
  Trial trial = make_trial(backend);
  (void)make_fashion_mnist_objective(off, space, context)(trial);
  EXPECT_FALSE(backend.attrs.contains("checkpoint"));
  EXPECT_FALSE(fs::exists(dir.file("logs/checkpoints")));
  // A checkpoint_dir of its own (relative paths are the worker's).
  Json own = {{"type", kFashionMnistType},
              {"train_subset", 300},
              {"max_epochs", 1},
              {"checkpoint_dir", dir.file("mine")}};
  RecordingBackend b2;
  Trial trial2 = make_trial(b2);
  (void)make_fashion_mnist_objective(own, space, {})(trial2);
  EXPECT_EQ(b2.attrs.at("checkpoint"), dir.file("mine/trial-0.pt"));

  auto error_of = [&](const Json& config) {
    try {
      (void)FashionMnistConfig::from_json(config, space);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{"type", kFashionMnistType}, {"checkpoint_dir", ""}})
                .find("objective.checkpoint_dir: must not be empty"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"type", kFashionMnistType}, {"checkpoints", "yes"}}).find("objective.checkpoints"),
      std::string::npos);
  // A folder that cannot be made is an error naming the field.
  (void)dir.write("file", "x");
  Json blocked = {
      {"type", kFashionMnistType}, {"train_subset", 300}, {"checkpoint_dir", dir.file("file/sub")}};
  try {
    (void)make_fashion_mnist_objective(blocked, space, {});
    FAIL() << "no error for a checkpoint_dir under a file";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("objective.checkpoint_dir"), std::string::npos)
        << e.what();
  }
}

// An attacker's files and links in the checkpoint folder, or a folder that
// others can write: no write follows a link, a named folder others can write
// or a link is refused naming objective.checkpoint_dir, the default folder
// is a warning and no checkpoints.
TEST(TorchCheckpoint, PlantedLinksAreNotFollowedAndFoldersOthersCanWriteAreRefused) {
  REQUIRE_DATA();
  HookGuard guard;
  testsupport::TempDir dir("torch_ckpt_attack");
  SearchSpace space;
  Json config = {{"type", kFashionMnistType}, {"train_subset", 300}, {"max_epochs", 2}};
  ObjectiveContext context;
  context.log_dir = dir.file("logs");
  Objective objective = make_fashion_mnist_objective(config, space, context);
  const fs::path folder = dir.file("logs/checkpoints");
  const std::string victim = dir.write("victim", "the victim's data");

  // Links planted while the trial runs (after its start removed stale files):
  // the epoch's write replaces them, the victim's file is unchanged.
  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t batch) {
    if (batch != 0) return;
    for (const std::string name : {"trial-0.pt", "trial-0.pt.tmp"}) {
      std::error_code ec;
      fs::remove(folder / name, ec);
      fs::create_symlink(victim, folder / name);
    }
    (void)epoch;
  });
  RecordingBackend backend;
  Trial trial = make_trial(backend);
  (void)objective(trial);
  torch_testing::set_batch_hook({});
  EXPECT_EQ(testsupport::read_file(victim), "the victim's data");
  EXPECT_EQ(fs::symlink_status(victim).type(), fs::file_type::regular);
  const fs::path file = folder / "trial-0.pt";
  EXPECT_EQ(fs::symlink_status(file).type(), fs::file_type::regular);
  EXPECT_EQ(backend.attrs.at("checkpoint"), file.string());
  // The link planted at the temporary name in epoch 2's first batch is gone.
  EXPECT_FALSE(fs::exists(fs::symlink_status(folder / "trial-0.pt.tmp")));

  auto config_error = [&](const std::string& checkpoint_dir, const ObjectiveContext& ctx) {
    Json c = config;
    if (!checkpoint_dir.empty()) c["checkpoint_dir"] = checkpoint_dir;
    try {
      (void)make_fashion_mnist_objective(c, space, ctx);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A named folder others can write, and a link as the named folder.
  fs::create_directory(dir.file("shared"));
  fs::permissions(dir.file("shared"), fs::perms::all);
  std::string e = config_error(dir.file("shared"), {});
  EXPECT_NE(e.find("objective.checkpoint_dir: " + dir.file("shared") +
                   ": writable by group or others (mode 0777): refused"),
            std::string::npos)
      << e;
  fs::create_directory_symlink(folder, dir.file("link"));
  e = config_error(dir.file("link"), {});
  EXPECT_NE(e.find("objective.checkpoint_dir: " + dir.file("link") + ": is a symbolic link"),
            std::string::npos)
      << e;

  // The default folder, made by someone else with mode 0777: a warning, the
  // trial runs without a checkpoint and writes nothing there.
  ObjectiveContext shared_logs;
  shared_logs.log_dir = dir.file("shared");
  fs::create_directory(dir.file("shared/checkpoints"));
  fs::permissions(dir.file("shared/checkpoints"), fs::perms::all);
  EXPECT_EQ(config_error("", shared_logs), "no error");
  RecordingBackend b2;
  Trial trial2 = make_trial(b2);
  (void)make_fashion_mnist_objective(config, space, shared_logs)(trial2);
  EXPECT_FALSE(b2.attrs.contains("checkpoint"));
  EXPECT_TRUE(fs::is_empty(dir.file("shared/checkpoints")));

  // The log folder the default folder is made in, planted as a link or made
  // writable by others: no checkpoint folder is made through it (a warning,
  // the trial runs without a checkpoint).
  fs::create_directory(dir.file("elsewhere"));
  fs::create_directory_symlink(dir.file("elsewhere"), dir.file("planted"));
  fs::create_directory(dir.file("open"));
  fs::permissions(dir.file("open"), fs::perms::all);
  for (const char* logs : {"planted", "open"}) {
    ObjectiveContext planted;
    planted.log_dir = dir.file(logs);
    EXPECT_EQ(config_error("", planted), "no error");
    RecordingBackend b3;
    Trial trial3 = make_trial(b3);
    (void)make_fashion_mnist_objective(config, space, planted)(trial3);
    EXPECT_FALSE(b3.attrs.contains("checkpoint")) << logs;
    EXPECT_FALSE(fs::exists(dir.file(std::string(logs) + "/checkpoints"))) << logs;
  }
  EXPECT_TRUE(fs::is_empty(dir.file("elsewhere")));
}

// The file the scoring would load replaced by a link, a FIFO, a huge file, a
// file others can write (or, as root, of another uid), or a path that is not
// a checkpoint's: each is refused unread with the reason, and the post-study
// scoring retrains.
TEST(TorchCheckpoint, ScoringRefusesLinkedForeignOrHugeFilesAndRetrains) {
  REQUIRE_DATA();
  register_torch_objectives();
  testsupport::TempDir dir("torch_ckpt_score_attack");
  const std::string good = dir.file("good.pt");
  for (const std::string attack :
       {"link", "fifo", "huge", "open", "foreign", "not absolute", "device"}) {
    SCOPED_TRACE(attack);
    if (attack == "foreign" && ::geteuid() != 0) continue;  // only root can give a file away
    CheckpointStudy s(dir.file(attack + ".logs"));
    const FrozenTrial t = s.run();
    std::string path = t.user_attrs.at("checkpoint").get<std::string>();
    std::string expected;
    if (attack == "link") {
      // A link to a good checkpoint of the same model: still refused.
      fs::copy_file(path, good, fs::copy_options::overwrite_existing);
      fs::remove(path);
      fs::create_symlink(good, path);
      expected = "is a symbolic link: refused";
    } else if (attack == "fifo") {
      fs::remove(path);
      ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
      expected = "not a regular file";
    } else if (attack == "huge") {
      fs::resize_file(path, std::uintmax_t{1} << 40);  // sparse: 1 TiB, never read
      expected = "1099511627776 bytes, more than the";
    } else if (attack == "open") {
      fs::permissions(path, fs::perms::all);
      expected = "writable by group or others (mode 0777): refused";
    } else if (attack == "foreign") {
      ASSERT_EQ(::chown(path.c_str(), 4242, 4242), 0);
      expected = "owned by uid 4242, not by this user (uid 0): refused";
    } else if (attack == "not absolute") {
      path = "trial-0.pt";
      expected = "not an absolute file path";
    } else {
      path = "/dev/zero";
      expected = "not a regular file";
    }
    s.study->storage().set_trial_user_attr(t.trial_id, "checkpoint", path);
    try {
      (void)evaluate_checkpoint_on_test_set(s.config, s.space, t.params, path, s.context);
      ADD_FAILURE() << "loaded " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("checkpoint " + path + ": "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    std::int64_t batches = 0;
    auto [out, attrs] = s.score(&batches);
    EXPECT_GT(batches, 0);  // retrained
    EXPECT_NE(out.find("Checkpoint not usable: checkpoint " + path + ": "), std::string::npos)
        << out;
    EXPECT_EQ(attrs.at("test_scored_from"), "retrain");
  }
  // The link's target was never written to.
  EXPECT_TRUE(fs::is_regular_file(good));
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

  // Each trial kept its best epoch's weights beside the store; the test
  // scoring loaded the best trial's file instead of retraining it.
  const fs::path folder = dir.path() / "fmnist-e2e.logs" / "checkpoints";
  for (const auto& t : trials)
    EXPECT_EQ(
        t->user_attrs.at("checkpoint"),
        fs::absolute(folder / fmt::format("trial-{}.pt", t->number)).lexically_normal().string());
  // Beside them, the lineage folders that retention keeps (search/checkpoints.h;
  // the same root): each holds the training state of its last reported epoch.
  std::int64_t files = 0;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("trial-", 0) == 0 && entry.is_regular_file()) {
      ++files;
    } else if (name.rfind("lineage-", 0) == 0 && entry.is_directory()) {
      std::int64_t states = 0;
      for (const auto& sub : fs::directory_iterator(entry.path()))
        if (sub.path().filename().string().rfind("snapshot-", 0) == 0 && sub.is_directory())
          states += fs::is_regular_file(sub.path() / "training_state.pt") ? 1 : 0;
      EXPECT_EQ(states, 1) << name;
    } else if (name != ".store-id") {  // the coordinator's token (shared-folder detection)
      ADD_FAILURE() << "unexpected " << entry.path();
    }
  }
  EXPECT_EQ(files, 6);
  EXPECT_EQ(best->user_attrs.at("test_scored_from"), "checkpoint");
  EXPECT_NE(r.out.find("from its checkpoint"), std::string::npos) << r.out;

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
