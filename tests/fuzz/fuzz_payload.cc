// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: decodePayload, and decodePayloadInto and decodePayloadStreaming (in pieces of 18 and 97 bytes)
// beside it (they must agree), on arbitrary bytes, in the layout of payload_seed_layout.h (rawBytes with the byte
// shuffle in its top bits, rawCrc32, the blob), which is what the seeds in corpus/fuzz_payload hold. The reader's
// payload limit is 1 MiB here: decodePayload allocates up to the limit for a frame whose declared size matches the
// reference, and the default (16 GiB) would only exercise the allocator.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "payload_seed_layout.h"
#include "ranklens/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::trace;
  if (size < fuzz_layout::kPayloadSeedHeader) return 0;
  PayloadRef ref = fuzz_layout::payloadSeedRef(data, size);
  const uint64_t rawBytes = ref.rawBytes;
  const uint32_t rawCrc32 = ref.rawCrc32;
  Limits limits;
  limits.maxPayloadBytes = 1u << 20;
  std::vector<uint8_t> out;
  std::string reason;
  // A private copy of exactly the blob, so reading past it is an ASan error.
  std::vector<uint8_t> blob(data + 8, data + size);
  const bool decoded = (reason = decodePayload(blob.data(), blob.size(), ref, limits, &out).message()).empty();
  if (decoded) {
    check(out.size() == rawBytes);
    check(crc32Bytes(out.data(), out.size()) == rawCrc32);
  } else {
    check(!reason.empty());
  }
  // Into caller memory of exactly rawBytes (bounded here, as decodePayload bounds its allocation by the limit): the
  // same verdict and bytes; one byte less room is refused.
  if (rawBytes <= limits.maxPayloadBytes) {
    std::vector<uint8_t> into(rawBytes);
    std::string why;
    check(
        (why = decodePayloadInto(blob.data(), blob.size(), ref, limits, into.data(), into.size()).message()).empty() ==
        decoded);
    check(!decoded || into == out);
    check(decoded || !why.empty());
    if (rawBytes > 0)
      check(!(why = decodePayloadInto(blob.data(), blob.size(), ref, limits, into.data(), rawBytes - 1).message())
                 .empty());
    // Piece by piece, each piece an exact copy (reading past one is an ASan error): the same verdict and bytes.
    const BlobSource source = [&blob](uint64_t at, uint8_t* to, size_t bytes) {
      if (at > blob.size() || bytes > blob.size() - at) return false;
      if (bytes > 0) memcpy(to, blob.data() + at, bytes);
      return true;
    };
    for (size_t piece : {size_t{18}, size_t{97}}) {
      std::vector<uint8_t> streamed(rawBytes);
      check((why = decodePayloadStreaming(source, blob.size(), ref, limits, streamed.data(), streamed.size(), piece)
                       .message())
                .empty() == decoded);
      check(!decoded || streamed == out);
      check(decoded || !why.empty());
    }
  }
  // The same blob with a reference that is off by one in each size must never be accepted.
  ref.compressedBytes = blob.size() + 1;
  check(!(reason = decodePayload(blob.data(), blob.size(), ref, limits, &out).message()).empty());
  return 0;
}
