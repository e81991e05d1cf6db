// A process for multi-process cache tests: get_or_create over a range of keys with a fake
// producer that records each run in a counter file.
//
// usage: kiln_cache_worker dir=D counter=F [keys=N] [rotate=R] [produce_ms=MS] [lock_wait_ms=MS]
//                          [payload_kb=KB] [mode=normal|hang-produce|hang-write] [marker=F]
//                          [remote=URL] [lease_ms=MS] [remote_key=SECRET]
// Prints "produced KEY", "hit KEY" or "remote KEY" (a remote hit) per key; warnings go to stderr. Exit 0: all good; 3: wrong bytes came back;
// 4: get_or_create failed; 2: bad usage.
#include "cache/cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>

namespace {

using namespace kiln::cache;

std::vector<KeyField> fields_of(int graph) {
  return {{"graph", std::string("canonical graph ") + std::to_string(graph)},
          {"graph_hash", std::string("h") + std::to_string(graph)},
          {"arch", "sm_90"},
          {"precision", "high"}};
}

// Incompressible bytes (xorshift), so that a large payload really reaches the disk in pages.
std::string noise(int graph, size_t bytes) {
  std::string out(bytes, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(graph + 1);
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return out;
}

Contents contents_of(int graph, int payload_kb) {
  Contents c;
  c.summary = std::string("{\"graph\":") + std::to_string(graph) + "}";
  c.compile_ms = 100;
  std::string ptx;
  for (int i = 0; ptx.size() < 20000; ++i)
    ptx += "graph " + std::to_string(graph) + " line " + std::to_string(i) + "\n";
  c.payloads = {{"source", std::string("// kernel for graph ") + std::to_string(graph)},
                {"ptx:k0", ptx}};
  if (payload_kb > 0) c.payloads.push_back({"cubin:k0", noise(graph, payload_kb * size_t{1024})});
  return c;
}

void append_line(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());  // one write with O_APPEND: lines never interleave
  ::close(fd);
}

void hang(const std::string& marker) {
  append_line(marker, "ready");
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "kiln_cache_worker: expected name=value, got '%s'\n", argv[i]);
      return 2;
    }
    args[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  auto number = [&](const char* name, int fallback) {
    return args.count(name) ? std::stoi(args[name]) : fallback;
  };
  const std::string counter = args["counter"], mode = args.count("mode") ? args["mode"] : "normal";
  const std::string marker = args["marker"];
  const int keys = number("keys", 1), rotate = number("rotate", 0);
  const int produce_ms = number("produce_ms", 0);
  const int payload_kb = number("payload_kb", 0);
  if (args["dir"].empty() || counter.empty()) return 2;

  Options options;
  options.dir = args["dir"];
  options.lock_wait = std::chrono::milliseconds(number("lock_wait_ms", 30000));
  if (mode == "hang-write") options.before_commit = [&] { hang(marker); };
  options.remote = args["remote"];
  if (args.count("remote_key")) options.remote_key = args["remote_key"];
  options.remote_lease = std::chrono::milliseconds(number("lease_ms", 10000));
  auto cache = Cache::open(options);
  if (!cache->enabled()) return 4;

  for (int t = 0; t < keys; ++t) {
    int graph = (rotate + t) % keys;
    auto fields = fields_of(graph);
    std::string key = make_key(fields);
    auto fetched = cache->get_or_create(key, fields, [&]() -> kiln::Expected<Contents> {
      append_line(counter, key);
      if (mode == "hang-produce") hang(marker);
      std::this_thread::sleep_for(std::chrono::milliseconds(produce_ms));
      return contents_of(graph, payload_kb);
    });
    if (!fetched) {
      std::fprintf(stderr, "kiln_cache_worker: %s\n", fetched.error().message.c_str());
      return 4;
    }
    if (fetched->entry.payloads != contents_of(graph, payload_kb).payloads) return 3;
    const char* how = fetched->source == FetchSource::hit          ? "hit"
                      : fetched->source == FetchSource::remote_hit ? "remote"
                                                                   : "produced";
    std::printf("%s %s\n", how, key.c_str());
    std::fflush(stdout);
  }
  return 0;
}
