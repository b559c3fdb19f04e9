// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parseSegment on arbitrary bytes (a whole segment image, seg-000000.rls). The visitor converts
// every body to every known record struct (msgpack conversion errors are expected and caught); the parser's own
// guarantees are checked: no crash, problems inside the image, visited frames in order and inside the image.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "fuzz_check.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace {

using namespace ranklens;
using namespace ranklens::trace;

template <typename Record>
void convert(const msgpack::object& body) {
  try {
    Record record = body.as<Record>();
    msgpack::sbuffer again;  // what was read can be written back
    msgpack::pack(again, record);
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Limits limits;
  limits.maxRecordBytes = 1u << 20;
  uint64_t lastOffset = 0;
  size_t visited = 0;
  Problem problem;
  const bool ok = parseSegment(
      data, size, 0, "seg-000000.rls", limits,
      [&](RecordType type, const msgpack::object& body, const Location& where) {
        check(where.segment == 0);
        check(where.offset >= kFileHeaderBytes && where.offset + kFrameHeaderBytes < size);
        check(visited == 0 || where.offset > lastOffset);
        check(body.type == msgpack::type::ARRAY);
        lastOffset = where.offset;
        ++visited;
        (void)recordTypeName(type);
        convert<events::CommInit>(body);
        convert<events::CommEnd>(body);
        convert<events::Call>(body);
        convert<events::GroupEnd>(body);
        convert<events::Stage>(body);
        convert<GroupBegin>(body);
        convert<Timing>(body);
        convert<PayloadRef>(body);
        convert<Edit>(body);
        return true;
      },
      &problem);
  if (!ok) {
    check(problem.file == "seg-000000.rls");
    check(!problem.reason.empty());
    check(problem.offset <= size);
    check(visited == 0 || problem.offset > lastOffset);
  }
  return 0;
}
