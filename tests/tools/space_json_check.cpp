// space_json_check --objective-types: prints the objective registry's type
// names, one a line (the built-in types and torch.fashion_mnist).
// space_json_check FILE...: reads each file as `hpsearch run` reads a
// space.json before any trial runs (the steps of the fuzz target
// tests/fuzz/fuzz_space_json.cpp: parse_json_text(), StudyConfig::from_json(),
// the sampler, pruner and objective factories) and prints one line per
// file, "accept<TAB>FILE" or "reject<TAB>FILE<TAB>ERROR" (the error's line
// breaks as \n). Exit status 0 when every file was read (accepted or not),
// 2 when one could not be opened.
//
// The schema agreement test (tests/space_schema_test.py) runs it on the
// examples and the fuzz corpus and checks that every file the parser
// accepts, search/space.schema.json accepts too.
//
// The torch.fashion_mnist objective is checked by its own config parser
// (FashionMnistConfig::from_json, objectives/torch_objectives.cpp, compiled
// in: it needs no LibTorch), as the program that registers it does, less
// the checkpoint folder's ownership check, which depends on the machine.
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "algorithms/factory.h"
#include "objectives/objective.h"
#include "objectives/torch_objectives.h"
#include "search/errors.h"
#include "search/json_util.h"
#include "search/search_space.h"

namespace {

void register_torch_config_check() {
  hps::ObjectiveType t;
  t.type = hps::kFashionMnistType;
  t.description = "config check only (space_json_check)";
  t.validate = [](const hps::Json& config, const hps::SearchSpace& space) {
    (void)hps::FashionMnistConfig::from_json(config, space);
  };
  t.make = [](const hps::Json&, const hps::SearchSpace&,
              const hps::ObjectiveContext&) -> hps::Objective {
    throw hps::Error("space_json_check: torch.fashion_mnist is checked, never run");
  };
  hps::register_objective_type(std::move(t));
}

// The reason `text` is refused, or "" when it is accepted.
std::string check(const std::string& text, const std::string& origin) {
  try {
    const hps::Json doc = hps::parse_json_text(text, origin);
    const hps::StudyConfig config = hps::StudyConfig::from_json(doc);
    (void)hps::make_sampler(config.sampler);
    (void)hps::make_pruner(config.pruner);
    hps::validate_objective(config.objective, config.space);
    return "";
  } catch (const hps::Error& e) {
    std::string what = e.what();
    return what.empty() ? "(empty error)" : what;
  }
}

std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  register_torch_config_check();
  if (argc == 2 && std::string(argv[1]) == "--objective-types") {
    for (const std::string& name : hps::objective_type_names()) std::cout << name << "\n";
    return 0;
  }
  int rc = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string file = argv[i];
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "space_json_check: cannot open " << file << "\n";
      rc = 2;
      continue;
    }
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::string error = check(text, file);
    if (error.empty())
      std::cout << "accept\t" << file << "\n";
    else
      std::cout << "reject\t" << file << "\t" << one_line(error) << "\n";
  }
  return rc;
}
