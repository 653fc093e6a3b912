// Embedding hpsearch in a C++ program: a define-by-run study over a toy
// function, run in-process with the Study API.
//
//   embed            keeps the study in memory
//   embed FILE.db    stores it in SQLite (a second run continues the study)
//
// Prints the best value and params. Exits 0 only if the search found a value
// that 50 random trials find with near certainty, and the stored best agrees
// with the objective recomputed from its params.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "search/errors.h"
#include "search/storage.h"
#include "search/study.h"

namespace {

// Minimum 0 at x = 2, n = 3, kind = "a"; at most 12^2 + 2^2 + 1 = 149.
double toy(double x, std::int64_t n, const std::string& kind) {
  return (x - 2) * (x - 2) + static_cast<double>((n - 3) * (n - 3)) + (kind == "a" ? 0.0 : 1.0);
}

// P(one random trial scores < 20) > 0.37, so 50 trials all miss with
// probability < 1e-10.
constexpr double kPlausibleBest = 20.0;
constexpr std::int64_t kTrials = 50;

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string url = argc > 1 ? argv[1] : ":memory:";
    auto storage = hps::open_storage(url);
    // A new study in memory; with a file, continue the study if it exists.
    hps::Study study =
        url == ":memory:"
            ? hps::Study::create(storage, "embed-demo", hps::StudyDirection::kMinimize)
            : hps::Study::load_if_exists(storage, "embed-demo", hps::StudyDirection::kMinimize);

    study.optimize(
        [](hps::Trial& t) {
          double x = t.suggest_float("x", -10, 10);
          std::int64_t n = t.suggest_int("n", 1, 5);
          std::string kind = t.suggest_categorical("kind", {"a", "b"}).get<std::string>();
          return toy(x, n, kind);
        },
        {.n_trials = kTrials});

    hps::TrialPtr best = study.best_trial();
    std::printf("trials finished: %lld\n", static_cast<long long>(study.n_finished()));
    std::printf("best value: %.6g (trial %lld)\n", *best->value,
                static_cast<long long>(best->number));
    for (const auto& [name, value] : best->params) {
      std::printf("  %s = %s\n", name.c_str(), value.dump().c_str());
    }

    const double recomputed =
        toy(best->params.at("x").get<double>(), best->params.at("n").get<std::int64_t>(),
            best->params.at("kind").get<std::string>());
    if (study.n_finished() < kTrials) {
      std::fprintf(stderr, "error: expected at least %lld finished trials\n",
                   static_cast<long long>(kTrials));
      return 1;
    }
    if (!(std::isfinite(*best->value) && *best->value >= 0 && *best->value < kPlausibleBest)) {
      std::fprintf(stderr, "error: best value %g is not in [0, %g)\n", *best->value,
                   kPlausibleBest);
      return 1;
    }
    if (recomputed != *best->value) {
      std::fprintf(stderr, "error: best value %.17g but its params give %.17g\n", *best->value,
                   recomputed);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
