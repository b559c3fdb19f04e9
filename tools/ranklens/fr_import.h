// SPDX-License-Identifier: Apache-2.0
// `ranklens import flight-recorder DUMP... -o TRACE`: PyTorch Flight Recorder dumps made into a RankLens trace (one
// rank directory per dump), and the cross-rank diagnosis of several dumps (which rank diverged first, and how).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "fr_dump.h"
#include "ranklens/events.h"
#include "ranklens/status.h"

namespace CLI {
class App;
}

namespace ranklens {
namespace tools {

// What one dump entry becomes: an NCCL call (isCall), with the Call fields the dump does not give listed in
// `unknown` (filled with stand-ins: redop sum, root 0, stream 0, ...).
struct EntryCall {
  bool isCall = false;
  events::Call call;
  std::string unknown;  // "redop,stream,payload" ...
  std::string why;      // !isCall: why not ("nccl:coalesced is torch's marker for a group, no NCCL call of its own")
};
// `nranks`/`groupRank`: the entry's process group and this rank's place in it (-1 unknown).
EntryCall entryToCall(const fr::Entry& entry, int nranks, int groupRank);
// c10 dtype name ("Float", "BFloat16") to ncclDataType_t, -1 when NCCL has none.
int datatypeOfDtype(const std::string& dtype);

struct ImportReport {
  int rank = -1;
  std::string rankDir;
  size_t entries = 0, calls = 0, timed = 0, notCalls = 0;
  size_t unfinished = 0;  // started or scheduled
};

// Writes <outDir>/rank<R>/ for each dump. A failure says why (nothing half-written is left claimed as complete: a
// failed rank's writer is closed and its directory named in the message).
Status importDumps(const std::vector<fr::Dump>& dumps, const std::string& outDir, std::vector<ImportReport>* reports);

// The cross-rank diagnosis of several ranks' dumps, in a few lines: per process group, the first collective sequence
// number that not every rank completed, which ranks reached it (and in which state), which did not, and the first
// divergence (a rank whose call at a sequence number differs in collective, sizes or dtypes from the others').
// Empty when the dumps show nothing wrong.
std::string diagnose(const std::vector<fr::Dump>& dumps);

struct ImportOptions {
  std::vector<std::string> dumps;
  std::string out;
  int rank = -1;
  bool diagnoseOnly = false;
  bool quiet = false;
};
CLI::App* addImportCommand(CLI::App& app, ImportOptions* options);
int runImport(const ImportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tools
}  // namespace ranklens
