// Tests of the trial_param_sets blob encoding (search/sqlite/param_set.h):
// values round-trip exactly (JSON type and float bits), the layout is the
// one documented, and no damaged blob (every truncation, every byte
// changed to every value) crashes or throws anything but StorageError.
#include "search/sqlite/param_set.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "search/errors.h"
#include "search/json_util.h"

namespace hps::sqlite {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string encode(const std::vector<std::pair<std::string, Json>>& params) {
  std::string out;
  append_param_set_header(out, params.size());
  std::int64_t id = 0;
  for (const auto& [name, value] : params) {
    append_param_key(out, name, id++);
    append_param_value(out, value, "param '" + name + "'");
  }
  return out;
}

// Decodes every param; throws what the reader throws.
std::vector<std::pair<std::string, Json>> decode(const std::string& blob) {
  const Where where{"trial_param_sets", "trial_id", 7};
  ParamSetReader reader(blob, where);
  std::vector<std::pair<std::string, Json>> out;
  while (reader.next()) out.emplace_back(std::string(reader.name()), reader.value());
  return out;
}

std::string describe(const Json& v) {
  std::string s = v.dump() + ":" + std::to_string(static_cast<int>(v.type()));
  if (v.is_number_float()) s += ":" + std::to_string(std::bit_cast<std::uint64_t>(v.get<double>()));
  return s;
}

const std::vector<std::pair<std::string, Json>>& samples() {
  static const std::vector<std::pair<std::string, Json>> params = {
      {"a_null", Json()},
      {"b_true", Json(true)},
      {"c_false", Json(false)},
      {"d_neg_zero", Json(-0.0)},
      {"e_denormal", Json(4.9e-324)},
      {"f_inf", Json(kInf)},
      {"g_minus_inf", Json(-kInf)},
      {"h_float", Json(0.1)},
      {"i_int", Json(42)},
      {"j_neg", Json(-42)},
      {"k_min", Json(std::numeric_limits<std::int64_t>::min())},
      {"l_umax", Json(std::numeric_limits<std::uint64_t>::max())},
      {"m_string", Json("relu")},
      {"n_utf8", Json("\u00e9t\u00e9")},
      {"o_array", Json::array({1, "x", nullptr, 2.5})},
      {"p_object", Json{{"k", Json::array({true})}}},
      {"", Json("")},
  };
  return params;
}

// Each value reads back as reading its v3 value_json text gave it: the
// same JSON type (an integer >= 0 as unsigned) and, for a float, the same
// bits.
TEST(ParamSet, ValuesRoundTripExactly) {
  const auto decoded = decode(encode(samples()));
  ASSERT_EQ(decoded.size(), samples().size());
  for (std::size_t k = 0; k < decoded.size(); ++k) {
    const auto& [name, value] = samples()[k];
    EXPECT_EQ(decoded[k].first, name);
    Json want = value.is_number_float() ? value : parse_json_nonfinite(value.dump());
    EXPECT_EQ(describe(decoded[k].second), describe(want)) << name;
    EXPECT_EQ(describe(stored_param_value(value, name)), describe(want)) << name;
  }
}

TEST(ParamSet, TheLayoutIsTheDocumentedOne) {
  std::string blob;
  append_param_set_header(blob, 2);
  append_param_key(blob, "lr", 3);
  append_param_value(blob, Json(-0.0), "lr");
  append_param_key(blob, "n", kNoDistribution);
  append_param_value(blob, Json(-2), "n");
  const std::string want(
      "\x01\x02"
      "\x02lr\x03"
      "\x03\x00\x00\x00\x00\x00\x00\x00\x80"
      "\x01n\x00"
      "\x05\x01",
      20);
  EXPECT_EQ(blob, want);
}

TEST(ParamSet, NaNAndInvalidUtf8AreRefusedOnWrite) {
  std::string out;
  try {
    append_param_value(out, Json(std::nan("")), "param 'x'");
    ADD_FAILURE() << "NaN accepted";
  } catch (const StorageError& e) {
    EXPECT_EQ(std::string(e.what()), "param 'x': value must not be NaN");
  }
  EXPECT_THROW(append_param_value(out, Json(std::string("\xff")), "param 'x'"), StorageError);
  EXPECT_TRUE(out.empty());
}

// Every prefix, and every byte set to every value: a StorageError or a
// decoded set, never another exception or a crash (run under ASan by the
// asan preset).
// Found by fuzz_param_set: JSON text (tag 7) of "-0" parsed as a signed
// integer 0, written back as tag 4 and read as unsigned; and a NUL byte
// ended the text, so what followed it was ignored.
TEST(ParamSet, JsonTextReadsAsItsValueWrittenBackReads) {
  for (const std::string text : {"-0", "0", "7"}) {
    std::string blob;
    append_param_set_header(blob, 1);
    append_param_key(blob, "x", 1);
    append_param_json_text(blob, text);
    const Json read = decode(blob).at(0).second;
    EXPECT_EQ(describe(read), describe(stored_param_value(read, "x"))) << text;
    EXPECT_TRUE(read.is_number_unsigned()) << text;
  }
  std::string blob;
  append_param_set_header(blob, 1);
  append_param_key(blob, "x", 1);
  append_param_json_text(blob, std::string("-0\0junk", 7));
  try {
    decode(blob);
    ADD_FAILURE() << "a NUL byte in JSON text was accepted";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("NUL byte"), std::string::npos) << e.what();
  }
}

TEST(ParamSet, DamagedBlobsGiveStorageErrorsOnly) {
  const std::string blob = encode(samples());
  for (std::size_t n = 0; n < blob.size(); ++n) {
    EXPECT_THROW(decode(blob.substr(0, n)), StorageError) << n;
  }
  std::size_t refused = 0;
  for (std::size_t at = 0; at < blob.size(); ++at) {
    for (int byte = 0; byte < 256; ++byte) {
      std::string damaged = blob;
      damaged[at] = static_cast<char>(byte);
      try {
        for (const auto& [name, value] : decode(damaged)) (void)value.dump();
      } catch (const StorageError& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("trial_param_sets row trial_id=7"), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_GT(refused, 0u);
}

}  // namespace
}  // namespace hps::sqlite
