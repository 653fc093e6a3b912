// Tests of search/study_diff.h: what differs between the settings stored
// with a study and a space.json file.
#include "search/study_diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hps {
namespace {

using ::testing::ElementsAre;

Json base() {
  return Json::parse(R"({
    "study": {"name": "s", "direction": "minimize", "storage": "s.db"},
    "sampler": {"type": "tpe", "seed": 1},
    "objective": {"type": "command", "argv": ["python3", "train.py", "--lr", "{lr}"]},
    "space": {
      "lr": {"type": "float", "low": 0.0001, "high": 0.1, "log": true},
      "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
      "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}}
    }
  })");
}

std::vector<std::string> fields(const std::vector<SettingChange>& changes) {
  std::vector<std::string> out;
  for (const SettingChange& c : changes) out.push_back(c.field);
  return out;
}

TEST(StudyDiff, SameDocumentsHaveNoChange) {
  EXPECT_TRUE(settings_changes(base(), base()).empty());
  // Written differently, read the same: 0 for 0.0, the default log false,
  // another storage (it names where the study is, it does not change it).
  Json now = base();
  now["space"]["momentum"]["low"] = 0;
  now["space"]["momentum"]["log"] = false;
  now["study"]["storage"] = "other.db";
  EXPECT_TRUE(settings_changes(base(), now).empty()) << changes_text(settings_changes(base(), now));
}

TEST(StudyDiff, ParamAddedRemovedAndChanged) {
  Json now = base();
  now["space"]["lr"]["low"] = 1e-5;
  now["space"].erase("momentum");
  now["space"]["dropout"] = {{"type", "float"}, {"low", 0.0}, {"high", 0.5}, {"step", 0.05}};
  const auto changes = settings_changes(base(), now);
  EXPECT_THAT(fields(changes), ElementsAre("space.dropout", "space.lr", "space.momentum"));
  EXPECT_EQ(change_text(changes[0]), "space.dropout: added (float [0, 0.5] step 0.05)");
  EXPECT_EQ(change_text(changes[1]), "space.lr: float [0.0001, 0.1] log -> float [1e-05, 0.1] log");
  EXPECT_EQ(change_text(changes[2]),
            "space.momentum: removed (was float [0, 0.99] when optimizer = 'sgd')");
  EXPECT_EQ(space_changes(base(), now).size(), 3U);
}

TEST(StudyDiff, DirectionObjectiveSamplerAndPrunerKeyByKey) {
  Json now = base();
  now["study"]["direction"] = "maximize";
  now["objective"]["argv"][1] = "train2.py";
  now["sampler"]["seed"] = 2;
  now["pruner"] = {{"type", "median"}};
  const auto changes = settings_changes(base(), now);
  EXPECT_THAT(fields(changes),
              ElementsAre("study.direction", "objective.argv[1]", "sampler.seed", "pruner"));
  EXPECT_EQ(change_text(changes[0]), "study.direction: 'minimize' -> 'maximize'");
  // The element that changed, not two lists cut to the same prefix.
  EXPECT_EQ(change_text(changes[1]), "objective.argv[1]: 'train.py' -> 'train2.py'");
  EXPECT_EQ(change_text(changes[2]), "sampler.seed: 1 -> 2");
  EXPECT_EQ(change_text(changes[3]), "pruner: added ({\"type\":\"median\"})");
  EXPECT_TRUE(space_changes(base(), now).empty());
  // A list of another length compares as a whole.
  now["objective"]["argv"].push_back("--epochs");
  EXPECT_EQ(fields(settings_changes(base(), now))[1], "objective.argv");
}

TEST(StudyDiff, AStoredSpaceThatDoesNotParseIsComparedAsWritten) {
  Json stored = base();
  stored["space"]["lr"]["low"] = -1;  // log scale with low < 0: not valid
  const auto changes = settings_changes(stored, base());
  ASSERT_EQ(changes.size(), 1U);
  EXPECT_EQ(changes[0].field, "space.lr");
  EXPECT_EQ(changes[0].stored["low"], -1);
}

TEST(StudyDiff, ParamText) {
  EXPECT_EQ(param_text({{"type", "int"}, {"low", 32}, {"high", 512}, {"step", 32}}),
            "int [32, 512] step 32");
  EXPECT_EQ(param_text({{"type", "ordinal"}, {"values", {16, 32}}}), "ordinal [16, 32]");
  EXPECT_EQ(param_text({{"type", "float"},
                        {"low", 0.001},
                        {"high", 0.1},
                        {"scale_with", {{"param", "bs"}, {"reference", 64}, {"rule", "linear"}}},
                        {"when", {{"opt", {"sgd", "adam"}}}}}),
            "float [0.001, 0.1] when opt in ['sgd', 'adam'] scale_with bs (reference 64, linear)");
  EXPECT_EQ(param_text(Json(3)), "3");  // not an object: as written
}

TEST(StudyDiff, DocumentsThatAreNotObjectsCompareAsAWhole) {
  const auto changes = settings_changes(Json("x"), base());
  ASSERT_EQ(changes.size(), 1U);
  EXPECT_EQ(changes[0].field, "settings");
  EXPECT_TRUE(settings_changes(Json(), Json()).empty());
}

}  // namespace
}  // namespace hps
