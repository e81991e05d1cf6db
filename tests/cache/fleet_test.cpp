// The remote tier against a real redis-server: fleet-wide single flight across "machines"
// (processes with their own cache directories), a new machine warming from the fleet, faults
// that cost one warning, and remote entries that must not be trusted.
#include "cache/cache.h"
#include "cache/remote/backend.h"
#include "cache/remote/envelope.h"
#include "cache/remote/redis.h"
#include "test_util.h"
#include "tests/support/redis_server.h"
#include "worker_util.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace kiln::cache {
namespace {

using kiln::testing::RedisServer;
using testing::contents_for;
using testing::fields_for;
using testing::spawn_worker;
using testing::TempDir;
using testing::wait_worker;
using testing::Worker;

#define REQUIRE_REDIS(server)                                               \
  if (!(server).installed()) GTEST_SKIP() << "redis-server is not installed"; \
  ASSERT_TRUE((server).started()) << (server).error()

// Per-test state: a scratch directory, a server, warnings by cache.
class Fleet : public ::testing::Test {
protected:
  Options options_for(const std::string& machine, std::vector<std::string>* warnings) {
    Options o = testing::options_in(tmp.sub(machine), warnings);
    o.remote = server.url();
    o.remote_op_timeout = std::chrono::milliseconds(300);
    o.remote_lease = std::chrono::milliseconds(1000);
    // Answers of 150 ms on a loaded machine are not what these tests are about (the slow ones
    // below set it).
    o.remote_slow_in_a_row = 0;
    return o;
  }
  // A cache for which every answer is slow (Options::remote_slow_after 0).
  Options every_answer_slow(const std::string& machine, std::vector<std::string>* warnings) {
    Options o = options_for(machine, warnings);
    o.remote_slow_in_a_row = 3;
    o.remote_slow_after = std::chrono::milliseconds(0);
    return o;
  }
  // The raw value the fleet stores for `key` (prefix "kiln:"), and a way to replace it.
  std::unique_ptr<remote::Backend> direct() {
    return remote::make_redis_backend(remote::parse_redis_url(server.url()).value());
  }
  static std::string join(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }

  TempDir tmp;
  RedisServer server;
  std::vector<KeyField> fields = fields_for("a");
  std::string key = make_key(fields);
  Producer producer_a = [this]() -> Expected<Contents> {
    ++produced;
    return contents_for("a");
  };
  int produced = 0;
};

TEST_F(Fleet, EightMachinesMissingOneKeyCompileItOnce) {
  REQUIRE_REDIS(server);
  std::vector<Worker> workers;
  for (int m = 0; m < 8; ++m)
    workers.push_back(spawn_worker(tmp, "m" + std::to_string(m),
                                   {"dir=" + tmp.sub("m" + std::to_string(m)),
                                    "counter=" + tmp.sub("count"), "keys=1", "produce_ms=300",
                                    "lease_ms=2000", "remote=" + server.url()}));
  int produced_lines = 0, remote_lines = 0;
  for (const Worker& w : workers) {
    EXPECT_EQ(wait_worker(w), 0) << join(testing::lines_of(w.err));
    for (const std::string& line : testing::lines_of(w.out)) {
      produced_lines += line.rfind("produced ", 0) == 0;
      remote_lines += line.rfind("remote ", 0) == 0;
    }
  }
  EXPECT_EQ(testing::lines_of(tmp.sub("count")).size(), 1u) << "one NVRTC compile in all";
  EXPECT_EQ(produced_lines, 1);
  EXPECT_EQ(remote_lines, 7) << "every other machine got the entry from the fleet";
}

TEST_F(Fleet, EightMachinesTwentyKeysInShuffledOrdersCompileEachKeyOnce) {
  REQUIRE_REDIS(server);
  std::vector<Worker> workers;
  for (int m = 0; m < 8; ++m)
    workers.push_back(spawn_worker(
        tmp, "m" + std::to_string(m),
        {"dir=" + tmp.sub("m" + std::to_string(m)), "counter=" + tmp.sub("count"), "keys=20",
         "rotate=" + std::to_string(m * 7), "produce_ms=20", "lease_ms=2000",
         "remote=" + server.url()}));
  for (const Worker& w : workers) EXPECT_EQ(wait_worker(w), 0) << join(testing::lines_of(w.err));
  auto counts = testing::count_lines(tmp.sub("count"));
  EXPECT_EQ(counts.size(), 20u);
  for (const auto& [k, n] : counts) EXPECT_EQ(n, 1) << "key " << k << " compiled " << n << " times";
}

TEST_F(Fleet, KilledCompilerLosesItsLeaseAndAnotherMachineTakesOver) {
  REQUIRE_REDIS(server);
  std::vector<std::string> common = {"counter=" + tmp.sub("count"), "keys=1", "lease_ms=600",
                                     "remote=" + server.url(), "lock_wait_ms=20000"};
  auto args = [&](const std::string& m, std::vector<std::string> more) {
    more.push_back("dir=" + tmp.sub(m));
    more.insert(more.end(), common.begin(), common.end());
    return more;
  };
  Worker stuck = spawn_worker(tmp, "stuck", args("m0", {"mode=hang-produce", "marker=" + tmp.sub("ready")}));
  ASSERT_TRUE(testing::wait_for_file(tmp.sub("ready")));
  auto start = std::chrono::steady_clock::now();
  Worker next = spawn_worker(tmp, "next", args("m1", {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_TRUE(testing::lines_of(next.out).empty()) << "waits while the lease is renewed";
  ::kill(stuck.pid, SIGKILL);
  (void)wait_worker(stuck);
  EXPECT_EQ(wait_worker(next, std::chrono::seconds(15)), 0) << join(testing::lines_of(next.err));
  auto lines = testing::lines_of(next.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("produced ", 0), 0u) << lines[0];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// A remote hit is stored locally off the caller's path; closing the cache at once loses nothing.
TEST_F(Fleet, ARemoteHitIsStoredLocallyEvenWhenTheCacheClosesAtOnce) {
  REQUIRE_REDIS(server);
  std::vector<std::string> w1, w2, w3;
  {
    auto build = Cache::open(options_for("build", &w1));
    ASSERT_EQ(build->get_or_create(key, fields, producer_a)->source, FetchSource::produced);
  }
  for (int i = 0; i < 5; ++i) {
    std::string machine = "fresh" + std::to_string(i);
    {
      auto fresh = Cache::open(options_for(machine, &w2));
      auto got = fresh->get_or_create(key, fields, producer_a);
      ASSERT_TRUE(got.ok());
      ASSERT_EQ(got->source, FetchSource::remote_hit);
    }
    Options offline = testing::options_in(tmp.sub(machine), &w3);  // no remote tier now
    auto local = Cache::open(offline);
    Lookup found = local->lookup(key, fields);
    ASSERT_TRUE(found.hit()) << machine << ": the remote hit was not stored locally";
    EXPECT_EQ(found.entry.payloads, contents_for("a").payloads);
  }
  EXPECT_EQ(produced, 1);
  EXPECT_TRUE(w2.empty()) << join(w2);
}

TEST_F(Fleet, ANewMachineHitsRemotelyThenLocally) {
  REQUIRE_REDIS(server);
  std::vector<std::string> w1, w2;
  {
    auto build = Cache::open(options_for("build", &w1));
    ASSERT_EQ(build->get_or_create(key, fields, producer_a)->source, FetchSource::produced);
  }
  auto fresh = Cache::open(options_for("fresh", &w2));
  auto first = fresh->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->source, FetchSource::remote_hit);
  EXPECT_EQ(first->entry.payloads, contents_for("a").payloads);
  auto second = fresh->get_or_create(key, fields, producer_a);
  EXPECT_EQ(second->source, FetchSource::hit);
  EXPECT_EQ(produced, 1);
  auto stats = fresh->stats();
  EXPECT_EQ(stats->remote_hits, 1u);
  EXPECT_EQ(stats->hits, 1u);
  EXPECT_TRUE(w1.empty() && w2.empty()) << join(w1) << join(w2);
  // kiln push / pull: a third machine pulls every entry the fleet has.
  auto third = Cache::open(options_for("third", &w2));
  auto pulled = third->pull(std::nullopt);
  ASSERT_TRUE(pulled.ok()) << pulled.error().message;
  EXPECT_EQ(pulled->pulled, 1u);
  EXPECT_TRUE(third->read(key).hit());
}

TEST_F(Fleet, PushUploadsEveryLocalEntryAndPullFiltersByGraph) {
  REQUIRE_REDIS(server);
  std::vector<std::string> warnings;
  Options offline = testing::options_in(tmp.sub("build"), &warnings);
  offline.remote = "";
  {
    auto build = Cache::open(offline);
    for (const char* g : {"a", "b", "c"})
      ASSERT_TRUE(build->store(make_key(fields_for(g)), fields_for(g), contents_for(g)).ok());
  }
  auto build = Cache::open(options_for("build", &warnings));
  auto pushed = build->push();
  ASSERT_TRUE(pushed.ok());
  EXPECT_EQ(pushed->pushed, 3u);
  auto node = Cache::open(options_for("node", &warnings));
  auto pulled = node->pull(std::string("h-b"));
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->pulled, 1u);
  EXPECT_TRUE(node->read(make_key(fields_for("b"))).hit());
  EXPECT_FALSE(node->read(make_key(fields_for("a"))).hit());
  EXPECT_TRUE(warnings.empty()) << join(warnings);
}

// Faults: every compile succeeds, with one warning per process.
TEST_F(Fleet, RedisKilledMidRunCostsOneWarning) {
  REQUIRE_REDIS(server);
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_for("m", &warnings));
  ASSERT_TRUE(cache->get_or_create(key, fields, producer_a).ok());
  server.kill_now();
  for (const char* g : {"b", "c", "d"}) {
    auto f = fields_for(g);
    auto got = cache->get_or_create(make_key(f), f, [&] { return Expected<Contents>(contents_for(g)); });
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->source, FetchSource::produced);
  }
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find("remote cache"), std::string::npos);
  EXPECT_GE(cache->stats()->remote_errors, 1u);
}

TEST_F(Fleet, StoppedRedisTimesOutOnceThenIsSkipped) {
  REQUIRE_REDIS(server);
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_for("m", &warnings));
  ASSERT_TRUE(cache->get_or_create(key, fields, producer_a).ok());  // connected
  server.pause();
  auto start = std::chrono::steady_clock::now();
  for (const char* g : {"b", "c", "d", "e"}) {
    auto f = fields_for(g);
    auto got = cache->get_or_create(make_key(f), f, [&] { return Expected<Contents>(contents_for(g)); });
    ASSERT_TRUE(got.ok());
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  server.resume();
  EXPECT_LT(elapsed, std::chrono::milliseconds(1500)) << "one op timeout (300 ms), then skipped";
  EXPECT_EQ(warnings.size(), 1u) << join(warnings);
}

// A server that answers, but only after most of the operation timeout, cost every lookup most
// of a second and was never marked down. Three slow answers in a row now mark it down; a prompt
// one in between starts the count again.
TEST_F(Fleet, RedisThatAnswersSlowlyIsMarkedDownAfterThreeSlowAnswersInARow) {
  REQUIRE_REDIS(server);
  std::vector<std::string> warnings;
  Options o = options_for("m", &warnings);
  o.remote_op_timeout = std::chrono::milliseconds(1000);
  o.remote_slow_in_a_row = 3;
  auto cache = Cache::open(o);
  int n = 0;
  // A lookup of a key nobody has (a local miss, then a remote get), the server stopped for
  // `hold` while it asks.
  auto lookup_held = [&](std::chrono::milliseconds hold) {
    auto f = fields_for("slow" + std::to_string(n++));
    auto start = std::chrono::steady_clock::now();  // before the hold begins: took >= hold
    server.pause();
    std::thread resume([&] {
      std::this_thread::sleep_for(hold);
      server.resume();
    });
    EXPECT_FALSE(cache->lookup(make_key(f), f).hit());
    auto took = std::chrono::steady_clock::now() - start;
    resume.join();
    return took;
  };
  const auto slow = std::chrono::milliseconds(650);
  EXPECT_GE(lookup_held(slow), slow);
  EXPECT_GE(lookup_held(slow), slow);
  EXPECT_LT(lookup_held(std::chrono::milliseconds(0)), std::chrono::milliseconds(400));
  EXPECT_GE(lookup_held(slow), slow);
  EXPECT_GE(lookup_held(slow), slow);
  EXPECT_TRUE(warnings.empty()) << join(warnings);
  EXPECT_EQ(cache->stats()->remote_errors, 0u);
  EXPECT_GE(lookup_held(slow), slow);  // the third in a row
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find(cache->remote_description() +
                             " answered slowly: 3 operations in a row took 500 ms or more"),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(cache->stats()->remote_errors, 1u);
  // Marked down: the next lookup does not ask.
  EXPECT_LT(lookup_held(slow), std::chrono::milliseconds(400));
}

// What the slow rule leaves alone: push and pull (their own budget bounds them), and the put of
// an entry compiled under this machine's lease (the fleet waits for it). Every answer counts as
// slow here, so without those exceptions the tier would be down after three operations.
TEST_F(Fleet, BulkCommandsAndALeasedPutAreNotStoppedBySlowAnswers) {
  REQUIRE_REDIS(server);
  std::vector<std::string> warnings;
  Options offline = testing::options_in(tmp.sub("build"), &warnings);
  offline.remote = "";
  const std::vector<std::string> graphs = {"a", "b", "c", "d", "e"};
  {
    auto build = Cache::open(offline);
    for (const std::string& g : graphs)
      ASSERT_TRUE(build->store(make_key(fields_for(g)), fields_for(g), contents_for(g)).ok());
  }
  auto pushed = Cache::open(every_answer_slow("build", &warnings))->push();
  ASSERT_TRUE(pushed.ok()) << pushed.error().message;
  EXPECT_EQ(pushed->pushed, graphs.size());
  auto pulled = Cache::open(every_answer_slow("node", &warnings))->pull(std::nullopt);
  ASSERT_TRUE(pulled.ok()) << pulled.error().message;
  EXPECT_EQ(pulled->pulled, graphs.size());
  EXPECT_TRUE(warnings.empty()) << join(warnings);
  // A miss: a get, the lease, a get under it (the third slow answer marks the tier down), then
  // the compile, whose entry is still put for the machines waiting on the lease.
  auto other = fields_for("leased");
  auto compiler = Cache::open(every_answer_slow("compiler", &warnings));
  auto got = compiler->get_or_create(make_key(other), other,
                                     [] { return Expected<Contents>(contents_for("leased")); });
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->source, FetchSource::produced);
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find("answered slowly"), std::string::npos) << warnings[0];
  EXPECT_FALSE(direct()->get(make_key(other))->value_or("").empty())
      << "the leased entry was put although the tier was marked down";
}

TEST_F(Fleet, AbsentRedisCostsAtMostTheConnectTimeout) {
  REQUIRE_REDIS(server);
  server.stop();  // nothing listens on its port now
  std::vector<std::string> warnings;
  auto start = std::chrono::steady_clock::now();
  auto cache = Cache::open(options_for("m", &warnings));
  ASSERT_TRUE(cache->get_or_create(key, fields, producer_a).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(800));
  EXPECT_EQ(warnings.size(), 1u) << join(warnings);
}

TEST_F(Fleet, FullRedisRefusesPutsAndCompilesGoOn) {
  RedisServer full({"--maxmemory", "1", "--maxmemory-policy", "noeviction"});
  REQUIRE_REDIS(full);
  std::vector<std::string> warnings;
  Options o = testing::options_in(tmp.sub("m"), &warnings);
  o.remote = full.url();
  auto cache = Cache::open(o);
  for (const char* g : {"a", "b", "c"}) {
    auto f = fields_for(g);
    auto got = cache->get_or_create(make_key(f), f, [&] { return Expected<Contents>(contents_for(g)); });
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->source, FetchSource::produced);
  }
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find("OOM"), std::string::npos) << warnings[0];
}

// Trust: a remote value that is damaged, foreign or not signed as the fleet requires is rejected,
// counted, recompiled and overwritten.
class FleetTrust : public Fleet {
protected:
  void SetUp() override {
    REQUIRE_REDIS(server);
    Options o = options_for("build", &warnings);
    o.remote_key = "fleet secret 0123";
    ASSERT_TRUE(Cache::open(o)->get_or_create(key, fields, producer_a).ok());
    ASSERT_EQ(produced, 1);
    value = direct()->get(key)->value_or("");
  }
  // A new machine reads the fleet's value for `key`; answers how it was served.
  FetchSource fetch_on_new_machine(const std::string& machine, const std::string& secret) {
    Options o = options_for(machine, &warnings);
    if (secret.empty())
      o.remote_key.reset();  // no secret
    else
      o.remote_key = secret;
    auto got = Cache::open(o)->get_or_create(key, fields, producer_a);
    EXPECT_TRUE(got.ok());
    rejected += Cache::open(o)->stats()->remote_rejected;
    return got.ok() ? got->source : FetchSource::produced_uncached;
  }
  void expect_rejected_then_repaired(const std::string& why) {
    EXPECT_EQ(fetch_on_new_machine("n1", "fleet secret 0123"), FetchSource::produced);
    EXPECT_EQ(produced, 2) << "recompiled";
    EXPECT_EQ(rejected, 1u);
    ASSERT_FALSE(warnings.empty());
    EXPECT_NE(warnings.back().find("rejected remote entry " + key + ": " + why), std::string::npos)
        << join(warnings);
    // Overwritten: the next machine is served by the fleet again.
    EXPECT_EQ(fetch_on_new_machine("n2", "fleet secret 0123"), FetchSource::remote_hit);
    EXPECT_EQ(produced, 2);
  }
  void replace(const std::string& bytes) { ASSERT_TRUE(direct()->put(key, bytes, 0).ok()); }

  std::vector<std::string> warnings;
  std::string value;
  uint64_t rejected = 0;
};

TEST_F(FleetTrust, SignedEntryIsServed) {
  EXPECT_EQ(fetch_on_new_machine("n0", "fleet secret 0123"), FetchSource::remote_hit);
  EXPECT_EQ(produced, 1);
}

TEST_F(FleetTrust, FlippedByteIsRejected) {
  value[value.size() / 2] = static_cast<char>(~value[value.size() / 2]);
  replace(value);
  expect_rejected_then_repaired("badly signed");
}

TEST_F(FleetTrust, TruncatedValueIsRejected) {
  replace(value.substr(0, value.size() - 100));
  expect_rejected_then_repaired("badly signed");
}

TEST_F(FleetTrust, AnotherKeysEntryIsRejected) {
  Options o = options_for("other", &warnings);
  o.remote_key = "fleet secret 0123";
  auto other = fields_for("b");
  ASSERT_TRUE(Cache::open(o)
                  ->get_or_create(make_key(other), other,
                                  [] { return Expected<Contents>(contents_for("b")); })
                  .ok());
  replace(direct()->get(make_key(other))->value_or(""));
  expect_rejected_then_repaired("badly signed");
}

TEST_F(FleetTrust, UnsignedEntryIsRejectedWhileAKeyIsSet) {
  ASSERT_TRUE(direct()->remove(key).ok());
  Options unsigned_writer = options_for("rogue", &warnings);
  unsigned_writer.remote_key.reset();  // no secret: entries go unsigned
  ASSERT_TRUE(Cache::open(unsigned_writer)->store(key, fields, contents_for("a")).ok());
  expect_rejected_then_repaired("unsigned");
}

TEST_F(FleetTrust, EntrySignedWithAnotherSecretIsRejected) {
  EXPECT_EQ(fetch_on_new_machine("n0", "another secret 0123"), FetchSource::produced);
  EXPECT_EQ(rejected, 1u);
}

TEST_F(FleetTrust, WithoutASecretADamagedRecordIsStillCaughtByItsChecksum) {
  value[value.size() - 20] = static_cast<char>(~value[value.size() - 20]);
  replace(value);
  EXPECT_EQ(fetch_on_new_machine("n1", ""), FetchSource::produced);
  EXPECT_EQ(rejected, 1u);
}

// Holes a writable Redis opened before: host code taken unsigned, replies of any size, keys of
// another type, stale leases, and keyless machines replacing signed entries.
class FleetLimits : public Fleet {
protected:
  void SetUp() override { REQUIRE_REDIS(server); }
  // An entry holding host machine code, as the CPU target's.
  static Contents native_contents(const std::string& graph) {
    Contents c = contents_for(graph);
    c.payloads.push_back({k_payload_object, "\x7f" "ELF machine code of " + graph});
    return c;
  }
  Options signed_options(const std::string& machine) {
    Options o = options_for(machine, &warnings);
    o.remote_key = "fleet secret 0123";
    return o;
  }
  // The signed value under `k` with its signature taken off: what a writer with access to Redis
  // but not to the secret can make of it.
  std::string unsigned_copy(const std::string& k) {
    std::string value = direct()->get(k)->value_or("");
    EXPECT_EQ(value.rfind(remote::signed_prefix(), 0), 0u);
    std::string out = value.substr(0, 8) + std::string(8, '\0');
    return out + value.substr(remote::signed_prefix().size() + 32);
  }
  uint64_t rejected(const Options& o) { return Cache::open(o)->stats()->remote_rejected; }
  uint64_t server_bytes_sent() {
    std::string info = server.command({"INFO", "stats"});
    size_t at = info.find("total_net_output_bytes:");
    EXPECT_NE(at, std::string::npos) << info;
    return std::stoull(info.substr(at + std::string("total_net_output_bytes:").size()));
  }

  std::vector<std::string> warnings;
};

TEST_F(FleetLimits, HostCodeIsSharedOnlySigned) {
  Producer native_a = [this]() -> Expected<Contents> {
    ++produced;
    return native_contents("a");
  };
  // A machine without a secret keeps its CPU-target entries to itself: no machine would take them.
  Options keyless = options_for("keyless", &warnings);
  ASSERT_TRUE(Cache::open(keyless)->get_or_create(key, fields, native_a).ok());
  EXPECT_FALSE(*direct()->exists(key));
  auto pushed = Cache::open(keyless)->push();
  ASSERT_TRUE(pushed.ok());
  EXPECT_EQ(pushed->pushed, 0u);
  EXPECT_EQ(pushed->skipped_native, 1u);

  // Signed, it is shared with the machines that hold the secret.
  ASSERT_TRUE(Cache::open(signed_options("build"))->get_or_create(key, fields, native_a).ok());
  EXPECT_EQ(produced, 2);
  auto node = Cache::open(signed_options("node"))->get_or_create(key, fields, native_a);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->source, FetchSource::remote_hit);
  // A keyless pull leaves it there: not a rejection (kiln pull exits 0), counted apart.
  warnings.clear();
  Options keyless_pull = options_for("keyless-pull", &warnings);
  auto pulled = Cache::open(keyless_pull)->pull(std::nullopt);
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->pulled, 0u);
  EXPECT_EQ(pulled->rejected, 0u);
  EXPECT_EQ(pulled->needs_key, 1u);
  EXPECT_EQ(rejected(keyless_pull), 0u);
  EXPECT_TRUE(warnings.empty()) << join(warnings);

  // Unsigned host code, planted by anyone who can write to Redis, is refused by a machine without
  // a secret (it cannot check one) with one warning saying how to share such entries...
  ASSERT_TRUE(direct()->put(key, unsigned_copy(key), 0).ok());
  warnings.clear();
  Options victim = options_for("victim", &warnings);
  auto got = Cache::open(victim)->get_or_create(key, fields, native_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_EQ(produced, 3);
  EXPECT_EQ(rejected(victim), 1u);
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find("host machine code"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("set KILN_REMOTE_KEY"), std::string::npos) << warnings[0];
  // ... and by one with a secret, as any unsigned value is.
  auto keyed = Cache::open(signed_options("keyed"))->get_or_create(key, fields, native_a);
  ASSERT_TRUE(keyed.ok());
  EXPECT_EQ(keyed->source, FetchSource::produced);

  // Further refusals are counted, not reported again.
  auto other = fields_for("b");
  std::string other_key = make_key(other);
  Producer native_b = [] { return Expected<Contents>(native_contents("b")); };
  ASSERT_TRUE(Cache::open(signed_options("b"))->get_or_create(other_key, other, native_b).ok());
  ASSERT_TRUE(direct()->put(other_key, unsigned_copy(other_key), 0).ok());
  ASSERT_TRUE(direct()->put(key, unsigned_copy(key), 0).ok());
  warnings.clear();
  auto cache = Cache::open(options_for("victim2", &warnings));
  ASSERT_TRUE(cache->get_or_create(other_key, other, native_b).ok());
  ASSERT_TRUE(cache->get_or_create(key, fields, native_a).ok());
  EXPECT_EQ(cache->stats()->remote_rejected, 2u);
  EXPECT_EQ(warnings.size(), 1u) << join(warnings);
}

TEST_F(FleetLimits, AMachineWithoutASecretKeepsTheSignedEntryThere) {
  ASSERT_TRUE(Cache::open(signed_options("build"))->get_or_create(key, fields, producer_a).ok());
  Options keyless = options_for("keyless", &warnings);
  ASSERT_TRUE(Cache::open(keyless)->store(key, fields, contents_for("a")).ok());
  EXPECT_EQ(direct()->get(key)->value_or("").rfind(remote::signed_prefix(), 0), 0u)
      << "still the signed value";
  auto node = Cache::open(signed_options("node"))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->source, FetchSource::remote_hit);
  EXPECT_EQ(produced, 1);
}

TEST_F(FleetLimits, AKeyOfAnotherTypeIsABadEntryThatIsOverwritten) {
  EXPECT_EQ(server.command({"HSET", "kiln:" + key, "field", "value"}), "1");
  Options o = options_for("m", &warnings);
  auto cache = Cache::open(o);
  auto got = cache->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  auto stats = cache->stats();
  EXPECT_EQ(stats->remote_errors, 0u) << "the tier is not marked down";
  EXPECT_EQ(stats->remote_rejected, 1u);
  ASSERT_EQ(warnings.size(), 1u) << join(warnings);
  EXPECT_NE(warnings[0].find("the key holds a hash, not a string"), std::string::npos)
      << warnings[0];
  EXPECT_EQ(server.command({"TYPE", "kiln:" + key}), "string") << "overwritten";
  auto node = Cache::open(options_for("node", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->source, FetchSource::remote_hit);
  // A pull counts it as rejected and goes on with the other keys.
  auto other = fields_for("b");
  EXPECT_EQ(server.command({"HSET", "kiln:" + make_key(other), "field", "value"}), "1");
  auto pulled = Cache::open(options_for("fresh", &warnings))->pull(std::nullopt);
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->pulled, 1u);
  EXPECT_EQ(pulled->rejected, 1u);
}

TEST_F(FleetLimits, AValueOverTheLimitIsRefusedBeforeItIsSent) {
  std::string junk(1 << 20, 'x');
  ASSERT_TRUE(direct()->put(key, junk, 0).ok());
  Options o = options_for("m", &warnings);
  o.remote_max_bytes = 64 << 10;
  uint64_t before = server_bytes_sent();
  auto cache = Cache::open(o);
  auto got = cache->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_LT(server_bytes_sent() - before, uint64_t{32} << 10) << "the value never crossed";
  EXPECT_EQ(cache->stats()->remote_rejected, 1u);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("1048576 bytes are over the limit of 65536"), std::string::npos)
      << join(warnings);
  // Within the limit, the entry the compile put there is served.
  auto node = Cache::open(options_for("node", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->source, FetchSource::remote_hit);
}

TEST_F(FleetLimits, WithASecretAnUnsignedValueIsRefusedBeforeItIsSent) {
  ASSERT_TRUE(direct()->put(key, "KILNREM1" + std::string(8, '\0') + std::string(1 << 20, 'x'), 0)
                  .ok());
  uint64_t before = server_bytes_sent();
  Options o = signed_options("m");
  auto cache = Cache::open(o);
  auto got = cache->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_LT(server_bytes_sent() - before, uint64_t{32} << 10);
  EXPECT_EQ(cache->stats()->remote_rejected, 1u);
}

TEST_F(FleetLimits, PullByGraphFetchesOnlyThatGraphAndLeavesJunkToExpire) {
  Options build = options_for("build", &warnings);
  for (const char* g : {"a", "b"}) {
    auto f = fields_for(g);
    ASSERT_TRUE(Cache::open(build)->store(make_key(f), f, contents_for(g)).ok());
  }
  std::string junk_key(32, 'e');
  EXPECT_EQ(server.command({"SET", "kiln:" + junk_key, "junk", "PX", "100000"}), "OK");
  uint64_t before = server_bytes_sent();
  auto pulled = Cache::open(options_for("node", &warnings))->pull(std::string("h-a"));
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->pulled, 1u);
  EXPECT_EQ(pulled->rejected, 0u) << "nothing else was fetched";
  EXPECT_LT(server_bytes_sent() - before, uint64_t{8} << 10);
  // A whole pull fetches the junk, rejects it, and leaves its time to live alone.
  auto all = Cache::open(options_for("node2", &warnings))->pull(std::nullopt);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->pulled, 2u);
  EXPECT_EQ(all->rejected, 1u);
  EXPECT_LE(std::stoll(server.command({"PTTL", "kiln:" + junk_key})), 100000);
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:" + make_key(fields_for("b"))})), 100000)
      << "a verified entry's is refreshed";
}

// A lookup resets a value's time to live only once it has verified it: junk a keyless machine
// cannot replace (it starts as a signed value) is left to expire, not kept alive by every miss.
TEST_F(FleetLimits, ALookupLeavesARejectedValuesTimeToLiveAlone) {
  std::string junk = remote::signed_prefix() + std::string(32, '\0') + "JUNK";
  EXPECT_EQ(server.command({"SET", "kiln:" + key, junk, "PX", "100000"}), "OK");
  Options keyless = options_for("keyless", &warnings);
  auto got = Cache::open(keyless)->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_EQ(rejected(keyless), 1u);
  EXPECT_LE(std::stoll(server.command({"PTTL", "kiln:" + key})), 100000);
  EXPECT_EQ(direct()->get(key)->value_or(""), junk) << "a keyless put keeps a signed-looking value";
  // A verified hit resets it (and its graph's marker, below).
  EXPECT_EQ(server.command({"DEL", "kiln:" + key}), "1");
  ASSERT_TRUE(Cache::open(options_for("build", &warnings))->store(key, fields, contents_for("a"))
                  .ok());
  EXPECT_EQ(server.command({"PEXPIRE", "kiln:" + key, "100000"}), "1");
  auto hit = Cache::open(options_for("node", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->source, FetchSource::remote_hit);
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:" + key})), 100000);
}

// A remote hit refreshes its graph's marker with the entry, so `pull --graph` still finds an
// entry kept alive by hits after the put that marked it.
TEST_F(FleetLimits, ARemoteHitKeepsItsGraphMarkerAlive) {
  ASSERT_TRUE(Cache::open(options_for("build", &warnings))->store(key, fields, contents_for("a"))
                  .ok());
  std::string marker = "kiln:graph:h-a:" + key;
  EXPECT_EQ(server.command({"EXISTS", marker}), "1");
  EXPECT_EQ(server.command({"DEL", marker}), "1");  // as if it had expired
  auto hit = Cache::open(options_for("node", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->source, FetchSource::remote_hit);
  EXPECT_GT(std::stoll(server.command({"PTTL", marker})), 100000);
  auto pulled = Cache::open(options_for("other", &warnings))->pull(std::string("h-a"));
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->pulled, 1u);
}

// While another machine's lease is waited on, a rejected value is read again (it may be replaced
// meanwhile), but reported and counted once.
TEST_F(FleetLimits, ARejectedValueReadWhileWaitingIsReportedOnce) {
  EXPECT_EQ(server.command({"SET", "kiln:" + key, "junk"}), "OK");
  EXPECT_EQ(server.command({"SET", "kiln:lock:" + key, "other machine", "PX", "600000"}), "OK");
  Options o = options_for("m", &warnings);
  o.lock_wait = std::chrono::milliseconds(1500);
  auto got = Cache::open(o)->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_EQ(rejected(o), 1u);
  size_t reports = 0;
  for (const std::string& w : warnings) reports += w.find("rejected remote entry") != std::string::npos;
  EXPECT_EQ(reports, 1u) << join(warnings);
}

// A lookup that finds nothing remotely counts one remote miss, however often it reads the key
// (before and after its lock, and while another machine's lease is waited on): 3 for a compile,
// and one per poll while waiting, were counted, so the hit rate could not be read from stats.
TEST_F(FleetLimits, ARemoteMissCountsOncePerLookup) {
  Options o = options_for("m", &warnings);
  o.lock_wait = std::chrono::milliseconds(5000);
  auto cache = Cache::open(o);
  auto got = cache->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_EQ(cache->stats()->remote_misses, 1u);
  // Another key, whose lease another machine holds for a while and then lets lapse: read many
  // times, missed once.
  auto other = fields_for("b");
  std::string other_key = make_key(other);
  EXPECT_EQ(server.command({"SET", "kiln:lock:" + other_key, "other machine", "PX", "700"}), "OK");
  auto waited = cache->get_or_create(other_key, other, producer_a);
  ASSERT_TRUE(waited.ok());
  EXPECT_EQ(waited->source, FetchSource::produced);
  EXPECT_EQ(cache->stats()->remote_misses, 2u) << join(warnings);
  EXPECT_EQ(cache->stats()->remote_hits, 0u);
}

// `kiln why`'s look at the fleet's value: verified as a compile verifies it, and not taken
// (nothing stored here, counted or refreshed); junk is "rejected" with the reason, where EXISTS
// called it present and the compile then rejected it.
TEST_F(FleetLimits, ARemoteVerdictVerifiesTheValueAndTakesNothing) {
  auto cache = Cache::open(options_for("m", &warnings));
  std::string why;
  EXPECT_EQ(cache->remote_verdict(key, fields, why), "absent");
  ASSERT_TRUE(Cache::open(options_for("build", &warnings))->store(key, fields, contents_for("a")).ok());
  EXPECT_EQ(cache->remote_verdict(key, fields, why), "present");
  EXPECT_FALSE(cache->read(key).hit()) << "nothing stored here";
  auto other = fields_for("b");
  std::string other_key = make_key(other);
  EXPECT_EQ(server.command({"SET", "kiln:" + other_key, "junk"}), "OK");
  EXPECT_EQ(cache->remote_verdict(other_key, other, why), "rejected");
  EXPECT_FALSE(why.empty());
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->remote_hits + stats->remote_misses + stats->remote_rejected, 0u);
  EXPECT_TRUE(warnings.empty()) << join(warnings);
}

// A pull stops when its time is spent, saying how far it got; the next one goes on from there.
TEST_F(FleetLimits, APullStopsWhenItsBudgetIsSpentAndTheNextGoesOn) {
  Options build = options_for("build", &warnings);
  for (const char* g : {"a", "b", "c"}) {
    auto f = fields_for(g);
    ASSERT_TRUE(Cache::open(build)->store(make_key(f), f, contents_for(g)).ok());
  }
  Options node = options_for("node", &warnings);
  node.remote_pull_budget = std::chrono::milliseconds(0);
  auto stopped = Cache::open(node)->pull(std::nullopt);
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(stopped->stopped);
  EXPECT_EQ(stopped->listed, 3u);
  EXPECT_EQ(stopped->read, 0u);
  EXPECT_EQ(stopped->pulled, 0u);
  node.remote_pull_budget = std::chrono::milliseconds(60000);
  auto rest = Cache::open(node)->pull(std::nullopt);
  ASSERT_TRUE(rest.ok());
  EXPECT_FALSE(rest->stopped);
  EXPECT_EQ(rest->read, 3u);
  EXPECT_EQ(rest->pulled, 3u);
}

TEST_F(FleetLimits, ALeaseWithoutATimeToLiveIsStale) {
  EXPECT_EQ(server.command({"SET", "kiln:lock:" + key, "ghost"}), "OK");
  auto start = std::chrono::steady_clock::now();
  auto got = Cache::open(options_for("m", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, FetchSource::produced);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000))
      << "not waited on";
  EXPECT_TRUE(warnings.empty()) << join(warnings);
}

TEST_F(FleetLimits, AReplyLimitOutsideOneByteTo512MiBIsRefusedForTheDefault) {
  for (uint64_t bytes : {uint64_t{0}, (uint64_t{512} << 20) + 1, ~uint64_t{0}}) {
    warnings.clear();
    Options o = options_for("m", &warnings);
    o.remote_max_bytes = bytes;
    auto cache = Cache::open(o);
    ASSERT_EQ(warnings.size(), 1u) << bytes;
    EXPECT_NE(warnings[0].find("expected 1 byte to 512 MiB; using 64 MiB"), std::string::npos);
    auto got = cache->get_or_create(key, fields, producer_a);
    ASSERT_TRUE(got.ok());
  }
  auto node = Cache::open(options_for("node", &warnings))->get_or_create(key, fields, producer_a);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->source, FetchSource::remote_hit) << "the default limit serves the entry";
}

TEST_F(FleetLimits, AnEmptyOrShortSecretTurnsTheRemoteTierOffWithAnError) {
  for (const char* secret : {"", "short"}) {
    warnings.clear();
    Options o = options_for("m", &warnings);
    o.remote_key = secret;
    auto cache = Cache::open(o);
    EXPECT_FALSE(cache->has_remote()) << secret;
    ASSERT_EQ(warnings.size(), 1u) << join(warnings);
    EXPECT_NE(warnings[0].find(*secret ? "is 5 bytes long; a secret needs at least 16"
                                       : "is set but empty"),
              std::string::npos)
        << warnings[0];
    ASSERT_TRUE(cache->get_or_create(key, fields, producer_a).ok());
    EXPECT_FALSE(*direct()->exists(key)) << "nothing was put unsigned";
  }
  EXPECT_FALSE(remote_secret(std::string("")).ok());
  EXPECT_FALSE(remote_secret(std::string(15, 's')).ok());
  EXPECT_EQ(*remote_secret(std::string(16, 's')), std::string(16, 's'));
}

}  // namespace
}  // namespace kiln::cache
