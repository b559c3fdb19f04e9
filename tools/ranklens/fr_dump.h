// SPDX-License-Identifier: Apache-2.0
// PyTorch Flight Recorder dumps: a restricted pickle reader and the dump's model.
//
// A dump is what torch's ProcessGroupNCCL writes on a watchdog timeout (TORCH_NCCL_DUMP_ON_TIMEOUT=1, one file per
// rank named <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>) or returns from torch._C._distributed_c10d._dump_nccl_trace():
// a pickle of a dict {version, pg_config, pg_status, comm_lib_version, entries, nccl_comm_state}; or the same as
// JSON (_dump_nccl_trace_json, no stacks). Dumps come from other machines and people, so the pickle is never
// unpickled: readPickle interprets the data opcodes only (dicts, lists, tuples, strings, numbers, memo) and refuses
// every opcode that would import or call anything (GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT...), naming
// the file offset. The one exception is torch's own list and type-tag helpers (torch.jit._pickle build_intlist,
// build_doublelist, build_boollist, build_tensorlist is refused, restore_type_tag), which torch's pickler may emit
// around plain data: they are recognised by name and their result built here, nothing is called.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ranklens/status.h"

namespace ranklens {
namespace fr {

// A pickled value. Containers hold pointers into the document's arena (Pickle), so memo references share rather
// than copy (no blow-up) and a cyclic pickle cannot leak; readers of a value bound their depth.
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                               // kStr (UTF-8 as pickled), kBytes
  std::vector<const Value*> items;                             // kList, kTuple
  std::vector<std::pair<const Value*, const Value*>> entries;  // kDict, in insertion order (last write wins on read)

  const Value* get(const std::string& key) const;  // kDict with a str key; nullptr when absent or not a dict
  bool isStr() const { return kind == Kind::kStr; }
  bool isInt() const { return kind == Kind::kInt || kind == Kind::kBool; }
  bool isNumber() const { return isInt() || kind == Kind::kFloat; }
  bool isSeq() const { return kind == Kind::kList || kind == Kind::kTuple; }
  double number() const { return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i); }
};

struct Pickle {
  std::vector<std::unique_ptr<Value>> arena;
  const Value* root = nullptr;
};

struct Limits {
  size_t maxValues = 50u << 20;  // values created (a dump of 20,000 entries with stacks makes a few million)
  size_t maxStack = 1u << 20;    // stack + mark depth
  size_t maxStringBytes = 64u << 20;
};

// Reads a pickle (protocols 0-5, the data opcodes). A corrupt Status "<name>: offset N: <reason>" on anything else:
// an opcode that imports or calls, a truncated or malformed stream, a limit.
Status readPickle(const uint8_t* data, size_t size, const std::string& name, Pickle* out, const Limits& limits = {});

// Reads JSON (RFC 8259) into the same values (objects -> kDict, arrays -> kList, integers -> kInt when they fit,
// else kFloat). Depth is bounded (256).
Status readJson(const std::string& text, const std::string& name, Pickle* out, const Limits& limits = {});

// ------------------------------------------------------------------------------------------------------ the dump

struct Frame {
  std::string name, filename;
  int64_t line = 0;
};

struct Entry {
  int64_t recordId = -1;
  int64_t pgId = -1;
  std::string pgName, pgDesc;  // process_group: (name, desc)
  int64_t collectiveSeqId = 0, p2pSeqId = 0, opId = 0;
  std::string profilingName;  // "nccl:all_reduce", "nccl:send 0->1", ...
  std::vector<std::vector<int64_t>> inputSizes, outputSizes;
  std::vector<std::string> inputDtypes, outputDtypes;  // c10 names: "Float", "BFloat16", ...
  std::string state;                                   // scheduled | started | completed
  int64_t timeCreatedNs = 0;
  std::optional<double> durationMs;  // TORCH_NCCL_ENABLE_TIMING=1 and completed
  std::optional<int64_t> timeDiscoveredStartedNs, timeDiscoveredCompletedNs;
  bool retired = false;
  int64_t timeoutMs = 0;
  bool isP2p = false;
  std::optional<bool> isP2pKnown;  // absent in dumps before the key existed
  std::string threadName, threadId;
  std::vector<Frame> frames;  // Python stack, innermost first; empty in JSON dumps
  bool hasFrames = false;
};

struct ProcessGroup {
  std::string name, desc;
  std::vector<int> ranks;  // global ranks, in group-rank order; empty when the dump says "all" or nothing
  std::string ranksText;   // as the dump wrote it ("[0, 1]")
};

struct PgStatus {
  int64_t lastEnqueued = -1, lastStarted = -1, lastCompleted = -1;
};

struct Dump {
  std::string file;
  std::string format;   // pickle | json
  int rank = -1;        // from the file name (<prefix><rank>), or given
  std::string version;  // "2.10"
  int versionMajor = 0, versionMinor = 0;
  std::string commLibVersion;
  std::map<std::string, ProcessGroup> pgConfig;  // by name
  std::map<std::string, PgStatus> pgStatus;      // by pg_id (decimal string)
  std::vector<Entry> entries;                    // oldest first
  bool hasEntries = false;                       // an empty buffer dumps no "entries" key
};

// The dump versions this reader understands: major 2 (torch 2.3 wrote 2.0-2.1 ... torch 2.11 writes 2.10).
constexpr int kSupportedMajor = 2;

// Parses a dump image (pickle, or JSON when it starts with '{'). `rank` < 0: taken from the file name's trailing
// digits. An error naming the file, the key or offset, the reason and what to do: corrupt for a damaged or hostile
// dump, unsupported for a version other than 2.x, invalid argument when the rank cannot be told.
Status parseDump(const std::string& bytes, const std::string& file, int rank, Dump* out);
// parseDump of a file's bytes; a system error when it cannot be read.
Status loadDump(const std::string& path, int rank, Dump* out);

// The trailing decimal digits of a file name (rank_12 -> 12, rank_3.json -> 3), or -1.
int rankFromFileName(const std::string& path);

}  // namespace fr
}  // namespace ranklens
