#include "search/params.h"

namespace hps {

namespace {

bool name_less(const Params::value_type& entry, std::string_view name) {
  return std::string_view(entry.first) < name;
}

}  // namespace

Params::Params(std::initializer_list<value_type> init) {
  entries_.reserve(init.size());
  for (const auto& entry : init) emplace(entry.first, entry.second);
}

Params::iterator Params::lower_bound(std::string_view name) {
  return std::lower_bound(entries_.begin(), entries_.end(), name, name_less);
}

Params::const_iterator Params::lower_bound(std::string_view name) const {
  return std::lower_bound(entries_.begin(), entries_.end(), name, name_less);
}

Params::iterator Params::find(std::string_view name) {
  auto it = lower_bound(name);
  return it != entries_.end() && it->first == name ? it : entries_.end();
}

Params::const_iterator Params::find(std::string_view name) const {
  auto it = lower_bound(name);
  return it != entries_.end() && it->first == name ? it : entries_.end();
}

Json& Params::at(std::string_view name) {
  auto it = find(name);
  if (it == entries_.end()) throw std::out_of_range("no param '" + std::string(name) + "'");
  return it->second;
}

const Json& Params::at(std::string_view name) const {
  auto it = find(name);
  if (it == entries_.end()) throw std::out_of_range("no param '" + std::string(name) + "'");
  return it->second;
}

Json& Params::operator[](std::string_view name) { return emplace(name, nullptr).first->second; }

Params::size_type Params::erase(std::string_view name) {
  auto it = find(name);
  if (it == entries_.end()) return 0;
  entries_.erase(it);
  return 1;
}

void to_json(Json& j, const Params& params) {
  j = Json::object();
  for (const auto& [name, value] : params) j.emplace(name, value);
}

void from_json(const Json& j, Params& params) {
  if (!j.is_object())
    throw Json::type_error::create(
        302, "params must be an object, not " + std::string(j.type_name()), &j);
  params.clear();
  params.reserve(j.size());
  // A JSON object's members come in name order (nlohmann::json keeps them
  // in a std::map), so each one goes at the end.
  for (const auto& [name, value] : j.items()) params.emplace_hint(params.end(), name, value);
}

}  // namespace hps
