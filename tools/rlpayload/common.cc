// SPDX-License-Identifier: Apache-2.0
#include "common.h"

#include "ranklens/config.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace rlpayload {

namespace fs = std::filesystem;
using ranklens::events::Op;

void printWarning(const std::string& text) { std::cerr << "warning: " << text << "\n"; }

// ------------------------------------------------------------------------------------------------------ progress

Progress::Progress(std::string label, uint64_t total, bool enabled) : label_(std::move(label)), total_(total) {
  const int forced = ranklens::config::readContext().progress;
  enabled_ = enabled && (forced >= 0 ? forced == 1 : isatty(STDERR_FILENO));
  last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { done(); }

void Progress::tick(uint64_t n) {
  count_ += n;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  draw();
}

void Progress::draw() {
  std::cerr << "\r" << label_ << ": " << count_;
  if (total_) std::cerr << "/" << total_;
  std::cerr << std::flush;
  drawn_ = true;
}

void Progress::done() {
  if (drawn_) {  // erase the counter line: the escape sequence past std::cerr, which would show it as text
    std::cerr << "\r" << std::flush;
    fputs("\033[K", stderr);
    fflush(stderr);
  }
  drawn_ = false;
  enabled_ = false;
}

// ------------------------------------------------------------------------------------------------------ names

std::string opName(int op) {
  if (op < 0 || op > static_cast<int>(Op::kRecv)) return "Op(" + std::to_string(op) + ")";
  return ranklens::events::opName(static_cast<Op>(op));
}

std::vector<std::string> opNames() {
  std::vector<std::string> names;
  for (int op = 0; op <= static_cast<int>(Op::kRecv); ++op) names.push_back(opName(op));
  return names;
}

static std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<int> opFromName(const std::string& name) {
  for (int op = 0; op <= static_cast<int>(Op::kRecv); ++op)
    if (lower(opName(op)) == lower(name)) return op;
  return std::nullopt;
}

bool isP2pOp(int op) { return op == static_cast<int>(Op::kSend) || op == static_cast<int>(Op::kRecv); }

bool sameCall(uint64_t commA, int opA, int peerA, uint64_t seqA, uint64_t commB, int opB, int peerB, uint64_t seqB) {
  if (commA != commB || seqA != seqB || isP2pOp(opA) != isP2pOp(opB)) return false;
  return !isP2pOp(opA) || (opA == opB && peerA == peerB);
}

bool editNames(const ranklens::trace::Edit& edit, const ranklens::trace::PayloadRef* previous,
               const ranklens::trace::PayloadRef& ref) {
  if (edit.op >= 0) return sameCall(edit.commId, edit.op, edit.peer, edit.seq, ref.commId, ref.op, ref.peer, ref.seq);
  return previous && previous->commId == edit.commId && previous->seq == edit.seq &&
         sameCall(previous->commId, previous->op, previous->peer, previous->seq, ref.commId, ref.op, ref.peer, ref.seq);
}

std::string describeCall(uint64_t commId, int op, int peer, uint64_t seq) {
  std::string s = "comm " + std::to_string(commId) + " " + opName(op);
  if (isP2pOp(op)) s += " peer " + std::to_string(peer);
  return s + " seq " + std::to_string(seq);
}

nlohmann::json jsonNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  return value;
}

// ------------------------------------------------------------------------------------------------------ traces

int rankFromDirectoryName(const std::string& dir) {
  fs::path path = fs::path(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "trace/rank3/"
  const std::string name = path.filename().string();
  if (name.size() < 5 || name.rfind("rank", 0) != 0) return -1;
  const std::string digits = name.substr(4);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

std::vector<std::string> findRankDirectories(const std::string& trace, std::string* error) {
  std::error_code ec;
  if (!fs::exists(trace, ec)) {
    *error = trace + ": no such file or directory";
    return {};
  }
  if (!fs::is_directory(trace, ec)) {
    *error = trace + ": not a directory (a trace is a directory of rank<R>/ directories, or one of them)";
    return {};
  }
  // Entries named rank<R> that cannot be read are said, never skipped in silence; two naming one rank are refused.
  for (const auto& t : ranklens::trace::rankDirectoryTrouble(trace)) {
    if (t.duplicate) {
      *error = t.reason;
      return {};
    }
    printWarning(t.reason);
  }
  auto dirs = ranklens::trace::rankDirectories(trace);
  if (dirs.empty())
    *error = trace + ": no RankLens trace here (expected manifest.msgpack, or rank<R>/manifest.msgpack below it)";
  return dirs;
}

std::unique_ptr<RankTrace> openRank(const std::string& dir, std::string* error) {
  std::string why;
  std::unique_ptr<ranklens::trace::TraceReader> reader;
  why = ranklens::trace::TraceReader::open(dir, ranklens::trace::Limits{}, &reader).message();
  if (!reader) {
    *error = why;
    return nullptr;
  }
  auto rank = std::make_unique<RankTrace>();
  rank->dir = dir;
  rank->rank = reader->manifest().rank >= 0 ? reader->manifest().rank : rankFromDirectoryName(dir);
  rank->reader = std::move(reader);
  return rank;
}

namespace {

// The operation a Selection names (0: any collective, which share one sequence per communicator), checked against
// --peer.
Status selectedOp(const Selection& s, int* op) {
  *op = 0;
  if (!s.op.empty()) {
    auto parsed = opFromName(s.op);
    if (!parsed)
      return Status::invalidArgument("--op " + s.op + ": not an operation (one of AllReduce, ..., Send, Recv)");
    *op = *parsed;
  }
  if (isP2pOp(*op) && !s.peerGiven)
    return Status::invalidArgument("--op " + opName(*op) +
                                   " needs --peer P (Send and Recv have one sequence per peer)");
  if (!isP2pOp(*op) && s.peerGiven)
    return Status::invalidArgument("--peer is for Send and Recv: give --op Send or --op Recv" +
                                   (s.op.empty() ? std::string() : " (" + opName(*op) + " is a collective)"));
  return Status::ok();
}

// The rank directory a Selection names: the only one, or the one --rank picks (by its name, else by its manifest).
Status selectedRankDir(const Selection& s, std::string* dir) {
  std::string why;
  auto dirs = findRankDirectories(s.trace, &why);
  if (dirs.empty()) return Status::systemError(why);
  if (s.rankGiven)
    for (const auto& t : ranklens::trace::rankDirectoryTrouble(s.trace))
      if (t.rank == s.rank) return Status::corrupt(t.reason);
  if (dirs.size() == 1) {
    *dir = dirs[0];  // one rank (or a rank directory itself): --rank is optional, and checked when given
    return Status::ok();
  }
  if (!s.rankGiven)
    return Status::invalidArgument(s.trace + " holds " + std::to_string(dirs.size()) +
                                   " ranks: choose one with --rank R");
  for (const auto& d : dirs)
    if (rankFromDirectoryName(d) == s.rank) *dir = d;
  for (const auto& d : dirs) {  // directories not named rank<R> (ranklens-pid<P>): their manifest says
    if (!dir->empty()) break;
    std::string ignored;
    if (rankFromDirectoryName(d) < 0)
      if (auto rank = openRank(d, &ignored); rank && rank->rank == s.rank) *dir = d;
  }
  if (dir->empty()) return Status::invalidUsage(s.trace + ": no rank " + std::to_string(s.rank) + " in this trace");
  return Status::ok();
}

// Why `rank` has no payload for the call a Selection names.
Status noPayload(const Selection& s, const RankTrace& rank, const std::string& dir, int op, int peer) {
  const auto& damage = rank.reader->problems();  // payload() may have rebuilt the index and met damage
  if (!damage.empty())
    return Status::corrupt(damage.front().describe() + (damage.front().truncated ? " (truncated)" : "") + "; " +
                           (s.op.empty() ? "comm " + std::to_string(s.comm) + " seq " + std::to_string(s.seq)
                                         : describeCall(s.comm, op, peer, s.seq)) +
                           ": no payload found before the damage");
  if (s.op.empty())
    return Status::invalidUsage(dir + ": comm " + std::to_string(s.comm) + " seq " + std::to_string(s.seq) +
                                ": no collective with a payload (for Send/Recv give --op and --peer)");
  return Status::invalidUsage(dir + ": " + describeCall(s.comm, op, peer, s.seq) + ": no payload recorded");
}

}  // namespace

Status selectPayload(const Selection& s, Selected* out) {
  int op = 0;
  RL_CHECK(selectedOp(s, &op));
  std::string dir;
  RL_CHECK(selectedRankDir(s, &dir));
  std::string error;
  out->rank = openRank(dir, &error);
  if (!out->rank) return Status::corrupt(error);
  if (s.rankGiven && out->rank->rank != s.rank)
    return Status::invalidUsage(dir + ": this is rank " + std::to_string(out->rank->rank) + ", not rank " +
                                std::to_string(s.rank));
  const int peer = isP2pOp(op) ? s.peer : -1;
  auto ref = out->rank->reader->payload(s.comm, op, peer, s.seq);
  if (!ref) return noPayload(s, *out->rank, dir, op, peer);
  if (!s.op.empty() && ref->op != op)
    return Status::invalidUsage(dir + ": comm " + std::to_string(s.comm) + " seq " + std::to_string(s.seq) + " is " +
                                opName(ref->op) + ", not " + opName(op));
  out->ref = *ref;
  out->call = out->rank->reader->call(s.comm, ref->op, ref->peer, s.seq);
  return Status::ok();
}

Status loadPayload(Selected& selected, std::vector<uint8_t>* bytes) {
  ranklens::trace::Problem problem;
  if (!selected.rank->reader->readPayload(selected.ref, bytes, &problem)) return Status::corrupt(problem.describe());
  return Status::ok();
}

int reportFailure(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return status.code() == Status::Code::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string shellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    const bool plain = !w.empty() && w.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-+=.,:/@%") == std::string::npos;
    if (plain) {
      out += w;
      continue;
    }
    out += '\'';
    for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

Status loadTensor(const Selection& selection, LoadedTensor* out) {
  out->selected.emplace();
  RL_CHECK(selectPayload(selection, &*out->selected));
  RL_CHECK(loadPayload(*out->selected, &out->bytes));
  const auto& ref = out->selected->ref;
  out->info = dtypeInfo(ref.datatype);
  if (out->info == nullptr)
    return Status::corrupt(out->selected->rank->dir + ": " + describeCall(ref.commId, ref.op, ref.peer, ref.seq) +
                           ": datatype " + std::to_string(ref.datatype) + " is not an NCCL datatype");
  // Damage elsewhere in the rank (a cut segment, a damaged frame) does not touch this payload, but the trace is not
  // whole: said, as ls says it.
  for (const auto& p : out->selected->rank->reader->problems()) {
    printWarning(p.describe() + (p.truncated ? " (truncated)" : ""));
    out->incomplete = true;
  }
  if (ranklens::trace::InterruptedEdit edit; ranklens::trace::findInterruptedEdit(out->selected->rank->dir, &edit)) {
    printWarning(edit.describe());
    out->incomplete = true;
  }
  // Said here, for every command that reads a tensor (show, export): a reference whose count disagrees with its
  // blob (a damaged or hostile one claiming 2^62 elements) must not pass silently through one of them.
  const uint64_t bytes = out->bytes.size();
  if (bytes / out->info->size != ref.count || bytes % out->info->size != 0)
    printWarning(out->selected->rank->dir + ": " + describeCall(ref.commId, ref.op, ref.peer, ref.seq) +
                 ": reference says " + std::to_string(ref.count) + " elements, the blob holds " +
                 std::to_string(bytes) + " bytes");
  return Status::ok();
}

}  // namespace rlpayload
