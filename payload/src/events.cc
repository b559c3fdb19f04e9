// SPDX-License-Identifier: Apache-2.0
#include "ranklens/events.h"

#include <algorithm>
#include <map>

namespace ranklens {
namespace events {

const char* opName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kReduce:
      return "Reduce";
    case Op::kAllGather:
      return "AllGather";
    case Op::kReduceScatter:
      return "ReduceScatter";
    case Op::kAlltoAll:
      return "AlltoAll";
    case Op::kGather:
      return "Gather";
    case Op::kScatter:
      return "Scatter";
    case Op::kSend:
      return "Send";
    case Op::kRecv:
      return "Recv";
  }
  return "Unknown";
}

bool isP2p(Op op) { return op == Op::kSend || op == Op::kRecv; }
bool isRooted(Op op) { return op == Op::kBroadcast || op == Op::kReduce || op == Op::kGather || op == Op::kScatter; }
bool isReduction(Op op) { return op == Op::kAllReduce || op == Op::kReduce || op == Op::kReduceScatter; }

namespace {
struct DatatypeRow {
  const char* name;
  size_t bytes;
};
// Indexed by ncclDataType_t (nccl.h 2.28): int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16
// float8e4m3 float8e5m2.
constexpr DatatypeRow kDatatypes[] = {{"int8", 1},    {"uint8", 1},    {"int32", 4},      {"uint32", 4},
                                      {"int64", 8},   {"uint64", 8},   {"float16", 2},    {"float32", 4},
                                      {"float64", 8}, {"bfloat16", 2}, {"float8e4m3", 1}, {"float8e5m2", 1}};
constexpr int kDatatypeCount = sizeof(kDatatypes) / sizeof(kDatatypes[0]);
}  // namespace

size_t datatypeBytes(int datatype) {
  return datatype >= 0 && datatype < kDatatypeCount ? kDatatypes[datatype].bytes : 0;
}

const char* datatypeName(int datatype) {
  return datatype >= 0 && datatype < kDatatypeCount ? kDatatypes[datatype].name : "invalid";
}

uint64_t receivedBytes(Op op, uint64_t count, int datatype, int nranks, int rank, int root) {
  const uint64_t bytes = count * datatypeBytes(datatype);
  switch (op) {
    case Op::kAllGather:
    case Op::kAlltoAll:
      return bytes * static_cast<uint64_t>(nranks);
    case Op::kGather:
      return rank == root ? bytes * static_cast<uint64_t>(nranks) : 0;
    case Op::kReduce:
      return rank == root ? bytes : 0;
    default:
      return bytes;
  }
}

StepMarkers stepMarkers(const std::vector<Stage>& stages) {
  StepMarkers out;
  for (const char* kind : {"step", "optimizer"}) {
    std::map<int64_t, const Stage*> first;  // by number
    for (const auto& s : stages)
      if (s.name == kind && s.step >= 0) first.emplace(s.step, &s);
    if (first.empty()) continue;
    out.kind = kind;
    for (const auto& [step, s] : first) out.marks.push_back(*s);
    std::sort(out.marks.begin(), out.marks.end(), [](const Stage& a, const Stage& b) { return a.timeNs < b.timeNs; });
    break;
  }
  return out;
}

ptrdiff_t markerBefore(const std::vector<Stage>& marks, int64_t timeNs) {
  auto next = std::upper_bound(marks.begin(), marks.end(), timeNs,
                               [](int64_t t, const Stage& mark) { return t < mark.timeNs; });
  return (next - marks.begin()) - 1;
}

uint64_t largestStepBytes(const std::vector<Stage>& stages,
                          const std::vector<std::pair<int64_t, uint64_t>>& timedBytes) {
  const std::vector<Stage> marks = stepMarkers(stages).marks;
  std::vector<uint64_t> bytes(marks.size() + 1, 0);  // [0]: before the first marker
  for (const auto& [time, n] : timedBytes) bytes[static_cast<size_t>(markerBefore(marks, time) + 1)] += n;
  return *std::max_element(bytes.begin(), bytes.end());
}

}  // namespace events
}  // namespace ranklens
