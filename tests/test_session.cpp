// core/session: the studio's training worker. Commands (pause, step-once, set-kappa, resume,
// stop, a sweep) are checked through the snapshots and through what the run store recorded.
// Waits poll the snapshot with a generous deadline; no assertion depends on timing.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/session/session.h"
#include "core/store/run_store.h"
#include "datasets/registry.h"
#include "test_util.h"

namespace ftx {
namespace {

constexpr auto kDeadline = std::chrono::seconds(120);  // a loaded 2-core CI machine is slow

TrainRequest tiny_request(const std::string& db, const std::string& run, int steps) {
  TrainRequest r;
  r.db_path = db, r.run = run;
  r.shape.preset = "tiny", r.shape.latent_bits = 4;
  r.train.preset = "tiny", r.train.steps = steps, r.train.batch = 4;
  r.train.eval_every = 0, r.train.checkpoint_every = 0;
  r.threads = 1;
  return r;
}

// Polls until pred(snapshot) holds; returns the snapshot (the test fails at the deadline).
template <class Pred>
SessionSnapshot wait_until(const Session& s, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + kDeadline;
  SessionSnapshot snap = s.snapshot();
  while (!pred(snap)) {
    if (std::chrono::steady_clock::now() > end) {
      ADD_FAILURE() << "timed out in state " << session_state_name(snap.state) << " at step " << snap.step;
      return snap;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    snap = s.snapshot();
  }
  return snap;
}

class SessionTest : public test::TempDirTest {
 protected:
  SessionTest() : TempDirTest("ftx_session_") {}
  std::string db() { return in_dir("runs.db"); }
};

TEST_F(SessionTest, PauseStepOnceSetKappaResumeFinish) {
  Session s(make_dataset);
  ASSERT_TRUE(s.start({tiny_request(db(), "a", 30)}).ok());
  s.pause();
  SessionSnapshot p = wait_until(s, [](const SessionSnapshot& x) { return x.state == SessionState::Paused; });
  const int paused_at = p.step;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(s.snapshot().step, paused_at) << "a paused session must not step";
  s.step_once();
  p = wait_until(s,
                 [&](const SessionSnapshot& x) { return x.step == paused_at + 1 && x.state == SessionState::Paused; });
  EXPECT_EQ(p.step, paused_at + 1);
  const float kNewKappa = 0.5f;
  s.set_kappa(kNewKappa);
  s.resume();
  p = wait_until(s, [](const SessionSnapshot& x) { return x.state == SessionState::Finished; });
  EXPECT_EQ(p.step, 30);
  EXPECT_FLOAT_EQ(static_cast<float>(p.kappa_nats), kNewKappa);
  EXPECT_FALSE(s.busy());

  auto store = RunStore::open(db());
  ASSERT_TRUE(store.ok());
  auto info = store->find_run("a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status, "done");
  auto kappa = store->metrics(info->id, "kappa");
  ASSERT_TRUE(kappa.ok());
  ASSERT_EQ(kappa->size(), 30u) << "every step, step-once included, is recorded";
  const int changed_after = paused_at + 1;  // applied before the first step after the resume
  for (const MetricRow& r : *kappa)
    EXPECT_FLOAT_EQ(static_cast<float>(r.value), r.step <= changed_after ? 0.08664340f : kNewKappa)
        << "step " << r.step;
  auto events = store->events(info->id);
  ASSERT_TRUE(events.ok());
  bool saw = false;
  for (const EventRow& e : *events)
    if (e.kind == "kappa") {
      saw = true;
      EXPECT_EQ(e.step, changed_after);
      EXPECT_FLOAT_EQ(nlohmann::json::parse(e.payload_json)["to_nats"].get<float>(), kNewKappa);
    }
  EXPECT_TRUE(saw) << "a live kappa change is an event";
}

TEST_F(SessionTest, StopCheckpointsAndDropsTheQueue) {
  Session s(make_dataset);
  ASSERT_TRUE(s.start({tiny_request(db(), "long", 100000), tiny_request(db(), "next", 10)}).ok());
  wait_until(s, [](const SessionSnapshot& x) { return x.step >= 3; });
  s.stop();
  SessionSnapshot p = wait_until(s, [](const SessionSnapshot& x) { return x.state == SessionState::Stopped; });
  EXPECT_EQ(p.run, "long");
  EXPECT_EQ(p.queued, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(s.busy());
  auto store = RunStore::open(db());
  ASSERT_TRUE(store.ok());
  auto info = store->find_run("long");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status, "stopped");
  auto cks = store->checkpoints(info->id);
  ASSERT_TRUE(cks.ok());
  ASSERT_EQ(cks->size(), 1u);
  EXPECT_EQ(cks->back().step, p.step);
  EXPECT_FALSE(store->find_run("next").ok()) << "stop drops the queued runs";
}

TEST_F(SessionTest, SweepRunsOneAfterAnother) {
  Session s(make_dataset);
  std::vector<TrainRequest> sweep;
  for (double bits : {1.0 / 64, 1.0}) {
    TrainRequest r = tiny_request(db(), "k" + std::to_string(bits), 5);
    r.train.kappa_nats = static_cast<float>(bits_to_nats(bits));
    sweep.push_back(r);
  }
  ASSERT_TRUE(s.start(sweep).ok());
  EXPECT_FALSE(s.start({tiny_request(db(), "other", 5)}).ok()) << "one session trains one queue at a time";
  wait_until(s, [&](const SessionSnapshot& x) { return x.run == sweep[1].run && x.state == SessionState::Finished; });
  auto store = RunStore::open(db());
  ASSERT_TRUE(store.ok());
  auto runs = store->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*runs)[i].name, sweep[i].run) << "queued order";
    EXPECT_EQ((*runs)[i].status, "done");
  }
}

// A precision the device cannot do (tf32 on the CPU) or an unknown one fails the run with the
// reason, before anything is trained.
TEST_F(SessionTest, PrecisionTheDeviceLacksFailsTheRunWithItsReason) {
  for (const auto& [precision, needle] : {std::pair{"tf32", "no tf32"}, std::pair{"fp8", "unknown GEMM precision"}}) {
    Session s(make_dataset);
    TrainRequest r = tiny_request(db(), std::string("p_") + precision, 5);
    r.precision = precision;
    ASSERT_TRUE(s.start({r}).ok());
    const SessionSnapshot snap =
        wait_until(s, [](const SessionSnapshot& x) { return x.state == SessionState::Failed; });
    EXPECT_NE(snap.message.find(needle), std::string::npos) << snap.message;
    EXPECT_EQ(snap.step, 0);
  }
}

TEST_F(SessionTest, BadRequestsAreRefusedBeforeAnythingIsQueued) {
  Session s(make_dataset);
  TrainRequest bad_kappa = tiny_request(db(), "b", 5);
  bad_kappa.train.kappa_nats = -1;
  Status st = s.start({tiny_request(db(), "ok", 5), bad_kappa});
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(s.busy());
  TrainRequest bad_data = tiny_request(db(), "c", 5);
  bad_data.train.dataset = "nope";
  EXPECT_FALSE(s.start({bad_data}).ok());
  TrainRequest bad_width = tiny_request(db(), "d", 5);
  bad_width.shape.dim = 30, bad_width.shape.heads = 4;
  st = s.start({bad_width});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("multiple"), std::string::npos) << st.error().message;
  EXPECT_FALSE(s.start({tiny_request(db(), "dup", 5), tiny_request(db(), "dup", 5)}).ok());
  ASSERT_TRUE(s.start({tiny_request(db(), "once", 2)}).ok());
  wait_until(s, [](const SessionSnapshot& x) { return x.state == SessionState::Finished; });
  st = s.start({tiny_request(db(), "once", 2)});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("already exists"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace ftx
