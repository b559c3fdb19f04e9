// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the rlpayload subcommands: exit codes, error lines, progress on a terminal, opening the rank
// directories of a trace, naming operations and calls, and selecting one call's payload.
#pragma once

#include "dtype.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ranklens/status.h"
#include "ranklens/trace.h"

namespace rlpayload {

using ranklens::Status;

constexpr const char* kVersion = "0.1.0";
constexpr const char* kJsonFormatVersion = "1.0";  // of every --json document ("format_version")

// Exit codes of every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // problems found, traces differ, or a runtime failure
constexpr int kExitUsage = 2;    // bad command line

// The one place a failed subcommand is said: "error: <message>" on stderr, and the exit status: kExitUsage for a
// command-line mistake (Status::invalidArgument), kExitFailure for anything else.
int reportFailure(const Status& status);

void printWarning(const std::string& text);

// A counter on stderr, redrawn at most every 0.5 s, only when stderr is a terminal (RANKLENS_PROGRESS=1 forces it,
// =0 disables it). Cleared by done() or the destructor. Never writes to stdout.
class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled = true);
  ~Progress();
  void tick(uint64_t n = 1);
  void setTotal(uint64_t total) { total_ = total; }
  void done();

 private:
  void draw();
  std::string label_;
  uint64_t total_ = 0, count_ = 0;
  bool enabled_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

// Operation names (events::opName) and back; case-insensitive.
std::string opName(int op);
std::optional<int> opFromName(const std::string& name);
std::vector<std::string> opNames();
bool isP2pOp(int op);

// Whether two (commId, op, peer, seq) name the same call: collectives by (comm, seq), Send/Recv by
// (comm, direction, peer, seq).
bool sameCall(uint64_t commA, int opA, int peerA, uint64_t seqA, uint64_t commB, int opB, int peerB, uint64_t seqB);
// Whether `edit` records a change of the call `ref` names. Edit records carry op and peer since format 1.0's
// additions; an older one (op -1) is matched through `previous`, the PayloadRef written just before it (an edit
// appends the reference and its Edit record together).
bool editNames(const ranklens::trace::Edit& edit, const ranklens::trace::PayloadRef* previous,
               const ranklens::trace::PayloadRef& ref);

// "comm 0 AllReduce seq 3" / "comm 1 Recv peer 2 seq 0".
std::string describeCall(uint64_t commId, int op, int peer, uint64_t seq);

// A non-finite double as JSON: numbers when finite, else the strings "nan", "inf", "-inf" (JSON has no such numbers).
nlohmann::json jsonNumber(double value);

// One rank directory of a trace, opened.
struct RankTrace {
  int rank = -1;  // manifest rank, else the number in rank<R>, else -1
  std::string dir;
  std::unique_ptr<ranklens::trace::TraceReader> reader;
};

// The rank directories below `trace` (or `trace` itself); empty with `error` set when there is no trace.
std::vector<std::string> findRankDirectories(const std::string& trace, std::string* error);
// Opens one rank directory; nullptr with `error` ("<path>: <reason>").
std::unique_ptr<RankTrace> openRank(const std::string& dir, std::string* error);
// The rank number a directory name says (rank<R>), or -1.
int rankFromDirectoryName(const std::string& dir);

// The call a command works on.
struct Selection {
  std::string trace;
  int rank = -1;
  bool rankGiven = false;
  uint64_t comm = 0, seq = 0;
  std::string op;  // empty: a collective
  int peer = -1;
  bool peerGiven = false;
};

struct Selected {
  std::unique_ptr<RankTrace> rank;
  ranklens::trace::PayloadRef ref;             // the call's effective payload reference
  std::optional<ranklens::events::Call> call;  // its Call record, when present
};

// Finds the payload a Selection names. Usage mistakes are invalidArgument; a missing call or unreadable trace says
// "<path>: <reason>".
Status selectPayload(const Selection& selection, Selected* out);

// Reads and checks the selected payload (zstd, sizes, CRC-32); a failure says "<file>: offset <n>: <reason>".
Status loadPayload(Selected& selected, std::vector<uint8_t>* bytes);

// selectPayload + loadPayload + the datatype's description, for the commands that decode a tensor (show, export).
struct LoadedTensor {
  std::optional<Selected> selected;
  std::vector<uint8_t> bytes;
  const DtypeInfo* info = nullptr;
  // The rank has damage or an interrupted edit elsewhere (said on stderr): the tensor is whole, but the command
  // exits 1 after its output, as ls does on the same trace.
  bool incomplete = false;
};
Status loadTensor(const Selection& selection, LoadedTensor* out);

// Shell-quoted words joined by spaces (the exact command line, for Edit records).
std::string shellJoin(const std::vector<std::string>& words);

}  // namespace rlpayload
