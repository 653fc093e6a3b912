// hpsearch keys init DIR / hpsearch keys add DIR: CURVE keys for remote
// workers (protocol/curve_keys.h), and the commands that use them.
#include <iostream>

#include "cli/commands.h"
#include "protocol/curve_keys.h"

namespace hps::cli {

int keys_command(const KeysOptions& o) {
  curve::MadeKeys made = curve::make_keys(o.dir, o.workers, o.add);
  if (made.new_coordinator)
    std::cout << "Made the coordinator's key pair in " << o.dir << "/ ("
              << curve::kCoordinatorSecretFile << " stays on the coordinator's machine).\n";
  std::cout << "Made " << made.workers.size() << " worker key pair"
            << (made.workers.size() == 1 ? ", in its own folder," : "s, each in its own folder,")
            << " and listed " << (made.workers.size() == 1 ? "it" : "them") << " in " << o.dir
            << "/" << curve::kAuthorizedWorkersFile << ":\n";
  for (const auto& w : made.workers) std::cout << "  " << w << "/\n";
  const std::string first = made.workers.front();
  std::cout << "\nNext:\n"
            << "  1. on the coordinator's machine:\n"
            << "       hpsearch run space.json --workers 0 --bind tcp://0.0.0.0:5555 --keys "
            << o.dir << "\n"
            << "  2. copy one worker folder to each worker machine (owner-only, e.g.):\n"
            << "       scp -rp " << first << " worker-host:hpsearch-keys\n"
            << "  3. on that worker machine:\n"
            << "       hpsearch worker --connect tcp://COORDINATOR-HOST:5555 --keys hpsearch-keys"
               " --allow-command\n"
            << "     (--allow-command: it may run a command objective's programs)\n"
            << "Add workers later with: hpsearch keys add " << o.dir << " --workers N "
            << "(restart the coordinator to admit them).\n";
  return kExitOk;
}

}  // namespace hps::cli
