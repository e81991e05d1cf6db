// Compile through the cache: a hit reads only what running needs, and the rest stays in the cache.
#include "runtime/compile_service.h"

#include "cache/entry_codec.h"
#include "cache/remote/envelope.h"
#include "cache/remote/redis.h"
#include "compiler/artifact.h"
#include "ir/parse.h"
#include "tests/cache/test_util.h"
#include "tests/support/redis_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

namespace kiln::runtime {
namespace {

class TempCacheDir {
public:
  TempCacheDir() {
    char name[] = "/tmp/kiln-compile-service-test-XXXXXX";
    m_path = mkdtemp(name);
  }
  ~TempCacheDir() { std::filesystem::remove_all(m_path); }
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

// A cache in a scratch folder, and options compiling for sm_90 in `high`.
class CachedCompile : public ::testing::Test {
protected:
  void SetUp() override {
    cache::Options cache_options;
    cache_options.dir = dir.path();
    cache = cache::Cache::open(cache_options);
    ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
    options.target.sm = 90;
    options.precision = ir::Precision::high;
  }
  static Expected<ir::Graph> example(const std::string& name) {
    return ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + name);
  }

  // `graph` compiled in a cache of its own: its one stored entry, as another machine would
  // serve it, and its key (empty, with a failure said, where it did not compile).
  std::optional<cache::StoredEntry> stored_entry(const ir::Graph& graph, std::string* key) {
    cache::Options plain;
    plain.dir = dir.path() + "/forger";
    auto forger = cache::Cache::open(plain);
    auto good = compile_graph(graph, options, forger.get());
    if (!good) {
      ADD_FAILURE() << good.error().message;
      return std::nullopt;
    }
    *key = good->key;
    auto exported = forger->export_entries();
    if (!exported || exported->size() != 1u) {
      ADD_FAILURE() << "expected one entry";
      return std::nullopt;
    }
    return exported->front();
  }

  // What a checked machine makes of `forged`, put unsigned under `key` in a real redis-server:
  // its compile of `graph` must miss and compile afresh; *rejected is its `remote_rejected`,
  // *warnings what it warned. False, the test skipped or failed, where no server runs.
  bool serve_forged(const ir::Graph& graph, const std::string& key,
                    const cache::StoredEntry& forged, uint64_t* rejected,
                    std::vector<std::string>* warnings) {
    kiln::testing::RedisServer server;
    if (!server.installed()) {
      [] { GTEST_SKIP() << "redis-server is not installed"; }();
      return false;
    }
    if (!server.started()) {
      ADD_FAILURE() << server.error();
      return false;
    }
    auto url = cache::remote::parse_redis_url(server.url());
    if (!url) {
      ADD_FAILURE() << url.error().message;
      return false;
    }
    auto direct = cache::remote::make_redis_backend(*url);
    const std::string value = cache::remote::seal(key, cache::encode_entry(forged), "");
    EXPECT_TRUE(direct->put(key, value, 0).ok());
    cache::Options node_options = cache_options(dir.path() + "/node", server.url());
    node_options.warn = [warnings](const std::string& w) { warnings->push_back(w); };
    auto node = cache::Cache::open(node_options);
    auto compiled = compile_graph(graph, options, node.get());
    if (!compiled) {
      ADD_FAILURE() << compiled.error().message;
      return false;
    }
    EXPECT_FALSE(compiled->hit || compiled->remote_hit);
    *rejected = node->stats()->remote_rejected;
    return true;
  }

  TempCacheDir dir;
  std::unique_ptr<cache::Cache> cache;
  compiler::CompileOptions options;
};

TEST_F(CachedCompile, HitCarriesTheCubinsAndLeavesPtxSourceAndLogInTheCache) {
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;

  auto cold = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(cold) << cold.error().message;
  ASSERT_FALSE(cold->hit);
  auto warm = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(warm) << warm.error().message;
  ASSERT_TRUE(warm->hit);
  ASSERT_EQ(warm->artifact.kernels.size(), cold->artifact.kernels.size());
  for (size_t i = 0; i < warm->artifact.kernels.size(); ++i) {
    const compiler::KernelArtifact& k = warm->artifact.kernels[i];
    EXPECT_EQ(k.name, cold->artifact.kernels[i].name);
    EXPECT_EQ(k.cubin, cold->artifact.kernels[i].cubin);
    EXPECT_FALSE(k.cubin.empty());
    EXPECT_TRUE(k.ptx.empty()) << k.name;
  }
  EXPECT_TRUE(warm->artifact.source.empty());
  EXPECT_TRUE(warm->artifact.log.empty());

  cache::Lookup full = cache->read(warm->key);
  ASSERT_TRUE(full.hit());
  auto everything = from_entry(full.entry);
  ASSERT_TRUE(everything) << everything.error().message;
  EXPECT_EQ(everything->source, cold->artifact.source);
  EXPECT_EQ(everything->kernels.at(0).ptx, cold->artifact.kernels.at(0).ptx);
}

// llama_layer's Q, K and V projections, its two norms and two of its permutes repeat a kernel's
// source but for the name: each is compiled once, stored once, and every kernel of a hit carries
// the binary it runs.
TEST_F(CachedCompile, KernelsWithTheSameSourceShareOneBinaryStoredOnce) {
  auto graph = example("llama_layer.kg");
  ASSERT_TRUE(graph) << graph.error().message;

  auto cold = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(cold) << cold.error().message;
  const std::vector<compiler::KernelArtifact>& kernels = cold->artifact.kernels;
  ASSERT_EQ(kernels.size(), 14u);
  std::vector<std::string> shared;
  for (const compiler::KernelArtifact& k : kernels) {
    if (k.binary_of.empty()) {
      EXPECT_EQ(k.entry, "kiln_" + k.name);
      continue;
    }
    shared.push_back(k.name + "<-" + k.binary_of);
    auto original = std::find_if(kernels.begin(), kernels.end(),
                                 [&](const auto& o) { return o.name == k.binary_of; });
    ASSERT_NE(original, kernels.end());
    EXPECT_EQ(k.entry, original->entry);
    EXPECT_EQ(k.cubin, original->cubin);
    EXPECT_EQ(k.report, original->report);
  }
  EXPECT_EQ(shared, (std::vector<std::string>{
                        "k2_matmul_tf32_64x64<-k1_matmul_tf32_64x64",
                        "k3_matmul_tf32_64x64<-k1_matmul_tf32_64x64", "k5_permute<-k4_permute",
                        "k10_rms_norm<-k0_rms_norm"}));

  cache::Lookup full = cache->read(cold->key);
  ASSERT_TRUE(full.hit());
  EXPECT_EQ(full.entry.find_payload("cubin:k2_matmul_tf32_64x64"), nullptr) << "stored once";
  EXPECT_EQ(full.entry.find_payload("ptx:k10_rms_norm"), nullptr);
  ASSERT_NE(full.entry.find_payload("cubin:k1_matmul_tf32_64x64"), nullptr);

  auto warm = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(warm) << warm.error().message;
  ASSERT_TRUE(warm->hit);
  ASSERT_EQ(warm->artifact.kernels.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(warm->artifact.kernels[i].cubin, kernels[i].cubin) << kernels[i].name;
    EXPECT_EQ(warm->artifact.kernels[i].entry, kernels[i].entry) << kernels[i].name;
    EXPECT_EQ(warm->artifact.kernels[i].binary_of, kernels[i].binary_of) << kernels[i].name;
  }
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

std::string field_of(const CacheRequest& request, const std::string& name) {
  for (const cache::KeyField& f : request.fields)
    if (f.name == name) return f.value;
  return {};
}

// An entry whose checksums hold but whose artifact does not decode (a damaged build, or a remote
// entry a keyholder signed) is never run: the fresh compile replaces it, so the next one hits.
TEST_F(CachedCompile, AnEntryWhoseArtifactDoesNotDecodeIsReplacedNotKept) {
  std::vector<std::string> warnings;
  cache::Options cache_options;
  cache_options.dir = dir.path();
  cache_options.warn = [&](const std::string& message) { warnings.push_back(message); };
  cache = cache::Cache::open(cache_options);
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  auto first = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(cache::testing::replace_payloads(*cache, first->key, [](const std::string& name) { return name == "artifact"; },
                                             "{\"not\": \"an artifact\"}"),
            1);
  ASSERT_TRUE(warnings.empty());

  auto second = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->hit);
  EXPECT_EQ(second->artifact.kernels.size(), first->artifact.kernels.size());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("replaced bad entry " + first->key + ": the copy here does not decode"),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(cache->stats()->errors, 1u);

  auto third = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE(third->hit) << "the fresh compile replaced the entry";
  EXPECT_EQ(warnings.size(), 1u);
}

// A remote value whose checksums hold but whose cubins are another arch's (what anyone who can
// write to a tier without KILN_REMOTE_KEY can serve) is rejected before it is served or stored
// here: counted, reported, compiled again and overwritten, so the next machine hits the good one.
// `kiln pull` and `kiln why` reject it too, and a bundle holding it imports nothing. A whole sm_80
// entry under the sm_90 key (cubins and artifact agreeing) is rejected as well.
TEST_F(CachedCompile, AForeignEntryWhoseCubinsWouldNotLoadIsRejectedAndReplaced) {
  kiln::testing::RedisServer server;
  if (!server.installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_TRUE(server.started()) << server.error();
  std::mutex warned;  // a cache's local fill may warn from its own thread
  std::vector<std::string> warnings;
  // A machine of the fleet: the runtime's options (the check), or plain ones (none).
  auto machine = [&](const std::string& name, bool checked, bool remote = true) {
    std::optional<std::string> url = remote ? server.url() : std::string();
    cache::Options o = checked ? cache_options(dir.path() + "/" + name, url) : cache::Options();
    if (!checked) {
      o.dir = dir.path() + "/" + name;
      o.remote = url;
    }
    o.warn = [&](const std::string& w) {
      std::lock_guard lock(warned);
      warnings.push_back(w);
    };
    auto opened = cache::Cache::open(o);
    EXPECT_TRUE(opened->enabled()) << opened->disabled_reason();
    EXPECT_EQ(opened->has_remote(), remote);
    return opened;
  };
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions sm80 = options;
  sm80.target.sm = 80;
  auto sm80_cache = machine("sm80", false, false);
  auto other = compile_graph(*graph, sm80, sm80_cache.get());
  ASSERT_TRUE(other) << other.error().message;
  const std::string prefix = cache::k_payload_cubin_prefix;
  auto cubins = [&](const std::string& name) {
    return name.compare(0, prefix.size(), prefix) == 0;
  };
  // The forger: a good entry, then the same with sm_80's cubin, put to the tier unsigned.
  auto forger = machine("forger", false);
  auto good = compile_graph(*graph, options, forger.get());
  ASSERT_TRUE(good) << good.error().message;
  ASSERT_FALSE(good->hit);
  auto forge = [&] {
    ASSERT_GE(cache::testing::replace_payloads(*forger, good->key, cubins,
                                               other->artifact.kernels.front().cubin),
              1);
    ASSERT_TRUE(forger->flush());
  };
  ASSERT_NO_FATAL_FAILURE(forge());
  const std::string why = "its cubins would not load: kernel '" +
                          good->artifact.kernels.front().name + "': cubin: ";
  const std::string arch = "built for sm_80, not for sm_90";
  auto request = prepare_compile(*graph, options);
  ASSERT_TRUE(request) << request.error().message;
  std::string verdict_why;
  EXPECT_EQ(machine("asker", true)->remote_verdict(good->key, request->fields, verdict_why),
            "rejected");
  EXPECT_NE(verdict_why.find(why), std::string::npos) << verdict_why;

  warnings.clear();
  auto node = machine("node", true);
  auto compiled = compile_graph(*graph, options, node.get());
  ASSERT_TRUE(compiled) << compiled.error().message;
  EXPECT_FALSE(compiled->hit);
  EXPECT_FALSE(compiled->remote_hit);
  EXPECT_EQ(compiled->key, good->key);
  EXPECT_EQ(node->stats()->remote_rejected, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("rejected remote entry " + good->key + ": " + why, 0), 0u)
      << warnings[0];
  EXPECT_NE(warnings[0].find(arch), std::string::npos) << warnings[0];
  ASSERT_TRUE(node->flush());

  // Its compile overwrote the value: the next machine is served the good one.
  auto next = machine("next", true);
  auto served = compile_graph(*graph, options, next.get());
  ASSERT_TRUE(served) << served.error().message;
  EXPECT_TRUE(served->hit && served->remote_hit);
  EXPECT_EQ(served->artifact.kernels.front().cubin, good->artifact.kernels.front().cubin);
  EXPECT_EQ(next->stats()->remote_rejected, 0u);

  // Forged again: a pull rejects it and stores nothing.
  ASSERT_NO_FATAL_FAILURE(forge());
  auto puller = machine("puller", true);
  auto pulled = puller->pull(std::nullopt);
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->pulled, 0u);
  EXPECT_EQ(pulled->rejected, 1u);
  EXPECT_TRUE(puller->list()->empty());

  // A bundle holding it imports nothing; the good entry of another machine imports.
  auto forged = forger->export_entries();
  ASSERT_TRUE(forged && forged->size() == 1u);
  auto importer = machine("importer", true, false);
  auto refused = importer->import_entries(*forged);
  ASSERT_TRUE(refused) << refused.error().message;
  EXPECT_EQ(refused->imported, 0u);
  EXPECT_EQ(refused->refused.rfind("entry " + good->key + ": " + why, 0), 0u) << refused->refused;
  EXPECT_NE(refused->refused.find(arch), std::string::npos) << refused->refused;
  EXPECT_TRUE(importer->list()->empty());
  auto fine = node->export_entries();
  ASSERT_TRUE(fine && fine->size() == 1u);
  auto imported = importer->import_entries(*fine);
  ASSERT_TRUE(imported) << imported.error().message;
  EXPECT_EQ(imported->imported, 1u);
  EXPECT_TRUE(imported->refused.empty());

  // sm_80's whole entry (its artifact, cubins and summary) under the sm_90 key: the cubins are
  // their artifact's arch, the artifact is not the key's.
  cache::Lookup mine = forger->read(good->key), theirs = sm80_cache->read(other->key);
  ASSERT_TRUE(mine.hit() && theirs.hit());
  ASSERT_TRUE(forger->store(good->key, mine.entry.info.fields,
                            cache::Contents{theirs.entry.info.summary, theirs.entry.payloads,
                                            theirs.entry.info.compile_ms}));
  ASSERT_TRUE(forger->flush());
  {
    std::lock_guard lock(warned);
    warnings.clear();
  }
  auto late = machine("late", true);
  auto recompiled = compile_graph(*graph, options, late.get());
  ASSERT_TRUE(recompiled) << recompiled.error().message;
  EXPECT_FALSE(recompiled->hit);
  EXPECT_EQ(recompiled->artifact.arch, "sm_90");
  EXPECT_EQ(late->stats()->remote_rejected, 1u);
  {
    std::lock_guard lock(warned);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], "rejected remote entry " + good->key +
                               ": its artifact is for sm_80 where its key says sm_90")
        << warnings[0];
    warnings.clear();
  }

  // The good entry but for its artifact's toolchain (which the driver check reads).
  cache::Lookup fresh = late->read(good->key);
  ASSERT_TRUE(fresh.hit());
  cache::Contents relabelled{fresh.entry.info.summary, fresh.entry.payloads,
                             fresh.entry.info.compile_ms};
  int relabelled_payloads = 0;
  for (cache::Payload& p : relabelled.payloads) {
    if (p.name != "artifact") continue;
    auto artifact = compiler::deserialize(p.bytes);
    ASSERT_TRUE(artifact) << artifact.error().message;
    artifact->nvrtc_version = "99.0 (libnvrtc.so.99 1)";
    p.bytes = compiler::serialize(*artifact);
    ++relabelled_payloads;
  }
  ASSERT_EQ(relabelled_payloads, 1);
  ASSERT_TRUE(forger->store(good->key, fresh.entry.info.fields, relabelled));
  ASSERT_TRUE(forger->flush());
  auto later = machine("later", true);
  auto again = compile_graph(*graph, options, later.get());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->hit);
  std::lock_guard lock(warned);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(": its artifact was built by NVRTC '99.0 (libnvrtc.so.99 1)' where "
                             "its key says '"),
            std::string::npos)
      << warnings[0];
}

// A value that names a payload twice: its first artifact and cubin good, then another arch's
// artifact under the same name (the one a run reads, which takes the last). Its record is
// refused as it is read, so it is rejected and compiled again; an entry built with the repeat
// directly is refused by verify_stored and by the check, with or without a verified copy.
TEST_F(CachedCompile, AValueNamingAPayloadTwiceIsRejected) {
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  std::string key;
  std::optional<cache::StoredEntry> good = stored_entry(*graph, &key);
  ASSERT_TRUE(good);
  compiler::CompileOptions sm80 = options;
  sm80.target.sm = 80;
  auto other = compile_graph(*graph, sm80, nullptr);
  ASSERT_TRUE(other) << other.error().message;
  cache::StoredEntry doubled = *good;
  for (const cache::Payload& p : to_contents(other->artifact, "", 0).payloads)
    if (p.name == "artifact")
      doubled.payloads.push_back({p.name, cache::encode(p.bytes, cache::Encoding::raw).value()});
  ASSERT_EQ(doubled.payloads.size(), good->payloads.size() + 1);
  EXPECT_EQ(foreign_entry_problem(doubled), "it holds payload 'artifact' twice");
  auto refused = cache::verify_stored(doubled);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "payload 'artifact' appears twice");
  auto verified = cache::verify_stored(*good);  // the first copies, as a lookup's
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_EQ(foreign_entry_problem(doubled, &*verified), "it holds payload 'artifact' twice");

  uint64_t rejected = 0;
  std::vector<std::string> warnings;
  if (!serve_forged(*graph, key, doubled, &rejected, &warnings)) return;
  EXPECT_EQ(rejected, 1u);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("payload 'artifact' appears twice"), std::string::npos)
      << warnings[0];
}

// A value whose checksums hold but whose artifact does not decode (or that has none) is refused
// by the check: same codegen version, same format, so it was damaged or forged. It used to be
// stored, to be compiled again at its first hit.
TEST_F(CachedCompile, AValueWhoseArtifactDoesNotDecodeIsRejected) {
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  std::string key;
  std::optional<cache::StoredEntry> good = stored_entry(*graph, &key);
  ASSERT_TRUE(good);
  cache::StoredEntry garbled = *good, without = *good;
  size_t replaced = 0;
  for (cache::StoredPayload& p : garbled.payloads)
    if (p.name == "artifact") {
      p = {p.name, cache::encode("not an artifact", cache::Encoding::raw).value()};
      ++replaced;
    }
  ASSERT_EQ(replaced, 1u);
  std::erase_if(without.payloads, [](const cache::StoredPayload& p) { return p.name == "artifact"; });
  EXPECT_EQ(foreign_entry_problem(*good), "");
  EXPECT_EQ(foreign_entry_problem(garbled), "its artifact does not decode: artifact: bad magic");
  EXPECT_EQ(foreign_entry_problem(without), "it has no artifact payload");

  uint64_t rejected = 0;
  std::vector<std::string> warnings;
  if (!serve_forged(*graph, key, garbled, &rejected, &warnings)) return;
  EXPECT_EQ(rejected, 1u);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("its artifact does not decode"), std::string::npos) << warnings[0];
}

// What kiln compiles passes the check of a foreign entry: a symbolic graph's bucket, an sm_90a
// entry and an sm_80 one served by the remote tier; an emulated entry and each of those imported
// from another cache. `kiln verify`'s check (entry_problem) finds nothing wrong in them either.
TEST_F(CachedCompile, EntriesKilnCompilesPassTheForeignCheck) {
  kiln::testing::RedisServer server;
  if (!server.installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_TRUE(server.started()) << server.error();
  std::vector<std::string> warnings;
  cache::Options plain;
  plain.dir = dir.path() + "/builder";
  plain.remote = server.url();
  plain.warn = [&](const std::string& w) { warnings.push_back(w); };
  auto builder = cache::Cache::open(plain);
  struct Case {
    const char* graph;
    compiler::Target target;
    std::vector<compiler::DimRange> bucket;
  };
  compiler::Target emulated = compiler::Target::cuda(90, "a");
  emulated.kind = compiler::Target::Kind::emulate;
  const std::vector<Case> cases = {{"mlp_dynamic.kg", compiler::Target::cuda(90), {{33, 64}}},
                                   {"attention.kg", compiler::Target::cuda(90, "a"), {}},
                                   {"mlp.kg", compiler::Target::cuda(80), {}},
                                   {"mlp.kg", emulated, {}}};
  std::vector<std::string> keys;
  // What a run reads of each compiled artifact, payload by payload.
  auto run_contents = [](const compiler::Artifact& artifact) {
    std::map<std::string, std::string> read;
    for (cache::Payload& p : to_contents(artifact, "", 0).payloads)
      if (run_payloads().wants(p.name)) read[p.name] = std::move(p.bytes);
    return read;
  };
  std::vector<std::map<std::string, std::string>> compiled;
  for (const Case& c : cases) {
    auto graph = example(c.graph);
    ASSERT_TRUE(graph) << graph.error().message;
    compiler::CompileOptions o = options;
    o.target = c.target;
    o.bucket = c.bucket;
    auto built = compile_graph(*graph, o, builder.get());
    ASSERT_TRUE(built) << c.graph << ": " << built.error().message;
    keys.push_back(built->key);
    compiled.push_back(run_contents(built->artifact));
  }
  ASSERT_TRUE(builder->flush());
  auto verified = builder->verify(cache::Fix::no, entry_problem);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->bad.empty()) << verified->bad.front().reason;
  auto exported = builder->export_entries();
  ASSERT_TRUE(exported && exported->size() == cases.size());
  const std::string cubin = cache::k_payload_cubin_prefix;
  for (const cache::StoredEntry& e : *exported) {
    EXPECT_EQ(foreign_entry_problem(e), "") << e.info.field("arch") << e.info.field("target");
    // Given the entry as a lookup verified it, the check reads that, not the stored payloads:
    // a cubin cut there is found. Given one that lacks a payload a run reads, it reads `e`.
    auto whole = cache::verify_stored(e);
    ASSERT_TRUE(whole) << whole.error().message;
    EXPECT_EQ(foreign_entry_problem(e, &*whole), "");
    auto artifact_only = cache::verify_stored(e, cache::PayloadSelection::only({"artifact"}));
    ASSERT_TRUE(artifact_only) << artifact_only.error().message;
    EXPECT_EQ(foreign_entry_problem(e, &*artifact_only), "");
    bool cut = false;
    for (cache::Payload& p : whole->payloads)
      if (p.name.compare(0, cubin.size(), cubin) == 0) {
        p.bytes.resize(p.bytes.size() / 2);
        cut = true;
      }
    if (cut) {
      std::string problem = foreign_entry_problem(e, &*whole);
      EXPECT_NE(problem.find("its cubins would not load"), std::string::npos) << problem;
    }
  }

  auto reader = cache::Cache::open(cache_options(dir.path() + "/reader", server.url()));
  for (size_t i = 0; i + 1 < cases.size(); ++i) {  // emulated entries travel only signed
    auto graph = example(cases[i].graph);
    compiler::CompileOptions o = options;
    o.target = cases[i].target;
    o.bucket = cases[i].bucket;
    auto served = compile_graph(*graph, o, reader.get());
    ASSERT_TRUE(served) << cases[i].graph << ": " << served.error().message;
    EXPECT_TRUE(served->hit && served->remote_hit) << cases[i].graph;
    EXPECT_EQ(served->key, keys[i]);
    // The artifact served is the one the check decoded: what was compiled, payload by payload.
    EXPECT_EQ(run_contents(served->artifact), compiled[i]) << cases[i].graph;
  }
  EXPECT_EQ(reader->stats()->remote_rejected, 0u);
  auto importer = cache::Cache::open(cache_options(dir.path() + "/importer", std::string()));
  auto imported = importer->import_entries(*exported);
  ASSERT_TRUE(imported) << imported.error().message;
  EXPECT_TRUE(imported->refused.empty()) << imported->refused;
  EXPECT_EQ(imported->imported, cases.size());
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

// An entry whose checksums hold but whose cubins are another arch's (what a forged or damaged
// build leaves): the runtime would refuse to load them (compiler::check_cubin), and `kiln verify`
// names the entry beforehand, where its checksums alone find nothing wrong.
TEST_F(CachedCompile, VerifyNamesAnEntryWhoseCubinsTheRuntimeWouldNotLoad) {
  auto graph = example("mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  auto first = compile_graph(*graph, options, cache.get());
  ASSERT_TRUE(first) << first.error().message;
  compiler::CompileOptions sm80 = options;
  sm80.target.sm = 80;
  auto other = compile_graph(*graph, sm80, nullptr);
  ASSERT_TRUE(other) << other.error().message;
  auto verified = cache->verify(cache::Fix::no, entry_problem);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->bad.empty());
  const std::string prefix = cache::k_payload_cubin_prefix;
  auto cubins = [&](const std::string& name) {
    return name.compare(0, prefix.size(), prefix) == 0;
  };
  ASSERT_GE(cache::testing::replace_payloads(*cache, first->key, cubins,
                                             other->artifact.kernels.front().cubin),
            1);
  auto checksums = cache->verify(cache::Fix::no);
  ASSERT_TRUE(checksums) << checksums.error().message;
  EXPECT_TRUE(checksums->bad.empty());
  verified = cache->verify(cache::Fix::no, entry_problem);
  ASSERT_TRUE(verified) << verified.error().message;
  ASSERT_EQ(verified->bad.size(), 1u);
  EXPECT_EQ(verified->bad[0].key, first->key);
  EXPECT_EQ(verified->bad[0].reason, "its cubins would not load: kernel '" +
                                         first->artifact.kernels.front().name +
                                         "': cubin: built for sm_80, not for sm_90")
      << verified->bad[0].reason;
}

// --allow-fallback changes the kernels only where something falls back, so only then the key.
TEST(CompileService, AllowingFallbacksKeysLikeRefusingWhenNothingFallsBack) {
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions strict;
  strict.target.sm = 90;
  strict.precision = ir::Precision::high;
  compiler::CompileOptions lenient = strict;
  lenient.fallback = compiler::FallbackPolicy::allow;
  auto a = prepare_compile(*graph, strict), b = prepare_compile(*graph, lenient);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->key, b->key) << "one entry for both";

  // TF32 needs sm_80: on sm_75 the f32 matmuls fall back, and the key says fallbacks were allowed.
  lenient.target.sm = 75;
  auto fell = prepare_compile(*graph, lenient);
  ASSERT_TRUE(fell) << fell.error().message;
  EXPECT_NE(field_of(*fell, "options").find("fallback=allow"), std::string::npos);
  strict.target.sm = 75;
  auto refused = prepare_compile(*graph, strict);
  ASSERT_FALSE(refused) << "refused without the flag";
  EXPECT_NE(refused.error().message.find("kiln compile --allow-fallback"), std::string::npos)
      << "the hint names the CLI flag: " << refused.error().message;
}

}  // namespace
}  // namespace kiln::runtime
