// fmnist_epoch: seconds per epoch and images per second of the
// torch.fashion_mnist MLP training loop, and the BLAS library LibTorch runs
// on, so that changes to the training loop can be measured.
//
//   fmnist_epoch [--data DIR] [--threads N] [--epochs N] [--subset N]
//                [--batch 64,256] [--hidden 256] [--layers 1]
//
// Defaults: the full training part of Fashion-MNIST (54,000 images after the
// 10% validation split), one thread, one epoch per batch size, batch sizes
// 64 and 256, one hidden layer of 256 units, Adam. An epoch is timed with its
// validation pass (6,000 images), as a trial runs it. The data are loaded
// before the clock starts.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "objectives/torch_objectives.h"
#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

struct Options {
  std::string data_dir = hps::kFashionMnistDefaultDir;
  int threads = 1;
  std::int64_t epochs = 1;
  std::int64_t subset = 0;
  std::vector<std::int64_t> batches = {64, 256};
  std::int64_t hidden = 256;
  std::int64_t layers = 1;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "fmnist_epoch: " << why
            << "\nusage: fmnist_epoch [--data DIR] [--threads N] [--epochs N] [--subset N] "
               "[--batch 64,256] [--hidden N] [--layers N]\n";
  std::exit(2);
}

std::int64_t parse_int(const std::string& flag, const std::string& text, std::int64_t min) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used != text.size() || v < min) throw std::invalid_argument("range");
    return v;
  } catch (const std::exception&) {
    usage(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'");
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("help");
    if (i + 1 >= argc) usage(flag + ": missing value");
    std::string value = argv[++i];
    if (flag == "--data")
      o.data_dir = value;
    else if (flag == "--threads")
      o.threads = static_cast<int>(parse_int(flag, value, 1));
    else if (flag == "--epochs")
      o.epochs = parse_int(flag, value, 1);
    else if (flag == "--subset")
      o.subset = parse_int(flag, value, 0);
    else if (flag == "--hidden")
      o.hidden = parse_int(flag, value, 1);
    else if (flag == "--layers")
      o.layers = parse_int(flag, value, 1);
    else if (flag == "--batch") {
      o.batches.clear();
      std::stringstream ss(value);
      for (std::string part; std::getline(ss, part, ',');)
        o.batches.push_back(parse_int(flag, part, 1));
      if (o.batches.empty()) usage("--batch: empty list");
    } else {
      usage("unknown option " + flag);
    }
  }
  return o;
}

// The BLAS LibTorch was built for (from its build configuration) and the BLAS
// shared libraries mapped into this process.
void print_blas() {
  // show_config() lists the build settings as "KEY=value, KEY=value, ...".
  std::string config = at::show_config();
  std::string settings;
  for (const char* key : {"BLAS_INFO=", "LAPACK_INFO=", "USE_MKLDNN=", "USE_OPENMP="}) {
    auto pos = config.find(key);
    if (pos == std::string::npos) continue;
    auto end = config.find_first_of(",\n", pos);
    settings += (settings.empty() ? "" : ", ") + config.substr(pos, end - pos);
  }
  std::cout << "LibTorch build settings: " << (settings.empty() ? "unknown" : settings)
            << " (generic: the system's libblas.so.3)\n";
  std::set<std::string> libs;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    std::string file = path.substr(path.rfind('/') + 1);
    if (file.find("blas") != std::string::npos || file.find("mkl") != std::string::npos ||
        file.find("lapack") != std::string::npos)
      libs.insert(path);
  }
  for (const auto& lib : libs) std::cout << "BLAS library mapped: " << lib << "\n";
  if (libs.empty()) std::cout << "BLAS library mapped: none found in /proc/self/maps\n";
}

// CPU seconds used by this process so far (user + system, all threads).
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  try {
    hps::SearchSpace space;
    space.add("hidden", hps::Distribution::make_ordinal({o.hidden}));
    space.add("layers", hps::Distribution::make_ordinal({o.layers}));
    hps::Json config = {{"type", hps::kFashionMnistType}, {"model", "mlp"},
                        {"data_dir", o.data_dir},         {"train_subset", o.subset},
                        {"max_epochs", o.epochs},         {"metric", "val_loss"}};
    hps::ObjectiveContext context;
    context.threads = o.threads;
    hps::SearchSpace full = space;
    full.add("batch_size", hps::Distribution::make_ordinal(
                               std::vector<hps::Json>(o.batches.begin(), o.batches.end())));
    // Loads the data before any timing.
    hps::Objective objective = hps::make_fashion_mnist_objective(config, full, context);

    std::cout << "LibTorch " << TORCH_VERSION << ", intra-op threads " << at::get_num_threads()
              << ", inter-op threads " << at::get_num_interop_threads() << "\n";
    print_blas();
    std::cout << fmt::format("MLP {}x{} hidden, Adam, {} epoch(s) per batch size, data {}\n\n",
                             o.layers, o.hidden, o.epochs, o.data_dir);
    std::cout << fmt::format("{:>6}  {:>10}  {:>12}  {:>12}  {:>10}  {:>12}\n", "batch",
                             "train imgs", "s per epoch", "CPU s/epoch", "images/s",
                             "val_accuracy");
    for (std::int64_t batch : o.batches) {
      auto storage = hps::open_storage("memory");
      hps::StudyOptions so;
      so.space = full;
      auto study = hps::Study::create(storage, fmt::format("bench-{}", batch),
                                      hps::StudyDirection::kMinimize, so);
      study.enqueue_trial({{"hidden", o.hidden}, {"layers", o.layers}, {"batch_size", batch}});
      hps::Trial trial = study.ask();
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = cpu_seconds();
      double value = objective(trial);
      const double cpu = cpu_seconds() - cpu_start;
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      auto done = study.tell(trial, value);
      const auto n_train = done->user_attrs.value("n_train", std::int64_t{0});
      const auto epochs = done->user_attrs.value("epochs_run", o.epochs);
      const double per_epoch = seconds / static_cast<double>(epochs);
      std::cout << fmt::format("{:>6}  {:>10}  {:>12.2f}  {:>12.2f}  {:>10.0f}  {:>12.4f}\n", batch,
                               n_train, per_epoch, cpu / static_cast<double>(epochs),
                               static_cast<double>(n_train) / per_epoch,
                               done->user_attrs.value("val_accuracy", 0.0));
    }
  } catch (const std::exception& e) {
    std::cerr << "fmnist_epoch: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
