// SPDX-License-Identifier: Apache-2.0
// Loading the replay session: the settings each part needs, the recording of replay_trace checked against this
// process, then each part's loader (estimates, holds, restore) and the line that says what is replayed and how.
#include "session.h"

#include <string>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"

namespace nccl_fake {
namespace replay {

using ranklens::Status;
using ranklens::config::Fidelity;
using ranklens::config::OnMismatch;

Session* loaded = nullptr;

namespace {

std::once_flag loadOnce;
Status failure;

// A setting as the configuration prints it (e.g. hold_shared_bytes: auto, sm or bytes).
std::string settingText(const ranklens::config::Settings& settings, const std::string& key) {
  for (const auto& row : ranklens::config::describe(settings))
    if (row.key == key) return row.value;
  return "?";
}

// Whether the recording may be replayed by this process: its world size, and a recording that left calls out.
Status checkRecording(const ranklens::trace::Recording& recording, const ranklens::config::Context& job) {
  const auto& m = recording.manifest();
  const int worldSize = job.world_size;
  if (m.world_size > 0 && worldSize > 0 && m.world_size != worldSize)
    return Status::invalidUsage("replay_trace " + recording.directory() + " was recorded with WORLD_SIZE " +
                                std::to_string(m.world_size) + " but this process has WORLD_SIZE " +
                                std::to_string(worldSize) + "; replay with --world-size " +
                                std::to_string(m.world_size) + " or pick the matching trace");
  namespace counter = ranklens::trace::counter;
  if (const uint64_t unrecorded = ranklens::trace::counterValue(m, counter::kCallsUnrecorded).value_or(0);
      unrecorded > 0)
    return Status::invalidUsage("replay_trace " + recording.directory() +
                                " was recorded with record_alternate_steps "
                                "(a benchmark setting): " +
                                std::to_string(unrecorded) +
                                " of its calls were "
                                "forwarded without being recorded, so it cannot be replayed; record again without "
                                "RANKLENS_RECORD_ALTERNATE_STEPS");
  return Status::ok();
}

// What the recording lacks or where it differs from this machine, said before the job spends its time.
void warnAboutRecording(const Session& s) {
  const auto& m = s.recording->manifest();
  if (m.mode != "record")
    WARN("replay_trace %s was written in %s mode, not record mode: it has no recorded durations or payloads",
         s.recording->directory().c_str(), m.mode.c_str());
  for (const auto& p : s.recording->problems())
    WARN("replay_trace: %s (records before it are replayed)", p.describe().c_str());
  if (s.fidelity == Fidelity::kStructure) return;
  ranklens::trace::Manifest here;
  ranklens::trace::describeHost(&here);
  std::string uuid;
  Runtime::get().device().describe(&here.gpu_name, &uuid);
  const std::string machines = ranklens::trace::machineDifference(m, here);
  if (!machines.empty())
    WARN(
        "replay: recorded on another kind of machine (%s): a host-bound step runs at this machine's speed, so "
        "its step times may differ from the recording's for that alone (docs/fidelity.md section 4)",
        machines.c_str());
  if (s.fidelity == Fidelity::kValue) {
    // A value replay of a recording that lacks payloads runs, but its values are not the recorded run's.
    const std::string gaps = ranklens::trace::describePayloadGaps(*s.recording);
    if (!gaps.empty()) WARN("replay: %s", gaps.c_str());
  }
}

// The recording of `replay_trace` into the session, checked against this process, its damage and machine reported.
Status openRecording(Session* s, const ranklens::config::Settings& st) {
  std::string error;
  const ranklens::config::Context job = ranklens::config::readContext();
  error = ranklens::trace::Recording::open(st.replay_trace, job.rank_number, &s->recording).message();
  if (!s->recording) return Status::invalidUsage("replay_trace: " + error);
  RL_CHECK(checkRecording(*s->recording, job));
  warnAboutRecording(*s);
  return Status::ok();
}

// The one line that says what is replayed, at what fidelity and with which holds.
void logSession(const Session& s, const ranklens::config::Settings& st) {
  const bool recorded = s.recording != nullptr;
  const std::string what = recorded ? s.recording->directory()
                                    : "no recording: every call held for its estimate from history " + st.history +
                                          " (" + std::to_string(s.estimates.history.samples.size()) + " samples), " +
                                          std::to_string(st.ranks_per_node) + " ranks per node";
  const ranklens::trace::Manifest none;
  const ranklens::trace::Manifest& m = recorded ? s.recording->manifest() : none;
  const auto& cal = s.holds.calibration;
  INFO(kSubInit | kSubRanklens,
       "replaying %s (rank %d of %d, %zu calls, %zu timed, %zu payloads, %zu communicators) at %s fidelity, "
       "on_mismatch %s; holds %d x %d threads, shared %s, from %s; hold fixed cost %ld ns, copy %ld ns + %.4f ns/byte",
       what.c_str(), m.rank, m.world_size, recorded ? s.recording->callCount() : 0,
       recorded ? s.recording->timedCount() : 0, recorded ? s.recording->payloadOrder().size() : 0,
       recorded ? s.recording->comms().size() : 0, ranklens::config::toString(s.fidelity),
       ranklens::config::toString(s.policy), st.hold_blocks, st.hold_threads,
       settingText(st, "hold_shared_bytes").c_str(), ranklens::config::toString(st.hold_from),
       static_cast<long>(cal.holdFixedNs), static_cast<long>(cal.copyFixedNs), cal.copyNsPerByte);
}

// The session for these settings, or null with `failure` set when its recording or history cannot be replayed (every
// such failure is ncclInvalidUsage at the first communicator, as the real job's settings are what is wrong).
std::unique_ptr<Session> makeSession(const ranklens::config::Settings& st) {
  const bool recorded = !st.replay_trace.empty();
  auto s = std::make_unique<Session>();
  s->fidelity = st.fidelity;
  s->policy = recorded ? st.on_mismatch : OnMismatch::kEstimate;  // no recording: every call is one it lacks
  s->matching.window = st.resync_window;
  s->hang.at = st.at_hang;
  s->hang.breakAt = st.break_hang;
  s->restore.onError = st.on_payload_error;
  s->restore.controlPayloadBytes = st.payload_max_bytes;
  if (recorded) failure = openRecording(s.get(), st);
  if (failure.isOk()) failure = loadEstimates(&s->estimates, st, s->recording.get());
  if (!failure.isOk()) return nullptr;
  loadHolds(s.get(), st, recorded);
  startPrefetcher(s.get(), st);
  logSession(*s, st);
  return s;
}

}  // namespace

Session* load() {
  std::call_once(loadOnce, [] {
    Runtime& rt = Runtime::get();
    const auto& st = rt.settings();
    if (st.mode != ranklens::config::Mode::kReplay) return;
    // Without a recording only estimated timing has anything to replay (Runtime refuses other fidelities there).
    if (st.replay_trace.empty() && st.fidelity == Fidelity::kStructure) return;
    loaded = makeSession(st).release();
    if (loaded != nullptr) rt.setBeforeClose([] { finish(); });
  });
  return loaded;
}

const Status& loadFailure() { return failure; }

bool active() {
  static const bool on = load() != nullptr;
  return on;
}

}  // namespace replay
}  // namespace nccl_fake
