// SPDX-License-Identifier: Apache-2.0
// A small two-rank trace written with TraceWriter for the rlpayload tests: several communicators, collectives and
// Send/Recv, float32 / bfloat16 / int32 payloads with known values, and calls without payloads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranklens/trace.h"

namespace rltest {

// The payloads the fixture writes, for checking what the tools report.
struct FixturePayload {
  int rank;
  uint64_t comm, seq;
  int op, peer, datatype;
  std::vector<uint8_t> bytes;
  uint64_t count;
};

// A fresh directory under $TMPDIR (or /tmp) named rlpayload-<tag>-XXXXXX.
std::string makeTempDir(const std::string& tag);
// Writes the fixture trace into `traceDir` (rank0/ and rank1/); returns the payloads it wrote.
std::vector<FixturePayload> writeFixtureTrace(const std::string& traceDir);
// The float32 values of rank 0, comm 0, AllReduce seq 0 (64 elements).
std::vector<float> allReduceValues();

std::vector<uint8_t> readBytes(const std::string& path);
void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes);
void copyTree(const std::string& from, const std::string& to);
void removeTree(const std::string& path);

// Every record of a rank directory, in segment order.
struct ScannedRecord {
  ranklens::trace::RecordType type;
  msgpack::object_handle body;  // the record array
  ranklens::trace::Location where;
};
std::vector<ScannedRecord> scanRecords(const std::string& rankDir);

}  // namespace rltest
