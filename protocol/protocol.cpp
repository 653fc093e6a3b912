#include "protocol/protocol.h"

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <sstream>
#include <streambuf>

namespace hps::protocol {

namespace {

// Reads a frame's bytes in place (no copy).
class MemoryBuf : public std::streambuf {
 public:
  MemoryBuf(const char* data, std::size_t size) {
    char* p = const_cast<char*>(data);
    setg(p, p, p + size);
  }
  std::size_t remaining() const { return static_cast<std::size_t>(egptr() - gptr()); }
};

// The body being decoded on this thread (set by decode_body()), so that a
// length field is checked against the bytes that are left: a short frame
// cannot make the decoder allocate what its length fields claim.
thread_local const MemoryBuf* t_body = nullptr;

// Bytes left in the body being decoded (kMaxFrameBytes outside decode_body()).
std::size_t bytes_left() { return t_body ? t_body->remaining() : kMaxFrameBytes; }

// Appends to a std::string.
class StringBuf : public std::streambuf {
 public:
  explicit StringBuf(std::string& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) out_.push_back(static_cast<char>(c));
    return c;
  }

 private:
  std::string& out_;
};

template <class A>
constexpr bool kLoading = A::is_loading::value;

// Field helpers: each reads or writes one field, validating on load.
template <class A>
void field_u8(A& ar, std::uint8_t& v) {
  ar(v);
}

template <class A>
void field_bool(A& ar, bool& b) {
  std::uint8_t raw = b ? 1 : 0;
  ar(raw);
  if constexpr (kLoading<A>) {
    if (raw > 1) throw ProtocolError("bool field holds " + std::to_string(raw));
    b = raw == 1;
  }
}

template <class A>
void field_string(A& ar, std::string& s) {
  std::uint64_t n = s.size();
  ar(n);
  if constexpr (kLoading<A>) {
    if (n > bytes_left())
      throw ProtocolError("string length " + std::to_string(n) + " exceeds the frame");
    s.resize(static_cast<std::size_t>(n));
  }
  if (n > 0) ar(cereal::binary_data(s.data(), static_cast<std::size_t>(n)));
}

template <class A, class E>
void field_enum(A& ar, E& e, std::uint8_t lo, std::uint8_t hi, const char* what) {
  std::uint8_t raw = static_cast<std::uint8_t>(e);
  ar(raw);
  if constexpr (kLoading<A>) {
    if (raw < lo || raw > hi)
      throw ProtocolError(std::string(what) + " has unknown value " + std::to_string(raw));
    e = static_cast<E>(raw);
  }
}

template <class A, class T>
void field_list(A& ar, std::vector<T>& list) {
  std::uint64_t n = list.size();
  ar(n);
  if constexpr (kLoading<A>) {
    if (n > bytes_left())  // each item takes at least one byte
      throw ProtocolError("list length " + std::to_string(n) + " exceeds the frame");
    list.clear();
    for (std::uint64_t i = 0; i < n; ++i) {  // no reserve: a short frame fails at the first read
      T item;
      ar(item);
      list.push_back(std::move(item));
    }
  } else {
    for (auto& item : list) ar(item);
  }
}

template <class A>
void field_optional_double(A& ar, std::optional<double>& v) {
  bool has = v.has_value();
  field_bool(ar, has);
  double d = v.value_or(0.0);
  ar(d);
  if constexpr (kLoading<A>) {
    if (has)
      v = d;
    else
      v.reset();
  }
}

void check_version(std::uint32_t version, const char* what) {
  if (version != 1)
    throw ProtocolError(std::string(what) + " class version " + std::to_string(version) +
                        " is not supported (this build reads version 1)");
}

}  // namespace

void check_heartbeat_settings(std::int64_t interval_ms, const std::string& interval_field,
                              std::int64_t liveness, const std::string& liveness_field) {
  if (interval_ms < 1 || interval_ms > kMaxHeartbeatIntervalMs)
    throw ConfigError(interval_field, "must be in [1, " + std::to_string(kMaxHeartbeatIntervalMs) +
                                          "] (milliseconds), got " + std::to_string(interval_ms));
  if (liveness < 1 || liveness > kMaxLiveness)
    throw ConfigError(liveness_field, "must be in [1, " + std::to_string(kMaxLiveness) +
                                          "] (missed heartbeats), got " + std::to_string(liveness));
}

void check_prefetch(std::int64_t prefetch, const std::string& field) {
  if (prefetch < 0 || prefetch > kMaxPrefetch)
    throw ConfigError(field, "must be in [0, " + std::to_string(kMaxPrefetch) + "] (trials a " +
                                 "worker holds besides the one it runs), got " +
                                 std::to_string(prefetch));
}

// --- cereal serialize functions (found by ADL) --------------------------------

template <class A>
void serialize(A& ar, Value& v, std::uint32_t const version) {
  check_version(version, "Value");
  field_enum(ar, v.kind, 0, 5, "Value.kind");
  switch (v.kind) {
    case Value::Kind::kNull:
      break;
    case Value::Kind::kBool:
      field_bool(ar, v.b);
      break;
    case Value::Kind::kInt:
      ar(v.i);
      break;
    case Value::Kind::kUint:
      ar(v.u);
      break;
    case Value::Kind::kFloat:
      ar(v.d);
      break;
    case Value::Kind::kString:
      field_string(ar, v.s);
      break;
  }
}

template <class A>
void serialize(A& ar, NamedValue& v, std::uint32_t const version) {
  check_version(version, "NamedValue");
  field_string(ar, v.name);
  ar(v.value);
  if constexpr (kLoading<A>)
    if (v.name.empty()) throw ProtocolError("a param name is empty");
}

template <class A>
void serialize(A& ar, Hello& m, std::uint32_t const version) {
  check_version(version, "Hello");
  field_string(ar, m.worker_id);
  field_string(ar, m.hostname);
  ar(m.pid);
  field_string(ar, m.device);
  field_string(ar, m.visible_devices);
  ar(m.threads);
  ar(m.protocol_version);
  ar(m.prefetch);
}

template <class A>
void serialize(A& ar, Welcome& m, std::uint32_t const version) {
  check_version(version, "Welcome");
  field_string(ar, m.study_name);
  ar(m.heartbeat_interval_ms, m.liveness);
  field_string(ar, m.artifact_endpoint);
  if constexpr (kLoading<A>)
    if (m.artifact_endpoint.size() > kMaxTokenBytes * 16)
      throw ProtocolError("Welcome: artifact_endpoint is longer than " +
                          std::to_string(kMaxTokenBytes * 16) + " bytes");
  if constexpr (kLoading<A>)
    if (m.heartbeat_interval_ms < 1 || m.heartbeat_interval_ms > kMaxHeartbeatIntervalMs ||
        m.liveness < 1 || m.liveness > kMaxLiveness)
      throw ProtocolError("Welcome: heartbeat interval or liveness out of bounds");
}

template <class A>
void serialize(A& ar, Disconnect& m, std::uint32_t const version) {
  check_version(version, "Disconnect");
  field_enum(ar, m.code, 1, 2, "Disconnect.code");
  ar(m.coordinator_version);
  field_string(ar, m.reason);
}

template <class A>
void serialize(A&, RequestTrial&, std::uint32_t const version) {
  check_version(version, "RequestTrial");
}

template <class A>
void serialize(A& ar, Assignment& m, std::uint32_t const version) {
  check_version(version, "Assignment");
  ar(m.trial_id, m.number);
  field_list(ar, m.params);
  field_list(ar, m.fixed);
  ar(m.config_id);
  field_string(ar, m.config_json);
  ar(m.lineage, m.resume_step);
  field_string(ar, m.store_id);
  field_string(ar, m.store_root);
  ar(m.rank, m.world_size, m.local_rank, m.local_world_size, m.group_rank);
  field_string(ar, m.master_addr);
  ar(m.master_port);
  if constexpr (kLoading<A>) {
    if (m.number < 0) throw ProtocolError("Assignment: trial number must be >= 0");
    if (m.world_size < 1 || m.world_size > kMaxWorldSize || m.rank < 0 || m.rank >= m.world_size ||
        m.local_world_size < 1 || m.local_world_size > m.world_size || m.local_rank < 0 ||
        m.local_rank >= m.local_world_size || m.group_rank < 0 || m.group_rank >= m.world_size)
      throw ProtocolError(
          "Assignment: rank, world_size, local_rank, local_world_size or "
          "group_rank out of range");
    if (m.master_addr.size() > kMaxHostBytes)
      throw ProtocolError("Assignment.master_addr: at most " + std::to_string(kMaxHostBytes) +
                          " bytes");
    if (m.lineage < -1 || m.resume_step < -1)
      throw ProtocolError("Assignment: lineage and resume_step must be >= -1");
    if (m.store_id.size() > kMaxStoreIdBytes || m.store_root.size() > kMaxStoreRootBytes)
      throw ProtocolError("Assignment: store_id or store_root too long");
  }
}

template <class A>
void serialize(A& ar, Suggest& m, std::uint32_t const version) {
  check_version(version, "Suggest");
  ar(m.number);
  field_string(ar, m.name);
  field_string(ar, m.distribution_json);
  if constexpr (kLoading<A>)
    if (m.number < 0 || m.name.empty())
      throw ProtocolError("Suggest: needs a trial number >= 0 and a param name");
}

template <class A>
void serialize(A& ar, SuggestReply& m, std::uint32_t const version) {
  check_version(version, "SuggestReply");
  ar(m.number);
  field_string(ar, m.name);
  field_bool(ar, m.ok);
  ar(m.value);
  field_string(ar, m.error);
}

template <class A>
void serialize(A& ar, Report& m, std::uint32_t const version) {
  check_version(version, "Report");
  ar(m.number, m.step, m.value);
  field_bool(ar, m.checkpoint);
  if constexpr (kLoading<A>)
    if (m.number < 0 || m.step < 0)
      throw ProtocolError("Report: trial number and step must be >= 0");
}

template <class A>
void serialize(A& ar, Decision& m, std::uint32_t const version) {
  check_version(version, "Decision");
  ar(m.number, m.step);
  field_bool(ar, m.stored);
  field_bool(ar, m.prune);
}

template <class A>
void serialize(A& ar, Complete& m, std::uint32_t const version) {
  check_version(version, "Complete");
  ar(m.number);
  field_bool(ar, m.pruned);
  field_optional_double(ar, m.value);
  field_string(ar, m.user_attrs_json);
  field_bool(ar, m.artifacts);
  if constexpr (kLoading<A>) {
    if (m.number < 0) throw ProtocolError("Complete: trial number must be >= 0");
    if (!m.pruned && !m.value) throw ProtocolError("Complete: a value is required unless pruned");
  }
}

template <class A>
void serialize(A& ar, Fail& m, std::uint32_t const version) {
  check_version(version, "Fail");
  ar(m.number);
  field_enum(ar, m.reason, 1, 2, "Fail.reason");
  field_string(ar, m.message);
  field_string(ar, m.user_attrs_json);
  field_bool(ar, m.artifacts);
  if constexpr (kLoading<A>)
    if (m.number < 0) throw ProtocolError("Fail: trial number must be >= 0");
}

template <class A>
void serialize(A& ar, Restored& m, std::uint32_t const version) {
  check_version(version, "Restored");
  ar(m.number, m.step);
  field_bool(ar, m.restored);
  field_string(ar, m.warning);
  if constexpr (kLoading<A>) {
    if (m.number < 0 || m.step < 0)
      throw ProtocolError("Restored: trial number and step must be >= 0");
    if (m.warning.size() > kMaxRestoreWarningBytes)
      throw ProtocolError("Restored.warning: at most " + std::to_string(kMaxRestoreWarningBytes) +
                          " bytes, got " + std::to_string(m.warning.size()));
  }
}

template <class A>
void serialize(A& ar, RankReady& m, std::uint32_t const version) {
  check_version(version, "RankReady");
  ar(m.number, m.rank);
  field_string(ar, m.addr);
  ar(m.port);
  if constexpr (kLoading<A>) {
    if (m.number < 0) throw ProtocolError("RankReady: trial number must be >= 0");
    if (m.rank < 0 || m.rank >= kMaxWorldSize)
      throw ProtocolError("RankReady.rank: must be in [0, " + std::to_string(kMaxWorldSize) +
                          "), got " + std::to_string(m.rank));
    if (m.addr.size() > kMaxHostBytes)
      throw ProtocolError("RankReady.addr: at most " + std::to_string(kMaxHostBytes) + " bytes");
  }
}

template <class A>
void serialize(A& ar, StopTrial& m, std::uint32_t const version) {
  check_version(version, "StopTrial");
  ar(m.number);
  field_string(ar, m.reason);
  if constexpr (kLoading<A>)
    if (m.number < 0) throw ProtocolError("StopTrial: trial number must be >= 0");
}

template <class A>
void serialize(A&, Heartbeat&, std::uint32_t const version) {
  check_version(version, "Heartbeat");
}

template <class A>
void serialize(A& ar, Shutdown& m, std::uint32_t const version) {
  check_version(version, "Shutdown");
  field_string(ar, m.reason);
  field_bool(ar, m.stop_trial);
}

namespace {

// The rules of a piece of a snapshot stream (ArtifactPut, ArtifactGetReply).
void check_piece(const char* what, std::int64_t number, std::int64_t step, std::uint64_t offset,
                 std::uint64_t total, std::uint64_t manifest_bytes, const std::string& data) {
  if (number < 0 || step < 0)
    throw ProtocolError(std::string(what) + ": trial number and step must be >= 0");
  if (data.size() > kMaxArtifactChunkBytes)
    throw ProtocolError(std::string(what) + ": a piece of " + std::to_string(data.size()) +
                        " bytes exceeds " + std::to_string(kMaxArtifactChunkBytes));
  if (offset > total || data.size() > total - offset || manifest_bytes > total)
    throw ProtocolError(std::string(what) + ": offset, size and manifest_bytes exceed total");
}

// A token's rule (ArtifactPut.token and the like).
void check_token(const char* what, const std::string& token) {
  if (token.size() > kMaxTokenBytes)
    throw ProtocolError(std::string(what) + ": token longer than " +
                        std::to_string(kMaxTokenBytes) + " bytes");
}

}  // namespace

template <class A>
void serialize(A& ar, ArtifactPut& m, std::uint32_t const version) {
  check_version(version, "ArtifactPut");
  ar(m.number, m.step, m.offset, m.total, m.manifest_bytes);
  field_string(ar, m.data);
  ar(m.checksum);
  field_enum(ar, m.kind, 1, 2, "ArtifactPut.kind");
  field_string(ar, m.token);
  if constexpr (kLoading<A>) check_token("ArtifactPut", m.token);
  if constexpr (kLoading<A>)
    check_piece("ArtifactPut", m.number, m.step, m.offset, m.total, m.manifest_bytes, m.data);
}

template <class A>
void serialize(A& ar, ArtifactPutReply& m, std::uint32_t const version) {
  check_version(version, "ArtifactPutReply");
  ar(m.number, m.step);
  field_bool(ar, m.ok);
  field_bool(ar, m.done);
  ar(m.next_offset);
  field_string(ar, m.error);
  field_enum(ar, m.kind, 1, 2, "ArtifactPutReply.kind");
  field_string(ar, m.token);
  if constexpr (kLoading<A>) check_token("ArtifactPutReply", m.token);
}

template <class A>
void serialize(A& ar, ArtifactGet& m, std::uint32_t const version) {
  check_version(version, "ArtifactGet");
  ar(m.number, m.step, m.offset);
  field_string(ar, m.token);
  if constexpr (kLoading<A>) check_token("ArtifactGet", m.token);
  if constexpr (kLoading<A>)
    if (m.number < 0 || m.step < 0)
      throw ProtocolError("ArtifactGet: trial number and step must be >= 0");
}

template <class A>
void serialize(A& ar, ArtifactGetReply& m, std::uint32_t const version) {
  check_version(version, "ArtifactGetReply");
  ar(m.number, m.step);
  field_bool(ar, m.ok);
  ar(m.offset, m.total, m.manifest_bytes);
  field_string(ar, m.data);
  ar(m.checksum);
  field_string(ar, m.error);
  field_string(ar, m.token);
  if constexpr (kLoading<A>) check_token("ArtifactGetReply", m.token);
  if constexpr (kLoading<A>)
    check_piece("ArtifactGetReply", m.number, m.step, m.offset, m.total, m.manifest_bytes, m.data);
}

}  // namespace hps::protocol

CEREAL_CLASS_VERSION(hps::protocol::ArtifactPut, 1)
CEREAL_CLASS_VERSION(hps::protocol::ArtifactPutReply, 1)
CEREAL_CLASS_VERSION(hps::protocol::ArtifactGet, 1)
CEREAL_CLASS_VERSION(hps::protocol::ArtifactGetReply, 1)
CEREAL_CLASS_VERSION(hps::protocol::Restored, 1)
CEREAL_CLASS_VERSION(hps::protocol::RankReady, 1)
CEREAL_CLASS_VERSION(hps::protocol::StopTrial, 1)
CEREAL_CLASS_VERSION(hps::protocol::Value, 1)
CEREAL_CLASS_VERSION(hps::protocol::NamedValue, 1)
CEREAL_CLASS_VERSION(hps::protocol::Hello, 1)
CEREAL_CLASS_VERSION(hps::protocol::Welcome, 1)
CEREAL_CLASS_VERSION(hps::protocol::Disconnect, 1)
CEREAL_CLASS_VERSION(hps::protocol::RequestTrial, 1)
CEREAL_CLASS_VERSION(hps::protocol::Assignment, 1)
CEREAL_CLASS_VERSION(hps::protocol::Suggest, 1)
CEREAL_CLASS_VERSION(hps::protocol::SuggestReply, 1)
CEREAL_CLASS_VERSION(hps::protocol::Report, 1)
CEREAL_CLASS_VERSION(hps::protocol::Decision, 1)
CEREAL_CLASS_VERSION(hps::protocol::Complete, 1)
CEREAL_CLASS_VERSION(hps::protocol::Fail, 1)
CEREAL_CLASS_VERSION(hps::protocol::Heartbeat, 1)
CEREAL_CLASS_VERSION(hps::protocol::Shutdown, 1)

namespace hps::protocol {

namespace {

constexpr std::uint16_t kFirstType = 1;
constexpr std::uint16_t kLastType = 20;

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

std::uint16_t get_u16(const char* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(p[0]) |
                                    (static_cast<unsigned char>(p[1]) << 8));
}

struct Envelope {
  std::uint16_t version;
  std::uint16_t type;
};

Envelope read_envelope(std::string_view frame) {
  if (frame.size() > kMaxFrameBytes)
    throw ProtocolError("frame of " + std::to_string(frame.size()) +
                        " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  if (frame.size() < kEnvelopeBytes)
    throw ProtocolError("frame of " + std::to_string(frame.size()) +
                        " bytes is shorter than the envelope");
  if (std::memcmp(frame.data(), kMagic, sizeof kMagic) != 0)
    throw ProtocolError("frame does not start with the magic \"HPSW\"");
  return {get_u16(frame.data() + 4), get_u16(frame.data() + 6)};
}

template <class T>
T decode_body(std::string_view frame) {
  MemoryBuf buf(frame.data() + kEnvelopeBytes, frame.size() - kEnvelopeBytes);
  std::istream in(&buf);
  T message;
  struct BodyScope {
    const MemoryBuf* saved = t_body;
    explicit BodyScope(const MemoryBuf* body) { t_body = body; }
    ~BodyScope() { t_body = saved; }
  } scope(&buf);
  try {
    cereal::PortableBinaryInputArchive ar(in);
    ar(message);
  } catch (const ProtocolError&) {
    throw;
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("truncated or malformed body: ") + e.what());
  }
  if (buf.remaining() != 0)
    throw ProtocolError(std::to_string(buf.remaining()) + " bytes left over after the body");
  return message;
}

template <std::size_t I = 0>
Message decode_as(std::uint16_t type, std::string_view frame) {
  if constexpr (I < std::variant_size_v<Message>) {
    if (type == I + 1) return decode_body<std::variant_alternative_t<I, Message>>(frame);
    return decode_as<I + 1>(type, frame);
  } else {
    throw ProtocolError("unknown message type " + std::to_string(type));
  }
}

}  // namespace

std::string to_string(MessageType type) {
  static const char* const kNames[] = {
      "Hello",       "Welcome",          "Disconnect", "RequestTrial", "Assignment",
      "Suggest",     "SuggestReply",     "Report",     "Decision",     "Complete",
      "Fail",        "Heartbeat",        "Shutdown",   "ArtifactPut",  "ArtifactPutReply",
      "ArtifactGet", "ArtifactGetReply", "Restored",   "RankReady",    "StopTrial"};
  auto n = static_cast<std::uint16_t>(type);
  if (n >= kFirstType && n <= kLastType) return kNames[n - 1];
  return "unknown(" + std::to_string(n) + ")";
}

VersionMismatch::VersionMismatch(std::uint16_t version, MessageType type)
    : ProtocolError("protocol version " + std::to_string(version) + " (this build speaks " +
                    std::to_string(kProtocolVersion) + ")"),
      version_(version),
      type_(type) {}

Value Value::from_json(const Json& j) {
  Value v;
  switch (j.type()) {
    case Json::value_t::null:
      v.kind = Kind::kNull;
      break;
    case Json::value_t::boolean:
      v.kind = Kind::kBool;
      v.b = j.get<bool>();
      break;
    case Json::value_t::number_integer:
      v.kind = Kind::kInt;
      v.i = j.get<std::int64_t>();
      break;
    case Json::value_t::number_unsigned:
      v.kind = Kind::kUint;
      v.u = j.get<std::uint64_t>();
      break;
    case Json::value_t::number_float:
      v.kind = Kind::kFloat;
      v.d = j.get<double>();
      break;
    case Json::value_t::string:
      v.kind = Kind::kString;
      v.s = j.get<std::string>();
      break;
    default:
      throw ProtocolError("a param value must be a JSON scalar, got " + std::string(j.type_name()));
  }
  return v;
}

Json Value::to_json() const {
  switch (kind) {
    case Kind::kNull:
      return Json();
    case Kind::kBool:
      return Json(b);
    case Kind::kInt:
      return Json(i);
    case Kind::kUint:
      return Json(u);
    case Kind::kFloat:
      return Json(d);
    case Kind::kString:
      return Json(s);
  }
  return Json();
}

std::vector<NamedValue> to_wire(const Params& params) {
  std::vector<NamedValue> out;
  out.reserve(params.size());
  for (const auto& [name, value] : params) out.push_back({name, Value::from_json(value)});
  return out;
}

Params from_wire(const std::vector<NamedValue>& values) {
  Params out;
  for (const auto& nv : values) out[nv.name] = nv.value.to_json();
  return out;
}

MessageType type_of(const Message& message) {
  return static_cast<MessageType>(message.index() + 1);
}

std::string encode(const Message& message) {
  std::string out;
  out.reserve(64);
  out.append(kMagic, sizeof kMagic);
  put_u16(out, kProtocolVersion);
  put_u16(out, static_cast<std::uint16_t>(type_of(message)));
  {
    StringBuf buf(out);
    std::ostream os(&buf);
    cereal::PortableBinaryOutputArchive ar(os);
    std::visit([&](const auto& m) { ar(m); }, message);
  }
  if (out.size() > kMaxFrameBytes)
    throw ProtocolError(to_string(type_of(message)) + " message of " + std::to_string(out.size()) +
                        " bytes exceeds the frame limit of " + std::to_string(kMaxFrameBytes));
  return out;
}

Message decode(std::string_view frame) {
  Envelope env = read_envelope(frame);
  if (env.version != kProtocolVersion)
    throw VersionMismatch(env.version, static_cast<MessageType>(env.type));
  if (env.type < kFirstType || env.type > kLastType)
    throw ProtocolError("unknown message type " + std::to_string(env.type));
  return decode_as(env.type, frame);
}

std::optional<Disconnect> decode_disconnect_any_version(std::string_view frame) {
  try {
    Envelope env = read_envelope(frame);
    if (env.type != static_cast<std::uint16_t>(MessageType::kDisconnect)) return std::nullopt;
    return decode_body<Disconnect>(frame);
  } catch (const ProtocolError&) {
    return std::nullopt;
  }
}

}  // namespace hps::protocol
