// SPDX-License-Identifier: Apache-2.0
// `ranklens timeline`: traces as Chrome/Perfetto trace-event JSON, one process per rank directory, one thread per
// stream.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ranklens {
namespace tools {

struct TimelineOptions {
  std::vector<std::string> traces;     // rank directories or trace roots (every rank inside)
  std::string output;                  // "-": stdout
  int64_t fromStep = -1, toStep = -1;  // -1: no bound
};

CLI::App* addTimelineCommand(CLI::App& app, TimelineOptions* options);
// 0: written; 1: a step bound is not marked in a trace, or the output cannot be written; 2: a trace cannot be read.
int runTimeline(const TimelineOptions& options, std::ostream& err);

}  // namespace tools
}  // namespace ranklens
