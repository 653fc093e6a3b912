// The trial_param_sets blob encoding (see param_set.h).
#include "search/sqlite/param_set.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace hps::sqlite {
namespace {

enum Tag : std::uint8_t {
  kNull = 0,
  kFalse = 1,
  kTrue = 2,
  kFloat = 3,
  kUnsigned = 4,
  kNegative = 5,
  kString = 6,
  kJsonText = 7,
};

constexpr std::size_t kMaxVarint = 10;

void append_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void append_bytes(std::string& out, std::string_view bytes) {
  append_varint(out, bytes.size());
  out.append(bytes);
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Reads a varint from `p` (up to `end`); false if it is cut short or too
// long for 64 bits.
bool read_varint(const char*& p, const char* end, std::uint64_t& v) {
  v = 0;
  for (std::size_t i = 0; i < kMaxVarint && p < end; ++i) {
    const auto byte = static_cast<std::uint8_t>(*p++);
    if (i == kMaxVarint - 1 && byte > 1) return false;  // beyond 64 bits
    v |= static_cast<std::uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

void append_param_set_header(std::string& out, std::size_t count) {
  out.push_back(static_cast<char>(kParamSetFormat));
  append_varint(out, count);
}

void append_param_key(std::string& out, std::string_view name, std::int64_t distribution_id) {
  append_bytes(out, name);
  append_varint(out, static_cast<std::uint64_t>(distribution_id));
}

void append_param_value(std::string& out, const Json& value, const std::string& what) {
  switch (value.type()) {
    case Json::value_t::null:
      out.push_back(static_cast<char>(kNull));
      return;
    case Json::value_t::boolean:
      out.push_back(static_cast<char>(value.get<bool>() ? kTrue : kFalse));
      return;
    case Json::value_t::number_float: {
      const double d = value.get<double>();
      if (std::isnan(d)) throw StorageError(what + ": value must not be NaN");
      out.push_back(static_cast<char>(kFloat));
      auto bits = std::bit_cast<std::uint64_t>(d);
      for (int i = 0; i < 8; ++i, bits >>= 8) out.push_back(static_cast<char>(bits & 0xff));
      return;
    }
    case Json::value_t::number_unsigned:
      out.push_back(static_cast<char>(kUnsigned));
      append_varint(out, value.get<std::uint64_t>());
      return;
    case Json::value_t::number_integer: {
      const auto v = value.get<std::int64_t>();
      if (v >= 0) {
        out.push_back(static_cast<char>(kUnsigned));
        append_varint(out, static_cast<std::uint64_t>(v));
      } else {
        out.push_back(static_cast<char>(kNegative));
        append_varint(out, static_cast<std::uint64_t>(-(v + 1)));
      }
      return;
    }
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (!is_ascii(s)) (void)encode_json(value, what);  // refuses what is not UTF-8
      out.push_back(static_cast<char>(kString));
      append_bytes(out, s);
      return;
    }
    default:
      append_param_json_text(out, encode_json(value, what));
      return;
  }
}

void append_param_json_text(std::string& out, std::string_view text) {
  out.push_back(static_cast<char>(kJsonText));
  append_bytes(out, text);
}

Json stored_param_value(const Json& value, const std::string& what) {
  std::string bytes;
  append_param_set_header(bytes, 1);
  append_param_key(bytes, "", kNoDistribution);
  append_param_value(bytes, value, what);
  const Where where{"trial_param_sets"};
  ParamSetReader reader(bytes, where);
  reader.next();
  return reader.value();
}

// ------------------------------------------------------------------ reader

ParamSetReader::ParamSetReader(std::string_view data, const Where& where)
    : data_(data), where_(where) {
  if (data_.empty()) fail("empty (no format byte)");
  if (static_cast<std::uint8_t>(data_[0]) != kParamSetFormat)
    fail("unknown format " + std::to_string(static_cast<std::uint8_t>(data_[0])));
  pos_ = 1;
  const std::uint64_t count = varint();
  // Each param takes at least 3 bytes (name length, distribution, tag).
  if (count > data_.size() / 3)
    fail("truncated (it announces " + std::to_string(count) + " params)");
  count_ = static_cast<std::size_t>(count);
}

void ParamSetReader::fail(const std::string& what) const {
  std::string msg = where_.str();
  if (named_) msg += " name='" + std::string(name_) + "'";
  throw StorageError(msg + ": column data: " + what);
}

std::uint64_t ParamSetReader::varint() {
  const char* p = data_.data() + pos_;
  std::uint64_t v = 0;
  if (!read_varint(p, data_.data() + data_.size(), v)) fail("truncated or bad varint");
  pos_ = static_cast<std::size_t>(p - data_.data());
  return v;
}

std::string_view ParamSetReader::bytes(std::size_t n) {
  if (n > data_.size() - pos_) fail("truncated");
  std::string_view out = data_.substr(pos_, n);
  pos_ += n;
  return out;
}

void ParamSetReader::skip_value() {
  switch (static_cast<std::uint8_t>(bytes(1)[0])) {
    case kNull:
    case kFalse:
    case kTrue:
      return;
    case kFloat:
      bytes(8);
      return;
    case kUnsigned:
    case kNegative:
      varint();
      return;
    case kString:
    case kJsonText: {
      const std::uint64_t n = varint();
      if (n > data_.size()) fail("truncated");
      bytes(static_cast<std::size_t>(n));
      return;
    }
    default:
      fail("unknown value tag " + std::to_string(static_cast<std::uint8_t>(data_[pos_ - 1])));
  }
}

bool ParamSetReader::next() {
  named_ = false;
  if (read_ == count_) {
    if (pos_ != data_.size())
      fail(std::to_string(data_.size() - pos_) + " bytes after the last param");
    return false;
  }
  const std::size_t begin = pos_;
  const std::uint64_t name_len = varint();
  if (name_len > data_.size()) fail("truncated");
  name_ = bytes(static_cast<std::size_t>(name_len));
  named_ = true;
  const std::uint64_t id = varint();
  if (id > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fail("bad distribution id");
  distribution_id_ = static_cast<std::int64_t>(id);
  const std::size_t value_begin = pos_;
  skip_value();
  entry_ = data_.substr(begin, pos_ - begin);
  value_ = data_.substr(value_begin, pos_ - value_begin);
  ++read_;
  return true;
}

Json ParamSetReader::value() const {
  // value_ was checked by skip_value(): its lengths fit.
  const char* p = value_.data() + 1;
  const char* end = value_.data() + value_.size();
  std::uint64_t v = 0;
  switch (static_cast<std::uint8_t>(value_[0])) {
    case kNull:
      return Json(nullptr);
    case kFalse:
      return Json(false);
    case kTrue:
      return Json(true);
    case kFloat: {
      std::uint64_t bits = 0;
      for (int i = 7; i >= 0; --i) bits = (bits << 8) | static_cast<std::uint8_t>(p[i]);
      const auto d = std::bit_cast<double>(bits);
      if (std::isnan(d)) fail("a float value is NaN");
      return Json(d);
    }
    case kUnsigned:
      read_varint(p, end, v);
      return Json(v);
    case kNegative:
      read_varint(p, end, v);
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("integer value out of range");
      return Json(-static_cast<std::int64_t>(v) - 1);
    case kString: {
      read_varint(p, end, v);
      std::string s(p, end);
      if (!is_ascii(s)) {
        try {
          check_utf8(s, "string value");
        } catch (const StorageError& e) {
          fail(e.what());
        }
      }
      return Json(std::move(s));
    }
    default: {  // kJsonText
      read_varint(p, end, v);
      std::string text(p, end);
      Where where = where_;
      std::string name(name_);
      where.key_name = "name";
      where.key = &name;
      Json parsed = decode_json(text, where, "data");
      // A top-level integer >= 0 reads as unsigned, as tag 4 does: text
      // such as "-0" parses as a signed 0, which would be written back as
      // tag 4 and read as another JSON type.
      if (parsed.is_number_integer() && !parsed.is_number_unsigned() &&
          parsed.get<std::int64_t>() >= 0)
        parsed = Json(parsed.get<std::uint64_t>());
      return parsed;
    }
  }
}

}  // namespace hps::sqlite
