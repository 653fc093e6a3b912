#include "search/json_util.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "search/printable.h"

namespace hps {

namespace {
bool plain_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '/';
  });
}
}  // namespace

std::string join_path(std::string_view parent, std::string_view key) {
  std::string out(parent);
  const std::string shown = printable_excerpt(key);
  // A plain key that is cut is bracketed too, so that "... (N bytes in
  // all)" does not read as more of the path.
  if (plain_key(key) && key.size() <= kMaxQuotedChars) {
    if (!out.empty()) out += '.';
    out += shown;
    return out;
  }
  out += "[\"";
  for (char c : shown) {
    if (c == '"') out += '\\';
    out += c;
  }
  out += "\"]";
  return out;
}

void require_at_least(std::string_view path, std::int64_t value, std::int64_t lo) {
  if (value < lo)
    throw ConfigError(std::string(path),
                      "must be >= " + std::to_string(lo) + ", got " + std::to_string(value));
}

std::string got_number(double value) {
  if (std::isnan(value)) return ", got nan";
  if (std::isinf(value)) return value > 0 ? ", got inf" : ", got -inf";
  return ", got " + Json(value).dump();
}

std::string quoted_value(const Json& value) {
  if (value.is_string())
    return "\"" + printable_excerpt(value.get_ref<const std::string&>()) + "\"";
  return printable_excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest_name(std::string_view got, const std::vector<std::string_view>& names) {
  const std::size_t limit = std::max<std::size_t>(2, got.size() / 3);
  std::string_view best;
  std::size_t best_d = limit + 1;
  for (std::string_view name : names) {
    // The distance is at least the difference in length: a huge name (a
    // key of a store edited by hand) is not compared letter by letter.
    if (got.size() > name.size() + limit || name.size() > got.size() + limit) continue;
    const std::size_t d = edit_distance(got, name);
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  }
  return std::string(best);
}

namespace {

template <typename Range>
void check_keys_impl(const Json& object, std::string_view path, const Range& allowed) {
  if (!object.is_object())
    throw ConfigError(std::string(path), "must be an object, got " + quoted_value(object));
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (const auto& a : allowed) {
      if (key == a) {
        ok = true;
        break;
      }
    }
    if (ok) continue;
    // The hint: the only allowed key that starts with `key` (a name cut
    // short: "n_startup" is "n_startup_trials", not the nearer "startup"),
    // else the nearest allowed key within the edit-distance limit.
    std::vector<std::string_view> names;
    std::string extends;
    std::size_t n_extends = 0;
    for (const auto& a : allowed) {
      names.emplace_back(a);
      if (key.size() >= 3 && std::string_view(a).starts_with(key)) {
        extends = std::string(a);
        ++n_extends;
      }
    }
    std::string rule = "unknown key";
    if (n_extends == 1)
      rule += " (did you mean '" + extends + "'?)";
    else if (std::string best = nearest_name(key, names); !best.empty())
      rule += " (did you mean '" + best + "'?)";
    std::string allowed_list;
    for (const auto& a : allowed) {
      if (!allowed_list.empty()) allowed_list += ", ";
      allowed_list += a;
    }
    rule += "; allowed keys: " + allowed_list;
    throw ConfigError(join_path(path, key), rule);
  }
}

const Json* field(const Json& object, std::string_view path, std::string_view key) {
  if (!object.is_object())
    throw ConfigError(std::string(path), "must be an object, got " + quoted_value(object));
  auto it = object.find(std::string(key));
  if (it == object.end()) return nullptr;
  return &*it;
}

std::string type_name(const Json& v) { return v.type_name(); }

// The value of `v` when it is an integer within int64's range: a JSON
// integer, or a finite float with an exact integer value; nullopt
// otherwise.
std::optional<std::int64_t> exact_int(const Json& v) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > kMax) return std::nullopt;
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  // -2^63 is the least double in range; 2^63 is the least one above it.
  if (!std::isfinite(d) || d != std::floor(d) || d < -9.2233720368547758e18 ||
      d >= 9.2233720368547758e18)
    return std::nullopt;
  return static_cast<std::int64_t>(d);
}

// Whether `v` is an integer outside int64's range (a JSON integer above
// 2^63 - 1, or a finite float with an integer value beyond +-2^63).
bool integer_out_of_range(const Json& v) {
  if (exact_int(v)) return false;
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

// "must be an integer from LO to HI", the rule of optional_int_in.
std::string integer_range_rule(std::int64_t lo, std::int64_t hi) {
  return "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

}  // namespace

void check_keys(const Json& object, std::string_view path,
                std::initializer_list<std::string_view> allowed) {
  check_keys_impl(object, path, allowed);
}
void check_keys(const Json& object, std::string_view path,
                const std::vector<std::string>& allowed) {
  check_keys_impl(object, path, allowed);
}

std::optional<double> optional_number(const Json& object, std::string_view path,
                                      std::string_view key) {
  const Json* v = field(object, path, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw ConfigError(join_path(path, key), "must be a number, got " + quoted_value(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) throw ConfigError(join_path(path, key), "must be finite");
  return d;
}

double require_number(const Json& object, std::string_view path, std::string_view key) {
  auto v = optional_number(object, path, key);
  if (!v) throw ConfigError(join_path(path, key), "is required (a number)");
  return *v;
}

std::optional<std::int64_t> optional_int(const Json& object, std::string_view path,
                                         std::string_view key) {
  const Json* v = field(object, path, key);
  if (!v) return std::nullopt;
  if (auto n = exact_int(*v)) return n;
  if (integer_out_of_range(*v))
    throw ConfigError(join_path(path, key),
                      integer_range_rule(std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::max()) +
                          ", got " + v->dump());
  throw ConfigError(join_path(path, key), "must be an integer, got " + quoted_value(*v));
}

std::optional<std::int64_t> optional_int_in(const Json& object, std::string_view path,
                                            std::string_view key, std::int64_t lo, std::int64_t hi,
                                            std::string_view alternative) {
  const Json* v = field(object, path, key);
  if (!v) return std::nullopt;
  const std::optional<std::int64_t> n = exact_int(*v);
  if (n && *n >= lo && *n <= hi) return n;
  std::string rule = integer_range_rule(lo, hi);
  if (!alternative.empty()) rule += " or " + std::string(alternative);
  rule += ", got ";
  if (v->is_string())
    rule += "'" + printable_excerpt(v->get<std::string>()) + "'";
  else if (v->is_primitive())  // a number, true, false or null
    rule += v->dump();
  else
    rule += type_name(*v);
  throw ConfigError(join_path(path, key), rule);
}

std::int64_t require_int(const Json& object, std::string_view path, std::string_view key) {
  auto v = optional_int(object, path, key);
  if (!v) throw ConfigError(join_path(path, key), "is required (an integer)");
  return *v;
}

std::optional<std::string> optional_string(const Json& object, std::string_view path,
                                           std::string_view key) {
  const Json* v = field(object, path, key);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw ConfigError(join_path(path, key), "must be a string, got " + quoted_value(*v));
  return v->get<std::string>();
}

void bad_choice(std::string_view field, const std::vector<std::string_view>& names,
                std::string_view got) {
  std::string rule = "must be one of ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) rule += ", ";
    rule += '\'';
    rule += names[i];
    rule += '\'';
  }
  rule += ", got '";
  rule += printable_excerpt(got);
  rule += '\'';
  if (std::string best = nearest_name(got, names); !best.empty())
    rule += " (did you mean '" + best + "'?)";
  throw ConfigError(std::string(field), rule);
}

std::string require_string(const Json& object, std::string_view path, std::string_view key) {
  auto v = optional_string(object, path, key);
  if (!v) throw ConfigError(join_path(path, key), "is required (a string)");
  return *v;
}

std::string require_type_field(const Json& object, std::string_view path) {
  if (object.is_object() && !object.contains("type")) {
    for (const auto& [key, value] : object.items())
      if (!nearest_name(key, {"type"}).empty())
        throw ConfigError(join_path(path, key), "unknown key (did you mean 'type'?)");
  }
  return require_string(object, path, "type");
}

std::optional<bool> optional_bool(const Json& object, std::string_view path, std::string_view key) {
  const Json* v = field(object, path, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw ConfigError(join_path(path, key), "must be true or false, got " + quoted_value(*v));
  return v->get<bool>();
}

std::optional<std::uint64_t> optional_seed(const Json& object, std::string_view path,
                                           std::string_view key) {
  const auto seed = optional_int(object, path, key);
  if (!seed) return std::nullopt;
  require_at_least(join_path(path, key), *seed, 0);
  return static_cast<std::uint64_t>(*seed);
}

std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

namespace {

// "line L, column C" of a byte offset.
std::string line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// nlohmann's message without its "[json.exception.x.n] " prefix.
std::string json_detail(const std::exception& e) {
  std::string what = e.what();
  auto pos = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
    what = what.substr(pos + 2);
  // parse errors: "parse error at line 1, column 2: syntax error ..." -> keep what follows.
  if (what.rfind("parse error", 0) == 0) {
    auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  // The token it quotes last ("last read: '...'", "number overflow parsing
  // '...'") may be a string of megabytes.
  const std::size_t open = what.find('\'');
  if (open != std::string::npos && what.size() >= open + 2 && what.back() == '\'')
    what = what.substr(0, open + 1) +
           printable_excerpt(std::string_view(what).substr(open + 1, what.size() - open - 2)) + "'";
  return what;
}

// The literal numbers that stand for NaN, +inf and -inf in text rewritten by
// rewrite_nonfinite.
struct NonfiniteLiterals {
  std::string nan, inf, neg_inf;
};

// `text` with each literal NaN, Infinity and -Infinity outside strings
// replaced by a number literal that cannot occur in `text` (it holds a longer
// run of zeros than any in `text`), told apart by its spelling while
// parsing; nullopt (and `rewritten` untouched) when `text` holds none.
std::optional<NonfiniteLiterals> rewrite_nonfinite(std::string_view text, std::string& rewritten) {
  std::size_t run = 0, longest = 0;
  bool found = false, in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    run = c == '0' ? run + 1 : 0;
    longest = std::max(longest, run);
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == 'N' || c == 'I') {
      found = true;
    }
  }
  if (!found) return std::nullopt;
  const std::string zeros(longest + 1, '0');
  NonfiniteLiterals lit{"0." + zeros + "1", "0." + zeros + "2", "-0." + zeros + "2"};
  rewritten.clear();
  rewritten.reserve(text.size() + 3 * zeros.size());
  in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      rewritten += c;
      if (c == '\\' && i + 1 < text.size())
        rewritten += text[++i];
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
      rewritten += c;
    } else if (text.compare(i, 3, "NaN") == 0) {
      rewritten += lit.nan;
      i += 2;
    } else if (text.compare(i, 8, "Infinity") == 0) {
      rewritten += lit.inf;
      i += 7;
    } else if (text.compare(i, 9, "-Infinity") == 0) {
      rewritten += lit.neg_inf;
      i += 8;
    } else {
      rewritten += c;
    }
  }
  return lit;
}

// One open array or object while a document is parsed (DomSax).
struct JsonFrame {
  bool is_object = false;
  bool is_element = false;  // an element of an array: `name` is "[i]"
  std::string name;         // how the container is reached from its parent
  std::string key;          // an object's key being read
  std::set<std::string> keys;
  std::size_t elements = 0;  // an array's elements begun
};

// Builds the DOM as Json::parse does. With `literals`, reads their number
// literals (rewrite_nonfinite) as the floats they stand for. With `frames`,
// keeps the open containers there, so that an error raised while a value is
// read can name where it is (value_path), and refuses an object that names a
// key twice: nlohmann keeps the last value silently (RFC 8259 section 4
// leaves duplicate names to the parser), so a setting written twice would be
// lost unnoticed.
class DomSax : public nlohmann::detail::json_sax_dom_parser<Json> {
 public:
  DomSax(Json& out, const NonfiniteLiterals* literals, std::vector<JsonFrame>* frames,
         const std::string* origin)
      : json_sax_dom_parser(out), lit_(literals), frames_(frames), origin_(origin) {}

  // The value being read, as a path of keys and indexes ("space.x.high",
  // "space.x.values[3]"), or "" outside any container.
  static std::string value_path(const std::vector<JsonFrame>& frames) {
    if (frames.empty()) return "";
    std::string path = container_path(frames);
    const JsonFrame& top = frames.back();
    if (!top.is_object) return path + "[" + std::to_string(top.elements) + "]";
    if (top.key.empty()) return path;
    return join_path(path, top.key);
  }

  bool null() { return element() && json_sax_dom_parser::null(); }
  bool boolean(bool v) { return element() && json_sax_dom_parser::boolean(v); }
  bool number_integer(number_integer_t v) {
    return element() && json_sax_dom_parser::number_integer(v);
  }
  bool number_unsigned(number_unsigned_t v) {
    return element() && json_sax_dom_parser::number_unsigned(v);
  }
  bool number_float(number_float_t v, const string_t& text) {
    if (lit_ && text == lit_->nan) v = std::numeric_limits<double>::quiet_NaN();
    if (lit_ && text == lit_->inf) v = std::numeric_limits<double>::infinity();
    if (lit_ && text == lit_->neg_inf) v = -std::numeric_limits<double>::infinity();
    return element() && json_sax_dom_parser::number_float(v, text);
  }
  bool string(string_t& v) { return element() && json_sax_dom_parser::string(v); }
  bool binary(binary_t& v) { return element() && json_sax_dom_parser::binary(v); }
  bool start_object(std::size_t n) {
    open(true);
    return json_sax_dom_parser::start_object(n);
  }
  bool start_array(std::size_t n) {
    open(false);
    return json_sax_dom_parser::start_array(n);
  }
  bool end_object() {
    if (frames_ && !frames_->empty()) frames_->pop_back();
    return json_sax_dom_parser::end_object();
  }
  bool end_array() {
    if (frames_ && !frames_->empty()) frames_->pop_back();
    return json_sax_dom_parser::end_array();
  }
  bool key(string_t& k) {
    if (frames_ && !frames_->empty()) {
      JsonFrame& top = frames_->back();
      top.key = k;
      if (!top.keys.insert(k).second)
        throw ConfigError(*origin_, "invalid JSON: key '" + printable_excerpt(k) +
                                        "' appears twice in " + where() +
                                        " (each key may appear once)");
    }
    return json_sax_dom_parser::key(k);
  }

 private:
  // A value begins: counted as the next element of an enclosing array.
  bool element() {
    if (frames_ && !frames_->empty() && !frames_->back().is_object) ++frames_->back().elements;
    return true;
  }

  void open(bool is_object) {
    if (!frames_) return;
    JsonFrame f;
    f.is_object = is_object;
    if (!frames_->empty()) {
      const JsonFrame& parent = frames_->back();
      f.is_element = !parent.is_object;
      f.name = parent.is_object ? parent.key  // join_path escapes it (container_path)
                                : "[" + std::to_string(parent.elements) + "]";
    }
    element();
    frames_->push_back(std::move(f));
  }

  // The open containers as a path of keys and indexes ("space.x",
  // "space.x.values[3]"), "" at the top.
  static std::string container_path(const std::vector<JsonFrame>& frames) {
    std::string path;
    for (std::size_t i = 1; i < frames.size(); ++i) {
      if (frames[i].is_element)
        path += frames[i].name;
      else
        path = join_path(path, frames[i].name);
    }
    return path;
  }

  // The open object, as a path ("'space.x'"), or "the top-level object".
  std::string where() const {
    const std::string path = container_path(*frames_);
    return path.empty() ? std::string("the top-level object") : "'" + printable(path) + "'";
  }

  const NonfiniteLiterals* lit_;
  std::vector<JsonFrame>* frames_;
  const std::string* origin_;
};

// parse_json_text and parse_stored_json_text: `nonfinite` reads the literals
// NaN, Infinity and -Infinity.
Json parse_checked(std::string_view text, const std::string& origin, bool nonfinite) {
  // nlohmann's lexer takes a NUL byte for the end of the input (for C
  // strings), so text after one would be ignored, not refused.
  if (std::size_t at = text.find('\0'); at != std::string::npos)
    throw ConfigError(
        origin, "invalid JSON at " + line_column(text, at) + ": a NUL byte (JSON text holds none)");
  if (std::size_t at = json_too_deep_at(text); at != std::string_view::npos)
    throw ConfigError(origin, "invalid JSON at " + line_column(text, at) + ": nested deeper than " +
                                  std::to_string(kMaxJsonDepth) + " levels");
  std::string rewritten;
  const std::optional<NonfiniteLiterals> literals =
      nonfinite ? rewrite_nonfinite(text, rewritten) : std::nullopt;
  const std::string_view input = literals ? std::string_view(rewritten) : text;
  std::vector<JsonFrame> frames;
  Json root;
  DomSax sax(root, literals ? &*literals : nullptr, &frames, &origin);
  try {
    Json::sax_parse(input, &sax);
    return root;
  } catch (const Json::parse_error& e) {
    // nlohmann reports the byte offset just past the error.
    throw ConfigError(origin, "invalid JSON at " +
                                  line_column(input, e.byte == 0 ? 0 : e.byte - 1) + ": " +
                                  printable(json_detail(e)));
  } catch (const Json::out_of_range& e) {  // 406: a number beyond a double's range
    const std::string path = DomSax::value_path(frames);
    throw ConfigError(origin, "invalid JSON" +
                                  (path.empty() ? "" : " at '" + printable(path) + "'") + ": " +
                                  printable(json_detail(e)) +
                                  (e.id == 406 ? " (a number must lie within +-1.8e308, the "
                                                 "range of a double)"
                                               : ""));
  } catch (const Json::exception& e) {
    throw ConfigError(origin, "invalid JSON: " + printable(json_detail(e)));
  }
}

}  // namespace

Json parse_json_text(const std::string& text, const std::string& origin) {
  return parse_checked(text, origin, false);
}

Json parse_stored_json_text(std::string_view text, const std::string& origin) {
  return parse_checked(text, origin, true);
}

Json read_json_file(const std::string& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw ConfigError(file, "is a directory, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file, "cannot open file (missing or unreadable)");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(file, "error while reading the file");
  return parse_json_text(ss.str(), file);
}

}  // namespace hps

namespace hps {
namespace {

bool has_nonfinite(const Json& v) {
  if (v.is_number_float()) return !std::isfinite(v.get<double>());
  if (v.is_structured())
    return std::any_of(v.begin(), v.end(), [](const Json& e) { return has_nonfinite(e); });
  return false;
}

void dump_nonfinite(const Json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, e] : v.items()) {
      if (!first) out += ',';
      first = false;
      out += Json(k).dump();
      out += ':';
      dump_nonfinite(e, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) out += ',';
      dump_nonfinite(v[i], out);
    }
    out += ']';
  } else if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    const double d = v.get<double>();
    out += std::isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity";
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string dump_json_nonfinite(const Json& value) {
  if (!has_nonfinite(value)) return value.dump();
  std::string out;
  dump_nonfinite(value, out);
  return out;
}

Json parse_json_nonfinite(std::string_view text) {
  // As in parse_json_text: a NUL byte would end the input silently.
  if (std::size_t at = text.find('\0'); at != std::string_view::npos)
    throw Json::parse_error::create(101, at + 1, "a NUL byte (JSON text holds none)", nullptr);
  std::string rewritten;
  const std::optional<NonfiniteLiterals> literals = rewrite_nonfinite(text, rewritten);
  if (!literals) return Json::parse(text);
  Json root;
  DomSax sax(root, &*literals, nullptr, nullptr);
  Json::sax_parse(rewritten, &sax);
  return root;
}

}  // namespace hps
