// SPDX-License-Identifier: Apache-2.0
// rlpayload show: one call's payload decoded: where it is stored, statistics, the first values, its edit history.
#include <cstdio>
#include <ctime>
#include <iostream>

#include "commands.h"
#include "dtype.h"
#include "stats.h"

namespace rlpayload {

using ranklens::trace::Edit;
using ranklens::trace::Location;
using ranklens::trace::PayloadRef;
using ranklens::trace::RecordType;

namespace {

const char* redopName(int redop) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return redop >= 0 && redop < 5 ? names[redop] : nullptr;
}

std::string realtime(int64_t ns) {
  const time_t seconds = static_cast<time_t>(ns / 1000000000);
  struct tm tm;
  gmtime_r(&seconds, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The Edit records of one call, in order.
std::vector<Edit> editsOf(ranklens::trace::TraceReader& reader, const PayloadRef& call) {
  std::vector<Edit> edits;
  std::optional<PayloadRef> previous;
  reader.scan([&](RecordType type, const msgpack::object& body, const Location&) {
    try {
      if (type == RecordType::kPayloadRef) {
        previous = body.as<PayloadRef>();
        return true;
      }
      if (type == RecordType::kEdit) {
        auto edit = body.as<Edit>();
        if (editNames(edit, previous ? &*previous : nullptr, call)) edits.push_back(edit);
      }
    } catch (const std::exception&) {
      // malformed records are verify's business
    }
    previous.reset();
    return true;
  });
  return edits;
}

// What show prints of one payload: the tensor, its statistics, the first values, the edits made to it.
struct Shown {
  const LoadedTensor& t;
  const TensorStats& stats;
  uint64_t values;  // leading values printed
  const std::vector<ranklens::trace::Edit>& edits;
  const PayloadRef& ref() const { return t.selected->ref; }
  const uint8_t* element(uint64_t i) const { return t.bytes.data() + i * t.info->size; }
};

nlohmann::json statsJson(const Shown& s) {
  const TensorStats& st = s.stats;
  const DtypeInfo* info = s.t.info;
  nlohmann::json stats = {{"count", st.count}, {"finite", st.finite}};
  if (st.finite) {
    if (info->isFloat) {
      stats["min"] = st.min;
      stats["max"] = st.max;
    } else {  // exact
      stats["min"] = info->isSigned ? nlohmann::json(std::stoll(st.minText)) : nlohmann::json(std::stoull(st.minText));
      stats["max"] = info->isSigned ? nlohmann::json(std::stoll(st.maxText)) : nlohmann::json(std::stoull(st.maxText));
    }
    stats["mean"] = jsonNumber(st.mean);
    stats["std"] = jsonNumber(st.stddev);
  } else {
    stats["min"] = stats["max"] = stats["mean"] = stats["std"] = nullptr;
  }
  stats["nan"] = st.nan;
  stats["pos_inf"] = st.posInf;
  stats["neg_inf"] = st.negInf;
  stats["first_nan"] = st.firstNan >= 0 ? nlohmann::json(st.firstNan) : nlohmann::json(nullptr);
  stats["first_inf"] = st.firstInf >= 0 ? nlohmann::json(st.firstInf) : nlohmann::json(nullptr);
  return stats;
}

void printJson(const Shown& s) {
  const PayloadRef& ref = s.ref();
  const DtypeInfo* info = s.t.info;
  const auto& selected = s.t.selected;
  nlohmann::json values = nlohmann::json::array();
  for (uint64_t i = 0; i < s.values; ++i) {
    const uint8_t* p = s.element(i);
    if (!info->isFloat)
      values.push_back(info->isSigned ? nlohmann::json(loadSigned(ref.datatype, p))
                                      : nlohmann::json(loadUnsigned(ref.datatype, p)));
    else
      values.push_back(jsonNumber(loadDouble(ref.datatype, p)));
  }
  nlohmann::json history = nlohmann::json::array();
  for (const auto& e : s.edits)
    history.push_back(
        {{"tool", e.tool}, {"action", e.action}, {"detail", e.detail}, {"user", e.user}, {"time_ns", e.timeNs}});
  nlohmann::json doc = {{"format_version", kJsonFormatVersion},
                        {"rank", selected->rank->rank},
                        {"rank_dir", selected->rank->dir},
                        {"comm", ref.commId},
                        {"op", opName(ref.op)},
                        {"peer", ref.peer},
                        {"seq", ref.seq},
                        {"dtype", info->name},
                        {"count", ref.count},
                        {"bytes", ref.rawBytes},
                        {"compressed_bytes", ref.compressedBytes},
                        {"file", ranklens::trace::payloadName(ref.file)},
                        {"offset", ref.offset},
                        {"crc32", ref.rawCrc32},
                        {"stats", statsJson(s)},
                        {"values", values},
                        {"edits", history}};
  if (selected->call)
    doc["call"] = {{"count", selected->call->count},   {"root_or_peer", selected->call->rootOrPeer},
                   {"redop", selected->call->redop},   {"group", selected->call->groupId},
                   {"nranks", selected->call->nranks}, {"bytes", selected->call->bytes}};
  std::cout << doc.dump(2) << "\n";
}

// The call and its payload: where it is, its size, the call's arguments.
void printCallText(const Shown& s) {
  const PayloadRef& ref = s.ref();
  const auto& selected = s.t.selected;
  std::cout << "rank " << selected->rank->rank << " (" << selected->rank->dir << "), "
            << describeCall(ref.commId, ref.op, ref.peer, ref.seq) << "\n";
  std::cout << "payload   " << s.t.info->name << " x " << ref.count << " (" << ref.rawBytes << " bytes; "
            << ref.compressedBytes << " compressed in " << ranklens::trace::payloadName(ref.file) << " at offset "
            << ref.offset << ", CRC-32 " << std::hex << ref.rawCrc32 << std::dec << ")\n";
  if (selected->call) {
    const auto& c = *selected->call;
    std::cout << "call      count " << c.count << ", " << c.nranks << " ranks";
    if (const char* r = redopName(c.redop)) std::cout << ", " << r;
    if (c.rootOrPeer >= 0) std::cout << (isP2pOp(c.op) ? ", peer " : ", root ") << c.rootOrPeer;
    if (c.groupId) std::cout << ", group " << c.groupId;
    std::cout << "\n";
  }
}

void printText(const Shown& s) {
  const TensorStats& st = s.stats;
  printCallText(s);
  std::cout << "finite    " << st.finite << " of " << st.count << "\n";
  if (st.finite) {
    char line[128];
    std::cout << "min       " << st.minText << "\nmax       " << st.maxText << "\n";
    std::snprintf(line, sizeof(line), "mean      %.9g\nstd       %.9g\n", st.mean, st.stddev);
    std::cout << line;
  }
  if (s.t.info->isFloat) {
    std::cout << "nan       " << st.nan;
    if (st.firstNan >= 0) std::cout << " (first at " << st.firstNan << ")";
    std::cout << "\ninf       " << st.posInf + st.negInf << " (+inf " << st.posInf << ", -inf " << st.negInf << ")";
    if (st.firstInf >= 0) std::cout << " (first at " << st.firstInf << ")";
    std::cout << "\n";
  }
  if (s.edits.empty()) {
    std::cout << "edits     none\n";
  } else {
    for (const auto& e : s.edits)
      std::cout << "edit      " << realtime(e.timeNs) << " " << e.user << " " << e.tool << " " << e.action << ": "
                << e.detail << "\n";
  }
  if (s.values) {
    std::cout << "first " << s.values << " value" << (s.values == 1 ? "" : "s") << ":\n";
    for (uint64_t i = 0; i < s.values; ++i)
      std::cout << "  [" << i << "] " << formatElement(s.ref().datatype, s.element(i)) << "\n";
  }
}

}  // namespace

int runShow(const ShowOptions& o) {
  LoadedTensor loaded;
  if (Status st = loadTensor(o.selection, &loaded); !st.isOk()) return reportFailure(st);
  const PayloadRef& ref = loaded.selected->ref;
  const uint64_t count = loaded.bytes.size() / loaded.info->size;
  const TensorStats stats = computeStats(ref.datatype, loaded.bytes.data(), count);
  const auto edits = editsOf(*loaded.selected->rank->reader, ref);
  const Shown shown{loaded, stats, std::min<uint64_t>(o.values, count), edits};
  if (o.json)
    printJson(shown);
  else
    printText(shown);
  return loaded.incomplete ? kExitFailure : kExitOk;
}

}  // namespace rlpayload
