// Tests of protocol/protocol: round trips and validation of hostile input.
#include "protocol/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace hps::protocol {
namespace {

std::uint64_t bits(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

double from_bits(std::uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}

template <class T>
T round_trip(const T& m) {
  Message decoded = decode(encode(m));
  EXPECT_TRUE(std::holds_alternative<T>(decoded)) << to_string(type_of(decoded));
  return std::get<T>(decoded);
}

// Every message type, filled with non-default values.
std::vector<Message> samples() {
  Hello h{"host:12", "host", 12, "cuda:0", "3", 4, kProtocolVersion};
  Welcome w{"study é", 250, 3};
  Disconnect d{Disconnect::Code::kRefused, 7, "why"};
  Assignment a;
  a.trial_id = 42;
  a.number = 41;
  a.params = to_wire(Params{{"lr", Json(0.1)}, {"n", Json(3)}, {"opt", Json("adam")}});
  a.fixed = to_wire(Params{{"flag", Json(true)}, {"none", Json()}});
  a.config_id = 0xfeedfacecafebeefull;
  a.config_json = R"({"objective":{"type":"sleep"}})";
  Suggest s{5, "x", R"({"type":"float","low":0,"high":1})"};
  SuggestReply sr{5, "x", true, Value::from_json(Json(0.25)), ""};
  Report r{5, 9, -1.5};
  Decision dec{5, 9, false, true};
  Complete c{5, false, 3.25, R"({"acc":0.9})"};
  Fail f{5, Fail::Reason::kInterrupted, "stopped", "{}"};
  Shutdown sh{"budget reached", true};
  ArtifactPut put{5, 3, 0, 10, 4, "{}ab", 0x1234};
  ArtifactPutReply put_reply{5, 3, true, false, 4, ""};
  ArtifactGet get{5, 3, 4};
  ArtifactGetReply get_reply{5, 3, true, 4, 10, 4, "cdef", 0x99, ""};
  Restored restored{5, 3, false, "snapshot-3/model.pt: truncated"};
  RankReady ready{5, 0, "node-1", 29500};
  StopTrial stop{5, "rank 1 was lost"};
  return {h,           w,  d,   RequestTrial{}, a,   s,         sr,       r,     dec, c, f,
          Heartbeat{}, sh, put, put_reply,      get, get_reply, restored, ready, stop};
}

TEST(Protocol, EveryMessageTypeRoundTrips) {
  auto all = samples();
  ASSERT_EQ(all.size(), std::variant_size_v<Message>);
  for (const auto& m : all) {
    std::string frame = encode(m);
    ASSERT_GE(frame.size(), kEnvelopeBytes);
    EXPECT_EQ(std::string(frame, 0, 4), "HPSW");
    Message back = decode(frame);
    EXPECT_EQ(back.index(), m.index());
    EXPECT_EQ(encode(back), frame) << to_string(type_of(m));  // same bytes again
  }
  auto h = round_trip(std::get<Hello>(all[0]));
  EXPECT_EQ(h.worker_id, "host:12");
  EXPECT_EQ(h.pid, 12);
  EXPECT_EQ(h.device, "cuda:0");
  EXPECT_EQ(h.visible_devices, "3");
  EXPECT_EQ(h.threads, 4);
  auto a = round_trip(std::get<Assignment>(all[4]));
  EXPECT_EQ(a.trial_id, 42);
  EXPECT_EQ(a.number, 41);
  EXPECT_EQ(a.config_id, 0xfeedfacecafebeefull);
  Params p = from_wire(a.params);
  EXPECT_EQ(p.at("lr"), Json(0.1));
  EXPECT_TRUE(p.at("n").is_number_integer());
  EXPECT_EQ(p.at("opt"), Json("adam"));
  Params fixed = from_wire(a.fixed);
  EXPECT_EQ(fixed.at("flag"), Json(true));
  EXPECT_TRUE(fixed.at("none").is_null());
  auto dec = round_trip(std::get<Decision>(all[8]));
  EXPECT_FALSE(dec.stored);
  EXPECT_TRUE(dec.prune);
  auto c = round_trip(std::get<Complete>(all[9]));
  ASSERT_TRUE(c.value.has_value());
  EXPECT_EQ(*c.value, 3.25);
  EXPECT_EQ(c.user_attrs_json, R"({"acc":0.9})");
  auto f = round_trip(std::get<Fail>(all[10]));
  EXPECT_EQ(f.reason, Fail::Reason::kInterrupted);
  auto sh = round_trip(std::get<Shutdown>(all[12]));
  EXPECT_TRUE(sh.stop_trial);
  EXPECT_EQ(sh.reason, "budget reached");
}

TEST(Protocol, DoublesArriveBitExact) {
  const double values[] = {0.1,
                           -0.0,
                           1.0 / 3.0,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::max(),
                           from_bits(0x7ff8000000000123ull)};  // a NaN with a payload
  for (double v : values) {
    Report r = round_trip(Report{1, 2, v});
    EXPECT_EQ(bits(r.value), bits(v));
    Complete c = round_trip(Complete{1, false, v, ""});
    ASSERT_TRUE(c.value);
    EXPECT_EQ(bits(*c.value), bits(v));
    SuggestReply s = round_trip(SuggestReply{1, "x", true, Value::from_json(Json(v)), ""});
    EXPECT_EQ(bits(s.value.d), bits(v));
  }
}

TEST(Protocol, ParamValuesKeepTheirJsonType) {
  Params in{{"null", Json()},
            {"bool", Json(false)},
            {"int", Json(std::int64_t{-7})},
            {"uint", Json(std::uint64_t{18446744073709551615ull})},
            {"float", Json(2.0)},
            {"string", Json("2")}};
  Assignment a;
  a.number = 0;
  a.params = to_wire(in);
  Params out = from_wire(round_trip(a).params);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [k, v] : in) {
    EXPECT_EQ(out.at(k).type(), v.type()) << k;
    EXPECT_EQ(out.at(k), v) << k;
  }
  EXPECT_THROW(Value::from_json(Json::array({1})), ProtocolError);
  EXPECT_THROW(Value::from_json(Json::object()), ProtocolError);
}

TEST(Protocol, RejectsBadEnvelopes) {
  std::string good = encode(Heartbeat{});
  EXPECT_THROW(decode(""), ProtocolError);
  EXPECT_THROW(decode("HPS"), ProtocolError);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_THROW(decode(bad_magic), ProtocolError);
  std::string unknown = good;
  unknown[6] = 77;
  unknown[7] = 0;
  EXPECT_THROW(decode(unknown), ProtocolError);
  std::string zero_type = good;
  zero_type[6] = 0;
  EXPECT_THROW(decode(zero_type), ProtocolError);
  std::string huge(kMaxFrameBytes + 1, '\0');
  std::memcpy(huge.data(), good.data(), good.size());
  EXPECT_THROW(decode(huge), ProtocolError);
}

TEST(Protocol, AnotherProtocolVersionIsAVersionMismatch) {
  std::string frame = encode(Hello{"w", "h", 1, "cpu", "", 1, kProtocolVersion});
  frame[4] = static_cast<char>(kProtocolVersion + 1);
  try {
    decode(frame);
    FAIL() << "decoded a frame of another version";
  } catch (const VersionMismatch& e) {
    EXPECT_EQ(e.version(), kProtocolVersion + 1);
    EXPECT_EQ(e.type(), MessageType::kHello);
  }
  // A Disconnect stays readable whatever the version.
  std::string d = encode(Disconnect{Disconnect::Code::kRefused, kProtocolVersion, "upgrade"});
  d[4] = 9;
  auto back = decode_disconnect_any_version(d);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->reason, "upgrade");
  EXPECT_FALSE(decode_disconnect_any_version(encode(Heartbeat{})));
}

TEST(Protocol, EveryTruncationAndExtensionIsRejected) {
  for (const auto& m : samples()) {
    std::string frame = encode(m);
    for (std::size_t n = 0; n < frame.size(); ++n)
      EXPECT_THROW(decode(std::string_view(frame.data(), n)), ProtocolError)
          << to_string(type_of(m)) << " cut at " << n;
    EXPECT_THROW(decode(frame + '\0'), ProtocolError) << to_string(type_of(m));
  }
}

// Replaces the first occurrence of `from` in `frame` by `to`.
std::string patch(std::string frame, const std::string& from, const std::string& to) {
  auto pos = frame.find(from);
  EXPECT_NE(pos, std::string::npos);
  if (pos != std::string::npos) frame.replace(pos, from.size(), to);
  return frame;
}

std::string le64(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

TEST(Protocol, HugeLengthsAndBadFieldValuesAreRejectedWithoutAllocating) {
  std::string frame = encode(Suggest{0, "ab", ""});
  // The name's length prefix claims 2^62 bytes.
  EXPECT_THROW(decode(patch(frame, le64(2) + "ab", le64(1ull << 62) + "ab")), ProtocolError);
  // A list (Assignment.params) that claims 2^40 entries.
  Assignment a;
  a.number = 3;
  a.config_id = 0x1122334455667788ull;
  std::string af = encode(a);
  EXPECT_THROW(decode(patch(af, le64(0) + le64(0) + le64(0x1122334455667788ull),
                            le64(1ull << 40) + le64(0) + le64(0x1122334455667788ull))),
               ProtocolError);
  // A bool byte that is neither 0 nor 1.
  std::string dec = encode(Decision{1, 2, true, false});
  std::string bad_bool = dec;
  bad_bool[bad_bool.size() - 2] = 2;
  EXPECT_THROW(decode(bad_bool), ProtocolError);
  // An enum value out of range (Fail.reason is the byte after the number).
  std::string fail = encode(Fail{0x0101010101010101ll, Fail::Reason::kException, "", ""});
  EXPECT_THROW(decode(patch(fail, le64(0x0101010101010101ull) + '\x01',
                            le64(0x0101010101010101ull) + '\x09')),
               ProtocolError);
  // A negative step.
  EXPECT_THROW(decode(encode(Report{1, -1, 0.0})), ProtocolError);
  // Complete without a value and not pruned.
  EXPECT_THROW(decode(encode(Complete{1, false, std::nullopt, ""})), ProtocolError);
}

// Found by tests/fuzz/fuzz_protocol: a length below kMaxFrameBytes but
// beyond the bytes left made decode() allocate it before failing.
TEST(Protocol, LengthsAreCheckedAgainstTheBytesLeftBeforeAllocating) {
  auto error_of = [](const std::string& frame) -> std::string {
    try {
      decode(frame);
    } catch (const ProtocolError& e) {
      return e.what();
    }
    return "decoded";
  };
  std::string frame = encode(Suggest{0, "ab", ""});
  // The name claims 1 MiB in a frame of a few dozen bytes.
  EXPECT_NE(error_of(patch(frame, le64(2) + "ab", le64(1u << 20) + "ab"))
                .find("string length 1048576 exceeds the frame"),
            std::string::npos);
  // One byte more than what is left.
  std::size_t left = frame.size() - frame.find(le64(2) + "ab") - 8;
  EXPECT_NE(error_of(patch(frame, le64(2) + "ab", le64(left + 1) + "ab")).find("exceeds the frame"),
            std::string::npos);
  Assignment a;
  a.number = 3;
  a.config_id = 0x1122334455667788ull;
  std::string af = encode(a);
  EXPECT_NE(error_of(patch(af, le64(0) + le64(0) + le64(0x1122334455667788ull),
                           le64(1000) + le64(0) + le64(0x1122334455667788ull)))
                .find("list length 1000 exceeds the frame"),
            std::string::npos);
}

TEST(Protocol, AnotherClassVersionIsRejected) {
  // The class version (u32) follows the endianness byte after the envelope.
  std::string frame = encode(Heartbeat{});
  ASSERT_EQ(frame.size(), kEnvelopeBytes + 1 + 4);
  frame[kEnvelopeBytes + 1] = 2;
  EXPECT_THROW(decode(frame), ProtocolError);
}

TEST(Protocol, RandomAndMutatedFramesNeverEscapeAsAnythingButProtocolError) {
  std::mt19937_64 rng(12345);
  auto all = samples();
  for (int i = 0; i < 20000; ++i) {
    std::string frame;
    if (i % 2 == 0) {
      // A valid envelope of a random type, then random bytes.
      frame = encode(all[static_cast<std::size_t>(rng() % all.size())]).substr(0, kEnvelopeBytes);
      frame[6] = static_cast<char>(1 + rng() % 14);
      std::size_t n = rng() % 64;
      for (std::size_t k = 0; k < n; ++k) frame += static_cast<char>(rng());
    } else {
      // A valid frame with a few bytes changed.
      frame = encode(all[static_cast<std::size_t>(rng() % all.size())]);
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k)
        frame[kEnvelopeBytes + rng() % (frame.size() - kEnvelopeBytes)] = static_cast<char>(rng());
    }
    try {
      Message m = decode(frame);
      (void)encode(m);  // whatever decoded is a valid message
    } catch (const ProtocolError&) {
    }
  }
}

TEST(Protocol, EncodingAnOversizedMessageThrows) {
  Assignment a;
  a.number = 0;
  a.config_json.assign(kMaxFrameBytes, 'x');
  EXPECT_THROW(encode(a), ProtocolError);
}

TEST(Protocol, HeartbeatSettingsHaveOneSetOfBounds) {
  EXPECT_NO_THROW(check_heartbeat_settings(1, "i", 1, "l"));
  EXPECT_NO_THROW(check_heartbeat_settings(kMaxHeartbeatIntervalMs, "i", kMaxLiveness, "l"));
  // The refusal's path and message ("" and "" when accepted).
  auto refusal_of = [](std::int64_t interval_ms,
                       std::int64_t liveness) -> std::pair<std::string, std::string> {
    try {
      check_heartbeat_settings(interval_ms, "--heartbeat-ms", liveness, "--liveness");
    } catch (const ConfigError& e) {
      return {e.path(), e.what()};
    }
    return {};
  };
  auto path_of = [&](std::int64_t interval_ms, std::int64_t liveness) {
    return refusal_of(interval_ms, liveness).first;
  };
  auto message_of = [&](std::int64_t interval_ms, std::int64_t liveness) {
    return refusal_of(interval_ms, liveness).second;
  };
  EXPECT_EQ(path_of(0, 5), "--heartbeat-ms");
  EXPECT_EQ(path_of(std::int64_t{kMaxHeartbeatIntervalMs} + 1, 5), "--heartbeat-ms");
  EXPECT_EQ(path_of(1000, 0), "--liveness");
  EXPECT_EQ(path_of(1000, std::int64_t{kMaxLiveness} + 1), "--liveness");
  // The message says what was given.
  EXPECT_NE(message_of(0, 5).find("got 0"), std::string::npos) << message_of(0, 5);
  EXPECT_NE(message_of(1000, -3).find("got -3"), std::string::npos) << message_of(1000, -3);
  // A Welcome outside the bounds is refused by the worker's decoder.
  Welcome w{"s", kMaxHeartbeatIntervalMs + 1, 3};
  EXPECT_THROW(decode(encode(w)), ProtocolError);
}

// Version 4: the artifact store's token and root travel in an Assignment;
// the pieces of a snapshot are checked on decode (size, offset, total).
TEST(Protocol, ArtifactMessagesRoundTripAndAreChecked) {
  Assignment a;
  a.number = 3;
  a.lineage = 1;
  a.resume_step = 4;
  a.store_id = "00ff";
  a.store_root = "/tmp/x.logs/checkpoints";
  Assignment back = round_trip(a);
  EXPECT_EQ(back.store_id, "00ff");
  EXPECT_EQ(back.store_root, "/tmp/x.logs/checkpoints");
  a.store_id = std::string(kMaxStoreIdBytes + 1, 'a');
  EXPECT_THROW(decode(encode(a)), ProtocolError);

  ArtifactPut put{2, 5, 3, 10, 2, "abcd", 42};
  ArtifactPut p = round_trip(put);
  EXPECT_EQ(p.data, "abcd");
  EXPECT_EQ(p.offset, 3u);
  EXPECT_EQ(p.checksum, 42u);
  put.offset = 8;  // 8 + 4 > 10
  EXPECT_THROW(decode(encode(put)), ProtocolError);
  put.offset = 0;
  put.manifest_bytes = 11;
  EXPECT_THROW(decode(encode(put)), ProtocolError);
  put.manifest_bytes = 0;
  put.total = kMaxArtifactChunkBytes + 10;
  put.data = std::string(kMaxArtifactChunkBytes + 1, 'x');
  EXPECT_THROW(decode(encode(put)), ProtocolError);
  ArtifactGet get{-1, 0, 0};
  EXPECT_THROW(decode(encode(get)), ProtocolError);
  ArtifactGetReply reply{1, 2, false, 0, 0, 0, "", 0, "no snapshot"};
  EXPECT_EQ(round_trip(reply).error, "no snapshot");
}

// Version 6: user artifacts travel as ArtifactPut of kind kUser; a
// worker that wrote them in place says so in Complete or Fail.
TEST(Protocol, UserArtifactFieldsRoundTripAndAnUnknownKindIsRefused) {
  ArtifactPut put{2, 0, 0, 10, 2, "abcd", 42, ArtifactKind::kUser};
  EXPECT_EQ(round_trip(put).kind, ArtifactKind::kUser);
  EXPECT_EQ(round_trip(ArtifactPut{2, 1, 0, 4, 0, "abcd", 1}).kind, ArtifactKind::kSnapshot);
  ArtifactPutReply reply{2, 0, true, true, 10, "", ArtifactKind::kUser};
  EXPECT_EQ(round_trip(reply).kind, ArtifactKind::kUser);
  // The kind is the byte before the token (version 7: an empty token is
  // its 8-byte length).
  std::string frame = encode(put);
  frame[frame.size() - 9] = 3;
  try {
    decode(frame);
    ADD_FAILURE() << "kind 3 accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("ArtifactPut.kind"), std::string::npos) << e.what();
  }
  Complete c{4, false, 0.5, "", true};
  EXPECT_TRUE(round_trip(c).artifacts);
  EXPECT_FALSE(round_trip(Complete{4, false, 0.5, ""}).artifacts);
  Fail f{4, Fail::Reason::kException, "boom", "", true};
  EXPECT_TRUE(round_trip(f).artifacts);
}

TEST(Protocol, RestoredIsChecked) {
  Restored r{7, 4, true, ""};
  Restored back = round_trip(r);
  EXPECT_EQ(back.number, 7);
  EXPECT_EQ(back.step, 4);
  EXPECT_TRUE(back.restored);
  EXPECT_THROW(decode(encode(Restored{-1, 4, true, ""})), ProtocolError);
  EXPECT_THROW(decode(encode(Restored{7, -2, true, ""})), ProtocolError);
  EXPECT_THROW(decode(encode(Restored{7, 4, false, std::string(kMaxRestoreWarningBytes + 1, 'w')})),
               ProtocolError);
  EXPECT_EQ(
      round_trip(Restored{7, 4, false, std::string(kMaxRestoreWarningBytes, 'w')}).warning.size(),
      kMaxRestoreWarningBytes);
}

// Multi-process trials (version 6): an Assignment's rank fields and
// RankReady/StopTrial round trip; a rank outside its world, a world beyond
// kMaxWorldSize, a negative trial number or an over-long host is refused.
TEST(Protocol, RankFieldsAndRankMessagesAreChecked) {
  Assignment a;
  a.trial_id = 3;
  a.number = 2;
  a.rank = 3;
  a.world_size = 4;
  a.local_rank = 1;
  a.local_world_size = 2;
  a.group_rank = 1;
  a.master_addr = "node-1";
  a.master_port = 29500;
  Assignment back = round_trip(a);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.local_rank, 1);
  EXPECT_EQ(back.local_world_size, 2);
  EXPECT_EQ(back.group_rank, 1);
  EXPECT_EQ(back.master_addr, "node-1");
  EXPECT_EQ(back.master_port, 29500);
  auto refused = [](Assignment m) { EXPECT_THROW(decode(encode(m)), ProtocolError); };
  Assignment bad = a;
  bad.rank = 4;  // not below world_size
  refused(bad);
  bad = a;
  bad.rank = -1;
  refused(bad);
  bad = a;
  bad.world_size = kMaxWorldSize + 1;
  refused(bad);
  bad = a;
  bad.local_rank = 2;  // not below local_world_size
  refused(bad);
  bad = a;
  bad.local_world_size = 5;  // more than the world
  refused(bad);
  bad = a;
  bad.group_rank = 4;
  refused(bad);
  bad = a;
  bad.master_addr.assign(kMaxHostBytes + 1, 'h');
  refused(bad);

  RankReady r = round_trip(RankReady{7, 1, "", 0});
  EXPECT_EQ(r.number, 7);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(round_trip(RankReady{7, 0, "host", 40000}).port, 40000);
  EXPECT_THROW(decode(encode(RankReady{-1, 0, "h", 1})), ProtocolError);
  EXPECT_THROW(decode(encode(RankReady{7, -1, "h", 1})), ProtocolError);
  EXPECT_THROW(decode(encode(RankReady{7, kMaxWorldSize, "h", 1})), ProtocolError);
  EXPECT_THROW(decode(encode(RankReady{7, 0, std::string(kMaxHostBytes + 1, 'h'), 1})),
               ProtocolError);
  EXPECT_EQ(round_trip(StopTrial{9, "the trial ended"}).reason, "the trial ended");
  EXPECT_THROW(decode(encode(StopTrial{-3, ""})), ProtocolError);
  EXPECT_EQ(to_string(MessageType::kRankReady), "RankReady");
  EXPECT_EQ(to_string(MessageType::kStopTrial), "StopTrial");
}

// Version 7: the artifact endpoint. The Welcome names it; the pieces after
// a transfer's first carry the token its reply granted; a token longer than
// kMaxTokenBytes, or an endpoint longer than 16 times that, is refused.
TEST(Protocol, ArtifactEndpointAndTokensRoundTripAndAreBounded) {
  EXPECT_EQ(kProtocolVersion, 7);
  Welcome w;
  w.study_name = "s";
  w.artifact_endpoint = "tcp://0.0.0.0:5556";
  EXPECT_EQ(round_trip(w).artifact_endpoint, "tcp://0.0.0.0:5556");
  EXPECT_EQ(round_trip(Welcome{}).artifact_endpoint, "");
  w.artifact_endpoint = std::string(kMaxTokenBytes * 16 + 1, 'a');
  EXPECT_THROW(decode(encode(w)), ProtocolError);

  const std::string token(kMaxTokenBytes, 't');
  ArtifactPut put{2, 1, 4, 8, 2, "abcd", 1};
  put.token = token;
  EXPECT_EQ(round_trip(put).token, token);
  ArtifactPutReply pr{2, 1, true, false, 4, ""};
  pr.token = token;
  EXPECT_EQ(round_trip(pr).token, token);
  ArtifactGet get{2, 1, 4, token};
  EXPECT_EQ(round_trip(get).token, token);
  ArtifactGetReply gr;
  gr.number = 2;
  gr.step = 1;
  gr.ok = true;
  gr.total = 4;
  gr.data = "abcd";
  gr.token = token;
  EXPECT_EQ(round_trip(gr).token, token);

  const std::string too_long(kMaxTokenBytes + 1, 't');
  put.token = too_long;
  pr.token = too_long;
  get.token = too_long;
  gr.token = too_long;
  for (const std::string& frame : {encode(put), encode(pr), encode(get), encode(gr)}) {
    try {
      decode(frame);
      ADD_FAILURE() << "a token of " << too_long.size() << " bytes accepted";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("token longer than 64 bytes"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace hps::protocol
