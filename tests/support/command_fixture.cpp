#include "tests/support/command_fixture.h"

#include <stdlib.h>

#include <fstream>

namespace hps::testsupport {

namespace fs = std::filesystem;

void CommandFixture::SetUp() {
  std::string tmpl = "/tmp/hps_" + label_ + "_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
  context_.study_name = label_;
  context_.log_dir = (dir_ / "logs").string();
  context_.direction = StudyDirection::kMinimize;
}

void CommandFixture::TearDown() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Json CommandFixture::script_argv(const std::string& body, const std::vector<std::string>& args) {
  const fs::path script = dir_ / ("script" + std::to_string(n_scripts_++) + ".sh");
  std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
  Json argv = Json::array({"/bin/sh", script.string()});
  for (const std::string& a : args) argv.push_back(a);
  return argv;
}

TrialPtr CommandFixture::run_trial(const Json& objective, const SearchSpace& space,
                                   const Params& params, std::shared_ptr<Pruner> pruner,
                                   StudyDirection direction) {
  StudyOptions options;
  options.space = space;
  options.pruner = std::move(pruner);
  Study study = Study::create(std::make_shared<InMemoryStorage>(), "s", direction, options);
  study.enqueue_trial(params);
  context_.direction = direction;
  Objective f = make_objective(objective, space, context_);
  study.optimize(f, {.n_trials = 1, .catch_exceptions = true});
  auto trials = study.trials();
  EXPECT_EQ(trials.size(), 1u);
  return trials.empty() ? nullptr : trials.back();
}

fs::path CommandFixture::log_of(const TrialPtr& t) const {
  return dir_ / "logs" / ("trial-" + std::to_string(t->number) + ".log");
}

}  // namespace hps::testsupport
