// The wire protocol between the coordinator and its workers.
//
// Every ZeroMQ message is one frame: an 8-byte envelope followed by the body.
//
//   bytes 0..3  magic "HPSW"
//   bytes 4..5  protocol version, little endian (kProtocolVersion)
//   bytes 6..7  message type, little endian (MessageType)
//   bytes 8..   the message struct, serialized with cereal's
//               PortableBinaryArchive (endianness-safe; doubles travel as
//               their IEEE-754 bits, so they arrive bit-exact), each struct
//               with its cereal class version
//
// A worker (ZeroMQ DEALER) talks to the coordinator (ROUTER):
//
//   worker                         coordinator
//   Hello                  ->                       (then Welcome, or
//                          <-      Welcome           Disconnect(kRefused))
//   RequestTrial           ->
//                          <-      Assignment       (when a trial is ready;
//                                                    Shutdown at the end)
//   (a worker whose Hello set prefetch = P may ask again while it holds up
//    to P trials besides the one it runs: it takes the next one as soon as
//    the last ends, without waiting for the coordinator; it runs the
//    trials it holds in the order they were assigned)
//   Suggest                ->                       (define-by-run params)
//                          <-      SuggestReply
//   Report                 ->
//                          <-      Decision         (continue or prune)
//   Complete | Fail        ->                       (then RequestTrial again,
//                                                    without waiting)
//   Heartbeat              <->     Heartbeat        (both ways, every
//                                                    heartbeat interval)
//   ArtifactPut            ->                       (a remote worker uploads the
//                          <-      ArtifactPutReply  snapshot of a reported step)
//   ArtifactGet            ->                       (a remote worker downloads
//                          <-      ArtifactGetReply  the snapshot a retry resumes)
//   (version 7: the first piece of a transfer goes on this socket, and its
//    reply carries a token; the next pieces, and their replies, go on the
//    coordinator's artifact endpoint (Welcome.artifact_endpoint, a second
//    ROUTER socket) with that token; the last reply of an upload, done or
//    refused, comes on this socket)
//   Restored               ->                       (a retry's checkpoint folder
//                                                    was restored, or not: sent
//                                                    before its first Report)
//   RankReady              ->                       (a rank of a multi-process
//                                                    trial is starting; rank 0
//                                                    names its rendezvous port)
//                          <-      StopTrial        (end this trial now: another
//                                                    rank ended it or was lost)
//                          <-      Disconnect       (a message from an
//                                                    unknown or expired worker)
//   Disconnect             ->                       (the worker is leaving:
//                                                    stopped by a signal)
//
// The heartbeat scheme is the ZeroMQ guide's Paranoid Pirate pattern
// (zguide chapter 4, "Robust Reliable Queuing"): each side counts the other
// dead after `liveness` intervals without any message from it.
//
// Decoding validates everything: the frame size (kMaxFrameBytes), the magic,
// the protocol version, the type, the struct's class version, every string
// and list length against the bytes left, enum values, and that nothing is
// left over. Any violation throws ProtocolError; no input can crash the
// decoder or make it allocate more than the frame's size.
//
// Compatibility: the envelope layout and the Disconnect body never change,
// so a peer of any version can read why it was refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "search/errors.h"
#include "search/json_util.h"
#include "search/search_space.h"

namespace hps::protocol {

inline constexpr char kMagic[4] = {'H', 'P', 'S', 'W'};
// 3: Assignment.lineage and resume_step, Report.checkpoint (long trials).
// 4: Assignment.store_id and store_root; ArtifactPut, ArtifactPutReply,
//    ArtifactGet, ArtifactGetReply (snapshots that travel to remote workers).
// 5: Restored (the coordinator carries a retry's earlier intermediate
//    values only once its worker restored the snapshot); the checksums of
//    ArtifactPut/ArtifactGetReply pieces are XXH3 64 (were FNV-1a 64).
// 6: multi-process trials: Assignment.rank, world_size, local_rank,
//    local_world_size, group_rank, master_addr, master_port; RankReady
//    (worker -> coordinator) and StopTrial (coordinator -> worker).
//    User artifacts: ArtifactPut.kind and ArtifactPutReply.kind (a
//    snapshot or a trial's user artifacts), Complete.artifacts and
//    Fail.artifacts (kept in place in the coordinator's artifact store).
// 7: the artifact endpoint: Welcome.artifact_endpoint; ArtifactPut.token,
//    ArtifactPutReply.token, ArtifactGet.token, ArtifactGetReply.token (the
//    pieces after the first travel on a socket of their own).
inline constexpr std::uint16_t kProtocolVersion = 7;
inline constexpr std::size_t kEnvelopeBytes = 8;
// Largest frame either side accepts (envelope included): 4 MiB. Larger
// frames are dropped unread (the coordinator also sets ZMQ_MAXMSGSIZE).
inline constexpr std::size_t kMaxFrameBytes = 4u << 20;

enum class MessageType : std::uint16_t {
  kHello = 1,
  kWelcome = 2,
  kDisconnect = 3,
  kRequestTrial = 4,
  kAssignment = 5,
  kSuggest = 6,
  kSuggestReply = 7,
  kReport = 8,
  kDecision = 9,
  kComplete = 10,
  kFail = 11,
  kHeartbeat = 12,
  kShutdown = 13,
  kArtifactPut = 14,
  kArtifactPutReply = 15,
  kArtifactGet = 16,
  kArtifactGetReply = 17,
  kRestored = 18,
  kRankReady = 19,
  kStopTrial = 20,
};

// "Hello", "Welcome", ...; "unknown(N)" for other numbers.
std::string to_string(MessageType type);

// Raised by decode() for a frame that breaks any rule; what() says which.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A frame whose envelope is valid but whose protocol version differs from
// kProtocolVersion.
class VersionMismatch : public ProtocolError {
 public:
  VersionMismatch(std::uint16_t version, MessageType type);
  std::uint16_t version() const { return version_; }
  MessageType type() const { return type_; }

 private:
  std::uint16_t version_;
  MessageType type_;
};

// A param value with its JSON type kept: null, bool, signed or unsigned
// integer, double (bit-exact, +-inf and NaN included) or string.
struct Value {
  enum class Kind : std::uint8_t {
    kNull = 0,
    kBool = 1,
    kInt = 2,
    kUint = 3,
    kFloat = 4,
    kString = 5
  };
  Kind kind = Kind::kNull;
  bool b = false;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double d = 0.0;
  std::string s{};

  // From a JSON scalar; throws ProtocolError for arrays and objects.
  static Value from_json(const Json& j);
  // The JSON value (same type as from_json() was given).
  Json to_json() const;
};

struct NamedValue {
  std::string name{};
  Value value{};
};

// Params <-> a list of named values (map order).
std::vector<NamedValue> to_wire(const Params& params);
Params from_wire(const std::vector<NamedValue>& values);

// --- messages (each struct's class version is 1) ---------------------------

// worker -> coordinator, first message of a session.
struct Hello {
  std::string worker_id{};  // stable name of the worker process ("host:pid" by default)
  std::string hostname{};
  std::int64_t pid = 0;
  std::string device{};           // "cpu", "cuda:0", ...
  std::string visible_devices{};  // CUDA_VISIBLE_DEVICES of the worker ("" if unset)
  std::int32_t threads = 1;       // CPU threads the objective may use
  std::uint32_t protocol_version = kProtocolVersion;
  // Trials the worker may hold besides the one it runs, in [0,
  // kMaxPrefetch] (version 2). 0: it asks for a trial only when idle.
  std::int32_t prefetch = 0;
};

// The most trials a worker may hold besides the one it runs (Hello.prefetch).
// One: a worker keeps at most one RequestTrial unanswered and asks again
// only as a trial starts or ends, so it could not reach a deeper queue (a
// new-user pass found 16 held 1 + 1).
inline constexpr std::int32_t kMaxPrefetch = 1;
// Throws ConfigError naming `field` ("worker.prefetch", "--prefetch") unless
// 0 <= prefetch <= kMaxPrefetch.
void check_prefetch(std::int64_t prefetch, const std::string& field);

// The heartbeat settings both sides accept: an interval in [1,
// kMaxHeartbeatIntervalMs] milliseconds and a liveness (intervals of silence
// before the peer counts as lost) in [1, kMaxLiveness]. Checked by
// CoordinatorOptions, WorkerOptions, the CLI and a Welcome's decoding.
inline constexpr std::int32_t kMaxHeartbeatIntervalMs = 3600 * 1000;  // one hour
inline constexpr std::int32_t kMaxLiveness = 1000;
// Throws ConfigError naming `interval_field` or `liveness_field` (e.g.
// "coordinator.liveness", "--liveness") if a setting is out of those bounds.
void check_heartbeat_settings(std::int64_t interval_ms, const std::string& interval_field,
                              std::int64_t liveness, const std::string& liveness_field);

// coordinator -> worker: the session is open. The worker adopts the
// heartbeat settings.
struct Welcome {
  std::string study_name{};
  std::int32_t heartbeat_interval_ms = 1000;
  std::int32_t liveness = 5;
  // Where the pieces of snapshots and user artifacts travel after the first
  // (version 7): the coordinator's artifact endpoint as bound, e.g.
  // "tcp://0.0.0.0:5556" (a worker keeps the host it connected to and
  // takes the port) or "ipc:///path/coordinator.sock.artifacts"; "" when
  // the coordinator has none (every piece then travels on this socket). At
  // most kMaxTokenBytes * 16 bytes.
  std::string artifact_endpoint{};
};

// coordinator -> worker: the session is over. Its body never changes
// between protocol versions. Also worker -> coordinator: the worker is
// leaving (stopped by a signal; `reason` says why, `code` is kExpired): the
// coordinator ends the session and queues a trial it had assigned again.
struct Disconnect {
  enum class Code : std::uint8_t {
    kRefused = 1,  // protocol version mismatch or a bad Hello: do not retry
    kExpired = 2,  // the coordinator does not know this session (expired, or
                   // the coordinator restarted): abandon the trial, say Hello again
  };
  Code code = Code::kExpired;
  std::uint16_t coordinator_version = kProtocolVersion;
  std::string reason{};
};

// worker -> coordinator: ready for a trial.
struct RequestTrial {};

// coordinator -> worker: run this trial.
struct Assignment {
  std::int64_t trial_id = -1;
  std::int64_t number = -1;
  std::vector<NamedValue> params{};  // values of the declared space, set in the store
  std::vector<NamedValue> fixed{};   // enqueued values for define-by-run suggest calls
  // Identifies the objective configuration; the worker builds its objective
  // once per id.
  std::uint64_t config_id = 0;
  // {"objective": {...}, "space": {...}, "study": name} as JSON text; sent
  // only in the first assignment of a session with this config_id, empty
  // otherwise.
  std::string config_json{};
  // Long trials (search/checkpoints.h; version 3): the trial's lineage (the
  // number of its first trial, >= 0), whose checkpoint folder the worker
  // uses, and on a retry that continues an earlier trial the step whose
  // snapshot it starts from (-1: none, a first run).
  std::int64_t lineage = -1;
  std::int64_t resume_step = -1;
  // Snapshots that travel (version 4): the token the coordinator wrote to
  // <its checkpoint root>/.store-id (at most kMaxStoreIdBytes; "" when the
  // coordinator keeps no checkpoint root) and that root's path (at most
  // kMaxStoreRootBytes; shown in logs). A worker whose own checkpoint root
  // holds the same token shares the folder and transfers nothing; any other
  // worker uploads each snapshot (ArtifactPut) and downloads the one a
  // retry resumes (ArtifactGet).
  std::string store_id{};
  std::string store_root{};
  // Multi-process trials (version 6; search/resources.h, docs
  // "Multi-process trials"): this worker runs rank `rank` of `world_size`
  // ranks (1: a single-process trial, the other fields unused). local_rank
  // and local_world_size: its place among the ranks on its host;
  // group_rank: the index of its host among the trial's hosts. Rank 0 gets
  // master_port 0: its worker picks a free TCP port on its host and sends
  // RankReady with it; the other ranks are assigned once it has, with
  // master_addr (rank 0's host, "127.0.0.1" when it is theirs) and
  // master_port set. The program gets them as the torchrun environment.
  std::int32_t rank = 0;
  std::int32_t world_size = 1;
  std::int32_t local_rank = 0;
  std::int32_t local_world_size = 1;
  std::int32_t group_rank = 0;
  std::string master_addr{};  // at most kMaxHostBytes
  std::uint16_t master_port = 0;
};

// The most ranks of one trial on the wire, and the longest host name.
inline constexpr std::int32_t kMaxWorldSize = 1024;
inline constexpr std::size_t kMaxHostBytes = 256;

// worker -> coordinator: rank `rank` of the multi-process trial `number`
// (which the worker holds) is starting. From rank 0: `addr` (its host
// name, at most kMaxHostBytes) and `port` (a free TCP port there, > 0),
// the rendezvous the other ranks get as MASTER_ADDR/MASTER_PORT. From the
// other ranks, port 0: the rank is ready (rendezvous timeout).
struct RankReady {
  std::int64_t number = -1;
  std::int32_t rank = 0;
  std::string addr{};
  std::uint16_t port = 0;
};

// coordinator -> worker: stop trial `number` now if it runs there (its
// program gets SIGTERM, then SIGKILL after grace_s), or drop it if it waits
// there. Sent to the other ranks' workers when a multi-process trial ends
// (rank 0 finished, was pruned or failed, or a rank was lost). The worker
// sends no result for it: the coordinator already released it.
struct StopTrial {
  std::int64_t number = -1;
  std::string reason{};
};

inline constexpr std::size_t kMaxStoreIdBytes = 128;
inline constexpr std::size_t kMaxStoreRootBytes = 4096;
// The most bytes of a snapshot one ArtifactPut or ArtifactGetReply carries:
// 1 MiB, well under kMaxFrameBytes.
inline constexpr std::size_t kMaxArtifactChunkBytes = 1u << 20;
// The longest token (ArtifactPutReply.token and the like), bytes.
inline constexpr std::size_t kMaxTokenBytes = 64;

// worker -> coordinator: a define-by-run suggest call for a param the
// assignment did not carry.
struct Suggest {
  std::int64_t number = -1;
  std::string name{};
  std::string distribution_json{};  // Distribution::to_json()
};

struct SuggestReply {
  std::int64_t number = -1;
  std::string name{};
  bool ok = false;
  Value value{};        // ok: the external value chosen
  std::string error{};  // !ok: why (the objective raises it as hps::Error)
};

// worker -> coordinator: an intermediate value; answered by Decision.
struct Report {
  std::int64_t number = -1;
  std::int64_t step = 0;  // >= 0
  double value = 0.0;
  // The worker took a snapshot of the lineage's checkpoint folder at this
  // step (version 3): the coordinator records it (system attr checkpoint).
  bool checkpoint = false;
};

struct Decision {
  std::int64_t number = -1;
  std::int64_t step = 0;
  bool stored = true;  // false: the step was reported before (first value kept)
  bool prune = false;  // the pruner's answer
};

// worker -> coordinator: the objective returned (or raised TrialPruned).
struct Complete {
  std::int64_t number = -1;
  bool pruned = false;
  std::optional<double> value{};  // required unless pruned; NaN makes the trial FAIL
  std::string user_attrs_json{};  // a JSON object as text ("" = none)
  // The trial's user artifacts are complete, with their manifest, in the
  // coordinator's artifact store, written in place by a worker that shares
  // it (version 6): the coordinator records them (system attr artifacts).
  // A worker that does not share it uploads them first (ArtifactPut of
  // kind kUser) and leaves this false.
  bool artifacts = false;
};

// worker -> coordinator: the objective raised, or the worker is stopping.
struct Fail {
  enum class Reason : std::uint8_t {
    kException = 1,    // the objective raised; the trial ends FAIL(message)
    kInterrupted = 2,  // the worker was stopped (signal, lost session); the
                       // trial is queued again within the retry limit
  };
  std::int64_t number = -1;
  Reason reason = Reason::kException;
  std::string message{};
  std::string user_attrs_json{};
  bool artifacts = false;  // as Complete.artifacts (version 6)
};

struct Heartbeat {};

// A snapshot travels as one byte stream (search/checkpoints.h,
// SnapshotReader): its manifest's JSON text (manifest_bytes bytes), then
// the bytes of its files in manifest order; `total` bytes in all.

// What an ArtifactPut carries (version 6).
enum class ArtifactKind : std::uint8_t {
  kSnapshot = 1,  // a snapshot of the lineage's checkpoint folder at `step`
  kUser = 2,      // the trial's user artifacts (search/checkpoints.h
                  // ArtifactFolder), sent once the trial's objective ended,
                  // before its Complete or Fail; `step` is 0
};

// worker -> coordinator: the piece of the stream of trial `number`'s
// snapshot of `step` (or of its user artifacts) that starts at `offset`
// (pieces in order, from 0). Answered by ArtifactPutReply once the
// coordinator wrote it.
struct ArtifactPut {
  std::int64_t number = -1;          // the trial; the worker must hold it
  std::int64_t step = 0;             // the snapshot's step, >= 0
  std::uint64_t offset = 0;          // bytes of the stream before `data`
  std::uint64_t total = 0;           // the stream's length, bytes
  std::uint64_t manifest_bytes = 0;  // the manifest's length, <= total
  std::string data{};                // at most kMaxArtifactChunkBytes
  std::uint64_t checksum = 0;        // XXH3 64 of `data` (util::xxh3_64, search/util/hash.h)
  ArtifactKind kind = ArtifactKind::kSnapshot;
  // Version 7: "" on the coordinator's main socket; on its artifact
  // endpoint, the token of the ArtifactPutReply to this upload's first piece.
  std::string token{};
};

// coordinator -> worker: the answer to an ArtifactPut.
struct ArtifactPutReply {
  std::int64_t number = -1;
  std::int64_t step = 0;
  bool ok = false;                // the piece was written (and, if done, the snapshot verified)
  bool done = false;              // the whole snapshot arrived, verified: the store names it
  std::uint64_t next_offset = 0;  // ok: the offset the next piece starts at
  std::string error{};            // !ok: why it was refused (the upload is dropped)
  ArtifactKind kind = ArtifactKind::kSnapshot;  // the put's
  // Version 7, the reply to a first piece (offset 0) that was written, when
  // the coordinator has an artifact endpoint: the token with which the
  // worker sends the next pieces there (at most kMaxTokenBytes; "": send
  // them on the main socket). The last reply (done, or a refusal of the
  // upload) comes on the main socket.
  std::string token{};
};

// worker -> coordinator: the piece at `offset` of the stream of the
// snapshot of `step` that trial `number` (which the worker holds) resumes
// from.
struct ArtifactGet {
  std::int64_t number = -1;
  std::int64_t step = 0;
  std::uint64_t offset = 0;
  std::string token{};  // version 7: as ArtifactPut.token (from the first piece's reply)
};

// coordinator -> worker: the answer to an ArtifactGet.
struct ArtifactGetReply {
  std::int64_t number = -1;
  std::int64_t step = 0;
  bool ok = false;
  std::uint64_t offset = 0;
  std::uint64_t total = 0;
  std::uint64_t manifest_bytes = 0;
  std::string data{};          // at most kMaxArtifactChunkBytes
  std::uint64_t checksum = 0;  // XXH3 64 of `data`
  std::string error{};         // !ok: why not (e.g. the coordinator has no such snapshot)
  // Version 7: as ArtifactPutReply.token, in the reply to the first piece
  // (offset 0); the next pieces are asked for on the artifact endpoint.
  std::string token{};
};

// worker -> coordinator: a retry (Assignment.resume_step = `step` >= 0)
// had its checkpoint folder restored to that step (restored = true), or
// starts from step 0 because the snapshot could not be used (restored =
// false; `warning` says why, at most kMaxRestoreWarningBytes). Sent before
// the trial's first Report. On true the coordinator copies the continued
// trial's intermediate values up to `step`; on false it marks the trial's
// resumed_from as not restored (search/checkpoints.h).
inline constexpr std::size_t kMaxRestoreWarningBytes = 4096;
struct Restored {
  std::int64_t number = -1;
  std::int64_t step = 0;
  bool restored = false;
  std::string warning{};
};

// coordinator -> worker: no more trials; exit. stop_trial: stop the running
// trial now (Ctrl-C at the coordinator) rather than finishing it.
struct Shutdown {
  std::string reason{};
  bool stop_trial = false;
};

using Message =
    std::variant<Hello, Welcome, Disconnect, RequestTrial, Assignment, Suggest, SuggestReply,
                 Report, Decision, Complete, Fail, Heartbeat, Shutdown, ArtifactPut,
                 ArtifactPutReply, ArtifactGet, ArtifactGetReply, Restored, RankReady, StopTrial>;

MessageType type_of(const Message& message);

// The frame for `message`: envelope + body.
std::string encode(const Message& message);

// Decodes one frame. Throws VersionMismatch for a valid envelope of another
// protocol version, ProtocolError for anything else that is wrong.
Message decode(std::string_view frame);

// Decodes the body of a Disconnect of any protocol version (whose body
// layout is fixed); nullopt if the frame is not one.
std::optional<Disconnect> decode_disconnect_any_version(std::string_view frame);

}  // namespace hps::protocol
