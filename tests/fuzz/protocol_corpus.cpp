// Writes the seed corpus of fuzz_protocol: a few encoded frames of every
// message type (protocol/protocol.h), plus near-valid ones (a truncated
// frame, another protocol version, an unknown type). The files in
// tests/fuzz/corpus/protocol were made by
//   build/fuzz/tests/fuzz/fuzz_protocol_corpus tests/fuzz/corpus/protocol
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "protocol/protocol.h"

namespace protocol = hps::protocol;

namespace {

void write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::cerr << "cannot write " << dir << "/" << name << "\n";
    std::exit(1);
  }
}

protocol::Value value(const hps::Json& j) { return protocol::Value::from_json(j); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_protocol_corpus DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, protocol::Message>> messages;
  constexpr auto kVersion = protocol::kProtocolVersion;
  messages.push_back({"hello", protocol::Hello{"host:42", "host", 42, "cpu", "", 4, kVersion}});
  messages.push_back(
      {"hello_cuda", protocol::Hello{"w1", "gpu-node", 7, "cuda:0", "0,1", 1, kVersion}});
  messages.push_back(
      {"hello_prefetch", protocol::Hello{"w2", "host", 8, "cpu", "", 1, kVersion, 1}});
  messages.push_back({"welcome", protocol::Welcome{"fmnist-mlp", 1000, 5}});
  messages.push_back(
      {"disconnect_refused", protocol::Disconnect{protocol::Disconnect::Code::kRefused, 1,
                                                  "protocol version 2 (this build speaks 1)"}});
  messages.push_back(
      {"disconnect_expired", protocol::Disconnect{protocol::Disconnect::Code::kExpired, 1, ""}});
  messages.push_back({"request_trial", protocol::RequestTrial{}});
  protocol::Assignment a;
  a.trial_id = 12;
  a.number = 11;
  a.params = {
      {"lr", value(0.001)},        {"batch_size", value(64)},
      {"optimizer", value("sgd")}, {"use_bn", value(true)},
      {"none", value(nullptr)},    {"big", value(std::numeric_limits<std::uint64_t>::max())}};
  a.fixed = {{"momentum", value(0.9)}};
  a.config_id = 0x1234abcd;
  a.config_json =
      R"({"objective": {"type": "branin"}, "space": {"x": {"type": "float", "low": -5, "high": 10}}, "study": "b"})";
  messages.push_back({"assignment", a});
  protocol::Assignment a3 = a;
  a3.lineage = 4;
  a3.resume_step = 7;
  a3.store_id = "3f2a9c0d4e5b6a7f8091a2b3c4d5e6f7";
  a3.store_root = "/home/u/fmnist.logs/checkpoints";
  messages.push_back({"assignment_resume", a3});
  protocol::Assignment a4 = a;
  a4.rank = 1;
  a4.world_size = 4;
  a4.local_rank = 1;
  a4.local_world_size = 2;
  a4.group_rank = 0;
  a4.master_addr = "127.0.0.1";
  a4.master_port = 29500;
  messages.push_back({"assignment_rank", a4});
  protocol::Assignment a2;
  a2.trial_id = 1;
  a2.number = 0;
  messages.push_back({"assignment_empty", a2});
  messages.push_back(
      {"suggest", protocol::Suggest{3, "units", R"({"type": "int", "low": 1, "high": 8})"}});
  messages.push_back({"suggest_reply", protocol::SuggestReply{3, "units", true, value(4), ""}});
  messages.push_back({"suggest_reply_error",
                      protocol::SuggestReply{3, "units", false, protocol::Value{},
                                             "param 'units' was suggested with another range"}});
  messages.push_back({"report", protocol::Report{5, 2, 0.125}});
  messages.push_back(
      {"report_inf", protocol::Report{5, 3, std::numeric_limits<double>::infinity()}});
  messages.push_back({"decision", protocol::Decision{5, 2, true, false}});
  messages.push_back({"decision_prune", protocol::Decision{5, 3, false, true}});
  messages.push_back({"complete", protocol::Complete{5, false, 0.25, R"({"epochs": 3})"}});
  messages.push_back({"complete_pruned", protocol::Complete{6, true, std::nullopt, ""}});
  messages.push_back({"complete_nan", protocol::Complete{7, false, std::nan(""), ""}});
  messages.push_back(
      {"complete_artifacts", protocol::Complete{10, false, 0.5, "", /*artifacts=*/true}});
  messages.push_back(
      {"fail", protocol::Fail{8, protocol::Fail::Reason::kException, "boom", R"({"a": 1})"}});
  messages.push_back(
      {"fail_interrupted", protocol::Fail{9, protocol::Fail::Reason::kInterrupted, "", ""}});
  messages.push_back({"heartbeat", protocol::Heartbeat{}});
  messages.push_back({"shutdown", protocol::Shutdown{"budget reached", false}});
  messages.push_back({"shutdown_stop", protocol::Shutdown{"interrupted", true}});
  messages.push_back({"artifact_put", protocol::ArtifactPut{5, 3, 0, 12, 2, "{}0123456789",
                                                            0xcbf29ce484222325ULL}});
  messages.push_back({"artifact_put_reply", protocol::ArtifactPutReply{5, 3, true, true, 12, ""}});
  messages.push_back({"artifact_put_refused",
                      protocol::ArtifactPutReply{5, 3, false, false, 0, "checksum mismatch"}});
  messages.push_back(
      {"artifact_put_user", protocol::ArtifactPut{5, 0, 0, 12, 2, "{}0123456789", 0x1234abcdULL,
                                                  protocol::ArtifactKind::kUser}});
  messages.push_back(
      {"artifact_put_user_reply",
       protocol::ArtifactPutReply{5, 0, true, true, 12, "", protocol::ArtifactKind::kUser}});
  messages.push_back({"artifact_get", protocol::ArtifactGet{5, 3, 0}});
  messages.push_back({"artifact_get_reply",
                      protocol::ArtifactGetReply{5, 3, true, 0, 12, 2, "{}0123456789", 7, ""}});
  messages.push_back({"restored", protocol::Restored{5, 3, true, ""}});
  messages.push_back(
      {"restored_failed", protocol::Restored{5, 3, false, "snapshot-3/a: truncated"}});
  messages.push_back({"rank_ready", protocol::RankReady{5, 0, "node-1", 29500}});
  messages.push_back({"rank_ready_other", protocol::RankReady{5, 3, "", 0}});
  messages.push_back({"stop_trial", protocol::StopTrial{5, "rank 1 was lost"}});

  for (const auto& [name, message] : messages) write(dir, name, protocol::encode(message));

  // Near-valid frames.
  std::string report = protocol::encode(messages[12].second);
  write(dir, "near_truncated_report", report.substr(0, report.size() - 3));
  std::string v2 = protocol::encode(messages[3].second);
  v2[4] = 2;  // protocol version 2
  write(dir, "near_disconnect_v2", v2);
  std::string unknown = protocol::encode(protocol::Heartbeat{});
  unknown[6] = 21;  // no such type
  write(dir, "near_unknown_type", unknown);
  write(dir, "near_envelope_only", std::string("HPSW\x01\x00\x0c\x00", 8));
  std::cout << "wrote " << messages.size() + 4 << " files to " << dir << "\n";
  return 0;
}
