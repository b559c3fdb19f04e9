// SPDX-License-Identifier: Apache-2.0
#include "ranklens/recording.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ranklens {
namespace trace {

SeqKind seqKindOf(int op) {
  if (op == static_cast<int>(events::Op::kSend)) return SeqKind::kSend;
  if (op == static_cast<int>(events::Op::kRecv)) return SeqKind::kRecv;
  return SeqKind::kCollective;
}

CallKey callKeyOf(const events::Call& call) {
  const SeqKind kind = seqKindOf(call.op);
  return CallKey{call.commId, kind, kind == SeqKind::kCollective ? -1 : call.rootOrPeer, call.seq};
}

namespace {

CallKey keyOf(uint64_t commId, int op, int peer, uint64_t seq) {
  const SeqKind kind = seqKindOf(op);
  return CallKey{commId, kind, kind == SeqKind::kCollective ? -1 : peer, seq};
}

bool isFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The rank directory named by `path`: itself when it holds a manifest, else its rank<rank> child, else its only
// rank* child.
bool resolveRankDir(const std::string& path, int rank, std::string* dir, std::string* error) {
  if (isFile(path + "/manifest.msgpack")) {
    *dir = path;
    return true;
  }
  if (rank >= 0 && isFile(path + "/rank" + std::to_string(rank) + "/manifest.msgpack")) {
    *dir = path + "/rank" + std::to_string(rank);
    return true;
  }
  std::vector<std::string> ranks;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, "rank", 4) == 0 && isFile(path + "/" + e->d_name + "/manifest.msgpack"))
        ranks.push_back(e->d_name);
    closedir(d);
  } else {
    *error = path + ": cannot open the recorded trace (" + strerror(errno) + "); replay_trace must name a rank "
             "directory or the trace root that holds rank<N> directories";
    return false;
  }
  std::sort(ranks.begin(), ranks.end());
  if (rank < 0 && ranks.size() == 1) {
    *dir = path + "/" + ranks[0];
    return true;
  }
  std::string list;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) list += (i ? ", " : "") + ranks[i];
  if (ranks.size() > 8) list += ", ...";
  *error = path + ": " +
           (rank >= 0 ? "no recording of rank " + std::to_string(rank) : std::string("no single rank directory")) +
           (ranks.empty() ? std::string(" (and no rank<N> directory with a manifest)")
                          : " (recorded: " + list + ")") +
           "; replay a recorded rank (RANK / ranklens replay --rank) or name its directory in replay_trace";
  return false;
}

}  // namespace

struct Recording::Impl {
  std::unique_ptr<TraceReader> reader;
  std::vector<events::CommInit> comms;
  std::vector<RecordedCall> calls;
  std::unordered_map<CallKey, size_t, CallKeyHash> index;
  std::vector<const RecordedCall*> payloadOrder;
  std::vector<Problem> problems;
  std::unordered_map<uint64_t, int64_t> groupHostNs;
  size_t timed = 0;
};

Recording::Recording() : impl_(std::make_unique<Impl>()) {}
Recording::~Recording() = default;

std::unique_ptr<Recording> Recording::open(const std::string& path, int rank, std::string* error) {
  std::string dir;
  if (!resolveRankDir(path, rank, &dir, error)) return nullptr;
  std::unique_ptr<Recording> rec(new Recording());
  Impl& im = *rec->impl_;
  im.reader = TraceReader::open(dir, Limits{}, error);
  if (!im.reader) return nullptr;

  std::unordered_map<CallKey, int64_t, CallKeyHash> durations;
  std::unordered_map<CallKey, PayloadRef, CallKeyHash> payloads;
  std::string decodeError;
  const bool scanned = im.reader->scan([&](RecordType type, const msgpack::object& body, const Location&) {
    try {
      switch (type) {
        case RecordType::kCommInit: im.comms.push_back(body.as<events::CommInit>()); break;
        case RecordType::kCall: {
          RecordedCall rc;
          rc.call = body.as<events::Call>();
          rc.order = im.calls.size();
          im.calls.push_back(std::move(rc));
          break;
        }
        case RecordType::kTiming: {
          const auto t = body.as<Timing>();
          if (t.durationNs >= 0) durations[keyOf(t.commId, t.op, t.peer, t.seq)] = t.durationNs;
          break;
        }
        case RecordType::kPayloadRef: {
          const auto ref = body.as<PayloadRef>();
          payloads[keyOf(ref.commId, ref.op, ref.peer, ref.seq)] = ref;  // a later reference supersedes (edits)
          break;
        }
        case RecordType::kGroupEnd: {
          const auto g = body.as<events::GroupEnd>();
          im.groupHostNs[g.groupId] = g.hostNs;
          break;
        }
        default: break;
      }
    } catch (const std::exception& e) {
      decodeError = std::string(recordTypeName(type)) + " record does not decode: " + e.what();
      return false;
    }
    return true;
  });
  im.problems = im.reader->problems();
  if (!decodeError.empty()) {
    *error = dir + ": " + decodeError;
    return nullptr;
  }
  (void)scanned;  // damage is in problems(); the records before it are used

  im.index.reserve(im.calls.size());
  for (size_t i = 0; i < im.calls.size(); ++i) {
    RecordedCall& rc = im.calls[i];
    const CallKey key = callKeyOf(rc.call);
    if (auto it = durations.find(key); it != durations.end()) {
      rc.durationNs = it->second;
      ++im.timed;
    }
    if (auto it = payloads.find(key); it != payloads.end()) rc.payload = it->second;
    im.index[key] = i;
  }
  for (const RecordedCall& rc : im.calls)
    if (rc.payload) im.payloadOrder.push_back(&rc);
  return rec;
}

const Manifest& Recording::manifest() const { return impl_->reader->manifest(); }
const std::string& Recording::directory() const { return impl_->reader->directory(); }
const std::vector<Problem>& Recording::problems() const { return impl_->problems; }
const std::vector<events::CommInit>& Recording::comms() const { return impl_->comms; }
size_t Recording::callCount() const { return impl_->calls.size(); }
size_t Recording::timedCount() const { return impl_->timed; }
const std::vector<const RecordedCall*>& Recording::payloadOrder() const { return impl_->payloadOrder; }
const std::vector<RecordedCall>& Recording::calls() const { return impl_->calls; }

int64_t Recording::groupHostNs(uint64_t groupId) const {
  auto it = impl_->groupHostNs.find(groupId);
  return it == impl_->groupHostNs.end() ? -1 : it->second;
}

const RecordedCall* Recording::find(const CallKey& key) const {
  auto it = impl_->index.find(key);
  return it == impl_->index.end() ? nullptr : &impl_->calls[it->second];
}

bool Recording::readPayload(const PayloadRef& ref, std::vector<uint8_t>* out, Problem* problem) const {
  return impl_->reader->readPayload(ref, out, problem);
}

}  // namespace trace
}  // namespace ranklens
