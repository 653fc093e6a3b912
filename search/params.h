// Params: the external param values of one trial, by name, in one flat
// array sorted by name (issue #16, compact history).
//
// It keeps std::map<std::string, Json>'s interface and its order (names
// sorted bytewise, as std::less<std::string>), so code written for a map
// reads the same. What differs: the entries sit in one std::vector, so a
// trial's params are one allocation instead of one tree node each (48
// bytes a param, names of up to 15 bytes held inline, against about 96 bytes
// and an allocation each in a std::map), and lookups are binary searches.
// Like any vector, an insertion or erasure invalidates iterators and
// references to the entries (std::map keeps them valid): do not hold one
// across a write.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "search/json_util.h"

namespace hps {

class Params {
 public:
  using value_type = std::pair<std::string, Json>;
  using Entries = std::vector<value_type>;
  using iterator = Entries::iterator;
  using const_iterator = Entries::const_iterator;
  using size_type = std::size_t;

  Params() = default;
  // As std::map's: of two entries with one name, the first is kept.
  Params(std::initializer_list<value_type> init);

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  const_iterator cbegin() const { return entries_.cbegin(); }
  const_iterator cend() const { return entries_.cend(); }

  bool empty() const { return entries_.empty(); }
  size_type size() const { return entries_.size(); }

  // The entry named `name`, or end().
  iterator find(std::string_view name);
  const_iterator find(std::string_view name) const;
  size_type count(std::string_view name) const { return find(name) == end() ? 0 : 1; }
  bool contains(std::string_view name) const { return find(name) != end(); }

  // The value of `name`. Throws std::out_of_range (as std::map::at) when
  // there is no such param.
  Json& at(std::string_view name);
  const Json& at(std::string_view name) const;

  // The value of `name`, inserted as null first when absent.
  Json& operator[](std::string_view name);

  // Inserts (name, value) unless `name` is there; returns the entry and
  // whether it was inserted (as std::map::emplace).
  template <typename V>
  std::pair<iterator, bool> emplace(std::string_view name, V&& value) {
    auto it = lower_bound(name);
    if (it != entries_.end() && it->first == name) return {it, false};
    return {entries_.emplace(it, std::string(name), Json(std::forward<V>(value))), true};
  }
  // As emplace; `hint` is where the entry would go (an entry added at
  // end() in name order is appended without a search).
  template <typename V>
  iterator emplace_hint(const_iterator hint, std::string_view name, V&& value) {
    if (hint == entries_.cend() &&
        (entries_.empty() || std::string_view(entries_.back().first) < name)) {
      entries_.emplace_back(std::string(name), Json(std::forward<V>(value)));
      return entries_.end() - 1;
    }
    return emplace(name, std::forward<V>(value)).first;
  }
  std::pair<iterator, bool> insert(const value_type& entry) {
    return emplace(entry.first, entry.second);
  }
  // Sets `name` to `value`, inserting it when absent; returns the entry and
  // whether it was inserted.
  template <typename V>
  std::pair<iterator, bool> insert_or_assign(std::string_view name, V&& value) {
    auto [it, inserted] = emplace(name, nullptr);
    it->second = Json(std::forward<V>(value));
    return {it, inserted};
  }

  // Removes `name`; returns how many entries were removed (0 or 1).
  size_type erase(std::string_view name);
  // Removes the entry at `pos`; returns the entry after it.
  iterator erase(const_iterator pos) { return entries_.erase(pos); }
  void clear() { entries_.clear(); }

  // Room for `n` entries without reallocating; shrink_to_fit() gives back
  // what a history held for long does not need.
  void reserve(size_type n) { entries_.reserve(n); }
  void shrink_to_fit() { entries_.shrink_to_fit(); }

  // Same names and, per name, equal values by Json's operator== (1 == 1.0),
  // as std::map's comparison.
  friend bool operator==(const Params& a, const Params& b) { return a.entries_ == b.entries_; }

 private:
  iterator lower_bound(std::string_view name);
  const_iterator lower_bound(std::string_view name) const;

  Entries entries_;
};

// JSON conversions (nlohmann's to_json / from_json, found by ADL): a JSON
// object with one member per param, in name order. from_json throws
// Json::type_error when `j` is not an object.
void to_json(Json& j, const Params& params);
void from_json(const Json& j, Params& params);

}  // namespace hps
