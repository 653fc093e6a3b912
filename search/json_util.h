// Helpers to read JSON configuration with errors that name the field.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "search/errors.h"

namespace hps {

using Json = nlohmann::json;

// Joins a dotted config path: join_path("space", "lr") == "space.lr". A key
// that is not plain (empty, or any byte other than ASCII letters, digits,
// '_', '-', '/') is written as a quoted JSON string in brackets, so that a
// param named "a.b" is told apart from a nested key:
// join_path("space", "a.b") == "space[\"a.b\"]" and
// join_path("space[\"a.b\"]", "low") == "space[\"a.b\"].low". A plain
// key longer than kMaxQuotedChars is bracketed too (it is cut). The key is
// written as printable_excerpt(key) (escaped, at most kMaxQuotedChars
// characters; bytes that are not UTF-8 become U+FFFD), with '"' as '\"'
// inside brackets. Never throws (but std::bad_alloc).
std::string join_path(std::string_view parent, std::string_view key);

// Throws ConfigError(path, "must be >= LO, got VALUE") when value < lo.
void require_at_least(std::string_view path, std::int64_t value, std::int64_t lo);

// ", got V" for a rule's message: V is `value` in JSON's shortest form
// (0.25, 1e-05, -3) or "nan", "inf", "-inf". Never throws (but
// std::bad_alloc).
std::string got_number(double value);

// A JSON value of a user's as a rule quotes it: a string in double quotes,
// its text as printable_excerpt gives it ("vvv... (1000 bytes in all)",
// the size that of the text, not of its JSON); any other value as its JSON
// text, cut the same way. Never throws (but std::bad_alloc).
std::string quoted_value(const Json& value);

// Levenshtein edit distance between two ASCII strings (bytes).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The "did you mean" hint for an unknown name: the name of `names` nearest
// to `got` by edit_distance (the first of equals) when it is within
// max(2, got.size() / 3) edits, else "". The one closeness rule of every
// hint (unknown keys, objective types, choices, subcommands).
std::string nearest_name(std::string_view got, const std::vector<std::string_view>& names);

// Throws ConfigError(path + "." + key, "unknown key ...") for the first key of
// `object` not in `allowed`, with "did you mean 'x'?" when an allowed key is
// within edit distance 2 (or a third of the key's length). Throws
// ConfigError(path, "must be an object") if `object` is not an object.
void check_keys(const Json& object, std::string_view path,
                std::initializer_list<std::string_view> allowed);
void check_keys(const Json& object, std::string_view path, const std::vector<std::string>& allowed);

// Typed field readers. Each throws ConfigError naming `path.key` when the
// field has the wrong JSON type or, for the required_* forms, is absent.
double require_number(const Json& object, std::string_view path, std::string_view key);
std::optional<double> optional_number(const Json& object, std::string_view path,
                                      std::string_view key);
// Integers: JSON integers, or floats with an exact integer value, within
// a 64-bit integer's range (one beyond it: "must be an integer from
// -9223372036854775808 to 9223372036854775807, got 1e+30").
std::int64_t require_int(const Json& object, std::string_view path, std::string_view key);
std::optional<std::int64_t> optional_int(const Json& object, std::string_view path,
                                         std::string_view key);
// An integer field (as optional_int reads one) within [lo, hi], or nullopt
// when absent. Any other value (of another type, beyond a 64-bit integer's
// range, or outside [lo, hi]) throws ConfigError "path.key: must be an
// integer from LO to HI, got X" (X: the number or literal; a string quoted
// and escaped; an array's or object's type), with " or " + `alternative`
// after HI when it is not empty (`"auto"`, for a field that also takes
// that string, read by the caller).
std::optional<std::int64_t> optional_int_in(const Json& object, std::string_view path,
                                            std::string_view key, std::int64_t lo, std::int64_t hi,
                                            std::string_view alternative = "");
std::string require_string(const Json& object, std::string_view path, std::string_view key);
std::optional<std::string> optional_string(const Json& object, std::string_view path,
                                           std::string_view key);
// The "type" of a section or param spec (whose other keys depend on it, so
// check_keys() can only run after). Throws, as require_string(), ConfigError
// "path.type: is required (a string)" when it is absent, or, when a key of
// `object` is a near miss of "type" ("typ", "tpye": nearest_name),
// ConfigError "path.typ: unknown key (did you mean 'type'?)", the hint
// check_keys() gives.
std::string require_type_field(const Json& object, std::string_view path);
std::optional<bool> optional_bool(const Json& object, std::string_view path, std::string_view key);
// A sampler's or pruner's seed: an integer >= 0 (ConfigError "path.seed:
// must be >= 0" otherwise), or nullopt when absent.
std::optional<std::uint64_t> optional_seed(const Json& object, std::string_view path,
                                           std::string_view key = "seed");

// One accepted string of an enumerated config field and the value it
// stands for (optional_choice, parse_choice).
template <typename T>
struct Choice {
  std::string_view name;
  T value;
};

// Throws ConfigError(field, "must be one of 'a', 'b', got 'x'"), followed by
// " (did you mean 'a'?)" when nearest_name() finds one.
[[noreturn]] void bad_choice(std::string_view field, const std::vector<std::string_view>& names,
                             std::string_view got);

// The value of the choice named `got`. Throws ConfigError(field, "must be
// one of 'a', 'b', got 'x'") when no choice has that name.
template <typename T>
T parse_choice(std::string_view got, std::string_view field,
               std::initializer_list<Choice<T>> choices) {
  std::vector<std::string_view> names;
  for (const Choice<T>& c : choices) {
    if (c.name == got) return c.value;
    names.push_back(c.name);
  }
  bad_choice(field, names, got);
}

// Reads object[key] as one of `choices`: the chosen value, or nullopt when
// the key is absent. Throws ConfigError(path.key, ...) when the field is not
// a string or names no choice.
template <typename T>
std::optional<T> optional_choice(const Json& object, std::string_view path, std::string_view key,
                                 std::initializer_list<Choice<T>> choices) {
  auto got = optional_string(object, path, key);
  if (!got) return std::nullopt;
  return parse_choice(*got, join_path(path, key), choices);
}

// Reads and parses a JSON file. Throws ConfigError(path_of_file, ...) for a
// missing or unreadable file and for invalid JSON, with line and column.
Json read_json_file(const std::string& file);

// Parses JSON text; `origin` names the source in errors. Invalid JSON throws
// ConfigError(origin, "invalid JSON at line L, column C: ..."), as does text
// nested deeper than kMaxJsonDepth and a NUL byte anywhere (nlohmann would
// end the input there and ignore what follows); a number out of the double
// range throws ConfigError(origin, "invalid JSON at 'space.x.values[3]':
// number overflow ..."), naming where it is; an object with a key twice
// throws ConfigError(origin, "invalid JSON: key 'k' appears twice in
// 'path.to.object' ..."). Bytes of the text quoted in a message (nlohmann's
// "last read: ...") are escaped with printable().
Json parse_json_text(const std::string& text, const std::string& origin);

// parse_json_text for a document this program stored (a study's settings,
// studies.config_json): the same rules and errors, and also the literals
// NaN, Infinity and -Infinity outside strings (dump_json_nonfinite's: a
// document given through the C++ API may hold them), read as the floats
// they name. A line and column in an error count the text with each such
// literal replaced by a longer number.
Json parse_stored_json_text(std::string_view text, const std::string& origin);

// Deepest nesting of arrays and objects accepted in any JSON we parse (files,
// messages, stored columns, program output); deeper text is refused before
// parsing, so no input can exhaust the stack.
inline constexpr std::size_t kMaxJsonDepth = 256;

// Byte offset of the first '[' or '{' (outside strings) that opens a level
// deeper than `max_depth`, or npos when the text stays within it. Works on
// any bytes, valid JSON or not; O(size).
std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

}  // namespace hps

namespace hps {

// JSON text as Python's json.dumps writes it (the form Optuna stores attrs
// in): exactly value.dump(), except that a float that is NaN, +inf or -inf
// is written as the literal NaN, Infinity or -Infinity (value.dump() would
// write null), so parse_json_nonfinite() reads it back as the same float.
// Throws Json::exception as dump() does (invalid UTF-8 in a string).
std::string dump_json_nonfinite(const Json& value);

// Json::parse(text), also accepting Python's literals NaN, Infinity and
// -Infinity outside strings (read as the float they name). Throws
// Json::exception as Json::parse does, and Json::parse_error for a NUL byte
// anywhere in `text` (Json::parse would end the input there and ignore the
// rest). Callers limit the depth first
// (json_too_deep_at).
Json parse_json_nonfinite(std::string_view text);

}  // namespace hps
