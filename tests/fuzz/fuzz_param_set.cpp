// libFuzzer target: a trial_param_sets blob (schema v4, search/sqlite/
// param_set.h), read as SqliteStorage's reads read it from a store whose
// bytes may be damaged.
//
// The input is the blob. Checks, for every input:
//  - ParamSetReader throws nothing but StorageError (no crash, no UB, no
//    leak, no allocation sized by a damaged length);
//  - an accepted blob holds what its header announces, and each value is
//    a JSON value that dumps (strings are UTF-8); a float is NaN only when
//    read from JSON text (as a v3 value_json "NaN" read before);
//  - re-encoding the accepted params (the same names, distribution ids
//    and values; those without NaN) reads back the same: the writer and
//    the reader agree.
// Run: make test-fuzz, or build/fuzz/tests/fuzz/fuzz_param_set CORPUS_DIR.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "search/errors.h"
#include "search/sqlite/param_set.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_param_set: %s\n", what);
  std::abort();
}

struct Param {
  std::string name;
  std::int64_t distribution_id;
  hps::Json value;
};

// The params of `blob`, or false when the reader refuses it.
bool read(const std::string& blob, std::vector<Param>& out) {
  const hps::sqlite::Where where{"trial_param_sets", "trial_id", 1};
  try {
    hps::sqlite::ParamSetReader reader(blob, where);
    const std::size_t announced = reader.size();
    while (reader.next())
      out.push_back({std::string(reader.name()), reader.distribution_id(), reader.value()});
    if (out.size() != announced) fail("read a count other than the header's");
    return true;
  } catch (const hps::StorageError&) {
    return false;
  } catch (...) {
    fail("ParamSetReader threw something other than StorageError");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  std::vector<Param> params;
  if (!read(blob, params)) return 0;
  for (const auto& p : params) {
    // A NaN float: only from JSON text (tag 7), which the writer never
    // makes of a NaN; such a set is not written again.
    if (p.value.is_number_float() && std::isnan(p.value.get<double>())) {
      if (blob.find("NaN") == std::string::npos) fail("read a NaN value from its 8 bytes");
      return 0;
    }
    (void)p.value.dump();  // throws (-> crash) on a string that is not UTF-8
  }
  std::string again;
  hps::sqlite::append_param_set_header(again, params.size());
  for (const auto& p : params) {
    hps::sqlite::append_param_key(again, p.name, p.distribution_id);
    try {
      hps::sqlite::append_param_value(again, p.value, "param");
    } catch (...) {
      fail("a value read back cannot be written");
    }
  }
  std::vector<Param> back;
  if (!read(again, back)) fail("a re-encoded blob is refused");
  if (back.size() != params.size()) fail("a re-encoded blob reads another count");
  for (std::size_t k = 0; k < back.size(); ++k) {
    // Compared as text: a NaN inside an array never equals itself.
    if (back[k].name != params[k].name || back[k].distribution_id != params[k].distribution_id ||
        back[k].value.type() != params[k].value.type() ||
        back[k].value.dump() != params[k].value.dump())
      fail("a re-encoded blob reads other params");
  }
  return 0;
}
