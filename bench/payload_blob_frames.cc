// SPDX-License-Identifier: Apache-2.0
// Trace format 1.10 against 1.9 for the payloads record mode compresses straight out of staging: each MiB (four
// 256 KiB blocks shuffled into byte planes with their CRC-32, trace::shuffleCopyAndChecksum; --frame-kib for other
// sizes) compressed as a zstd frame of its own in one call (1.10, trace::compressBlobFrom), or the blocks streamed
// into one frame for the whole payload (1.9: zstd's stream copies every block into a window of its own first); then
// both decoded as a value replay does
// (trace::decodePayloadInto). One thread, best of --repeats, every decode checked. No GPU; input: raw payload files
// (`rlpayload export TRACE -c 0 -s 40 -f raw -o grad.raw`) or, with --synthetic N, N MiB of fp32 gradients rounded
// to bf16 values, a quarter of them zero (a bf16-autocast job's fp32 gradients, as record_host_overhead --data
// bf16-gradients makes them).
//
//   payload_blob_frames [FILE...] [--synthetic 40] [--element-bytes 4] [--level -1] [--frame-kib 256,1024]
//                       [--repeats 5] [--json]
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ranklens/trace.h"
#include "trace_io.h"

namespace {

namespace trace = ranklens::trace;

template <typename F>
double best(int repeats, F&& f) {
  double fastest = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t = std::chrono::steady_clock::now();
    f();
    fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return fastest;
}

// Trace 1.9's way, kept here for the comparison: the blocks streamed into one frame.
bool oneStreamedFrame(ZSTD_CCtx* cctx, int level, const uint8_t* data, size_t size, int width, trace::Blob* out,
                      uint32_t* crc) {
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (trace::planesMatchFinder(level)) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, trace::kPlanesHashLog);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, trace::kPlanesMinMatch);
  }
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
  ZSTD_CCtx_setPledgedSrcSize(cctx, size);
  static std::vector<uint8_t> block(trace::kShuffleBlockBytes);
  out->resize(ZSTD_compressBound(size));
  ZSTD_outBuffer output{out->data(), out->size(), 0};
  *crc = 0;
  for (size_t at = 0; at < size;) {
    const size_t length = std::min(trace::kShuffleBlockBytes, size - at);
    *crc = trace::shuffleCopyAndChecksum(block.data(), data + at, length, width, *crc);
    at += length;
    ZSTD_inBuffer input{block.data(), length, 0};
    const ZSTD_EndDirective mode = at == size ? ZSTD_e_end : ZSTD_e_continue;
    for (;;) {
      const size_t left = ZSTD_compressStream2(cctx, &output, &input, mode);
      if (ZSTD_isError(left)) return false;
      if (mode == ZSTD_e_continue ? input.pos == input.size : left == 0) break;
    }
  }
  out->resize(output.pos);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "payload_blob_frames: trace 1.10's zstd frames (1 MiB) against 1.9's one streamed frame, "
      "compressed and decoded as record mode and a value replay do (no GPU)"};
  std::vector<std::string> files;
  size_t syntheticMiB = 0;
  int width = 4, level = -1, repeats = 5;
  std::vector<size_t> frameKiB = {trace::kPayloadFrameBytes >> 10};
  bool json = false;
  app.add_option("files", files, "raw payload files (rlpayload export -f raw)")->check(CLI::ExistingFile);
  app.add_option("--synthetic", syntheticMiB, "also this many MiB of bf16-valued fp32 gradients, a quarter zero");
  app.add_option("--element-bytes", width, "bytes per element (the byte planes' width): 2, 4, 8")
      ->check(CLI::IsMember({2, 4, 8}));
  app.add_option("--level", level, "zstd level (record mode's default: -1)");
  app.add_option("--frame-kib", frameKiB, "frame sizes to try, KiB (whole 256 KiB blocks; the writer's: 256)")
      ->delimiter(',');
  app.add_option("--repeats", repeats, "runs of each, the fastest kept")->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "one JSON object per line");
  CLI11_PARSE(app, argc, argv);
  if (files.empty() && syntheticMiB == 0) {
    fprintf(stderr, "payload_blob_frames: give raw payload files or --synthetic MIB\n");
    return 2;
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    inputs.emplace_back(file,
                        std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
  if (syntheticMiB > 0) {
    std::vector<uint8_t> bytes(syntheticMiB << 20);
    std::mt19937 random(1);
    std::normal_distribution<float> gradient(0.0f, 1e-3f);
    for (size_t i = bytes.size() / 4; i + 4 <= bytes.size(); i += 4) {  // the first quarter stays zero
      float v = gradient(random);
      uint32_t u;
      memcpy(&u, &v, 4);
      u &= 0xffff0000u;
      memcpy(&bytes[i], &u, 4);
    }
    inputs.emplace_back("synthetic-" + std::to_string(syntheticMiB) + "MiB", std::move(bytes));
  }
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  int status = 0;
  for (const auto& [name, raw] : inputs) {
    std::vector<size_t> layouts = {0};  // 0: one streamed frame
    for (size_t kib : frameKiB) layouts.push_back(kib << 10);
    for (const size_t frameBytes : layouts) {
      const bool framePerBlock = frameBytes != 0;
      trace::Blob blob;
      uint32_t crc = 0;
      bool ok = true;
      std::string error;
      const double compressS = best(repeats, [&] {
        ok = framePerBlock
                 ? (error = trace::compressBlobFrom(cctx, level, raw.data(), raw.size(), width, &blob, &crc, frameBytes)
                                .message())
                       .empty()
                 : oneStreamedFrame(cctx, level, raw.data(), raw.size(), width, &blob, &crc);
      });
      trace::PayloadRef ref;
      ref.rawBytes = raw.size();
      ref.compressedBytes = blob.size();
      ref.rawCrc32 = crc;
      ref.shuffle = width;
      std::vector<uint8_t> decoded(raw.size());
      std::string why;
      const double decodeS = best(repeats, [&] {
        ok = ok && (why = trace::decodePayloadInto(blob.data(), blob.size(), ref, trace::Limits{}, decoded.data(),
                                                   decoded.size())
                              .message())
                       .empty();
      });
      ok = ok && decoded == raw;
      if (!ok) status = 1;
      const double mb = raw.size() / 1e6;
      const std::string layout = framePerBlock ? "a frame per " + std::to_string(frameBytes >> 10) + " KiB (1.10)"
                                               : "one streamed frame (1.9)";
      if (json)
        printf(
            "{\"input\": \"%s\", \"bytes\": %zu, \"element_bytes\": %d, \"level\": %d, \"layout\": \"%s\", "
            "\"compressed_bytes\": %zu, \"compress_mb_s\": %.0f, \"decode_mb_s\": %.0f, \"roundtrip_ok\": %s}\n",
            name.c_str(), raw.size(), width, level, layout.c_str(), blob.size(), mb / compressS, mb / decodeS,
            ok ? "true" : "false");
      else
        printf("%s  %-24s %zu bytes: compress %5.0f MB/s (shuffle, CRC-32, zstd), decode %5.0f MB/s%s\n", name.c_str(),
               layout.c_str(), blob.size(), mb / compressS, mb / decodeS, ok ? "" : "  ROUNDTRIP FAILED");
    }
  }
  ZSTD_freeCCtx(cctx);
  return status;
}
