// Shared parts of the command objective's tests (tests/command_*_test.cpp):
// a pruner that stops trials at a step, and a fixture with a scratch
// directory, scripts written into it and one-trial studies.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "objectives/objective.h"
#include "search/pruner.h"
#include "search/study.h"

namespace hps::testsupport {

// Prunes every trial once it reports step >= `from`.
class PruneFromStep : public Pruner {
 public:
  explicit PruneFromStep(std::int64_t from) : from_(from) {}
  bool prune(const PruningContext& ctx) override { return ctx.step >= from_; }
  std::string name() const override { return "test"; }

 private:
  std::int64_t from_;
};

class CommandFixture : public ::testing::Test {
 protected:
  // `label` names the scratch directory (/tmp/hps_<label>_XXXXXX) and the
  // study of the objective context.
  explicit CommandFixture(std::string label) : label_(std::move(label)) {}
  void SetUp() override;
  void TearDown() override;

  // Writes `body` as a /bin/sh script into the scratch directory and
  // returns the argv running it with `args` (templates such as "{x}").
  Json script_argv(const std::string& body, const std::vector<std::string>& args = {});

  // Runs one trial of `objective` over `space` with `params` enqueued (and
  // `pruner`), in a new in-memory study, and returns it (nullptr, with a
  // test failure, if no trial was stored).
  TrialPtr run_trial(const Json& objective, const SearchSpace& space, const Params& params,
                     std::shared_ptr<Pruner> pruner = nullptr,
                     StudyDirection direction = StudyDirection::kMinimize);

  // The log file of trial `t` in the context's log folder.
  std::filesystem::path log_of(const TrialPtr& t) const;

  std::filesystem::path dir_;
  ObjectiveContext context_;

 private:
  std::string label_;
  int n_scripts_ = 0;
};

}  // namespace hps::testsupport
