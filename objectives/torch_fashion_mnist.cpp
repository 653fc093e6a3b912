// torch.fashion_mnist: MLP and CNN classifiers of Fashion-MNIST (or MNIST)
// trained with LibTorch. Every use of LibTorch of the objectives is in this
// file (one slow translation unit rather than several), but for the
// process group of data parallel training (objectives/torch_distributed.cpp).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <new>
#include <ostream>
#include <thread>

#include "objectives/idx.h"
#include "objectives/torch_distributed.h"
#include "objectives/torch_objectives.h"
#include "search/private_files.h"
#include "search/util/hash.h"
#include "search/util/random.h"

namespace hps {
namespace {

// ------------------------------------------------------------------ data

// Raw data sets, loaded once per process and kept: (data_dir, train) -> data.
std::mutex g_raw_mu;
std::map<std::pair<std::string, bool>, std::shared_ptr<const Dataset>> g_raw;
std::atomic<std::int64_t> g_loads{0};

std::shared_ptr<const Dataset> load_cached(const std::string& dir, bool train) {
  std::lock_guard lock(g_raw_mu);
  auto key = std::make_pair(dir, train);
  if (auto it = g_raw.find(key); it != g_raw.end()) return it->second;
  auto data = std::make_shared<const Dataset>(load_fashion_mnist(dir, train));
  ++g_loads;
  spdlog::debug("loaded {} {} images of {}x{} from {}", data->n, train ? "training" : "test",
                data->rows, data->cols, dir);
  g_raw.emplace(key, data);
  return data;
}

// The tensors one configuration trains on, on its device.
struct PreparedData {
  torch::Tensor train_x, train_y;  // [n_train, 1, rows, cols] float32 normalized; [n_train] int64
  torch::Tensor val_x, val_y;      // [n_val, 1, rows, cols]; [n_val]
  std::int64_t rows = 0, cols = 0;
  double mean = 0.0, std = 1.0;  // of the training part's pixels scaled to [0, 1]
};

// Images `indices` of `data` as a [k, 1, rows, cols] float32 tensor in [0, 1]
// and their labels as [k] int64.
std::pair<torch::Tensor, torch::Tensor> select(const Dataset& data,
                                               const std::vector<std::size_t>& indices) {
  const auto n = static_cast<std::int64_t>(data.n);
  const auto rows = static_cast<std::int64_t>(data.rows),
             cols = static_cast<std::int64_t>(data.cols);
  // from_blob does not copy; index_select does, so the result owns its memory.
  auto images = torch::from_blob(const_cast<std::uint8_t*>(data.images.data()), {n, 1, rows, cols},
                                 torch::kUInt8);
  auto labels = torch::from_blob(const_cast<std::uint8_t*>(data.labels.data()), {n}, torch::kUInt8);
  std::vector<std::int64_t> idx(indices.begin(), indices.end());
  auto index = torch::tensor(idx, torch::kInt64);
  auto x = images.index_select(0, index).to(torch::kFloat32).div_(255.0);
  auto y = labels.index_select(0, index).to(torch::kInt64);
  return {x, y};
}

std::mutex g_prepared_mu;
std::map<std::string, std::shared_ptr<const PreparedData>> g_prepared;

std::shared_ptr<const PreparedData> prepare(const FashionMnistConfig& c,
                                            const torch::Device& device) {
  const std::string key = fmt::format("{}|{}|{}|{}|{}", c.data_dir, c.val_fraction, c.train_subset,
                                      c.seed, device.str());
  {
    std::lock_guard lock(g_prepared_mu);
    if (auto it = g_prepared.find(key); it != g_prepared.end()) return it->second;
  }
  auto raw = load_cached(c.data_dir, true);
  IndexSplit split;
  try {
    split = split_indices(raw->n, c.val_fraction, c.seed, static_cast<std::size_t>(c.train_subset));
  } catch (const ConfigError& e) {
    const std::string field = e.path() == "subset"         ? "objective.train_subset"
                              : e.path() == "val_fraction" ? "objective.val_fraction"
                                                           : "objective.data_dir";
    std::string rule = e.what();
    rule = rule.substr(std::min(rule.size(), e.path().size() + 2));
    throw ConfigError(field,
                      rule + " (" + std::to_string(raw->n) + " images in " + c.data_dir + ")");
  }
  auto data = std::make_shared<PreparedData>();
  data->rows = static_cast<std::int64_t>(raw->rows);
  data->cols = static_cast<std::int64_t>(raw->cols);
  auto [tx, ty] = select(*raw, split.train);
  auto [vx, vy] = select(*raw, split.val);
  // Normalize with the training part's statistics only (no leak from val).
  data->mean = tx.mean().item<double>();
  data->std = std::max(tx.std().item<double>(), 1e-6);
  data->train_x = tx.sub_(data->mean).div_(data->std).to(device);
  data->train_y = ty.to(device);
  data->val_x = vx.sub_(data->mean).div_(data->std).to(device);
  data->val_y = vy.to(device);
  std::lock_guard lock(g_prepared_mu);
  return g_prepared.emplace(key, std::move(data)).first->second;
}

// ------------------------------------------------------------------ runtime

std::function<void(std::int64_t, std::int64_t)> g_batch_hook;

// Sets LibTorch's intra-op threads and pins OpenBLAS to one thread: LibTorch
// parallelizes through its OpenMP pool, and OpenBLAS' own pthreads inside it
// oversubscribe the cores (bench/fmnist_epoch on 2 cores, MLP batch 64:
// 1.7 s/epoch with 1 thread, 1.9 s with 2 LibTorch threads and OpenBLAS at 1,
// 5.2 s with both at 2). The inter-op pool can be sized only once per
// process, before it is first used: done on the first call only.
void apply_threads(int threads) {
  threads = std::max(1, threads);
  static std::once_flag interop_once;
  std::call_once(interop_once, [threads] {
    try {
      at::set_num_interop_threads(threads);
    } catch (const c10::Error& e) {
      spdlog::debug("LibTorch inter-op threads already set: {}", e.what_without_backtrace());
    }
  });
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (void* fn = dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))
    reinterpret_cast<SetThreads>(fn)(1);
}

torch::Device pick_device(const std::string& wanted) {
  if (wanted.empty() || wanted == "cpu") return torch::kCPU;
  if (wanted.rfind("cuda", 0) != 0)
    throw ConfigError("device", "must be \"cpu\" or \"cuda:N\", got \"" + wanted + "\"");
  std::optional<torch::Device> device;
  try {
    device.emplace(wanted);
  } catch (const c10::Error&) {
    throw ConfigError("device", "must be \"cpu\" or \"cuda:N\", got \"" + wanted + "\"");
  }
  if (torch::cuda::is_available()) {
    const auto count = static_cast<std::int64_t>(torch::cuda::device_count());
    if (!device->has_index() || device->index() < count) return *device;
    spdlog::warn("device {} asked for, but only {} CUDA devices are visible; using the CPU", wanted,
                 count);
  } else {
    spdlog::warn("device {} asked for, but LibTorch has no usable CUDA; using the CPU", wanted);
  }
  return torch::kCPU;
}

using util::splitmix64;

// The seed of a trial: the config's seed mixed with a 64-bit FNV-1a hash of
// the params as canonical JSON (keys sorted, numbers round-trip exact).
std::uint64_t trial_seed(std::uint64_t base, const Params& params) {
  const std::uint64_t h = util::fnv1a64(Json(params).dump());
  // Keep it below 2^53 so that it survives a JSON number round trip.
  return splitmix64(base ^ h) >> 11;
}

// ------------------------------------------------------------------ models

torch::nn::AnyModule activation(const std::string& name) {
  if (name == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  if (name == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (name == "silu") return torch::nn::AnyModule(torch::nn::SiLU());
  if (name == "leaky_relu") return torch::nn::AnyModule(torch::nn::LeakyReLU());
  return torch::nn::AnyModule(torch::nn::ReLU());
}

// Dropout drawing its masks from the trial's own generator (not LibTorch's
// global one), so that concurrent trials in one process stay reproducible.
// Inverted dropout (Srivastava et al., "Dropout", JMLR 2014, scaled at
// training time): y = x * mask / (1 - p), mask ~ Bernoulli(1 - p); identity
// in eval mode. `generator` undefined: the device's default generator.
class SeededDropoutImpl : public torch::nn::Cloneable<SeededDropoutImpl> {
 public:
  SeededDropoutImpl(double p, c10::optional<at::Generator> generator)
      : p_(p), generator_(std::move(generator)) {}
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) {
    if (!is_training() || p_ <= 0) return x;
    auto mask = torch::empty_like(x).bernoulli_(1.0 - p_, generator_);
    return x * mask / (1.0 - p_);
  }

 private:
  double p_;
  c10::optional<at::Generator> generator_;
};
TORCH_MODULE(SeededDropout);

// Re-initialises every Linear and Conv2d layer as LibTorch does by default
// (weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), which is
// kaiming_uniform with a = sqrt(5); He et al., ICCV 2015), drawing from
// `generator` instead of the global generator. Call before moving to a device.
void init_weights(torch::nn::Module& model, at::Generator& generator) {
  torch::NoGradGuard no_grad;
  for (auto& module : model.modules(/*include_self=*/false)) {
    torch::Tensor weight, bias;
    if (auto* linear = module->as<torch::nn::Linear>()) {
      weight = linear->weight;
      bias = linear->bias;
    } else if (auto* conv = module->as<torch::nn::Conv2d>()) {
      weight = conv->weight;
      bias = conv->bias;
    } else {
      continue;
    }
    const double fan_in = static_cast<double>(weight[0].numel());
    const double bound = 1.0 / std::sqrt(fan_in);
    weight.uniform_(-bound, bound, generator);
    if (bias.defined()) bias.uniform_(-bound, bound, generator);
  }
}

// Options of Mlp, in LibTorch's options style (MlpOptions(784).hidden(256)).
struct MlpOptions {
  explicit MlpOptions(std::int64_t in_features) : in_features_(in_features) {}
  // Pixels per image (rows * cols); the input is flattened to this many.
  TORCH_ARG(std::int64_t, in_features);
  // Hidden layers (>= 1) and units per hidden layer (>= 1).
  TORCH_ARG(std::int64_t, layers) = 1;
  TORCH_ARG(std::int64_t, hidden) = 128;
  // "relu", "gelu", "tanh", "silu" or "leaky_relu" (any other name: relu).
  TORCH_ARG(std::string, activation) = "relu";
  // Dropout probability after every hidden layer, in [0, 1); 0: none.
  TORCH_ARG(double, dropout) = 0.0;
  // Output logits.
  TORCH_ARG(std::int64_t, classes) = Dataset::kNumClasses;
};

// Multilayer perceptron: input [N, 1, rows, cols] float32 -> flatten
// [N, in_features] -> `layers` x (Linear(hidden) -> activation -> Dropout)
// -> Linear(classes): logits [N, classes]. Dropout masks come from
// `dropout_generator` (see SeededDropout).
class MlpImpl final : public torch::nn::Cloneable<MlpImpl> {
 public:
  explicit MlpImpl(MlpOptions options_,
                   c10::optional<at::Generator> dropout_generator = c10::nullopt)
      : options(std::move(options_)), dropout_generator_(std::move(dropout_generator)) {
    reset();
  }
  // (Re)creates the layers with LibTorch's default initialisation.
  void reset() override {
    layers_ = register_module("layers", torch::nn::Sequential());
    layers_->push_back(torch::nn::Flatten());
    std::int64_t in = options.in_features();
    for (std::int64_t i = 0; i < options.layers(); ++i) {
      layers_->push_back(torch::nn::Linear(in, options.hidden()));
      layers_->push_back(activation(options.activation()));
      if (options.dropout() > 0)
        layers_->push_back(SeededDropout(options.dropout(), dropout_generator_));
      in = options.hidden();
    }
    layers_->push_back(torch::nn::Linear(in, options.classes()));
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers_->forward(x); }

  MlpOptions options;

 private:
  c10::optional<at::Generator> dropout_generator_;
  torch::nn::Sequential layers_{nullptr};
};
TORCH_MODULE(Mlp);

// Options of Cnn.
struct CnnOptions {
  CnnOptions(std::int64_t rows, std::int64_t cols) : rows_(rows), cols_(cols) {}
  // Image height and width in pixels (each >= 4).
  TORCH_ARG(std::int64_t, rows);
  TORCH_ARG(std::int64_t, cols);
  // Channels of the first convolution (>= 1); the second has twice as many.
  TORCH_ARG(std::int64_t, channels) = 32;
  // Odd convolution kernel size (>= 1), "same" padding.
  TORCH_ARG(std::int64_t, kernel_size) = 3;
  // As MlpOptions::activation.
  TORCH_ARG(std::string, activation) = "relu";
  // Dropout probability before each fully connected layer, in [0, 1).
  TORCH_ARG(double, dropout) = 0.0;
  // Units of the hidden fully connected layer.
  TORCH_ARG(std::int64_t, hidden) = 128;
  // Output logits.
  TORCH_ARG(std::int64_t, classes) = Dataset::kNumClasses;
};

// Convolutional network after LeNet-5 (LeCun et al., "Gradient-based
// learning applied to document recognition", Proc. IEEE 1998, section II):
// input [N, 1, rows, cols] ->
// Conv(channels, k, same padding) -> act -> MaxPool 2 -> [N, c, rows/2, cols/2]
// Conv(2*channels, k, same padding) -> act -> MaxPool 2 -> [N, 2c, rows/4, cols/4]
// flatten -> Dropout -> Linear(hidden) -> act -> Dropout -> Linear(classes):
// logits [N, classes]. Throws Error when the images are smaller than 4x4.
class CnnImpl final : public torch::nn::Cloneable<CnnImpl> {
 public:
  explicit CnnImpl(CnnOptions options_,
                   c10::optional<at::Generator> dropout_generator = c10::nullopt)
      : options(std::move(options_)), dropout_generator_(std::move(dropout_generator)) {
    reset();
  }
  void reset() override {
    namespace nn = torch::nn;
    const std::int64_t c = options.channels(), k = options.kernel_size(), pad = k / 2;
    const std::int64_t flat = 2 * c * (options.rows() / 4) * (options.cols() / 4);
    if (flat < 1)
      throw Error(fmt::format("cnn: images of {}x{} are too small (need at least 4x4)",
                              options.rows(), options.cols()));
    features_ = register_module("features", nn::Sequential());
    features_->push_back(nn::Conv2d(nn::Conv2dOptions(1, c, k).padding(pad)));
    features_->push_back(activation(options.activation()));
    features_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
    features_->push_back(nn::Conv2d(nn::Conv2dOptions(c, 2 * c, k).padding(pad)));
    features_->push_back(activation(options.activation()));
    features_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
    classifier_ = register_module("classifier", nn::Sequential());
    classifier_->push_back(nn::Flatten());
    if (options.dropout() > 0)
      classifier_->push_back(SeededDropout(options.dropout(), dropout_generator_));
    classifier_->push_back(nn::Linear(flat, options.hidden()));
    classifier_->push_back(activation(options.activation()));
    if (options.dropout() > 0)
      classifier_->push_back(SeededDropout(options.dropout(), dropout_generator_));
    classifier_->push_back(nn::Linear(options.hidden(), options.classes()));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return classifier_->forward(features_->forward(x));
  }

  CnnOptions options;

 private:
  c10::optional<at::Generator> dropout_generator_;
  torch::nn::Sequential features_{nullptr}, classifier_{nullptr};
};
TORCH_MODULE(Cnn);

// The model of a trial's params, as a module of any type with
// forward(Tensor) -> logits.
torch::nn::AnyModule make_model(const std::string& model, const TrainingParams& p,
                                std::int64_t rows, std::int64_t cols,
                                const c10::optional<at::Generator>& dropout_gen) {
  if (model == "cnn")
    return torch::nn::AnyModule(Cnn(CnnOptions(rows, cols)
                                        .channels(p.channels)
                                        .kernel_size(p.kernel_size)
                                        .activation(p.activation)
                                        .dropout(p.dropout),
                                    dropout_gen));
  return torch::nn::AnyModule(Mlp(MlpOptions(rows * cols)
                                      .layers(p.layers)
                                      .hidden(p.hidden)
                                      .activation(p.activation)
                                      .dropout(p.dropout),
                                  dropout_gen));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingParams& p,
                                                        const std::vector<torch::Tensor>& params) {
  namespace optim = torch::optim;
  if (p.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions(p.lr_effective).weight_decay(p.weight_decay));
  if (p.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions(p.lr_effective)
                                                    .momentum(p.momentum)
                                                    .nesterov(p.nesterov && p.momentum > 0)
                                                    .weight_decay(p.weight_decay));
  if (p.optimizer == "rmsprop")
    return std::make_unique<optim::RMSprop>(
        params,
        optim::RMSpropOptions(p.lr_effective).momentum(p.momentum).weight_decay(p.weight_decay));
  return std::make_unique<optim::Adam>(
      params, optim::AdamOptions(p.lr_effective).weight_decay(p.weight_decay));
}

// Summed cross-entropy (nats) and the number of images classified right of
// `model` on (x, y), in chunks.
std::pair<double, std::int64_t> score_sums(torch::nn::AnyModule& model, const torch::Tensor& x,
                                           const torch::Tensor& y, std::int64_t chunk) {
  torch::NoGradGuard no_grad;
  model.ptr()->eval();
  const std::int64_t n = x.size(0);
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < n; start += chunk) {
    const std::int64_t end = std::min(n, start + chunk);
    auto logits = model.forward(x.slice(0, start, end));
    auto target = y.slice(0, start, end);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(target).sum().item<std::int64_t>();
  }
  return {loss_sum, correct};
}

// Mean cross-entropy and accuracy of `model` on (x, y), in chunks.
std::pair<double, double> score(torch::nn::AnyModule& model, const torch::Tensor& x,
                                const torch::Tensor& y, std::int64_t chunk) {
  const auto [loss_sum, correct] = score_sums(model, x, y, chunk);
  const auto n = static_cast<double>(x.size(0));
  return {loss_sum / n, static_cast<double>(correct) / n};
}

// Everything an objective needs across trials.
struct FashionMnistState {
  FashionMnistConfig config;
  SearchSpace space;
  TrainMetric metric = TrainMetric::kValLoss;
  torch::Device device = torch::kCPU;
  std::shared_ptr<const PreparedData> data;
};

std::shared_ptr<FashionMnistState> make_state(const Json& config, const SearchSpace& space,
                                              const ObjectiveContext& context) {
  auto s = std::make_shared<FashionMnistState>();
  s->config = FashionMnistConfig::from_json(config, space);
  s->space = space;
  s->metric = s->config.resolve_metric(context.direction);
  apply_threads(context.threads);
  s->device = pick_device(context.device);
  s->data = prepare(s->config, s->device);
  return s;
}

// Runs `fn`, turning out-of-memory errors into Error("oom") and other
// LibTorch errors into Error("libtorch: <message without backtrace>").
// LibTorch 1.13 raises c10::OutOfMemoryError for CUDA, and a plain c10::Error
// ("DefaultCPUAllocator: can't allocate memory: ...") for host memory.
template <class Fn>
auto oom_guard(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::OutOfMemoryError& e) {
    spdlog::warn("out of memory: {}", e.what_without_backtrace());
    throw Error("oom");
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    std::string lower = msg;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    // CUDA says "out of memory"; the CPU allocator "can't allocate memory".
    const bool oom = lower.find("out of memory") != std::string::npos ||
                     lower.find("can't allocate memory") != std::string::npos ||
                     lower.find("cannot allocate memory") != std::string::npos ||
                     lower.find("not enough memory") != std::string::npos;
    if (oom) {
      spdlog::warn("out of memory: {}", msg);
      throw Error("oom");
    }
    throw Error("libtorch: " + msg.substr(0, msg.find('\n')));
  } catch (const std::bad_alloc&) {
    spdlog::warn("out of memory: std::bad_alloc");
    throw Error("oom");
  }
}

// A copy of a model's parameters and buffers.
std::vector<torch::Tensor> snapshot(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : model.buffers()) out.push_back(b.detach().clone());
  return out;
}

void restore(torch::nn::Module& model, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  std::size_t i = 0;
  for (auto& p : model.parameters()) p.copy_(saved.at(i++));
  for (auto& b : model.buffers()) b.copy_(saved.at(i++));
}

// ------------------------------------------------------------------ checkpoints

namespace fs = std::filesystem;

// The archive key of the epoch whose weights a checkpoint holds.
constexpr const char* kCheckpointEpochKey = "hpsearch_best_epoch";

// Ends the refusal of a named checkpoint_dir that breaks the owner-only rule.
constexpr const char* kCheckpointDirHint =
    "set objective.checkpoint_dir to a folder only you can write (for a link: the folder it "
    "points to), or objective.checkpoints to false";

// The named checkpoint_dir of `c`, checked as it is now without creating or
// writing anything, so that `hpsearch run` refuses it before any worker
// starts or the study is stored: one that exists and breaks the owner-only
// rule (owned by another user, writable by group or others, a symbolic link;
// OwnerOnlyFolder) is a ConfigError naming objective.checkpoint_dir. A
// missing one is fine (the trials make it, 0700).
void check_named_checkpoint_dir(const FashionMnistConfig& c) {
  if (!c.checkpoints || c.checkpoint_dir.empty()) return;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(c.checkpoint_dir, ec))) return;
  try {
    const OwnerOnlyFolder folder(c.checkpoint_dir, false, kCheckpointDirHint);
  } catch (const std::exception& e) {
    throw ConfigError("objective.checkpoint_dir", e.what());
  }
}

// The checkpoint folder of `c` under `context`, created (0700) if missing
// and opened owner-only (OwnerOnlyFolder); nullptr when checkpoints are off
// or have no folder. A folder (or, for the default one, the log folder it
// is made in) that cannot be created or breaks the
// owner-only rule (owned by another user, writable by group or others, a
// symbolic link) is a ConfigError naming objective.checkpoint_dir when the
// user named it, else a warning naming the option (the trials run without
// checkpoints).
std::shared_ptr<const OwnerOnlyFolder> checkpoint_folder(const FashionMnistConfig& c,
                                                         const ObjectiveContext& context) {
  if (!c.checkpoints) return nullptr;
  const bool named = !c.checkpoint_dir.empty();
  if (!named && context.log_dir.empty()) {
    spdlog::debug("{}: no log_dir and no checkpoint_dir: no checkpoints", kFashionMnistType);
    return nullptr;
  }
  const fs::path dir =
      named ? fs::path(c.checkpoint_dir) : fs::path(context.log_dir) / "checkpoints";
  try {
    // The default folder is made inside the study's log folder: that one is
    // checked first, so nothing is made through a planted <study>.logs (a
    // link, another user's, or writable by others).
    if (!named) {
      const OwnerOnlyFolder parent(context.log_dir, true);
    }
    return std::make_shared<const OwnerOnlyFolder>(dir.string(), true,
                                                   named ? kCheckpointDirHint : std::string());
  } catch (const std::exception& e) {
    if (named) throw ConfigError("objective.checkpoint_dir", e.what());
    spdlog::warn(
        "{}: no checkpoints: {} (set objective.checkpoint_dir to a folder only you can write, or "
        "objective.checkpoints to false)",
        kFashionMnistType, e.what());
    return nullptr;
  }
}

// The file name of trial `number`'s checkpoint.
std::string checkpoint_name(std::int64_t number) {
  return "trial-" + std::to_string(number) + ".pt";
}

// Removes the checkpoint `name` of `folder` and its temporary file.
void remove_checkpoint(const OwnerOnlyFolder& folder, const std::string& name) {
  (void)folder.remove(name);
  (void)folder.remove(name + ".tmp");
}

// Writes the parameters and buffers of `module` and `epoch` to `name` in
// `folder` (through name + ".tmp", mode 0600, then renamed over `name`;
// OwnerOnlyFolder::replace_file: no planted link is followed).
void save_checkpoint(const torch::nn::Module& module, std::int64_t epoch,
                     const OwnerOnlyFolder& folder, const std::string& name) {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  archive.write(kCheckpointEpochKey, torch::tensor(epoch, torch::kInt64));
  folder.replace_file(name, [&](const std::function<void(const void*, std::size_t)>& sink) {
    archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
      sink(data, size);
      return size;
    });
  });
}

// The shapes of a module's parameters and buffers, in order.
std::vector<std::vector<std::int64_t>> shapes(const torch::nn::Module& module) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& t : module.parameters()) out.push_back(t.sizes().vec());
  for (const auto& t : module.buffers()) out.push_back(t.sizes().vec());
  return out;
}

// The dtypes of a module's parameters and buffers, in order.
std::vector<torch::Dtype> dtypes(const torch::nn::Module& module) {
  std::vector<torch::Dtype> out;
  for (const auto& t : module.parameters()) out.push_back(t.scalar_type());
  for (const auto& t : module.buffers()) out.push_back(t.scalar_type());
  return out;
}

// The largest checkpoint file of `module` read: twice its tensors' bytes
// plus 1 MiB for the archive's own records (a checkpoint is the tensors
// plus a few KiB); a larger file is refused unread.
std::uint64_t max_checkpoint_bytes(const torch::nn::Module& module) {
  std::uint64_t bytes = 0;
  for (const auto& t : module.parameters()) bytes += t.nbytes();
  for (const auto& t : module.buffers()) bytes += t.nbytes();
  return 2 * bytes + (std::uint64_t{1} << 20);
}

// Loads a checkpoint into `module` (built from the trial's params) on
// `device`; returns the stored epoch (0 if absent). The file is read
// through OwnerOnlyFolder (its folder and itself owned by this user and
// writable by no one else, not a link, at most max_checkpoint_bytes), then
// parsed from memory. Throws Error ("checkpoint <path>: <reason>").
std::int64_t load_checkpoint(torch::nn::Module& module, const std::string& path,
                             const torch::Device& device) {
  const std::string what = "checkpoint " + path + ": ";
  const fs::path p(path);
  if (!p.is_absolute() || !p.has_filename()) throw Error(what + "not an absolute file path");
  std::string bytes;
  try {
    const OwnerOnlyFolder folder(p.parent_path().string(), false);
    bytes = folder.read_file(p.filename().string(), max_checkpoint_bytes(module));
  } catch (const Error& e) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(p, ec))) throw Error(what + "no such file on this machine");
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // no path twice
    throw Error(what + why);
  }
  const auto expected = shapes(module);
  const auto expected_dtypes = dtypes(module);
  torch::Tensor epoch;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), device);
    torch::NoGradGuard no_grad;
    module.load(archive);
    if (!archive.try_read(kCheckpointEpochKey, epoch)) epoch = torch::zeros({}, torch::kInt64);
  } catch (const std::exception& e) {
    // c10::Error from the archive reader, or a standard exception from the
    // unpickler of a damaged file.
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    const std::string msg = ce ? ce->what_without_backtrace() : e.what();
    throw Error(what + msg.substr(0, msg.find('\n')));
  }
  if (shapes(module) != expected || dtypes(module) != expected_dtypes)
    throw Error(what + "holds the weights of another model (parameter shapes or types differ)");
  if (epoch.numel() != 1 || epoch.scalar_type() != torch::kInt64)
    throw Error(what + "its epoch record is not one integer");
  return epoch.item<std::int64_t>();
}

// ------------------------------------------------------------------ training state

// The file of a trial's full training state in its checkpoint folder
// (Trial::checkpoint_dir(); torch_objectives.h, "Resume").
constexpr const char* kTrainingStateFile = "training_state.pt";
// The layout of that file; a file of another format is not loaded.
constexpr std::int64_t kTrainingStateFormat = 1;

// What one training run changes as it trains: the trial's generators, the
// model and its optimizer.
struct TrainingRun {
  at::Generator init_gen;     // initial weights
  at::Generator shuffle_gen;  // batch order
  // Dropout masks on the CPU; none on a GPU (the device's generator).
  c10::optional<at::Generator> dropout_gen;
  torch::nn::AnyModule model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

// A fresh run of `p` seeded with `seed`: the model initialized from the
// trial's generators, on the state's device, with a new optimizer.
TrainingRun start_run(const FashionMnistState& s, const TrainingParams& p, std::uint64_t seed) {
  const PreparedData& d = *s.data;
  // The trial's generators: initial weights, batch order, dropout masks (on
  // the CPU; on a GPU the masks come from the device's generator, seeded by
  // manual_seed, so concurrent GPU trials in one process can interfere).
  torch::manual_seed(seed);
  TrainingRun run;
  run.init_gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  run.shuffle_gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed));
  if (s.device.is_cpu())
    run.dropout_gen = at::make_generator<at::CPUGeneratorImpl>(splitmix64(splitmix64(seed)));
  run.model = make_model(s.config.model, p, d.rows, d.cols, run.dropout_gen);
  torch::nn::Module& module = *run.model.ptr();
  init_weights(module, run.init_gen);
  module.to(s.device);
  run.optimizer = make_optimizer(p, module.parameters());
  return run;
}

// What a training state must have been made by: the model, every
// hyperparameter, the seed and the data's shape. A state of any other
// training (another trial's, another model's) is not loaded.
std::string training_fingerprint(const FashionMnistState& s, const TrainingParams& p,
                                 std::uint64_t seed) {
  const PreparedData& d = *s.data;
  return fmt::format(
      "model={} optimizer={} lr={} batch_size={} momentum={} nesterov={} weight_decay={} "
      "layers={} hidden={} activation={} dropout={} channels={} kernel_size={} seed={} "
      "n_train={} n_val={} image={}x{}",
      s.config.model, p.optimizer, p.lr_effective, p.batch_size, p.momentum, p.nesterov,
      p.weight_decay, p.layers, p.hidden, p.activation, p.dropout, p.channels, p.kernel_size, seed,
      d.train_x.size(0), d.val_x.size(0), d.rows, d.cols);
}

// The largest training state file read for `module`: six times its tensors'
// bytes plus 1 MiB (the weights, the best weights and up to three optimizer
// buffers per parameter, plus the archive's own records).
std::uint64_t max_training_state_bytes(const torch::nn::Module& module) {
  return 3 * (max_checkpoint_bytes(module) - (std::uint64_t{1} << 20)) + (std::uint64_t{1} << 20);
}

torch::Tensor int64_record(std::int64_t v) { return torch::scalar_tensor(v, torch::kInt64); }
torch::Tensor double_record(double v) { return torch::scalar_tensor(v, torch::kFloat64); }

// Writes run's model, optimizer and generators, the loop state `st` and
// the best weights to kTrainingStateFile in `folder` (a temporary file
// renamed into place, 0600: OwnerOnlyFolder::replace_file). Throws on a
// write error.
void save_training_state(const TrainingRun& run, const EpochLoopState& st,
                         const std::vector<torch::Tensor>& best_weights,
                         const std::string& fingerprint, const torch::Device& device,
                         const OwnerOnlyFolder& folder) {
  torch::serialize::OutputArchive a;
  a.write("format", int64_record(kTrainingStateFormat));
  a.write("fingerprint", c10::IValue(fingerprint));
  a.write("epoch", int64_record(st.epoch));
  torch::serialize::OutputArchive model(a.compilation_unit());
  run.model.ptr()->save(model);
  a.write("model", model);
  torch::serialize::OutputArchive optimizer(a.compilation_unit());
  run.optimizer->save(optimizer);
  a.write("optimizer", optimizer);
  a.write("rng_init", run.init_gen.get_state());
  a.write("rng_shuffle", run.shuffle_gen.get_state());
  if (run.dropout_gen) a.write("rng_dropout", run.dropout_gen->get_state());
  if (!device.is_cpu())
    a.write("rng_device", at::globalContext().defaultGenerator(device).get_state());
  a.write("have_best", int64_record(st.have_best ? 1 : 0));
  a.write("best_value", double_record(st.best_value));
  a.write("best_epoch", int64_record(st.best_epoch));
  a.write("best_train_loss", double_record(st.best.train_loss));
  a.write("best_val_loss", double_record(st.best.val_loss));
  a.write("best_val_accuracy", double_record(st.best.val_accuracy));
  a.write("reference", double_record(st.reference));
  a.write("since_improvement", int64_record(st.since_improvement));
  torch::serialize::OutputArchive best(a.compilation_unit());
  best.write("size", int64_record(static_cast<std::int64_t>(best_weights.size())));
  for (std::size_t i = 0; i < best_weights.size(); ++i)
    best.write(std::to_string(i), best_weights[i], /*is_buffer=*/true);
  a.write("best_weights", best);
  folder.replace_file(kTrainingStateFile,
                      [&](const std::function<void(const void*, std::size_t)>& sink) {
                        a.save_to([&](const void* data, std::size_t size) -> std::size_t {
                          sink(data, size);
                          return size;
                        });
                      });
}

// The scalar record `key` of `a`, of type `type`; throws Error naming the
// record when it is missing or not one value of that type.
torch::Tensor read_scalar(torch::serialize::InputArchive& a, const std::string& key,
                          torch::Dtype type) {
  torch::Tensor t;
  if (!a.try_read(key, t)) throw Error("no record '" + key + "'");
  if (t.numel() != 1 || t.scalar_type() != type)
    throw Error(fmt::format("record '{}' is not one {}", key, c10::toString(type)));
  return t.to(torch::kCPU);
}
std::int64_t read_int64(torch::serialize::InputArchive& a, const std::string& key) {
  return read_scalar(a, key, torch::kInt64).item<std::int64_t>();
}
double read_double(torch::serialize::InputArchive& a, const std::string& key) {
  return read_scalar(a, key, torch::kFloat64).item<double>();
}

// Sets `gen` to the state `state` (Generator::get_state()'s bytes); throws
// c10::Error when it is not a state of that kind of generator.
void set_generator(at::Generator& gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state.to(torch::kCPU));
}

// Sets `gen` to the state record `key` of `a`.
void read_generator(torch::serialize::InputArchive& a, const std::string& key, at::Generator& gen) {
  torch::Tensor t;
  if (!a.try_read(key, t)) throw Error("no record '" + key + "'");
  set_generator(gen, t);
}

// The tensors of an optimizer's per-parameter state (LibTorch's Adam,
// AdamW, SGD, RMSprop), undefined ones included.
std::vector<torch::Tensor> state_tensors(const torch::optim::OptimizerParamState& state) {
  namespace optim = torch::optim;
  if (const auto* s = dynamic_cast<const optim::AdamParamState*>(&state))
    return {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
  if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(&state))
    return {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
  if (const auto* s = dynamic_cast<const optim::SGDParamState*>(&state))
    return {s->momentum_buffer()};
  if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(&state))
    return {s->square_avg(), s->momentum_buffer(), s->grad_avg()};
  return {};
}

// Throws Error when a state tensor of `optimizer` does not have its
// parameter's shape, type and device (a state loaded from another model
// would otherwise fail in the middle of a step).
void check_optimizer_state(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      auto it = optimizer.state().find(c10::guts::to_string(param.unsafeGetTensorImpl()));
      if (it == optimizer.state().end()) continue;
      for (const auto& t : state_tensors(*it->second)) {
        if (t.defined() && (t.sizes() != param.sizes() || t.scalar_type() != param.scalar_type() ||
                            t.device() != param.device()))
          throw Error("the optimizer state is of another model (buffer shapes differ)");
      }
    }
  }
}

// Loads a training state (the bytes of kTrainingStateFile) into `run`
// (made by start_run for the same params) and *best_weights; returns the
// loop state. Throws Error(reason) when the bytes are not a training state
// of format kTrainingStateFormat made by the training `fingerprint`, or
// any record is missing, of the wrong type or shape, or out of range.
// `run` may be changed even then: start it again.
EpochLoopState load_training_state(TrainingRun& run, const std::string& bytes,
                                   const std::string& fingerprint, const torch::Device& device,
                                   std::vector<torch::Tensor>* best_weights) {
  torch::nn::Module& module = *run.model.ptr();
  const auto expected = shapes(module);
  const auto expected_dtypes = dtypes(module);
  EpochLoopState st;
  try {
    torch::serialize::InputArchive a;
    a.load_from(bytes.data(), bytes.size(), device);
    if (std::int64_t f = read_int64(a, "format"); f != kTrainingStateFormat)
      throw Error(fmt::format("format {}, this version reads format {}", f, kTrainingStateFormat));
    c10::IValue saved;
    if (!a.try_read("fingerprint", saved) || !saved.isString())
      throw Error("no record 'fingerprint'");
    if (saved.toStringRef() != fingerprint)
      throw Error("the state of another model or params (saved by: " + saved.toStringRef() +
                  "; this trial: " + fingerprint + ")");
    st.epoch = read_int64(a, "epoch");
    {
      torch::serialize::InputArchive model;
      a.read("model", model);
      torch::NoGradGuard no_grad;
      module.load(model);
    }
    if (shapes(module) != expected || dtypes(module) != expected_dtypes)
      throw Error("holds the weights of another model (parameter shapes or types differ)");
    {
      torch::serialize::InputArchive optimizer;
      a.read("optimizer", optimizer);
      run.optimizer->load(optimizer);
    }
    check_optimizer_state(*run.optimizer);
    read_generator(a, "rng_init", run.init_gen);
    read_generator(a, "rng_shuffle", run.shuffle_gen);
    torch::Tensor saved_dropout;
    // A state saved on a GPU has no dropout generator: this run's seeded
    // one goes on (another device: not bit-exact anyway).
    if (run.dropout_gen && a.try_read("rng_dropout", saved_dropout))
      set_generator(*run.dropout_gen, saved_dropout);
    // On a GPU the device's generator draws the dropout masks (a state
    // saved on the CPU has none: the device's goes on).
    if (torch::Tensor t; !device.is_cpu() && a.try_read("rng_device", t)) {
      at::Generator gen = at::globalContext().defaultGenerator(device);
      set_generator(gen, t);
    }
    st.have_best = read_int64(a, "have_best") == 1;
    st.best_value = read_double(a, "best_value");
    st.best_epoch = read_int64(a, "best_epoch");
    st.best.train_loss = read_double(a, "best_train_loss");
    st.best.val_loss = read_double(a, "best_val_loss");
    st.best.val_accuracy = read_double(a, "best_val_accuracy");
    st.reference = read_double(a, "reference");
    st.since_improvement = read_int64(a, "since_improvement");
    if (st.epoch < 1 || !st.have_best || st.best_epoch < 1 || st.best_epoch > st.epoch ||
        st.since_improvement < 0 || st.since_improvement >= st.epoch ||
        !std::isfinite(st.best_value) || !std::isfinite(st.reference))
      throw Error(fmt::format(
          "its records are out of range (epoch {}, best_epoch {}, since_improvement {})", st.epoch,
          st.best_epoch, st.since_improvement));
    torch::serialize::InputArchive best;
    a.read("best_weights", best);
    const std::int64_t n = read_int64(best, "size");
    if (n != static_cast<std::int64_t>(expected.size()))
      throw Error(
          fmt::format("holds {} best-weight tensors, the model has {}", n, expected.size()));
    std::vector<torch::Tensor> weights(expected.size());
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (!best.try_read(std::to_string(i), weights[i], /*is_buffer=*/true))
        throw Error("no best-weight record " + std::to_string(i));
      if (weights[i].sizes().vec() != expected[i] || weights[i].scalar_type() != expected_dtypes[i])
        throw Error("holds best weights of another model (shapes or types differ)");
    }
    if (best_weights) *best_weights = std::move(weights);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // c10::Error from the archive reader or a LibTorch check, or a standard
    // exception from the unpickler of a damaged file.
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    const std::string msg = ce ? ce->what_without_backtrace() : e.what();
    throw Error(msg.substr(0, msg.find('\n')));
  }
  return st;
}

// Writes `weights` (parameters then buffers, as snapshot()) as the
// best-epoch checkpoint `name` of `folder` (save_checkpoint's format),
// through `module`, whose own weights are put back afterwards.
void save_weights_checkpoint(torch::nn::Module& module, const std::vector<torch::Tensor>& weights,
                             std::int64_t epoch, const OwnerOnlyFolder& folder,
                             const std::string& name) {
  const std::vector<torch::Tensor> current = snapshot(module);
  restore(module, weights);
  try {
    save_checkpoint(module, epoch, folder, name);
  } catch (...) {
    restore(module, current);
    throw;
  }
  restore(module, current);
}

// Where a trial keeps its training state: its checkpoint folder
// (Trial::checkpoint_dir()) opened owner-only, or nullptr when it has none
// or the folder is refused (a warning: the trial trains without saving).
std::unique_ptr<OwnerOnlyFolder> training_state_folder(const Trial* trial) {
  if (!trial || trial->checkpoint_dir().empty()) return nullptr;
  try {
    return std::make_unique<OwnerOnlyFolder>(trial->checkpoint_dir(), true);
  } catch (const std::exception& e) {
    spdlog::warn("trial {}: no training state is saved (a retry starts from scratch): {}",
                 trial->number(), e.what());
    return nullptr;
  }
}

// The loop state a retry of `trial` (trial.resume_step() set) continues
// from: the training state in `state_folder` loaded into `run` and *best.
// When it cannot be used: a warning naming the file and the reason,
// nullopt, and `run` started again (from scratch, epoch 1). *bytes_out
// (when given) receives the file's bytes when they were loaded.
std::optional<EpochLoopState> resume_run(const FashionMnistState& s, const TrainingParams& p,
                                         std::uint64_t seed, const Trial& trial,
                                         const OwnerOnlyFolder& state_folder,
                                         const std::string& fingerprint, TrainingRun& run,
                                         std::vector<torch::Tensor>& best,
                                         std::string* bytes_out = nullptr) {
  const std::int64_t step = *trial.resume_step();
  const std::string path = state_folder.path() + "/" + kTrainingStateFile;
  try {
    const std::string bytes =
        state_folder.read_file(kTrainingStateFile, max_training_state_bytes(*run.model.ptr()));
    EpochLoopState st = load_training_state(run, bytes, fingerprint, s.device, &best);
    if (st.epoch > step)
      throw Error(fmt::format("holds epoch {}, later than the snapshot's step {}", st.epoch, step));
    if (st.epoch < step)
      spdlog::warn(
          "trial {}: training state {} holds epoch {}, the snapshot is of step {}: epochs {}..{} "
          "are trained again (their reports keep the first values)",
          trial.number(), path, st.epoch, step, st.epoch + 1, step);
    spdlog::info("trial {}: resuming from the training state of epoch {} ({})", trial.number(),
                 st.epoch, path);
    if (bytes_out) *bytes_out = bytes;
    return st;
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // no path twice
    spdlog::warn(
        "trial {}: training state {} not usable: {}; training from scratch (epoch 1; the "
        "reports of epochs 1..{} keep their first values)",
        trial.number(), path, why, step);
    run = start_run(s, p, seed);
    best.clear();
    return std::nullopt;
  }
}

// One epoch of data parallel training on this rank ("Data parallel
// training" in torch_objectives.h): the epoch's order from the trial's
// shuffle generator (the same on every rank), each global batch of
// `batch` images split into world_size contiguous shards, this rank's
// shard's mean loss backpropagated, the gradients weighted by the shard's
// share and summed over the ranks, one optimizer step; then the losses and
// the validation sums over the ranks' shards.
EpochMetrics run_epoch_data_parallel(const FashionMnistState& s, TrainingRun& run,
                                     torch_dist::ProcessGroup& group, std::int64_t batch,
                                     std::int64_t epoch, std::uint64_t seed) {
  const PreparedData& d = *s.data;
  const std::int64_t n = d.train_x.size(0);
  const std::int64_t rank = group.rank();
  const std::int64_t world = group.world_size();
  torch::nn::AnyModule& model = run.model;
  torch::nn::Module& module = *model.ptr();
  // Rank 0 draws its dropout masks as one process does; the others from a
  // stream of their own, reseeded each epoch (so a resumed rank draws as
  // it would have).
  if (rank != 0 && run.dropout_gen) {
    std::lock_guard<std::mutex> lock(run.dropout_gen->mutex());
    run.dropout_gen->set_current_seed(
        splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(rank) << 32 |
                                     static_cast<std::uint64_t>(epoch))));
  }
  module.train();
  auto perm = torch::randperm(n, run.shuffle_gen, torch::kInt64).to(s.device);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(s.device));
  std::int64_t b = 0;
  for (std::int64_t start = 0; start < n; start += batch, ++b) {
    if (g_batch_hook) g_batch_hook(epoch, b);
    const std::int64_t global = std::min(n, start + batch) - start;
    const std::int64_t lo = start + global * rank / world;
    const std::int64_t hi = start + global * (rank + 1) / world;
    run.optimizer->zero_grad();
    if (hi > lo) {
      auto idx = perm.slice(0, lo, hi);
      auto x = d.train_x.index_select(0, idx);
      auto y = d.train_y.index_select(0, idx);
      auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
      loss.backward();
      loss_sum += loss.detach().to(torch::kFloat64) * static_cast<double>(hi - lo);
    }
    group.all_reduce_gradients(module, static_cast<double>(hi - lo) / static_cast<double>(global));
    run.optimizer->step();
  }
  // This rank's part of the validation set.
  const std::int64_t n_val = d.val_x.size(0);
  const std::int64_t vlo = n_val * rank / world;
  const std::int64_t vhi = n_val * (rank + 1) / world;
  double val_loss_sum = 0.0;
  std::int64_t correct = 0;
  if (vhi > vlo)
    std::tie(val_loss_sum, correct) = score_sums(
        model, d.val_x.slice(0, vlo, vhi), d.val_y.slice(0, vlo, vhi), s.config.eval_batch_size);
  torch::Tensor sums = torch::zeros({3}, torch::kFloat64);
  sums[0] = loss_sum.item<double>();
  sums[1] = val_loss_sum;
  sums[2] = static_cast<double>(correct);
  group.all_reduce_sum(sums, "metrics all-reduce");
  EpochMetrics m;
  m.train_loss = sums[0].item<double>() / static_cast<double>(n);
  m.val_loss = sums[1].item<double>() / static_cast<double>(n_val);
  m.val_accuracy = sums[2].item<double>() / static_cast<double>(n_val);
  spdlog::debug("epoch {} (rank {} of {}): train_loss {:.4f} val_loss {:.4f} val_accuracy {:.4f}",
                epoch, rank, world, m.train_loss, m.val_loss, m.val_accuracy);
  return m;
}

// The decision every rank follows after `epoch`: rank 0's, with the
// digests of every rank's parameters, in one all-reduce (slot r: rank r's
// digest, the last slot: rank 0's decision). Throws Error when a rank's
// parameters differ from rank 0's.
EpochDecision agree_on_epoch(torch_dist::ProcessGroup& group, const torch::nn::Module& module,
                             std::int64_t epoch, EpochDecision local) {
  const int world = group.world_size();
  torch::Tensor t = torch::zeros({world + 1}, torch::kInt64);
  const std::uint64_t digest = torch_dist::parameter_digest(module);
  std::int64_t as_int = 0;
  std::memcpy(&as_int, &digest, sizeof as_int);
  t[group.rank()] = as_int;
  if (group.rank() == 0) t[world] = static_cast<std::int64_t>(local);
  group.all_reduce_sum(t, "the decision after an epoch");
  const auto* v = t.data_ptr<std::int64_t>();
  for (int r = 1; r < world; ++r)
    if (v[r] != v[0])
      throw Error(fmt::format(
          "data parallel training: the parameters of rank {} differ from rank 0's after epoch {} "
          "(digests {:016x} and {:016x})",
          r, epoch, static_cast<std::uint64_t>(v[r]), static_cast<std::uint64_t>(v[0])));
  const std::int64_t decision = v[world];
  if (decision < 0 || decision > static_cast<std::int64_t>(EpochDecision::kDiverged))
    throw Error(
        fmt::format("data parallel training: rank 0 sent the unknown decision {}", decision));
  return static_cast<EpochDecision>(decision);
}

// Trains one model: returns the outcome and the model (with its final
// weights); keeps the best epoch's weights in *best_weights when given, and
// in the checkpoint file `checkpoint` when not empty (a write error is a
// warning; the trial goes on without a checkpoint). With a trial that has a
// checkpoint folder, saves the training state there each epoch before its
// report, and, on a retry (trial->resume_step()), continues from the state
// found there (see "Resume" in torch_objectives.h). With `group` (a rank
// of a multi-process trial): trains data parallel ("Data parallel
// training" in torch_objectives.h); only rank 0 may be given `folder`.
TrainingOutcome train(const FashionMnistState& s, const TrainingParams& p, std::uint64_t seed,
                      Trial* trial, torch::nn::AnyModule* model_out,
                      std::vector<torch::Tensor>* best_weights,
                      const OwnerOnlyFolder* folder = nullptr, const std::string& checkpoint = {},
                      torch_dist::ProcessGroup* group = nullptr) {
  const PreparedData& d = *s.data;
  TrainingRun run = start_run(s, p, seed);
  const std::int64_t n = d.train_x.size(0);
  const std::int64_t batch = std::min<std::int64_t>(p.batch_size, n);
  const int rank = group ? group->rank() : 0;
  const int world = group ? group->world_size() : 1;
  bool save = folder != nullptr && !checkpoint.empty();
  // A best-epoch checkpoint that cannot be written: the trial goes on without.
  auto drop_checkpoint = [&](const std::exception& e) {
    spdlog::warn("cannot write checkpoint {}/{} (the trial goes on without one): {}",
                 folder->path(), checkpoint, e.what());
    remove_checkpoint(*folder, checkpoint);
    save = false;
  };

  // The full training state (issue #43): saved when the runner gives the
  // trial a checkpoint folder; loaded on a retry.
  // Only rank 0 has the lineage's folder (the runner gives it to rank 0).
  const std::unique_ptr<OwnerOnlyFolder> state_folder =
      rank == 0 ? training_state_folder(trial) : nullptr;
  const std::string fingerprint = state_folder || group ? training_fingerprint(s, p, seed) : "";
  // The best epoch's weights, kept when they are asked for or saved.
  std::vector<torch::Tensor> best;
  const bool keep_best = best_weights != nullptr || state_folder != nullptr;
  EpochLoopResume resume;
  std::string resumed_bytes;  // the training state rank 0 resumed from
  if (state_folder && trial->resume_step()) {
    resume.from = resume_run(s, p, seed, *trial, *state_folder, fingerprint, run, best,
                             group ? &resumed_bytes : nullptr);
    // The best-epoch checkpoint of this trial holds the restored best
    // weights, as it would after an uninterrupted run.
    if (resume.from && save) {
      try {
        save_weights_checkpoint(*run.model.ptr(), best, resume.from->best_epoch, *folder,
                                checkpoint);
      } catch (const std::exception& e) {
        drop_checkpoint(e);
      }
    }
  }
  if (group) {
    // Every rank continues from rank 0's state: its training state (on a
    // retry that could use one; empty otherwise), then its weights.
    resumed_bytes = group->broadcast_bytes(resumed_bytes, "sending rank 0's training state");
    if (rank != 0 && !resumed_bytes.empty())
      resume.from = load_training_state(run, resumed_bytes, fingerprint, s.device, &best);
    group->broadcast_module(*run.model.ptr());
  }
  torch::nn::AnyModule& model = run.model;
  torch::nn::Module& module = *model.ptr();

  auto run_epoch = [&](std::int64_t epoch) {
    if (group) return run_epoch_data_parallel(s, run, *group, batch, epoch, seed);
    module.train();
    auto perm = torch::randperm(n, run.shuffle_gen, torch::kInt64).to(s.device);
    // Summed on the device: no host synchronisation per batch.
    auto loss_sum =
        torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(s.device));
    std::int64_t b = 0;
    for (std::int64_t start = 0; start < n; start += batch, ++b) {
      if (g_batch_hook) g_batch_hook(epoch, b);
      auto idx = perm.slice(0, start, std::min(n, start + batch));
      auto x = d.train_x.index_select(0, idx);
      auto y = d.train_y.index_select(0, idx);
      run.optimizer->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
      loss.backward();
      run.optimizer->step();
      loss_sum += loss.detach().to(torch::kFloat64) * static_cast<double>(idx.size(0));
    }
    EpochMetrics m;
    m.train_loss = loss_sum.item<double>() / static_cast<double>(n);
    std::tie(m.val_loss, m.val_accuracy) = score(model, d.val_x, d.val_y, s.config.eval_batch_size);
    spdlog::debug("epoch {}: train_loss {:.4f} val_loss {:.4f} val_accuracy {:.4f}", epoch,
                  m.train_loss, m.val_loss, m.val_accuracy);
    return m;
  };
  auto on_best = [&](std::int64_t epoch) {
    if (keep_best) best = snapshot(module);
    if (!save) return;
    try {
      save_checkpoint(module, epoch, *folder, checkpoint);
    } catch (const std::exception& e) {
      drop_checkpoint(e);
    }
  };
  bool state_warned = false;
  if (state_folder) {
    resume.save_state = [&](const EpochLoopState& st) {
      try {
        save_training_state(run, st, best, fingerprint, s.device, *state_folder);
      } catch (const std::exception& e) {
        // The folder keeps the previous epoch's state (the file is replaced
        // atomically): a retry resumes from there.
        if (!state_warned)
          spdlog::warn(
              "trial {}: cannot save the training state of epoch {} in {} (a retry resumes "
              "from an earlier epoch): {}",
              trial->number(), st.epoch, state_folder->path(), e.what());
        state_warned = true;
      }
    };
  }
  std::function<EpochDecision(std::int64_t, EpochDecision)> agree;
  std::int64_t in_sync = 0;
  if (group) {
    agree = [&](std::int64_t epoch, EpochDecision local) {
      const EpochDecision decision = agree_on_epoch(*group, module, epoch, local);
      ++in_sync;
      if (trial && rank == 0) trial->set_user_attr("ranks_in_sync_epochs", in_sync);
      return decision;
    };
    if (trial && rank == 0) trial->set_user_attr("processes", world);
  }
  TrainingOutcome out = run_epochs(trial, s.config.max_epochs, s.metric, s.config.early_stopping,
                                   run_epoch, on_best, resume, agree);
  if (best_weights) *best_weights = best;
  if (model_out) *model_out = model;
  return out;
}

// A rank whose process group failed (`error`): a peer was lost, or timed
// out. When a peer's worker was lost, the coordinator ends the trial as a
// lost rank and retries it as a whole (docs "Multi-process trials"); this
// rank's own failure, sent first, would end it as an exception of the
// objective, which is not retried. So the rank waits, at most the group's
// timeout, for the coordinator to stop the trial (Trial::should_prune()
// then throws Interrupted), and only then fails with `error`.
void await_trial_end(Trial& trial, const torch_dist::ProcessGroup& group, const Error& error) {
  const double timeout_s = group.timeout_s();
  spdlog::warn("trial {}: {}; waiting up to {:g} s for the trial to be ended", trial.number(),
               error.what(), timeout_s);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (std::chrono::steady_clock::now() < deadline) {
    (void)trial.should_prune();  // throws Interrupted once the trial was stopped
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Objective make_fashion_mnist_objective(const Json& config, const SearchSpace& space,
                                       const ObjectiveContext& context) {
  auto state = oom_guard([&] { return make_state(config, space, context); });
  spdlog::info(
      "{}: {} model, {} training and {} validation images, metric {}, device {}, {} threads",
      kFashionMnistType, state->config.model, state->data->train_x.size(0),
      state->data->val_x.size(0), to_string(state->metric), state->device.str(),
      at::get_num_threads());
  std::shared_ptr<const OwnerOnlyFolder> folder_all = checkpoint_folder(state->config, context);
  if (folder_all) spdlog::info("{}: checkpoints in {}", kFashionMnistType, folder_all->path());
  return [state, folder_all](Trial& trial) -> double {
    const TrainingParams p = TrainingParams::from_params(trial.params(), state->space);
    const std::uint64_t seed = trial_seed(state->config.seed, trial.params());
    // A rank of a multi-process trial: its process group; only rank 0
    // writes the best-epoch checkpoint file.
    std::unique_ptr<torch_dist::ProcessGroup> group;
    if (trial.ranks() && trial.ranks()->world_size > 1)
      group = torch_dist::ProcessGroup::join(*trial.ranks(), state->config.process_group_timeout_s,
                                             state->device);
    const std::shared_ptr<const OwnerOnlyFolder> folder =
        group && group->rank() != 0 ? nullptr : folder_all;
    trial.set_user_attr("lr_effective", p.lr_effective);
    trial.set_user_attr("n_train", state->data->train_x.size(0));
    const std::string checkpoint = folder ? checkpoint_name(trial.number()) : "";
    // An earlier study's trial of the same number.
    if (folder) remove_checkpoint(*folder, checkpoint);
    TrainingOutcome out;
    try {
      out = oom_guard([&] {
        return train(*state, p, seed, &trial, nullptr, nullptr, folder.get(), checkpoint,
                     group.get());
      });
    } catch (const Error& e) {
      if (folder) remove_checkpoint(*folder, checkpoint);  // FAIL: keep no file
      if (group && group->failed()) await_trial_end(trial, *group, e);
      throw;
    } catch (...) {
      if (folder) remove_checkpoint(*folder, checkpoint);  // PRUNED or FAIL: keep no file
      throw;
    }
    if (folder && folder->is_regular_file(checkpoint))
      trial.set_user_attr("checkpoint", folder->path() + "/" + checkpoint);
    return out.best_value;
  };
}

namespace {

// The test split, normalized as the training part, on the state's device.
std::pair<torch::Tensor, torch::Tensor> test_split(const FashionMnistState& state) {
  auto test_raw = load_cached(state.config.data_dir, false);
  const PreparedData& d = *state.data;
  if (static_cast<std::int64_t>(test_raw->rows) != d.rows ||
      static_cast<std::int64_t>(test_raw->cols) != d.cols)
    throw Error(fmt::format("{}: test images are {}x{} but training images are {}x{}",
                            state.config.data_dir, test_raw->rows, test_raw->cols, d.rows, d.cols));
  std::vector<std::size_t> all(test_raw->n);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  auto [tx, ty] = select(*test_raw, all);
  tx = tx.sub_(d.mean).div_(d.std).to(state.device);
  ty = ty.to(state.device);
  return {tx, ty};
}

}  // namespace

TestEvaluation evaluate_on_test_set(const Json& config, const SearchSpace& space,
                                    const Params& params, const ObjectiveContext& context) {
  auto state = oom_guard([&] { return make_state(config, space, context); });
  const TrainingParams p = TrainingParams::from_params(params, space);
  const std::uint64_t seed = trial_seed(state->config.seed, params);
  return oom_guard([&] {
    auto [tx, ty] = test_split(*state);
    torch::nn::AnyModule model;
    std::vector<torch::Tensor> best_weights;
    TrainingOutcome out = train(*state, p, seed, nullptr, &model, &best_weights);
    restore(*model.ptr(), best_weights);
    TestEvaluation e;
    std::tie(e.test_loss, e.test_accuracy) = score(model, tx, ty, state->config.eval_batch_size);
    e.best_epoch = out.best_epoch;
    e.val_loss = out.best.val_loss;
    e.val_accuracy = out.best.val_accuracy;
    return e;
  });
}

TestEvaluation evaluate_checkpoint_on_test_set(const Json& config, const SearchSpace& space,
                                               const Params& params, const std::string& path,
                                               const ObjectiveContext& context) {
  auto state = oom_guard([&] { return make_state(config, space, context); });
  const TrainingParams p = TrainingParams::from_params(params, space);
  return oom_guard([&] {
    const PreparedData& d = *state->data;
    torch::nn::AnyModule model = make_model(state->config.model, p, d.rows, d.cols, c10::nullopt);
    TestEvaluation e;
    e.best_epoch = load_checkpoint(*model.ptr(), path, state->device);
    model.ptr()->to(state->device);
    auto [tx, ty] = test_split(*state);
    std::tie(e.val_loss, e.val_accuracy) =
        score(model, d.val_x, d.val_y, state->config.eval_batch_size);
    std::tie(e.test_loss, e.test_accuracy) = score(model, tx, ty, state->config.eval_batch_size);
    e.scored_from = "checkpoint";
    return e;
  });
}

namespace {

// The largest difference between a checkpoint's recomputed validation
// accuracy and the trial's recorded one that is taken as the same weights
// (12 of 6,000 images: other thread counts can flip a borderline image).
constexpr double kCheckpointValTolerance = 0.002;

// Scores the best trial's checkpoint; throws when there is none or it is
// not usable (see register_torch_objectives in torch_objectives.h).
TestEvaluation score_checkpoint(const Json& config, const SearchSpace& space,
                                const FrozenTrial& best, const std::string& path,
                                const ObjectiveContext& context) {
  TestEvaluation e = evaluate_checkpoint_on_test_set(config, space, best.params, path, context);
  auto it = best.user_attrs.find("val_accuracy");
  if (it != best.user_attrs.end() && it->is_number() &&
      std::abs(it->get<double>() - e.val_accuracy) > kCheckpointValTolerance)
    throw Error(
        fmt::format("checkpoint {}: its validation accuracy {:.4f} is not the trial's {:.4f}", path,
                    e.val_accuracy, it->get<double>()));
  return e;
}

}  // namespace

// The post-study hook of torch.fashion_mnist: scores the best trial on the
// test set from its checkpoint, or by retraining it, unless an earlier run
// did.
Json score_best_trial_on_test_set(const Json& config, const SearchSpace& space, const Study&,
                                  const FrozenTrial& best, const ObjectiveContext& context,
                                  std::ostream& out) {
  if (best.user_attrs.contains("test_accuracy")) return Json();
  if (auto it = best.user_attrs.find("checkpoint");
      it != best.user_attrs.end() && it->is_string()) {
    const std::string path = it->get<std::string>();
    out << "Scoring the best trial (" << best.number << ") on the test set from its checkpoint "
        << path << std::endl;
    try {
      return score_checkpoint(config, space, best, path, context).to_user_attrs();
    } catch (const std::exception& e) {
      spdlog::warn("{}; retraining trial {}", e.what(), best.number);
      out << "Checkpoint not usable: " << e.what() << "; retraining" << std::endl;
    }
  }
  out << "Scoring the best trial (" << best.number << ") on the test set by retraining it..."
      << std::endl;
  // The retrained model is the trial's own when `context` has the trial's
  // threads and device (hpsearch run passes every core of this machine).
  return evaluate_on_test_set(config, space, best.params, context).to_user_attrs();
}

void register_torch_objectives() {
  ObjectiveType t;
  t.type = kFashionMnistType;
  t.description =
      "LibTorch MLP or CNN on Fashion-MNIST (or MNIST) with early stopping; value: the best "
      "val_loss or val_accuracy";
  t.validate = [](const Json& config, const SearchSpace& space) {
    check_named_checkpoint_dir(FashionMnistConfig::from_json(config, space));
  };
  t.make = make_fashion_mnist_objective;
  t.after_study.name = "test set evaluation";
  t.after_study.run = score_best_trial_on_test_set;
  register_objective_type(std::move(t));
}

namespace torch_testing {
void set_batch_hook(std::function<void(std::int64_t, std::int64_t)> hook) {
  g_batch_hook = std::move(hook);
}
void clear_data_cache() {
  std::scoped_lock lock(g_raw_mu, g_prepared_mu);
  g_raw.clear();
  g_prepared.clear();
}
std::int64_t data_loads() { return g_loads.load(); }
}  // namespace torch_testing

}  // namespace hps
