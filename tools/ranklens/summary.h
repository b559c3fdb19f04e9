// SPDX-License-Identifier: Apache-2.0
// `ranklens trace summary`: per communicator and per call signature, what a rank did.
#pragma once

#include <ostream>
#include <string>

namespace ranklens {
namespace tools {

// Summarises every rank directory under `traceDir` (or the single rank directory given). Returns 0 on success,
// 1 when a log is unreadable or truncated (the readable part is still summarised, the problem named on `err`).
int printTraceSummary(const std::string& traceDir, bool json, std::ostream& out, std::ostream& err);

}  // namespace tools
}  // namespace ranklens
