// embed_worker: a LibTorch training program that serves trials for an
// hpsearch coordinator through hps::Worker (workers/worker.h).
//
//   hpsearch keys init keys --workers 1                                     # once
//   hpsearch run space.json --workers 0 --bind tcp://0.0.0.0:5555 --keys keys  # the coordinator
//   embed_worker tcp://127.0.0.1:5555 --keys keys/worker-1 [--epochs N] [--device cpu|cuda:N]
//
// --keys DIR (default: $HPSEARCH_KEYS_DIR) is this worker's keys folder: it
// pins the coordinator's public key (README "Security"); --insecure
// connects over tcp without keys.
//
// Start as many embed_worker processes as you like, on any machine that
// reaches the coordinator; each runs one trial at a time. The model is an
// MLP classifier on a seeded synthetic data set (no download); put your own
// model and data where make_data() and train_trial() are.
//
// The trial API is the in-process Study's: suggest_*() of a param declared
// in space.json returns the value the coordinator's sampler chose (the
// distribution must be the declared one); "weight_decay" is not declared
// and is sampled define-by-run over the wire. report() sends the validation
// loss after each epoch and returns once the pruner has answered.
//
// Exit status: 0 when the coordinator ends the study, 130 after Ctrl-C (the
// running trial is given back and queued again), 1 when the coordinator
// cannot be reached or refuses this worker.
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <string>

#include "search/errors.h"
#include "search/study.h"
#include "workers/worker.h"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

struct Data {
  torch::Tensor x_train, y_train, x_val, y_val;
};

// 12000 samples, 32 features, 10 classes (Gaussian blobs); the same for
// every trial and every worker.
Data make_data(const torch::Device& device) {
  constexpr int64_t kSamples = 12000, kFeatures = 32, kClasses = 10, kTrain = 10000;
  torch::manual_seed(1234);
  torch::Tensor centers = torch::randn({kClasses, kFeatures}) * 1.5;
  torch::Tensor labels = torch::randint(0, kClasses, {kSamples}, torch::kLong);
  torch::Tensor x = centers.index_select(0, labels) + torch::randn({kSamples, kFeatures}) * 2.0;
  Data d;
  d.x_train = x.slice(0, 0, kTrain).to(device);
  d.y_train = labels.slice(0, 0, kTrain).to(device);
  d.x_val = x.slice(0, kTrain).to(device);
  d.y_val = labels.slice(0, kTrain).to(device);
  return d;
}

double train_trial(hps::Trial& t, const Data& data, int epochs, const torch::Device& device) {
  const double lr = t.suggest_float("lr", 1e-4, 1e-1, {.log = true});
  const int64_t hidden = t.suggest_int("hidden", 16, 256, {.log = true});
  const double dropout = t.suggest_float("dropout", 0.0, 0.5, {.step = 0.05});
  const int64_t batch_size = t.param("batch_size").get<int64_t>();  // ordinal: read it
  const std::string optimizer =
      t.suggest_categorical("optimizer", {"adam", "sgd"}).get<std::string>();
  const double weight_decay = t.suggest_float("weight_decay", 1e-6, 1e-2, {.log = true});

  torch::manual_seed(static_cast<uint64_t>(t.number()));
  const int64_t features = data.x_train.size(1);
  torch::nn::Sequential model(torch::nn::Linear(features, hidden), torch::nn::ReLU(),
                              torch::nn::Dropout(dropout), torch::nn::Linear(hidden, hidden),
                              torch::nn::ReLU(), torch::nn::Dropout(dropout),
                              torch::nn::Linear(hidden, 10));
  model->to(device);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (optimizer == "sgd") {
    const double momentum = t.suggest_float("momentum", 0.0, 0.99);  // active with sgd only
    opt = std::make_unique<torch::optim::SGD>(
        model->parameters(),
        torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(weight_decay));
  } else {
    opt = std::make_unique<torch::optim::Adam>(
        model->parameters(), torch::optim::AdamOptions(lr).weight_decay(weight_decay));
  }

  double best = std::numeric_limits<double>::infinity();
  double best_accuracy = 0.0;
  const int64_t n = data.x_train.size(0);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    torch::Tensor perm =
        torch::randperm(n, torch::TensorOptions().dtype(torch::kLong).device(device));
    for (int64_t start = 0; start < n; start += batch_size) {
      // A long epoch can check for a stop between batches.
      if (t.interrupted()) throw hps::Interrupted();
      torch::Tensor idx = perm.slice(0, start, std::min(start + batch_size, n));
      opt->zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(data.x_train.index_select(0, idx)), data.y_train.index_select(0, idx));
      loss.backward();
      opt->step();
    }
    model->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = model->forward(data.x_val);
    const double val_loss = torch::nn::functional::cross_entropy(logits, data.y_val).item<double>();
    const double accuracy =
        logits.argmax(1).eq(data.y_val).to(torch::kDouble).mean().item<double>();
    if (!std::isfinite(val_loss)) throw hps::Error("diverged at epoch " + std::to_string(epoch));
    if (val_loss < best) {
      best = val_loss;
      best_accuracy = accuracy;
    }
    t.report(epoch, val_loss);
    if (t.should_prune()) throw hps::TrialPruned();
  }
  t.set_user_attr("val_accuracy", best_accuracy);
  return best;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s ENDPOINT [--keys DIR | --insecure] [--epochs N] [--device cpu|cuda:N]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return usage(argv[0]);
  hps::WorkerOptions options;
  options.connect = argv[1];
  options.device = torch::cuda::is_available() ? "cuda:0" : "cpu";
  if (const char* keys = std::getenv("HPSEARCH_KEYS_DIR");
      keys && *keys && options.connect.rfind("tcp://", 0) == 0)
    options.keys_dir = keys;
  int epochs = 10;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--keys" && i + 1 < argc) {
      options.keys_dir = argv[++i];
    } else if (arg == "--insecure") {
      options.insecure = true;
      options.keys_dir.clear();
    } else if (arg == "--epochs" && i + 1 < argc) {
      epochs = std::atoi(argv[++i]);
    } else if (arg == "--device" && i + 1 < argc) {
      options.device = argv[++i];
    } else {
      return usage(argv[0]);
    }
  }
  if (epochs < 1) return usage(argv[0]);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  options.stop = &g_stop;

  try {
    const torch::Device device(options.device);
    const Data data = make_data(device);
    hps::Worker worker(options);
    int rc = worker.run([&](hps::Trial& t) { return train_trial(t, data, epochs, device); });
    std::printf("embed_worker: %lld trials run\n", static_cast<long long>(worker.trials_run()));
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_worker: %s\n", e.what());
    return 1;
  }
}
