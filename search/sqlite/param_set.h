// Private to SqliteStorage: the encoding of a trial_param_sets row (schema
// v4): all params of one trial in one BLOB, so a resume decodes one row per
// trial instead of one per param, and the distributions are ids into the
// store's distributions table instead of a copy of their JSON each.
//
// Byte layout (varint: unsigned LEB128, 7 bits a byte, low bits first, at
// most 10 bytes):
//   blob  := format(1 byte, kParamSetFormat = 1) count(varint) param*count
//   param := name_len(varint) name(name_len bytes, UTF-8)
//            distribution(varint: a distributions.distribution_id, or 0 for
//            a param stored without a distribution) value
//   value := tag(1 byte) payload
//     0 null, 1 false, 2 true                       (no payload)
//     3 float: 8 bytes, IEEE-754 binary64, little-endian (bit-exact: -0.0,
//       denormals, +-inf; NaN is never a param value)
//     4 integer >= 0: varint of the value (a uint64)
//     5 integer < 0: varint of -(v + 1) (v is an int64)
//     6 string: len(varint) + len bytes of UTF-8
//     7 JSON text: len(varint) + len bytes (arrays and objects, written by
//       encode_json and read by decode_json: as value_json was)
// Params come in name order (bytewise, as Params keeps them), each name
// once. Values read back as the v3 columns gave them: a float as a JSON
// float, an integer >= 0 as a JSON unsigned, < 0 as a JSON integer (what
// parsing its text gives); a tag 7 text that is one integer >= 0 ("-0")
// reads as a JSON unsigned too, so that writing it back reads the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "search/json_util.h"
#include "search/sqlite/codec.h"

namespace hps::sqlite {

constexpr std::uint8_t kParamSetFormat = 1;
// The distribution id of a param stored without a distribution.
constexpr std::int64_t kNoDistribution = 0;

// Appends the blob's header: the format byte and `count`, the number of
// params that follow.
void append_param_set_header(std::string& out, std::size_t count);
// Appends a param's name and distribution id (its value must follow).
void append_param_key(std::string& out, std::string_view name, std::int64_t distribution_id);
// Appends a value (tag and payload). Throws StorageError "<what>: value
// must not be NaN" for NaN, and encode_json's error for a value that
// cannot be stored as JSON (a string that is not UTF-8).
void append_param_value(std::string& out, const Json& value, const std::string& what);
// Appends a value of tag 7 holding `text` as it is (the v4 migration keeps
// a v3 value_json it cannot parse, so that reading it fails as before).
void append_param_json_text(std::string& out, std::string_view text);
// What reading back append_param_value(value) gives (see above).
Json stored_param_value(const Json& value, const std::string& what);

// Reads a param set blob param by param, checking every length against the
// blob's end. Every error is a StorageError "<where>[ name='<param>']:
// column data: <what is wrong>" (truncated, an unknown format or tag, bytes
// after the last param, a string that is not UTF-8, invalid JSON text).
class ParamSetReader {
 public:
  // Reads the header. `data` and `where` must outlive the reader.
  ParamSetReader(std::string_view data, const Where& where);

  // The number of params the header announces (at most the blob's size).
  std::size_t size() const { return count_; }
  // Moves to the next param; false after the last (then checks that no
  // byte follows).
  bool next();
  std::string_view name() const { return name_; }
  std::int64_t distribution_id() const { return distribution_id_; }
  // The current param's value, decoded.
  Json value() const;
  // The bytes of the current param (name to value), and of its value alone:
  // for splicing a blob without decoding what does not change.
  std::string_view entry_bytes() const { return entry_; }
  std::string_view value_bytes() const { return value_; }

  // Throws the StorageError described above, naming the current param
  // when one is read.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::uint64_t varint();
  std::string_view bytes(std::size_t n);
  void skip_value();

  std::string_view data_;
  const Where& where_;
  std::size_t pos_ = 0;
  std::size_t count_ = 0;
  std::size_t read_ = 0;
  bool named_ = false;  // a param's name is read (errors name it)
  std::string_view name_, entry_, value_;
  std::int64_t distribution_id_ = kNoDistribution;
};

}  // namespace hps::sqlite
