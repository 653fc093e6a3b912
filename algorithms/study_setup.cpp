#include "algorithms/study_setup.h"

#include <utility>

#include "algorithms/factory.h"

namespace hps {

Study create_study(const StudyConfig& config, std::shared_ptr<Storage> storage) {
  StudyOptions so;
  so.sampler = make_sampler(config.sampler);
  so.pruner = make_pruner(config.pruner);
  so.space = config.space;
  return Study::create(std::move(storage), config.name, config.direction, so, config.source);
}

}  // namespace hps
