// Params (search/params.h): the flat, name-sorted map of a trial's params
// behaves as the std::map<std::string, Json> it replaced.
#include "search/params.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace hps {
namespace {

std::vector<std::string> names_of(const Params& p) {
  std::vector<std::string> out;
  for (const auto& [name, value] : p) out.push_back(name);
  return out;
}

TEST(ParamsTest, EntriesAreKeptInNameOrderWhateverTheInsertionOrder) {
  Params p;
  p["lr"] = 0.1;
  p["batch_size"] = 64;
  p["optimizer"] = "sgd";
  p["Z"] = true;  // uppercase sorts before lowercase, as in std::map
  EXPECT_EQ(names_of(p), (std::vector<std::string>{"Z", "batch_size", "lr", "optimizer"}));
  EXPECT_EQ(p.size(), 4U);
  EXPECT_EQ(p.at("batch_size"), Json(64));
  EXPECT_EQ(p.count("lr"), 1U);
  EXPECT_EQ(p.count("momentum"), 0U);
  EXPECT_FALSE(p.contains("momentum"));
  EXPECT_EQ(p.find("momentum"), p.end());
}

TEST(ParamsTest, LookupsAndWritesAgreeWithStdMapOnRandomOperations) {
  std::mt19937_64 rng(7);
  Params p;
  std::map<std::string, Json> m;
  const std::vector<std::string> names = {"a", "b", "aa", "ab", "b0", "", "z", "lr", "x1", "x10"};
  for (int i = 0; i < 5000; ++i) {
    const std::string& name = names[rng() % names.size()];
    const int value = static_cast<int>(rng() % 100);
    switch (rng() % 5) {
      case 0:
        p[name] = value;
        m[name] = value;
        break;
      case 1: {
        const bool inserted = p.emplace(name, value).second;
        EXPECT_EQ(inserted, m.emplace(name, value).second) << name;
        break;
      }
      case 2:
        EXPECT_EQ(p.erase(name), m.erase(name)) << name;
        break;
      case 3: {
        const bool inserted = p.insert_or_assign(name, value).second;
        EXPECT_EQ(inserted, m.insert_or_assign(name, value).second) << name;
        break;
      }
      default:
        EXPECT_EQ(p.count(name), m.count(name)) << name;
    }
    ASSERT_EQ(p.size(), m.size());
    auto it = m.begin();
    for (const auto& [k, v] : p) {
      ASSERT_EQ(k, it->first);
      ASSERT_EQ(v, it->second);
      ++it;
    }
  }
}

TEST(ParamsTest, AtThrowsOutOfRangeForAMissingParam) {
  Params p{{"x", 1.5}};
  EXPECT_EQ(p.at("x"), Json(1.5));
  EXPECT_THROW((void)p.at("y"), std::out_of_range);
  const Params& c = p;
  EXPECT_THROW((void)c.at("y"), std::out_of_range);
}

TEST(ParamsTest, InitializerListKeepsTheFirstOfTwoEntriesWithOneName) {
  Params p{{"x", 1}, {"a", "s"}, {"x", 2}};
  EXPECT_EQ(p.size(), 2U);
  EXPECT_EQ(p.at("x"), Json(1));
  EXPECT_EQ(names_of(p), (std::vector<std::string>{"a", "x"}));
}

TEST(ParamsTest, EqualityComparesNamesAndValues) {
  EXPECT_EQ((Params{{"a", 1}, {"b", "c"}}), (Params{{"b", "c"}, {"a", 1}}));
  EXPECT_NE((Params{{"a", 1}}), (Params{{"a", 2}}));
  EXPECT_NE((Params{{"a", 1}}), (Params{{"b", 1}}));
  EXPECT_NE((Params{{"a", 1}}), (Params{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(Params{}, Params{});
}

TEST(ParamsTest, ConvertsToAndFromAJsonObject) {
  const Params p{{"lr", 0.01}, {"opt", "adam"}, {"n", 3}, {"flag", false}, {"none", nullptr}};
  const Json j = p;
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.dump(), R"({"flag":false,"lr":0.01,"n":3,"none":null,"opt":"adam"})");
  EXPECT_EQ(j.get<Params>(), p);
  EXPECT_EQ(Json(Params{}).dump(), "{}");
  EXPECT_THROW((void)Json::array({1, 2}).get<Params>(), Json::type_error);
  EXPECT_THROW((void)Json(3).get<Params>(), Json::type_error);
}

TEST(ParamsTest, EraseByPositionReturnsTheNextEntry) {
  Params p{{"a", 1}, {"b", 2}, {"c", 3}};
  auto next = p.erase(p.find("b"));
  ASSERT_NE(next, p.end());
  EXPECT_EQ(next->first, "c");
  EXPECT_EQ(names_of(p), (std::vector<std::string>{"a", "c"}));
  p.clear();
  EXPECT_TRUE(p.empty());
}

TEST(ParamsTest, LongNamesAndCopiesAreIndependent) {
  const std::string long_name(100, 'q');
  Params a{{long_name, 1}};
  Params b = a;
  b[long_name] = 2;
  b.shrink_to_fit();
  EXPECT_EQ(a.at(long_name), Json(1));
  EXPECT_EQ(b.at(long_name), Json(2));
}

}  // namespace
}  // namespace hps
