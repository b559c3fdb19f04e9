// SPDX-License-Identifier: Apache-2.0
// The history file (msgpack, History): written whole then renamed into place, and read back with every sample
// checked, since a history is shared between users and machines and may be damaged or edited by hand.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ranklens/estimator.h"
#include "ranklens/events.h"

namespace ranklens {
namespace timing {

Status saveHistory(const std::string& path, const History& history) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, history);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::systemError(path + ": cannot write the history");
  }
  return Status::ok();
}

namespace {

// Why a sample cannot be used, "" when it can: what the estimator relies on (an index into runs, durations that are
// durations, a finite phase, a known operation).
std::string sampleProblem(const HistorySample& s, size_t runs) {
  if (s.run >= runs) return "names run " + std::to_string(s.run) + " of " + std::to_string(runs);
  if (s.op < 0 || s.op > static_cast<int>(events::Op::kRecv)) return "has an unknown operation " + std::to_string(s.op);
  if (s.nranks < 1) return "has a communicator of " + std::to_string(s.nranks) + " ranks";
  if (s.durationNs < 0) return "has a negative duration";
  if (s.transferNs < -1) return "has a negative transfer time";        // -1: not known (version 1 reads it so)
  if (!(s.stepPhase == -1 || (s.stepPhase >= 0 && s.stepPhase <= 1)))  // (NaN fails both)
    return "has a step phase that is not a phase (" + std::to_string(s.stepPhase) + ")";
  if (s.stepOccurrence < -1) return "has a negative place in its step";
  return "";
}

}  // namespace

Status parseHistory(const char* data, size_t size, const std::string& name, History* history) {
  try {
    // No element count can exceed the file's byte count (a damaged count must not allocate gigabytes); a history
    // nests 4 deep (map, samples, sample, role).
    const auto most = static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX));
    size_t used = 0;
    msgpack::object_handle handle =
        msgpack::unpack(data, size, used, nullptr, nullptr, msgpack::unpack_limit(most, most, most, most, most, 8));
    History h;
    handle.get().convert(h);
    if (h.format != "ranklens-history" || h.version < 1 || h.version > kHistoryVersion)
      return Status::corrupt(name + ": not a RankLens history (format '" + h.format + "' version " +
                             std::to_string(h.version) + "; this RankLens reads versions 1 to " +
                             std::to_string(kHistoryVersion) + ")");
    for (size_t i = 0; i < h.samples.size(); ++i) {
      const std::string problem = sampleProblem(h.samples[i], h.runs.size());
      if (!problem.empty())
        return Status::corrupt(name + ": corrupt history (sample " + std::to_string(i) + " " + problem + ")");
    }
    *history = std::move(h);
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::corrupt(name + ": corrupt history (" + e.what() + ")");
  }
}

Status loadHistory(const std::string& path, History* history) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::systemError(path + ": cannot open the history (build one: ranklens history build TRACE_DIRS -o " +
                               path + ")");
  std::stringstream data;
  data << in.rdbuf();
  const std::string bytes = data.str();
  return parseHistory(bytes.data(), bytes.size(), path, history);
}

}  // namespace timing
}  // namespace ranklens
