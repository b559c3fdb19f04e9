// SPDX-License-Identifier: Apache-2.0
// rlpayload ls: the calls that have payloads (their effective reference), with sizes and compression.
#include <cstdio>
#include <iostream>
#include <limits>

#include "commands.h"
#include "dtype.h"

namespace rlpayload {

using ranklens::trace::PayloadRef;

namespace {

// One end of a --seq range: `fallback` when empty.
Status seqNumber(const std::string& text, const std::string& part, uint64_t fallback, uint64_t* value) {
  if (part.empty()) {
    *value = fallback;
    return Status::ok();
  }
  if (part.find_first_not_of("0123456789") != std::string::npos || part.size() > 19)
    return Status::invalidArgument("--seq " + text + ": expected A:B, A, A: or :B with non-negative integers");
  *value = std::stoull(part);
  return Status::ok();
}

}  // namespace

Status parseSeqRange(const std::string& text, std::pair<uint64_t, uint64_t>* range) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    uint64_t v = 0;
    RL_CHECK(seqNumber(text, text, 0, &v));
    if (text.empty()) return Status::invalidArgument("--seq: empty range");
    *range = {v, v};
    return Status::ok();
  }
  uint64_t lo = 0, hi = 0;
  RL_CHECK(seqNumber(text, text.substr(0, colon), 0, &lo));
  RL_CHECK(seqNumber(text, text.substr(colon + 1), std::numeric_limits<uint64_t>::max(), &hi));
  if (lo > hi) return Status::invalidArgument("--seq " + text + ": the range is empty (A > B)");
  *range = {lo, hi};
  return Status::ok();
}

namespace {

// What ls found over the ranks: the rows (--json), the problems, the totals, and the exit status.
struct Listing {
  nlohmann::json rows = nlohmann::json::array(), problems = nlohmann::json::array();
  uint64_t totalRaw = 0, totalCompressed = 0, listed = 0;
  int status = kExitOk;
  bool header = false;  // the text table's header printed
};

nlohmann::json rowJson(const RankTrace& rank, const std::string& dir, const PayloadRef& ref, double ratio) {
  return {{"rank", rank.rank},
          {"rank_dir", dir},
          {"comm", ref.commId},
          {"op", opName(ref.op)},
          {"peer", ref.peer},
          {"seq", ref.seq},
          {"dtype", dtypeName(ref.datatype)},
          {"count", ref.count},
          {"bytes", ref.rawBytes},
          {"compressed_bytes", ref.compressedBytes},
          {"ratio", ratio},
          {"shuffle", ref.shuffle},
          {"file", ranklens::trace::payloadName(ref.file)},
          {"offset", ref.offset}};
}

void printRow(const RankTrace& rank, const PayloadRef& ref, double ratio, Listing& l, Progress& progress) {
  if (!l.header) {
    progress.done();
    std::printf("%5s %5s %-13s %5s %8s %-10s %12s %14s %14s %7s %-7s\n", "rank", "comm", "op", "peer", "seq", "dtype",
                "count", "bytes", "compressed", "ratio", "stored");
    l.header = true;
  }
  const std::string stored = ref.shuffle ? "planes" + std::to_string(ref.shuffle) : "as-is";
  std::printf("%5d %5llu %-13s %5s %8llu %-10s %12llu %14llu %14llu %7.2f %-7s\n", rank.rank,
              static_cast<unsigned long long>(ref.commId), opName(ref.op).c_str(),
              isP2pOp(ref.op) ? std::to_string(ref.peer).c_str() : "-", static_cast<unsigned long long>(ref.seq),
              dtypeName(ref.datatype).c_str(), static_cast<unsigned long long>(ref.count),
              static_cast<unsigned long long>(ref.rawBytes), static_cast<unsigned long long>(ref.compressedBytes),
              ratio, stored.c_str());
}

// One rank directory's payloads that pass the filters. A rank that cannot be opened, or damage that cuts its
// listing short, is said and makes the exit status 1 (as verify's).
void listRank(const LsOptions& o, const std::string& dir, bool onlyDir, std::optional<int> op,
              std::pair<uint64_t, uint64_t> seqs, Listing& l, Progress& progress) {
  const int named = rankFromDirectoryName(dir);
  if (o.rank && named >= 0 && named != *o.rank && !onlyDir) return;
  std::string error;
  auto rank = openRank(dir, &error);
  if (!rank) {
    std::cerr << "error: " << error << "\n";  // the other ranks are still listed
    l.problems.push_back({{"file", dir}, {"reason", error}});
    l.status = kExitFailure;
    return;
  }
  if (o.rank && rank->rank != *o.rank) return;
  // payloads() may rebuild the index (a stale entry): read the problems after it.
  const std::vector<PayloadRef> refs = rank->reader->payloads();
  for (const auto& p : rank->reader->problems()) {
    l.status = kExitFailure;
    printWarning(p.describe() + (p.truncated ? " (truncated)" : "") +
                 (p.skipped ? "; it is skipped" : "; records after it are not listed"));
    l.problems.push_back({{"file", p.file}, {"offset", p.offset}, {"reason", p.reason}, {"truncated", p.truncated}});
  }
  if (ranklens::trace::InterruptedEdit edit; ranklens::trace::findInterruptedEdit(dir, &edit)) {
    l.status = kExitFailure;
    printWarning(edit.describe());
    l.problems.push_back({{"file", edit.journal}, {"reason", edit.describe().substr(edit.journal.size() + 2)}});
  }
  for (const PayloadRef& ref : refs) {
    if (o.comm && ref.commId != *o.comm) continue;
    if (op && ref.op != *op) continue;
    if (ref.seq < seqs.first || ref.seq > seqs.second) continue;
    const double ratio = ref.compressedBytes ? static_cast<double>(ref.rawBytes) / ref.compressedBytes : 0.0;
    l.totalRaw += ref.rawBytes;
    l.totalCompressed += ref.compressedBytes;
    ++l.listed;
    if (o.json)
      l.rows.push_back(rowJson(*rank, dir, ref, ratio));
    else
      printRow(*rank, ref, ratio, l, progress);
  }
}

void printTotals(const LsOptions& o, const Listing& l) {
  const double ratio = l.totalCompressed ? static_cast<double>(l.totalRaw) / l.totalCompressed : 0.0;
  if (o.json) {
    nlohmann::json doc = {
        {"format_version", kJsonFormatVersion},
        {"trace", o.trace},
        {"payloads", l.rows},
        {"totals",
         {{"payloads", l.listed}, {"bytes", l.totalRaw}, {"compressed_bytes", l.totalCompressed}, {"ratio", ratio}}},
        {"problems", l.problems}};
    std::cout << doc.dump(2) << "\n";
  } else {
    std::printf("%llu payload%s, %llu bytes, %llu compressed (ratio %.2f)\n", static_cast<unsigned long long>(l.listed),
                l.listed == 1 ? "" : "s", static_cast<unsigned long long>(l.totalRaw),
                static_cast<unsigned long long>(l.totalCompressed), ratio);
  }
}

Status listPayloads(const LsOptions& o, int* exitStatus) {
  std::optional<int> op;
  if (!o.op.empty()) {
    op = opFromName(o.op);
    if (!op) return Status::invalidArgument("--op " + o.op + ": not an operation");
  }
  auto seqs = std::make_pair(uint64_t{0}, std::numeric_limits<uint64_t>::max());
  if (!o.seqRange.empty()) RL_CHECK(parseSeqRange(o.seqRange, &seqs));
  std::string error;
  auto dirs = findRankDirectories(o.trace, &error);
  if (dirs.empty()) return Status::systemError(error);
  Listing l;
  Progress progress("ls: ranks", dirs.size(), !o.json);
  for (const auto& dir : dirs) {
    progress.tick();
    listRank(o, dir, dirs.size() == 1 && dir == o.trace, op, seqs, l, progress);
  }
  progress.done();
  printTotals(o, l);
  *exitStatus = l.status;
  return Status::ok();
}

}  // namespace

int runLs(const LsOptions& o) {
  int exitStatus = kExitOk;
  const Status status = listPayloads(o, &exitStatus);
  return status.isOk() ? exitStatus : reportFailure(status);
}

}  // namespace rlpayload
