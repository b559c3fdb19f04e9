// SPDX-License-Identifier: Apache-2.0
// The hang of a trace imported from Flight Recorder dumps, reported where the replayed program reaches it.
#include "hang.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "nccl_fake/debug.h"
#include "session.h"

// at_hang: wait. A debugger clears it to let the replayed rank go on from the hang
// (gdb -p PID -ex 'set var ranklens_hang_wait = 0' -ex continue).
extern "C" {
__attribute__((used)) volatile int ranklens_hang_wait = 0;
}

namespace nccl_fake {
namespace replay {

using ranklens::config::AtHang;

namespace {

// The first `maxLines` lines of `text` (without those that start with a space, if asked), each indented by four.
std::string indentLines(const std::string& text, int maxLines, bool skipIndented) {
  std::string out;
  size_t start = 0;
  for (int shown = 0; start < text.size() && shown < maxLines;) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (end > start && !(skipIndented && text[start] == ' ')) {
      out += "    " + text.substr(start, end - start) + "\n";
      ++shown;
    }
    start = end + 1;
  }
  return out;
}

// The report: where the job hung in the user's terms (process group, call, sequence number), which ranks reached
// it according to the dumps, the dump's Python stack and the replayed call site.
std::string hangReport(const Session& s, const ranklens::trace::FlightRecorderEntry& e) {
  const std::string where = "process group " + e.pgName +
                            (e.pgDesc.empty() || e.pgDesc == "undefined" ? "" : " (" + e.pgDesc + ")") + ", " +
                            e.profilingName + " " + e.inputSizes + " " + e.inputDtypes + ", " +
                            (e.isP2p ? "point-to-point sequence number " + std::to_string(e.p2pSeqId)
                                     : "collective sequence number " + std::to_string(e.collectiveSeqId));
  const auto& imported = s.recording->manifest().imported;
  auto diag = imported.find("diagnosis");
  // The diagnosis's own lines (one per process group); its stacks (indented) are left out, the dump's stack follows.
  std::string ranks = diag == imported.end() ? "" : indentLines(diag->second, 64, /*skipIndented=*/true);
  ranks = ranks.empty() ? "  (only this rank's dump was imported: import every rank's to see which reached it)\n"
                        : "  according to the dumps:\n" + ranks;
  const std::string stack =
      e.frames.empty() ? "    (the dump has no stack: a JSON dump)\n" : indentLines(e.frames, 16, false);
  const char* then = s.hang.at == AtHang::kStop
                         ? "The call fails (ncclInvalidUsage) here. RANKLENS_AT_HANG=wait blocks here for a debugger; "
                           "continue replays on."
                     : s.hang.at == AtHang::kWait ? ""
                                                  : "Replaying on (at_hang: continue).";
  char head[160];
  std::snprintf(head, sizeof head,
                "replay: rank %d reached the call its Flight Recorder dump left %s: where the job hung",
                s.recording->manifest().rank, e.state.c_str());
  return std::string(head) + "\n  " + where + "\n" + ranks + "  the dump's Python stack (innermost first):\n" + stack +
         "  replayed call site:" + callSite() + "\n  " + then;
}

// at_hang: wait. Blocks until a debugger clears ranklens_hang_wait.
void waitForDebugger() {
  ranklens_hang_wait = 1;
  const int pid = static_cast<int>(getpid());
  std::fprintf(stderr,
               "ranklens: waiting at the hang for a debugger: pid %d. py-spy dump --pid %d shows the Python stack; "
               "gdb -p %d -ex 'set var ranklens_hang_wait = 0' -ex continue lets the call fail and the program go "
               "on\n",
               pid, pid, pid);
  while (ranklens_hang_wait != 0) usleep(100000);
}

}  // namespace

bool goesOnPastHang(Session* s, const ranklens::trace::RecordedCall& rc, std::unique_lock<std::mutex>* lock) {
  const AtHang at = s->hang.at;
  if (s->hang.reported && at == AtHang::kContinue) return true;
  s->hang.reported = true;
  lock->unlock();
  // The one thing this replay is for: said whatever NCCL_DEBUG is (WARN also makes it ncclGetLastError's text,
  // which PyTorch puts in the error it raises).
  SAY("%s", hangReport(*s, *rc.flightRecorder).c_str());
  if (s->hang.breakAt) {
    std::fprintf(stderr, "ranklens: break_at: hang: raising SIGTRAP (under a debugger: continue to go on)\n");
    raise(SIGTRAP);
  }
  if (at == AtHang::kWait) waitForDebugger();
  lock->lock();
  return at == AtHang::kContinue;
}

}  // namespace replay
}  // namespace nccl_fake
