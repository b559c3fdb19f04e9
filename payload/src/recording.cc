// SPDX-License-Identifier: Apache-2.0
#include "ranklens/recording.h"

#include <algorithm>
#include <unordered_set>

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

// What a scan finds for calls besides their Call records, joined to them once every record is read.
struct ScannedRecords {
  std::unordered_map<CallKey, Timing, CallKeyHash> durations;
  std::unordered_map<CallKey, PayloadRef, CallKeyHash> payloads;
  std::unordered_set<CallKey, CallKeyHash> captured;
  std::unordered_map<CallKey, std::shared_ptr<const FlightRecorderEntry>, CallKeyHash> flightRecorder;
  std::vector<Problem> malformed;  // records of the wrong shape: reported with their file and offset, and skipped
};

}  // namespace

struct Recording::Impl {
  std::unique_ptr<TraceReader> reader;
  std::vector<events::CommInit> comms;
  std::vector<RecordedCall> calls;
  std::unordered_map<CallKey, size_t, CallKeyHash> index;
  std::vector<const RecordedCall*> payloadOrder;
  std::vector<Problem> problems;
  std::unordered_map<uint64_t, int64_t> groupHostNs;
  std::vector<events::Stage> stages;
  size_t timed = 0;

  // One record of the scan (it throws on a field of the wrong type).
  void take(RecordType type, const msgpack::object& body, ScannedRecords* found) {
    switch (type) {
      case RecordType::kCommInit:
        comms.push_back(body.as<events::CommInit>());
        break;
      case RecordType::kCall: {
        RecordedCall rc;
        rc.call = body.as<events::Call>();
        rc.order = calls.size();
        calls.push_back(std::move(rc));
        break;
      }
      case RecordType::kTiming: {
        const auto t = body.as<Timing>();
        // A captured call ran at each launch of its graph: its Timing has the first launch's duration, or 0 when
        // no launch was timed, which is no duration.
        if (t.captured && t.durationNs <= 0)
          found->captured.insert(keyOf(t.commId, t.op, t.peer, t.seq));
        else if (t.durationNs >= 0)
          found->durations[keyOf(t.commId, t.op, t.peer, t.seq)] = t;
        break;
      }
      case RecordType::kPayloadRef: {
        const auto ref = body.as<PayloadRef>();
        found->payloads[keyOf(ref.commId, ref.op, ref.peer, ref.seq)] = ref;  // a later reference supersedes (edits)
        break;
      }
      case RecordType::kGroupEnd: {
        const auto g = body.as<events::GroupEnd>();
        groupHostNs[g.groupId] = g.hostNs;
        break;
      }
      case RecordType::kStage:
        stages.push_back(body.as<events::Stage>());
        break;
      case RecordType::kFlightRecorderEntry: {
        auto e = std::make_shared<FlightRecorderEntry>(body.as<FlightRecorderEntry>());
        if (e->op >= 0) found->flightRecorder[keyOf(e->commId, e->op, e->peer, e->seq)] = std::move(e);
        break;
      }
      default:
        break;
    }
  }

  // Every intact record, in trace order; damage goes to `problems` and what precedes it is used.
  void readRecords(const std::string& dir, ScannedRecords* found) {
    (void)reader->scan([&](RecordType type, const msgpack::object& body, const Location& where) {
      try {
        take(type, body, found);
      } catch (const std::exception&) {
        // The spec: a record whose fields have the wrong types is reported and skipped, the rest of the segment read.
        found->malformed.push_back(Problem{dir + "/" + segmentName(where.segment), where.offset,
                                           std::string(recordTypeName(type)) +
                                               " record has a field of the wrong type (skipped: its call is replayed "
                                               "without it; rlpayload verify lists every such record)",
                                           false, true});
      }
      return true;
    });
    problems = reader->problems();
    for (auto& m : found->malformed) {  // the reader itself reports a malformed Call or PayloadRef (it indexes them)
      bool known = false;
      for (const auto& p : problems) known = known || (p.file == m.file && p.offset == m.offset);
      if (!known) problems.push_back(std::move(m));
    }
  }

  // docs/trace-format.md: several Call records of one identity are one call, the last in segment order (as the
  // index and every other command read it); the earlier ones are not calls.
  void keepLastCallOfEachIdentity() {
    std::unordered_set<CallKey, CallKeyHash> seen;
    std::vector<RecordedCall> kept;
    for (auto it = calls.rbegin(); it != calls.rend(); ++it)
      if (seen.insert(callKeyOf(it->call)).second) kept.push_back(std::move(*it));
    if (kept.size() == calls.size()) return;
    std::reverse(kept.begin(), kept.end());
    for (size_t i = 0; i < kept.size(); ++i) kept[i].order = i;
    calls.swap(kept);
  }

  // Each call with its duration, payload and Flight Recorder entry, and the indices over the calls.
  void joinCalls(const ScannedRecords& found) {
    index.reserve(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      RecordedCall& rc = calls[i];
      const CallKey key = callKeyOf(rc.call);
      if (auto it = found.flightRecorder.find(key); it != found.flightRecorder.end()) rc.flightRecorder = it->second;
      if (auto it = found.durations.find(key); it != found.durations.end()) {
        rc.durationNs = it->second.durationNs;
        rc.gapNs = it->second.gapNs;
        rc.kernelClock = it->second.clock == kClockKernel;
        rc.captured = it->second.captured;
        ++timed;
      } else {
        rc.captured = found.captured.count(key) > 0;
      }
      if (auto it = found.payloads.find(key); it != found.payloads.end()) rc.payload = it->second;
      index[key] = i;
    }
    for (const RecordedCall& rc : calls)
      if (rc.payload) payloadOrder.push_back(&rc);
  }
};

Recording::Recording() : impl_(std::make_unique<Impl>()) {}
Recording::~Recording() = default;

Status JobRecordings::open(const std::vector<std::string>& rankDirs) {
  for (const auto& dir : rankDirs) {
    std::unique_ptr<Recording> recording;
    RL_CHECK(Recording::open(dir, -1, &recording));
    owned.push_back(std::move(recording));
    ranks.push_back(owned.back().get());
  }
  return Status::ok();
}

Status Recording::open(const std::string& path, int rank, std::unique_ptr<Recording>* recording) {
  recording->reset();
  std::string dir;
  if (Status resolved = resolveRankDirectory(path, rank, &dir); !resolved.isOk())
    return Status::error(resolved.code(), resolved.message() +
                                              "; replay a recorded rank (RANK / ranklens replay "
                                              "--rank) or name its directory in replay_trace");
  std::unique_ptr<Recording> rec(new Recording());
  Impl& im = *rec->impl_;
  RL_CHECK(TraceReader::open(dir, Limits{}, &im.reader));
  ScannedRecords found;
  im.readRecords(dir, &found);
  im.keepLastCallOfEachIdentity();
  im.joinCalls(found);
  *recording = std::move(rec);
  return Status::ok();
}

const Manifest& Recording::manifest() const { return impl_->reader->manifest(); }
const std::string& Recording::directory() const { return impl_->reader->directory(); }
const std::vector<Problem>& Recording::problems() const { return impl_->problems; }
const std::vector<events::CommInit>& Recording::comms() const { return impl_->comms; }
size_t Recording::callCount() const { return impl_->calls.size(); }
size_t Recording::timedCount() const { return impl_->timed; }
const std::vector<const RecordedCall*>& Recording::payloadOrder() const { return impl_->payloadOrder; }
const std::vector<RecordedCall>& Recording::calls() const { return impl_->calls; }
const std::vector<events::Stage>& Recording::stages() const { return impl_->stages; }

uint64_t Recording::largestStepPayloadBytes() const {
  std::vector<std::pair<int64_t, uint64_t>> payloads;
  for (const RecordedCall* c : impl_->payloadOrder) payloads.emplace_back(c->call.timeNs, c->payload->rawBytes);
  return events::largestStepBytes(impl_->stages, payloads);
}

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

bool Recording::readPayload(const PayloadRef& ref, uint8_t* out, size_t outBytes, Problem* problem) const {
  return impl_->reader->readPayload(ref, out, outBytes, problem);
}

PayloadGaps payloadGaps(const Recording& recording) {
  PayloadGaps gaps;
  const events::StepMarkers markers = events::stepMarkers(recording.stages());
  for (const RecordedCall& c : recording.calls()) {
    const events::Call& call = c.call;
    if (call.op == static_cast<int>(events::Op::kSend) ||
        events::receivedBytes(static_cast<events::Op>(call.op), call.count, call.datatype, call.nranks, call.rank,
                              call.rootOrPeer) == 0)
      continue;
    gaps.receiving++;
    if (c.payload) continue;
    if (gaps.missing++ > 0) continue;
    gaps.first = &c;
    if (markers.marks.empty()) continue;
    gaps.stepKind = markers.kind;
    if (const ptrdiff_t at = events::markerBefore(markers.marks, call.timeNs); at >= 0)
      gaps.firstStep = markers.marks[static_cast<size_t>(at)].step;
  }
  return gaps;
}

std::string describePayloadGaps(const Recording& recording) {
  const PayloadGaps gaps = payloadGaps(recording);
  if (gaps.missing == 0 || gaps.first == nullptr) return "";
  const Manifest& m = recording.manifest();
  std::string why;
  uint64_t explained = 0;
  for (const auto& [reason, n] : payloadsNotStored(m)) {
    why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + reason;
    explained += n;
  }
  // Damage ends what can be read of a segment: payload references after it are not in the recording, whatever
  // the payload policy stored (a reader may not trust the records past a damaged frame).
  const Problem* loss = firstLoss(recording.problems());
  if (gaps.missing > explained && loss != nullptr) {
    why += (why.empty() ? "" : ", ") + std::string(explained > 0 ? "the rest " : "") + "lost to damage at " +
           loss->describe() + ", after which no record is read, or left out by its payload policy";
    explained = gaps.missing;
  }
  if (gaps.missing > explained) {
    auto policy = m.env.find("RANKLENS_PAYLOADS");
    why += (why.empty() ? "" : ", ") + std::string(explained > 0 ? "the rest " : "") +
           "left out by its payload policy (" +
           (policy != m.env.end() ? "RANKLENS_PAYLOADS=" + policy->second
                                  : std::string("payloads: small, the default, stores up to 64 KiB")) +
           "; payload_ops, payload_comms, payload_steps and payload_seqs narrow it)";
  }
  const events::Call& c = gaps.first->call;
  std::string where = std::string(events::opName(static_cast<events::Op>(c.op))) + " comm " + std::to_string(c.commId) +
                      " seq " + std::to_string(c.seq);
  // A "step" marker starts its step; an "optimizer" marker ends one (the next step starts there).
  const bool ends = gaps.stepKind != nullptr && std::string(gaps.stepKind) == "optimizer";
  if (gaps.stepKind != nullptr)
    where += gaps.firstStep < 0 ? " (before the first " + std::string(gaps.stepKind) + " marker)"
             : ends             ? " (after optimizer step " + std::to_string(gaps.firstStep) + ")"
                                : " (step " + std::to_string(gaps.firstStep) + ")";
  return "fidelity value: " + std::to_string(gaps.missing) + " of the " + std::to_string(gaps.receiving) +
         " recorded calls that receive data have no payload in the recording (" + why +
         "); they get the fill semantics, so this rank's values part from the recorded run's at " + where +
         (loss == nullptr
              ? ". To replay every value, record with payloads: all and staging_full: wait (ranklens record "
                "--payloads all; RANKLENS_STAGING_FULL=wait)"
              : ". Copy the trace again from where it was recorded (rlpayload verify names every damaged place)");
}

}  // namespace trace
}  // namespace ranklens
