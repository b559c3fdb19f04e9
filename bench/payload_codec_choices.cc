// SPDX-License-Identifier: Apache-2.0
// How fast and how small real payloads compress with the choices the trace format offers: zstd levels, on the bytes
// as they are and as byte planes (format 1.8, shuffleBlocks: each byte position of the elements of a 256 KiB block
// stored as one plane, so the exponent bytes of floating-point values sit together and compress). zstd on real
// fp32 gradients bounds both full-payload recording (about 200 MB/s per thread at level -1 on one H200 host) and
// value replay (about 0.8 GB/s per thread decoding). No GPU; input is
// raw payload bytes, e.g. `rlpayload export TRACE -c 0 -s 40 -f raw -o grad.raw`.
//
//   payload_codec_choices FILE... [--element-bytes 4] [--levels 1,-1,-5] [--checksum off|on|both]
//                         [--match-finder planes|level|both] [--literals on|off|both] [--repeats 3] [--json]
//
// --match-finder: for the planes, the recorder's match finder at the fast levels (`planes`: trace::kPlanesHashLog and
// kPlanesMinMatch), the level's own (`level`, as before), or both.
// --checksum: zstd's content checksum (XXH64) in the frame, as writers before format 1.9 set it (`on`), or not, as
// 1.9 writers do (`off`, the default). One line per file, layout, level and checksum: ratio, compress and decompress
// MB/s (best of --repeats on one thread), and the shuffle and unshuffle rates; every decode is checked against its
// input.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode (--literals)
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ranklens/trace.h"

namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename F>
double best(int repeats, F&& f) {
  double fastest = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t = seconds();
    f();
    fastest = std::min(fastest, seconds() - t);
  }
  return fastest;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"payload_codec_choices: zstd levels on raw and byte-shuffled payload bytes (no GPU)"};
  std::vector<std::string> files;
  size_t width = 4;
  std::vector<int> levels = {1, -1, -5};
  int repeats = 3;
  bool json = false;
  std::string checksum = "off", matchFinder = "both", literals = "on";
  app.add_option("files", files, "raw payload files (rlpayload export -f raw)")->required()->check(CLI::ExistingFile);
  app.add_option("--element-bytes", width, "bytes per element: 2 (bf16/fp16), 4 (fp32), 8")
      ->check(CLI::IsMember({2, 4, 8}));
  app.add_option("--levels", levels, "zstd levels")->delimiter(',');
  app.add_option("--checksum", checksum,
                 "zstd's content checksum in the frame: off (trace format 1.9), on (writers before 1.9), or both")
      ->check(CLI::IsMember({"off", "on", "both"}));
  app.add_option("--match-finder", matchFinder,
                 "planes: the recorder's match finder for byte planes at the fast levels (a 64-entry hash table, "
                 "7-byte matches); level: the zstd level's own; both")
      ->check(CLI::IsMember({"planes", "level", "both"}));
  app.add_option("--literals", literals,
                 "zstd's Huffman coding of literals: on (zstd decides, as the recorder), off (literals stored raw: "
                 "matches only), or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--repeats", repeats, "runs of each, the fastest kept")->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "one JSON object per line");
  CLI11_PARSE(app, argc, argv);

  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  int status = 0;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t n = raw.size();
    // The trace format's own byte planes (ranklens::trace::shuffleBlocks, per 256 KiB block, in place): stored and
    // restored in turn on one buffer, each timed on its own.
    std::vector<uint8_t> back = raw, frame(ZSTD_compressBound(n)), decoded(n);
    double shuffleS = 1e30, unshuffleS = 1e30;
    for (int r = 0; r < repeats; ++r) {
      shuffleS =
          std::min(shuffleS, best(1, [&] { ranklens::trace::shuffleBlocks(back.data(), n, static_cast<int>(width)); }));
      unshuffleS = std::min(
          unshuffleS, best(1, [&] { ranklens::trace::unshuffleBlocks(back.data(), n, static_cast<int>(width)); }));
    }
    std::vector<uint8_t> shuffled = raw;
    ranklens::trace::shuffleBlocks(shuffled.data(), n, static_cast<int>(width));
    if (back != raw) {
      fprintf(stderr, "payload_codec_choices: %s: unshuffle did not give the input back\n", file.c_str());
      return 1;
    }
    for (const bool isShuffled : {false, true}) {
      const std::vector<uint8_t>& src = isShuffled ? shuffled : raw;
      for (const int level : levels)
        for (const bool withChecksum : {false, true})
          for (const bool planesTable : {true, false})
            for (const bool rawLiterals : {false, true}) {
              if (checksum != "both" && withChecksum != (checksum == "on")) continue;
              if (literals != "both" && rawLiterals != (literals == "off")) continue;
              // The planes' own match finder exists only for planes at the fast levels; elsewhere the level's alone.
              const bool applies = isShuffled && ranklens::trace::planesMatchFinder(level);
              if (applies ? (matchFinder != "both" && planesTable != (matchFinder == "planes")) : planesTable) continue;
              size_t size = 0;
              const double compressS = best(repeats, [&] {
                ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
                ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
                ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, withChecksum ? 1 : 0);
                if (planesTable) {
                  ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, ranklens::trace::kPlanesHashLog);
                  ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, ranklens::trace::kPlanesMinMatch);
                }
                if (rawLiterals) ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
                size = ZSTD_compress2(cctx, frame.data(), frame.size(), src.data(), n);
              });
              size_t out = 0;
              const double decompressS =
                  best(repeats, [&] { out = ZSTD_decompressDCtx(dctx, decoded.data(), n, frame.data(), size); });
              const bool ok = !ZSTD_isError(size) && out == n && decoded == src;
              if (!ok) status = 1;
              const double mb = n / 1e6;
              if (json) {
                printf(
                    "{\"file\": \"%s\", \"bytes\": %zu, \"element_bytes\": %zu, \"layout\": \"%s\", \"level\": %d, "
                    "\"ratio\": %.3f, \"compress_mb_s\": %.0f, \"decompress_mb_s\": %.0f, \"shuffle_mb_s\": %.0f, "
                    "\"unshuffle_mb_s\": %.0f, \"zstd_checksum\": %s, \"match_finder\": \"%s\", \"literals\": \"%s\", "
                    "\"roundtrip_ok\": %s}\n",
                    file.c_str(), n, width, isShuffled ? "shuffled" : "raw", level, double(n) / size, mb / compressS,
                    mb / decompressS, mb / shuffleS, mb / unshuffleS, withChecksum ? "true" : "false",
                    planesTable ? "planes" : "level", rawLiterals ? "raw" : "zstd", ok ? "true" : "false");
              } else {
                printf("%s  %-8s level %3d%s%s%s: ratio %.2f, compress %6.0f MB/s, decompress %6.0f MB/s%s\n",
                       file.c_str(), isShuffled ? "shuffled" : "raw", level, withChecksum ? " +xxh64" : "",
                       planesTable ? " (planes' match finder)" : "", rawLiterals ? " (raw literals)" : "",
                       double(n) / size, mb / compressS, mb / decompressS, ok ? "" : "  ROUNDTRIP FAILED");
              }
            }
    }
    if (!json)
      printf("%s  shuffle %.0f MB/s, unshuffle %.0f MB/s\n", file.c_str(), n / 1e6 / shuffleS, n / 1e6 / unshuffleS);
  }
  ZSTD_freeCCtx(cctx);
  ZSTD_freeDCtx(dctx);
  return status;
}
