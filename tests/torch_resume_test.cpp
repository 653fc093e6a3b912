// Tests of the LibTorch objective's training state and resume (issue #43;
// "Resume" in objectives/torch_objectives.h): a trial interrupted at epoch
// k and continued from its lineage folder ends as one never interrupted,
// and a state that cannot be used is a warning and a run from scratch.
// They train a small MLP on a subset of Fashion-MNIST
// (/usr/share/datasets/fashion-mnist) with one thread on the CPU and are
// skipped when the data set is absent.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "objectives/objective.h"
#include "objectives/torch_objectives.h"
#include "search/checkpoints.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace hps {
namespace {

namespace fs = std::filesystem;

bool have_data() {
  return fs::exists(std::string(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte.gz") ||
         fs::exists(std::string(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte");
}

#define REQUIRE_DATA() \
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed in " << kFashionMnistDefaultDir

// A trial backend standing for the store: keeps the first value of each
// step (a second report of a step is refused, as Storage does), records
// every report asked for and the user attrs, and sets the run's interrupt
// flag once step `interrupt_at` is stored (so the objective's next
// should_prune() throws Interrupted, as on Ctrl-C or a lost lease).
class StoreBackend : public TrialBackend {
 public:
  std::map<std::int64_t, double> values;  // step -> the first value reported
  std::vector<std::int64_t> asked;        // every step reported, refused ones too
  Json attrs = Json::object();
  std::optional<std::int64_t> interrupt_at;
  std::atomic<bool> interrupt{false};

  Json suggest(Trial&, const std::string& name, const Distribution&) override {
    throw Error("unexpected suggest of " + name);
  }
  bool report(Trial&, std::int64_t step, double value) override {
    asked.push_back(step);
    const bool stored = values.emplace(step, value).second;
    if (interrupt_at && step == *interrupt_at) interrupt = true;
    return stored;
  }
  bool should_prune(Trial&) override { return false; }
  void set_user_attr(Trial&, const std::string& key, const Json& value) override {
    attrs[key] = value;
  }
};

// Every tensor of a LibTorch archive file by its path of keys
// ("model/layers/1/weight"), and its other values as text.
struct ArchiveContents {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> values;
};

void flatten(torch::serialize::InputArchive& archive, const std::string& prefix,
             ArchiveContents& out) {
  for (const std::string& key : archive.keys()) {
    torch::Tensor t;
    torch::serialize::InputArchive sub;
    c10::IValue v;
    if (archive.try_read(key, t)) {
      out.tensors[prefix + key] = t;
    } else if (archive.try_read(key, sub)) {
      flatten(sub, prefix + key + "/", out);
    } else if (archive.try_read(key, v)) {
      std::ostringstream text;
      text << v;
      out.values[prefix + key] = text.str();
    }
  }
}

// LibTorch's optimizer archives name each parameter's state by the
// address of the parameter's TensorImpl ("optimizer/state/0x55.../exp_avg"),
// listed in order under "optimizer/param_groups/.../params/<i>": the
// addresses are replaced by "param<i>" so that two runs compare.
ArchiveContents normalize_optimizer_keys(const ArchiveContents& in) {
  const std::string list = "optimizer/param_groups/param_groups/0/params/";
  std::map<std::string, std::string> names;  // address -> param<i>
  for (const auto& [key, value] : in.values) {
    if (key.rfind(list, 0) != 0 || key == list + "size") continue;
    std::string address = value;
    if (address.size() >= 2 && address.front() == '"')
      address = address.substr(1, address.size() - 2);
    names[address] = "param" + key.substr(list.size());
  }
  auto rename = [&](std::string text) {
    for (const auto& [address, name] : names)
      for (auto at = text.find(address); at != std::string::npos; at = text.find(address))
        text.replace(at, address.size(), name);
    return text;
  };
  ArchiveContents out;
  for (const auto& [key, t] : in.tensors) out.tensors[rename(key)] = t;
  for (const auto& [key, v] : in.values) out.values[rename(key)] = rename(v);
  return out;
}

ArchiveContents read_archive(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  ArchiveContents out;
  flatten(archive, "", out);
  return normalize_optimizer_keys(out);
}

// Expects the two archives to hold the same keys and bit-identical tensors
// (same shapes, types and values) and values.
void expect_identical(const std::string& a_path, const std::string& b_path) {
  const ArchiveContents a = read_archive(a_path), b = read_archive(b_path);
  ASSERT_FALSE(a.tensors.empty()) << a_path;
  std::vector<std::string> a_keys, b_keys;
  for (const auto& [k, _] : a.tensors) a_keys.push_back(k);
  for (const auto& [k, _] : b.tensors) b_keys.push_back(k);
  ASSERT_EQ(a_keys, b_keys);
  for (const auto& [key, t] : a.tensors) {
    const torch::Tensor& u = b.tensors.at(key);
    EXPECT_EQ(t.scalar_type(), u.scalar_type()) << key;
    EXPECT_EQ(t.sizes(), u.sizes()) << key;
    // torch::equal compares values; the bytes too, so that -0.0 and 0.0 (or
    // two NaN payloads) would differ.
    EXPECT_TRUE(torch::equal(t, u)) << key;
    const torch::Tensor tc = t.contiguous(), uc = u.contiguous();
    EXPECT_EQ(0, std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes())) << key;
  }
  EXPECT_EQ(a.values, b.values);
}

// The objective, params and folders of the tests: a 1-hidden-layer MLP
// with dropout (so that the dropout generator matters), patience 2 (so
// that early stopping ends it before max_epochs), on 600 images, one CPU
// thread.
struct ResumeSetup {
  testsupport::TempDir dir{"torch_resume"};
  SearchSpace space;
  Json config = {{"type", kFashionMnistType},
                 {"train_subset", 600},
                 {"max_epochs", 12},
                 {"early_stopping", {{"patience", 2}, {"min_delta", 0.0}}},
                 {"metric", "val_loss"}};
  ObjectiveContext context;

  ResumeSetup() {
    context.threads = 1;
    context.direction = StudyDirection::kMinimize;
    context.log_dir = dir.file("logs");  // best-epoch checkpoints in logs/checkpoints
  }
  Objective objective() const { return make_fashion_mnist_objective(config, space, context); }
  // The lineage folder `name` under the test's checkpoint root.
  std::shared_ptr<checkpoints::LineageFolder> lineage(std::int64_t lineage) const {
    return std::make_shared<checkpoints::LineageFolder>(dir.file("ckpt"), lineage);
  }
};

Params mlp_params(const std::string& optimizer, std::int64_t hidden = 32) {
  Params p = {{"optimizer", optimizer}, {"hidden", hidden}, {"dropout", 0.25},
              {"batch_size", 50},       {"lr", 1e-2},       {"weight_decay", 1e-4}};
  if (optimizer == "rmsprop") p["momentum"] = 0.5;
  return p;
}

// A trial of number `number` on `backend` with `params`, given `folder`
// restored to `resume_step`.
Trial make_trial(StoreBackend& backend, std::int64_t number, const Params& params,
                 const std::shared_ptr<checkpoints::LineageFolder>& folder,
                 std::optional<std::int64_t> resume_step) {
  Trial trial(&backend, number + 1, number, params, {}, {}, nullptr, &backend.interrupt);
  trial.set_checkpoint(folder, resume_step);
  return trial;
}

// One uninterrupted trial in lineage `lineage`: its value, backend and the
// path of its final training state.
struct Reference {
  double value = 0.0;
  StoreBackend backend;
  std::string state;
};

void run_reference(const ResumeSetup& s, const Params& params, std::int64_t lineage,
                   Reference& ref) {
  auto folder = s.lineage(lineage);
  (void)folder->prepare(std::nullopt);
  Trial trial = make_trial(ref.backend, 100 + lineage, params, folder, std::nullopt);
  ref.value = s.objective()(trial);
  ref.state = folder->work_dir() + "/training_state.pt";
}

// Removes the batch hook when a test ends, whatever happens.
struct HookGuard {
  ~HookGuard() { torch_testing::set_batch_hook({}); }
};

// Interrupts a trial right after epoch `k` was stored, then continues it in
// a new trial (another number, as a retry has) from the lineage folder
// restored to the snapshot of step k, and expects the outcome of `ref`
// bit for bit: value, intermediate values, user attrs, the final training
// state (weights, optimizer, generators, best weights, counters) and the
// best-epoch checkpoint file.
void interrupt_and_resume(const ResumeSetup& s, const Params& params, std::int64_t lineage,
                          std::int64_t k, const Reference& ref) {
  SCOPED_TRACE(fmt::format("optimizer {}, interrupted after epoch {}", params.at("optimizer"), k));
  HookGuard guard;
  std::vector<std::int64_t> epochs_trained;
  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t batch) {
    if (batch == 0) epochs_trained.push_back(epoch);
  });
  StoreBackend store;  // the study's store of this lineage's intermediate values
  store.interrupt_at = k;
  auto folder = s.lineage(lineage);
  (void)folder->prepare(std::nullopt);
  {
    Trial first = make_trial(store, 2 * lineage, params, folder, std::nullopt);
    EXPECT_THROW((void)s.objective()(first), Interrupted);
  }
  ASSERT_EQ(store.values.size(), static_cast<std::size_t>(k));

  // The retry: the folder restored to step k (the runner's part), the
  // earlier values already the trial's.
  store.interrupt_at.reset();
  store.interrupt = false;
  store.asked.clear();
  store.attrs = Json::object();
  epochs_trained.clear();
  auto retry_folder = s.lineage(lineage);
  const checkpoints::Prepared prepared = retry_folder->prepare(k);
  ASSERT_EQ(prepared.resume_step, k) << prepared.warning;
  Trial retry = make_trial(store, 2 * lineage + 1, params, retry_folder, prepared.resume_step);
  const double value = s.objective()(retry);

  // Only the epochs after k were trained and reported.
  std::vector<std::int64_t> expected_epochs;
  for (const auto& [step, _] : ref.backend.values)
    if (step > k) expected_epochs.push_back(step);
  EXPECT_EQ(epochs_trained, expected_epochs);
  EXPECT_EQ(store.asked, expected_epochs);
  // The same outcome, bit for bit.
  EXPECT_EQ(std::memcmp(&value, &ref.value, sizeof value), 0) << value << " vs " << ref.value;
  EXPECT_EQ(store.values, ref.backend.values);
  Json attrs = store.attrs, ref_attrs = ref.backend.attrs;
  ASSERT_TRUE(attrs.contains("checkpoint"));
  ASSERT_TRUE(ref_attrs.contains("checkpoint"));
  const std::string best_file = attrs["checkpoint"].get<std::string>();
  const std::string ref_best_file = ref_attrs["checkpoint"].get<std::string>();
  EXPECT_NE(best_file, ref_best_file);  // trial-<number>.pt of each trial
  attrs.erase("checkpoint");
  ref_attrs.erase("checkpoint");
  EXPECT_EQ(attrs, ref_attrs);
  expect_identical(ref.state, retry_folder->work_dir() + "/training_state.pt");
  // The best-epoch checkpoint (used to score the test set) holds the same
  // weights and epoch, even when the best epoch was before the interruption.
  expect_identical(ref_best_file, best_file);
}

// run_epochs alone: for every epoch k, a loop stopped after k (its saved
// state taken) and resumed from that state reports, calls on_best and ends
// as the uninterrupted loop: same outcome, attrs, reports after k, and
// early stopping at the same epoch (the counters come from the state).
TEST(TorchResume, EpochLoopResumedFromEachEpochEndsAsTheUninterruptedOne) {
  // Best 0.5 at epoch 3; 0.495 at epoch 5 is the best value but not an
  // improvement by more than min_delta; patience 3 stops after epoch 6.
  const std::vector<double> losses = {0.9, 0.7, 0.5, 0.6, 0.495, 0.55, 0.3, 0.2};
  const EarlyStoppingOptions early{.patience = 3, .min_delta = 0.01};
  auto epoch_metrics = [&](std::int64_t epoch) {
    EpochMetrics m;
    m.train_loss = 1.0 + static_cast<double>(epoch);
    m.val_loss = losses.at(static_cast<std::size_t>(epoch - 1));
    m.val_accuracy = 1.0 - m.val_loss;
    return m;
  };
  struct Run {
    StoreBackend backend;
    std::vector<std::int64_t> trained, bests;
    std::vector<EpochLoopState> saved;
    TrainingOutcome out;
  };
  auto run = [&](Run& r, std::optional<EpochLoopState> from) {
    Trial trial(&r.backend, 1, 0, {}, {}, {}, nullptr, &r.backend.interrupt);
    EpochLoopResume resume;
    resume.from = from;
    resume.save_state = [&](const EpochLoopState& st) {
      // Saved before the report of its epoch.
      EXPECT_EQ(r.backend.values.count(st.epoch), 0u);
      r.saved.push_back(st);
    };
    auto train = [&](std::int64_t epoch) {
      r.trained.push_back(epoch);
      return epoch_metrics(epoch);
    };
    auto on_best = [&](std::int64_t epoch) { r.bests.push_back(epoch); };
    try {
      r.out = run_epochs(&trial, 8, TrainMetric::kValLoss, early, train, on_best, resume);
    } catch (const Interrupted&) {
    }
  };
  Run ref;
  run(ref, std::nullopt);
  ASSERT_TRUE(ref.out.stopped_early);
  ASSERT_EQ(ref.out.epochs_run, 6);
  ASSERT_EQ(ref.saved.size(), 6u);
  EXPECT_EQ(ref.out.best_epoch, 5);
  for (std::int64_t k = 1; k <= 6; ++k) {
    SCOPED_TRACE("stopped after epoch " + std::to_string(k));
    Run first;
    first.backend.interrupt_at = k;
    run(first, std::nullopt);
    ASSERT_EQ(first.saved.size(), static_cast<std::size_t>(k));
    Run retry;
    retry.backend.values = first.backend.values;
    run(retry, first.saved.back());
    std::vector<std::int64_t> after;
    for (std::int64_t e = k + 1; e <= 6; ++e) after.push_back(e);
    EXPECT_EQ(retry.trained, after);
    EXPECT_EQ(retry.backend.asked, after);
    EXPECT_EQ(retry.backend.values, ref.backend.values);
    EXPECT_EQ(retry.out.best_value, ref.out.best_value);
    EXPECT_EQ(retry.out.best_epoch, ref.out.best_epoch);
    EXPECT_EQ(retry.out.best.train_loss, ref.out.best.train_loss);
    EXPECT_EQ(retry.out.epochs_run, ref.out.epochs_run);
    EXPECT_EQ(retry.out.stopped_early, ref.out.stopped_early);
    EXPECT_EQ(retry.backend.attrs, ref.backend.attrs);
    // on_best only for the epochs after k.
    std::vector<std::int64_t> bests;
    for (std::int64_t e : ref.bests)
      if (e > k) bests.push_back(e);
    EXPECT_EQ(retry.bests, bests);
  }
  // A state without a best epoch is refused.
  StoreBackend backend;
  Trial trial(&backend, 1, 0, {}, {}, {}, nullptr);
  EpochLoopResume bad;
  bad.from = EpochLoopState{};
  EXPECT_THROW(run_epochs(&trial, 8, TrainMetric::kValLoss, early, epoch_metrics, {}, bad), Error);
}

TEST(TorchResume, InterruptedAndResumedEndsBitIdentical) {
  REQUIRE_DATA();
  ResumeSetup s;
  std::int64_t lineage = 0;
  for (const std::string optimizer : {"adam", "rmsprop"}) {
    const Params params = mlp_params(optimizer);
    Reference ref;
    run_reference(s, params, lineage++, ref);
    const auto last = static_cast<std::int64_t>(ref.backend.values.size());

    ASSERT_GE(last, 3) << "too few epochs to interrupt in the middle";
    EXPECT_EQ(ref.backend.attrs.at("epochs_run"), last);
    // After the first epoch, at the best epoch, after it (the best weights
    // and early stopping's counters come from the state), and after the
    // last epoch (the retry trains nothing: the trial had ended, by
    // patience or max_epochs, when it was interrupted). With these params
    // (LibTorch 1.13, x86-64) both curves stop early after epoch 9, the
    // best being epoch 7.
    const std::int64_t best = ref.backend.attrs.at("best_epoch").get<std::int64_t>();
    std::set<std::int64_t> ks = {1, best, last - 1, last};
    for (std::int64_t k : ks) interrupt_and_resume(s, params, lineage++, k, ref);
  }
}

// The state the retry finds is unusable: the warning names the file and
// the reason, the trial trains from epoch 1 and completes, the store keeps
// the values it had (epochs 1..k are refused as duplicates), and, the
// training being deterministic, the value is the uninterrupted one.
TEST(TorchResume, UnusableStateTrainsFromScratchWithAWarning) {
  REQUIRE_DATA();
  ResumeSetup s;
  const Params params = mlp_params("adam");
  Reference ref;
  run_reference(s, params, 0, ref);
  // A training state of another model: the same params but hidden 16.
  Reference other;
  run_reference(s, mlp_params("adam", 16), 1, other);
  const std::string good = testsupport::read_file(ref.state);
  ASSERT_FALSE(good.empty());

  struct Damage {
    std::string name;
    std::string bytes;   // what training_state.pt holds when the retry starts
    std::string reason;  // a part of the warning's reason
  };
  const std::vector<Damage> damages = {
      {"truncated", good.substr(0, good.size() / 2), ""},
      {"corrupted", std::string(good.size(), 'x'), ""},
      {"another model", testsupport::read_file(other.state), "another model"},
  };
  const std::int64_t k = 2;
  std::int64_t lineage = 10;
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.name);
    StoreBackend store;
    store.interrupt_at = k;
    auto folder = s.lineage(lineage);
    (void)folder->prepare(std::nullopt);
    {
      Trial first = make_trial(store, 2 * lineage, params, folder, std::nullopt);
      EXPECT_THROW((void)s.objective()(first), Interrupted);
    }
    const std::map<std::int64_t, double> stored = store.values;
    ASSERT_EQ(stored.size(), static_cast<std::size_t>(k));
    store.interrupt_at.reset();
    store.interrupt = false;
    store.asked.clear();

    auto retry_folder = s.lineage(lineage);
    const checkpoints::Prepared prepared = retry_folder->prepare(k);
    ASSERT_EQ(prepared.resume_step, k) << prepared.warning;
    const std::string path = retry_folder->work_dir() + "/training_state.pt";
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << damage.bytes;
    }
    Trial retry = make_trial(store, 2 * lineage + 1, params, retry_folder, prepared.resume_step);
    testsupport::CapturedLog log(spdlog::level::warn);
    const double value = s.objective()(retry);
    const std::string text = log.text();

    const std::string warning = "warning: trial " + std::to_string(2 * lineage + 1) +
                                ": training state " + path + " not usable: ";
    const auto at = text.find(warning);
    ASSERT_NE(at, std::string::npos) << text;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    EXPECT_NE(line.find("training from scratch"), std::string::npos) << line;
    EXPECT_NE(line.find(damage.reason), std::string::npos) << line;
    // From epoch 1: the first k reports refused (the first values stay),
    // the trial completes with the uninterrupted run's outcome.
    ASSERT_GE(store.asked.size(), static_cast<std::size_t>(k));
    EXPECT_EQ(store.asked.front(), 1);
    for (const auto& [step, v] : stored) EXPECT_EQ(store.values.at(step), v) << step;
    EXPECT_EQ(store.values, ref.backend.values);
    EXPECT_EQ(value, ref.value);
    EXPECT_EQ(store.attrs.at("epochs_run"), ref.backend.attrs.at("epochs_run"));
    // The folder holds a good state again (of the new run's last epoch).
    expect_identical(ref.state, path);
    ++lineage;
  }
}

// Through a Study with a checkpoint root (the runner's side, search/study.h
// and search/checkpoints.h): a trial stopped while it trains epoch k + 1
// ends FAIL and is queued again; its retry continues from the snapshot of
// epoch k, trains only the epochs after k, and completes with the value,
// the whole learning curve and the user attrs of a study never stopped.
TEST(TorchResume, StudyRetryOfAStoppedTrialContinuesFromItsCheckpoint) {
  REQUIRE_DATA();
  ResumeSetup s;
  s.context.log_dir.clear();  // no best-epoch files: the Study's folders only
  Json space_json = Json::object();
  for (const auto& [name, value] : mlp_params("adam"))
    space_json[name] = {{"type", "categorical"}, {"choices", {value}}};
  s.space = SearchSpace::from_json(space_json);
  auto run_study = [&](const std::string& root, std::atomic<bool>* stop) {
    StudyOptions so;
    so.space = s.space;
    so.checkpoint_root = root;
    Study study = Study::create(open_storage("memory"), "resume", StudyDirection::kMinimize, so);
    OptimizeOptions opt;
    opt.n_trials = 1;
    opt.stop = stop;
    study.optimize(s.objective(), opt);
    return study;
  };
  Study reference = run_study(s.dir.file("ref"), nullptr);
  const TrialPtr ref = reference.trials().at(0);
  ASSERT_EQ(ref->state, TrialState::kComplete);
  const auto last = static_cast<std::int64_t>(ref->intermediate_values.size());
  ASSERT_GE(last, 3);
  const std::int64_t k = last - 2;

  HookGuard guard;
  std::atomic<bool> stop{false};
  std::vector<std::int64_t> epochs_trained;
  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t batch) {
    if (batch == 0) epochs_trained.push_back(epoch);
    if (epoch == k + 1) stop = true;  // Ctrl-C while epoch k + 1 trains
  });
  Study study = run_study(s.dir.file("stopped"), &stop);
  ASSERT_EQ(study.trials().size(), 2u);  // the stopped trial and its retry
  EXPECT_EQ(study.trials()[0]->state, TrialState::kFail);
  EXPECT_EQ(study.trials()[1]->state, TrialState::kWaiting);

  torch_testing::set_batch_hook([&](std::int64_t epoch, std::int64_t batch) {
    if (batch == 0) epochs_trained.push_back(epoch);
  });
  epochs_trained.clear();
  stop = false;
  OptimizeOptions opt;
  opt.n_trials = 1;
  study.optimize(s.objective(), opt);
  const TrialPtr retry = study.trials().at(1);
  ASSERT_EQ(retry->state, TrialState::kComplete) << retry->fail_reason;
  std::vector<std::int64_t> after;
  for (std::int64_t e = k + 1; e <= last; ++e) after.push_back(e);
  EXPECT_EQ(epochs_trained, after);
  EXPECT_EQ(retry->system_attrs.at(checkpoints::kAttrResumedFrom),
            (Json{{"trial", 0}, {"step", k}, {"restored", true}}));
  EXPECT_EQ(*retry->value, *ref->value);
  EXPECT_EQ(retry->intermediate_values, ref->intermediate_values);
  EXPECT_EQ(retry->user_attrs, ref->user_attrs);
}

// A trial without a checkpoint folder (StudyOptions::checkpoint_root not
// set) saves no training state and trains as before.
TEST(TorchResume, NoCheckpointFolderNoState) {
  REQUIRE_DATA();
  ResumeSetup s;
  StoreBackend store;
  Trial trial(&store, 1, 0, mlp_params("adam"), {}, {}, nullptr);
  EXPECT_EQ(trial.checkpoint_dir(), "");
  Reference ref;
  run_reference(s, mlp_params("adam"), 0, ref);
  EXPECT_EQ(s.objective()(trial), ref.value);
  EXPECT_EQ(store.values, ref.backend.values);
  EXPECT_FALSE(fs::exists(s.dir.file("ckpt/lineage-1")));
}

}  // namespace
}  // namespace hps
