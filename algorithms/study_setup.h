// A new Study as a parsed space.json (StudyConfig) describes it: its name,
// direction, search space and source, with the sampler and pruner of its
// "sampler" and "pruner" sections (algorithms/factory.h). The set-up of
// tests and benchmarks that drive a Coordinator directly; the CLI's run
// also resumes an existing study (cli/run_command.cpp, open_study).
#pragma once

#include <memory>

#include "search/search_space.h"
#include "search/storage.h"
#include "search/study.h"

namespace hps {

// Creates the study in `storage`; throws StorageError if its name exists
// there, ConfigError from make_sampler()/make_pruner().
Study create_study(const StudyConfig& config, std::shared_ptr<Storage> storage);

}  // namespace hps
