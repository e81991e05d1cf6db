// Cache commands: `kiln stats`, `ls`, `show`, `prune`, `clear`, `verify`, `export`, `import`,
// `push`, `pull`.
// None of them needs CUDA. Exit 0 on success; 1 when the work fails (an unusable cache, a damaged
// entry, `verify` finding any bad entry even with --fix); 2 on bad usage or input (a bad size, an
// ambiguous key prefix, a bad bundle).
#include "tools/cli.h"

#include "compiler/key.h"

#include "cache/bundle.h"
#include "cache/cache.h"
#include "cache/units.h"
#include "ir/hash.h"
#include "ir/print.h"
#include "runtime/compile_service.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <memory>
#include <mutex>

namespace kiln::tools {
namespace {

using nlohmann::json;

struct CacheArgs {
  std::string dir;
  bool json = false;
  bool zero = false;
  std::string target;  // KEY for show, FILE for export and import
  bool source = false, ptx = false, log = false, graph_text = false;
  std::string max_size, older_than;
  bool fix = false;
  std::optional<std::string> remote;
  std::string graph;  // pull --graph
  bool force = false;  // export --force
  bool allow_native = false;  // import --allow-native-code
  // Only import and pull fill a cache that is not there yet; the others say there is none.
  bool create = false;
};

std::string iso_time(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string dump(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

// A field value fit to print as text: short and printable ASCII.
bool printable(const std::string& value) {
  if (value.size() > 120) return false;
  for (char c : value)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

int fail(const std::string& message, int code) {
  print_error("kiln: " + message);
  return code;
}

// The opened cache, or nullptr after an error (said on stderr: by the cache when it turned itself
// off, here when there is no cache to read).
std::unique_ptr<cache::Cache> open_cache(const CacheArgs& args, bool checked_already = false) {
  cache::Options options = runtime::cache_options(args.dir, args.remote);
  options.create = args.create;
  // `kiln import` checks the bundle's entries itself, before it opens the cache and again as it
  // stores each.
  if (checked_already) options.check_foreign = nullptr;
  // The warnings of the open wait here: a cache that cannot be used ends a cache command with an
  // error saying why, where the warning would say "continuing without a cache". Later ones print
  // as they come.
  struct Held {
    std::mutex mutex;
    bool opening = true;
    std::vector<std::string> warnings;
  };
  auto held = std::make_shared<Held>();
  options.warn = [held](const std::string& message) {
    std::lock_guard lock(held->mutex);
    if (held->opening) return held->warnings.push_back(message);
    std::fprintf(stderr, "kiln: cache: %s\n", message.c_str());
  };
  auto opened = cache::Cache::open(options);
  std::vector<std::string> warnings;
  {
    std::lock_guard lock(held->mutex);
    held->opening = false;
    warnings.swap(held->warnings);
  }
  std::string reason = opened->enabled() ? "" : opened->disabled_reason();
  for (const std::string& w : warnings)
    if (reason.empty() || w.rfind(reason, 0) != 0)
      std::fprintf(stderr, "kiln: cache: %s\n", w.c_str());
  if (reason.empty()) return opened;
  if (reason.rfind(cache::k_no_cache_reason, 0) == 0) {
    (void)fail(reason, k_exit_failure);
  } else {
    (void)fail("cannot use the cache: " + reason, k_exit_failure);
  }
  return nullptr;
}

// Hits over lookups (local hits and misses); 0 before any lookup.
double hit_rate(const cache::Stats& stats) {
  uint64_t lookups = stats.hits + stats.misses;
  return lookups ? static_cast<double>(stats.hits) / static_cast<double>(lookups) : 0.0;
}

int run_stats(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  if (args.zero) {
    if (Status s = c->zero_stats(); !s) return fail(s.error().message, k_exit_failure);
    if (!args.json) std::printf("statistics zeroed\n");
  }
  auto stats = c->stats();
  if (!stats) return fail(stats.error().message, k_exit_failure);
  if (args.json) {
    json j = {{"dir", c->dir()},
              {"entries", stats->entries},
              {"bytes", stats->bytes},
              {"raw_bytes", stats->raw_bytes},
              {"disk_bytes", stats->database_file_bytes + stats->wal_file_bytes},
              {"wal_bytes", stats->wal_file_bytes},
              {"free_bytes", stats->free_bytes},
              {"max_size", c->max_size()},
              {"hits", stats->hits},
              {"misses", stats->misses},
              {"errors", stats->errors},
              {"hit_rate", std::round(hit_rate(*stats) * 1000.0) / 1000.0},
              {"time_saved_ms", stats->time_saved_ms},
              {"remote",
               {{"backend", c->remote_description()},
                {"hits", stats->remote_hits},
                {"misses", stats->remote_misses},
                {"errors", stats->remote_errors},
                {"rejected", stats->remote_rejected},
                {"puts", stats->remote_puts}}}};
    std::printf("%s\n", dump(j).c_str());
    return k_exit_ok;
  }
  if (args.zero) return k_exit_ok;
  std::printf("cache dir     %s\n", c->dir().c_str());
  std::printf("entries       %llu\n", static_cast<unsigned long long>(stats->entries));
  std::printf("size          %s (%s uncompressed, cap %s)\n",
              cache::format_size(stats->bytes).c_str(),
              cache::format_size(stats->raw_bytes).c_str(),
              c->max_size() ? cache::format_size(c->max_size()).c_str() : "none");
  std::printf("on disk       %s (kiln.db %s + WAL %s; free pages %s)\n",
              cache::format_size(stats->database_file_bytes + stats->wal_file_bytes).c_str(),
              cache::format_size(stats->database_file_bytes).c_str(),
              cache::format_size(stats->wal_file_bytes).c_str(),
              cache::format_size(stats->free_bytes).c_str());
  uint64_t lookups = stats->hits + stats->misses;
  if (lookups)
    std::printf("hits          %llu (%.1f%% of %llu lookups)\n",
                static_cast<unsigned long long>(stats->hits), 100.0 * hit_rate(*stats),
                static_cast<unsigned long long>(lookups));
  else
    std::printf("hits          0 (no lookups yet)\n");
  std::printf("misses        %llu\n", static_cast<unsigned long long>(stats->misses));
  std::printf("errors        %llu\n", static_cast<unsigned long long>(stats->errors));
  std::printf("time saved    %.3f s of CPU (each hit: the CPU time its entry's compile took)\n",
              static_cast<double>(stats->time_saved_ms) / 1000.0);
  auto count = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("remote        %s\n",
              c->has_remote() ? c->remote_description().c_str() : "none (KILN_REMOTE_CACHE)");
  std::printf("remote hits   %llu (misses %llu, errors %llu, rejected %llu, puts %llu)\n",
              count(stats->remote_hits), count(stats->remote_misses), count(stats->remote_errors),
              count(stats->remote_rejected), count(stats->remote_puts));
  if (stats->zeroed_ms) std::printf("since         %s\n", iso_time(stats->zeroed_ms).c_str());
  return k_exit_ok;
}

// What an entry was compiled for: its CUDA arch ("sm_90") or CPU target ("cpu:znver4").
std::string entry_target(const cache::EntryInfo& e) {
  std::string arch = e.field("arch");
  return arch.empty() ? e.field("target") : arch;
}

int run_ls(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  auto entries = c->list();
  if (!entries) return fail(entries.error().message, k_exit_failure);
  if (args.json) {
    json list = json::array();
    for (const cache::EntryInfo& e : *entries)
      list.push_back({{"key", e.key},
                      {"graph", e.field("graph_hash")},
                      {"arch", entry_target(e)},
                      {"precision", e.field("precision")},
                      {"size", e.stored_bytes},
                      {"compile_ms", e.compile_ms},
                      {"hits", e.hits},
                      {"created", iso_time(e.created_ms)},
                      {"last_used", iso_time(e.last_used_ms)}});
    // A symbolic graph's bucket, as its key field says it ("dim0 in [33, 64], ...").
    for (size_t i = 0; i < entries->size(); ++i) {
      std::string dims = (*entries)[i].field("dims");
      if (!dims.empty()) list[i]["dims"] = dims;
      // A tuning record (kiln tune): its problem and device.
      std::string tuning = (*entries)[i].field("tuning");
      if (!tuning.empty()) {
        list[i]["tuning"] = tuning;
        list[i]["device"] = (*entries)[i].field("device");
      }
    }
    std::printf("%s\n", dump(json{{"entries", list}}).c_str());
    return k_exit_ok;
  }
  std::printf("%-32s  %-12s  %-7s  %-9s  %10s  %10s  %6s  %-24s  %s\n", "KEY", "GRAPH", "ARCH",
              "PRECISION", "SIZE", "COMPILE_MS", "HITS", "LAST_USED", "DIMS");
  for (const cache::EntryInfo& e : *entries) {
    // A symbolic graph's bucket as "dim0=33..64,dim1=1..1"; "-" for a static graph.
    std::string dims;
    if (auto bucket = compiler::parse_dims_key(e.field("dims"))) {
      for (size_t i = 0; i < bucket->size(); ++i)
        dims += (i ? ",dim" : "dim") + std::to_string(i) + "=" + std::to_string((*bucket)[i].lo) +
                ".." + std::to_string((*bucket)[i].hi);
    }
    // A tuning record has no graph: "(tuning)" stands in its column.
    bool tuning = !e.field("tuning").empty();
    std::printf("%-32s  %-12.12s  %-7s  %-9s  %10s  %10lld  %6lld  %-24s  %s\n", e.key.c_str(),
                tuning ? "(tuning)" : e.field("graph_hash").c_str(), entry_target(e).c_str(),
                e.field("precision").c_str(), cache::format_size(e.stored_bytes).c_str(),
                static_cast<long long>(e.compile_ms), static_cast<long long>(e.hits),
                iso_time(e.last_used_ms).c_str(), dims.empty() ? "-" : dims.c_str());
  }
  return k_exit_ok;
}

// Prints the payloads `show --source/--ptx/--log` asked for; 1 when there are none.
int print_payloads(const cache::Entry& entry, const CacheArgs& args) {
  std::vector<const cache::Payload*> chosen;
  for (const cache::Payload& p : entry.payloads) {
    bool is_ptx = p.name == "ptx" || p.name.rfind(cache::k_payload_ptx_prefix, 0) == 0;
    if ((args.ptx && is_ptx) || (args.source && p.name == cache::k_payload_source) ||
        (args.log && p.name == cache::k_payload_log))
      chosen.push_back(&p);
  }
  const char* what = args.ptx ? "ptx" : args.source ? "source" : "log";
  if (chosen.empty()) return fail("entry " + entry.info.key + " holds no " + what, k_exit_failure);
  for (const cache::Payload* p : chosen) {
    if (chosen.size() > 1) std::printf("// %s\n", p->name.c_str());
    std::fwrite(p->bytes.data(), 1, p->bytes.size(), stdout);
    if (!p->bytes.empty() && p->bytes.back() != '\n') std::printf("\n");
  }
  return k_exit_ok;
}

int print_entry(const cache::Entry& entry, bool as_json) {
  const cache::EntryInfo& info = entry.info;
  json summary = json::parse(info.summary, nullptr, false);
  if (summary.is_discarded()) summary = info.summary;
  if (as_json) {
    json fields = json::object();
    for (const cache::KeyField& f : info.fields)
      fields[f.name] = printable(f.value) ? json(f.value) : json{{"size", f.value.size()}};
    json payloads = json::array();
    for (const cache::Payload& p : entry.payloads)
      payloads.push_back({{"name", p.name}, {"size", p.bytes.size()}});
    json j = {{"key", info.key},
              {"fields", fields},
              {"summary", summary},
              {"payloads", payloads},
              {"size", info.stored_bytes},
              {"raw_size", info.raw_bytes},
              {"compile_ms", info.compile_ms},
              {"hits", info.hits},
              {"created", iso_time(info.created_ms)},
              {"last_used", iso_time(info.last_used_ms)}};
    std::printf("%s\n", dump(j).c_str());
    return k_exit_ok;
  }
  std::printf("key         %s\n", info.key.c_str());
  std::printf("created     %s\n", iso_time(info.created_ms).c_str());
  std::printf("last used   %s\n", iso_time(info.last_used_ms).c_str());
  std::printf("hits        %lld\n", static_cast<long long>(info.hits));
  std::printf("compile     %lld ms\n", static_cast<long long>(info.compile_ms));
  std::printf("size        %s (%s uncompressed)\n", cache::format_size(info.stored_bytes).c_str(),
              cache::format_size(info.raw_bytes).c_str());
  std::printf("fields\n");
  for (const cache::KeyField& f : info.fields)
    std::printf("  %-16s %s\n", f.name.c_str(),
                printable(f.value) ? f.value.c_str()
                                   : ("<" + std::to_string(f.value.size()) + " bytes>").c_str());
  std::printf("payloads\n");
  for (const cache::Payload& p : entry.payloads)
    std::printf("  %-16s %s\n", p.name.c_str(), cache::format_size(p.bytes.size()).c_str());
  std::printf("summary\n%s\n", dump(summary).c_str());
  return k_exit_ok;
}

int run_show(const CacheArgs& args) {
  if (!cache::is_key_prefix(args.target))
    return fail("'" + args.target + "' is not a key or key prefix (lower-case hex digits)",
                k_exit_usage);
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  auto keys = c->keys_with_prefix(args.target);
  if (!keys) return fail(keys.error().message, k_exit_failure);
  if (keys->empty()) return fail("no cache entry matches '" + args.target + "'", k_exit_failure);
  if (keys->size() > 1)
    return fail("key prefix '" + args.target + "' matches several entries; give more digits",
                k_exit_usage);
  cache::Lookup found = c->read(keys->front());
  if (!found.hit())
    return fail("entry " + keys->front() + " could not be read" +
                    (found.failure.empty() ? "" : ": " + found.failure),
                k_exit_failure);
  if (args.graph_text) {
    // The cached graph's canonical text, rebuilt from the canonical bytes the key hashes.
    std::string bytes = found.entry.info.field("graph");
    auto graph = ir::graph_from_canonical(bytes, "cached");
    if (!graph) return fail("entry " + keys->front() + ": " + graph.error().message, k_exit_failure);
    std::fputs(ir::print_graph(*graph).c_str(), stdout);
    return k_exit_ok;
  }
  if (args.source || args.ptx || args.log) return print_payloads(found.entry, args);
  return print_entry(found.entry, args.json);
}

int print_removed(const cache::PruneReport& report) {
  if (report.replaced_database && report.disk_full)
    std::printf("the disk is full, which leaves no room to remove entries one by one: removed "
                "the database and started an empty one\n");
  else if (report.replaced_database)
    std::printf("the database was malformed: started an empty one\n");
  else
    std::printf("removed %llu entries (%s)\n", static_cast<unsigned long long>(report.removed),
                cache::format_size(report.freed_bytes).c_str());
  std::printf("on disk %s -> %s (kiln.db and its WAL)\n",
              cache::format_size(report.disk_bytes_before).c_str(),
              cache::format_size(report.disk_bytes_after).c_str());
  return k_exit_ok;
}

int run_prune(const CacheArgs& args) {
  std::optional<uint64_t> max_size, older_than;
  if (!args.max_size.empty()) {
    auto size = cache::parse_size(args.max_size);
    if (!size) return fail("--max-size: " + size.error().message, k_exit_usage);
    max_size = *size;
  }
  if (!args.older_than.empty()) {
    auto age = cache::parse_duration(args.older_than);
    if (!age) return fail("--older-than: " + age.error().message, k_exit_usage);
    older_than = *age;
  }
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  if (!max_size && !older_than && c->max_size() != 0) max_size = c->max_size();
  auto report = c->prune(max_size, older_than);
  if (!report) return fail(report.error().message, k_exit_failure);
  return print_removed(*report);
}

int run_clear(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  auto report = c->clear();
  if (!report) return fail(report.error().message, k_exit_failure);
  return print_removed(*report);
}

int run_verify(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  auto report = c->verify(args.fix ? cache::Fix::yes : cache::Fix::no, runtime::entry_problem);
  if (!report) return fail(report.error().message, k_exit_failure);
  int code = report->bad.empty() && report->database.empty() ? k_exit_ok : k_exit_failure;
  if (args.json) {
    json bad = json::array();
    for (const cache::BadEntry& b : report->bad) {
      json item{{"key", b.key}, {"reason", b.reason}};
      if (b.replaced) item["replaced"] = true;
      bad.push_back(std::move(item));
    }
    json out{{"checked", report->checked}, {"bad", bad}, {"removed", report->removed}};
    if (!report->database.empty()) out["database"] = report->database;
    std::printf("%s\n", dump(out).c_str());
    return code;
  }
  if (!report->database.empty()) {
    std::printf("%s\n", report->database.c_str());
    std::printf(report->removed ? "moved the database aside and started an empty one\n"
                                : "kiln verify --fix moves it aside and starts an empty one\n");
    return code;
  }
  size_t left = 0;
  for (const cache::BadEntry& b : report->bad) {
    left += b.replaced ? 1 : 0;
    std::printf("%s %s: %s%s\n", args.fix && !b.replaced ? "removed" : "bad", b.key.c_str(),
                b.reason.c_str(),
                b.replaced ? " (left alone: another process replaced it after the check)" : "");
  }
  std::printf("checked %llu entries, %zu bad", static_cast<unsigned long long>(report->checked),
              report->bad.size());
  if (args.fix && !report->bad.empty())
    std::printf(", %zu removed, %zu left alone", report->bad.size() - left, left);
  std::printf("\n");
  return code;
}

int run_export(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  std::error_code ec;
  if (std::filesystem::equivalent(args.target, c->db_path(), ec)) {
    return fail("refusing to export over the cache's own database " + c->db_path(), k_exit_usage);
  }
  const std::string exists = "'" + args.target + "' exists";
  auto refused = [&](const Error& error) {
    if (error.message == exists) return fail(exists + "; pass --force to replace it", k_exit_usage);
    if (error.message.find("' is not a regular file;") != std::string::npos)
      return fail(error.message, k_exit_usage);
    return fail(error.message, k_exit_failure);
  };
  // One entry in memory at a time, into a temporary renamed into place at the end.
  auto writer = cache::BundleWriter::create(args.target,
                                            args.force ? cache::Replace::yes : cache::Replace::no);
  if (!writer) return refused(writer.error());
  auto taken = c->export_to([&](const cache::StoredEntry& e) { return (*writer)->add(e); });
  if (!taken) return fail(taken.error().message, k_exit_failure);
  if (Status written = (*writer)->finish(); !written) return refused(written.error());
  std::printf("exported %llu entries to %s\n", static_cast<unsigned long long>(*taken),
              args.target.c_str());
  return k_exit_ok;
}

int run_import(const CacheArgs& args) {
  // Read through twice, one entry in memory at a time (a bundle may be as large as a cache):
  // first to check it all, the file checksum last, so that a bundle refused leaves no trace
  // (the cache is not opened); then to import it, each entry's record the one checked (its
  // fingerprint from the first read) and checked again.
  auto checking = cache::BundleReader::open(args.target);
  if (!checking) return fail(checking.error().message, k_exit_usage);
  // A bundle is checksummed, not signed: its CPU-target entries are machine code that `kiln run`
  // would execute as this user, so taking them is the user's explicit decision.
  size_t natives = 0;
  // An entry the runtime would not load (runtime::foreign_entry_problem, which the cache would
  // run).
  std::string problem;
  std::vector<cache::Fingerprint> records;
  for (;;) {
    auto entry = (*checking)->next();
    if (!entry) return fail(entry.error().message, k_exit_usage);
    if (!*entry) break;
    records.push_back((*checking)->record_fingerprint());
    if (cache::holds_native_code(**entry)) ++natives;
    if (problem.empty()) {
      if (std::string why = runtime::foreign_entry_problem(**entry); !why.empty())
        problem = "entry " + (*entry)->info.key + ": " + why;
    }
  }
  if (natives && !args.allow_native) {
    return fail("'" + args.target + "' holds " + std::to_string(natives) +
                    " CPU-target or emulated entries (host machine code, or kernel text kiln "
                    "builds into it, which kiln run executes as you; a bundle carries no "
                    "signature); pass --allow-native-code to import them from a source you trust",
                k_exit_usage);
  }
  auto refuse = [&](const std::string& why) {
    return fail("bad bundle '" + args.target + "': " + why + "; nothing was imported (`kiln " +
                    "verify --fix` where it was exported drops such entries)",
                k_exit_usage);
  };
  if (!problem.empty()) return refuse(problem);
  auto importing = cache::BundleReader::open(args.target);
  if (!importing) {
    return fail("'" + args.target + "' changed while it was checked (" +
                    importing.error().message + "); nothing was imported",
                k_exit_failure);
  }
  if ((*importing)->identity() != (*checking)->identity())
    return fail("'" + args.target + "' changed while it was checked; nothing was imported",
                k_exit_failure);
  (*importing)->expect(std::move(records));
  auto c = open_cache(args, true);
  if (!c) return k_exit_failure;
  // The checks again, on what is stored: a file rewritten during this read stops the import at
  // the first entry unlike the one checked, and no entry gets in unchecked.
  auto report = c->import_from([&]() -> Expected<std::optional<cache::StoredEntry>> {
    auto entry = (*importing)->next();
    if (!entry || !*entry) return entry;
    if (cache::holds_native_code(**entry) && !args.allow_native)
      return make_error("entry ", (*entry)->info.key, " holds host code and --allow-native-code "
                        "was not given");
    if (std::string why = runtime::foreign_entry_problem(**entry); !why.empty())
      return make_error("entry ", (*entry)->info.key, ": ", why);
    return entry;
  });
  if (!report) return fail(report.error().message, k_exit_failure);
  if (!report->stopped.empty()) {
    return fail("the import stopped after " + std::to_string(report->imported) +
                    " entries, which stay imported: " + report->stopped,
                k_exit_failure);
  }
  std::printf("imported %llu entries (%llu already present)\n",
              static_cast<unsigned long long>(report->imported),
              static_cast<unsigned long long>(report->already_present));
  if (report->too_large)
    std::printf("%llu entries not imported: each is larger than the size cap (%s)\n",
                static_cast<unsigned long long>(report->too_large),
                cache::format_size(c->max_size()).c_str());
  if (report->evicted)
    std::printf("%llu entries evicted to keep the cache within its size cap (%s), the least "
                "recently used first\n",
                static_cast<unsigned long long>(report->evicted),
                cache::format_size(c->max_size()).c_str());
  return k_exit_ok;
}

int run_push(const CacheArgs& args) {
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  if (!c->has_remote()) return fail("no remote cache (set KILN_REMOTE_CACHE or --remote)", k_exit_usage);
  auto report = c->push();
  if (!report) return fail(report.error().message, k_exit_failure);
  std::printf("pushed %llu entries to %s (%llu bad ones skipped)\n",
              static_cast<unsigned long long>(report->pushed), c->remote_description().c_str(),
              static_cast<unsigned long long>(report->skipped_bad));
  if (report->skipped_native)
    std::printf("%llu CPU-target or emulated entries not pushed: host code is shared only signed "
                "(set KILN_REMOTE_KEY)\n",
                static_cast<unsigned long long>(report->skipped_native));
  return report->skipped_bad ? k_exit_failure : k_exit_ok;
}

int run_pull(const CacheArgs& args) {
  if (!args.graph.empty() && (args.graph.size() != 32 || !cache::is_key_prefix(args.graph)))
    return fail("--graph expects a graph hash of 32 hex digits (kiln hash FILE)",
                k_exit_usage);
  auto c = open_cache(args);
  if (!c) return k_exit_failure;
  if (!c->has_remote()) return fail("no remote cache (set KILN_REMOTE_CACHE or --remote)", k_exit_usage);
  std::optional<std::string> graph;
  if (!args.graph.empty()) graph = args.graph;
  auto report = c->pull(graph);
  if (!report) return fail(report.error().message, k_exit_failure);
  std::printf("pulled %llu entries from %s (%llu already present, %llu rejected)\n",
              static_cast<unsigned long long>(report->pulled), c->remote_description().c_str(),
              static_cast<unsigned long long>(report->already_present),
              static_cast<unsigned long long>(report->rejected));
  if (report->needs_key)
    std::printf("%llu CPU-target or emulated entries not pulled: host code is taken only signed "
                "(set KILN_REMOTE_KEY)\n",
                static_cast<unsigned long long>(report->needs_key));
  if (report->stopped) {
    auto budget = std::chrono::duration_cast<std::chrono::seconds>(
        cache::Options().remote_pull_budget);
    return fail("stopped after " + std::to_string(budget.count()) + " s, " +
                    std::to_string(report->read) + " of " + std::to_string(report->listed) +
                    " keys read; run kiln pull again to go on (it skips the entries already here)",
                k_exit_failure);
  }
  return report->rejected ? k_exit_failure : k_exit_ok;
}

}  // namespace

void register_cache_commands(CLI::App& app, int& exit_code) {
  struct Command {
    const char* name;
    const char* help;
    int (*run)(const CacheArgs&);
  };
  static const Command k_commands[] = {
      {"stats", "print cache statistics (hits, misses, entries, bytes, time saved, errors)",
       run_stats},
      {"ls", "list cache entries, most recently used first", run_ls},
      {"show", "print one cache entry, or its source, PTX or log", run_show},
      {"prune", "evict entries by age and then least recently used down to a size", run_prune},
      {"clear", "remove every cache entry", run_clear},
      {"verify", "check every entry's checksums and that it decodes (exit 1 and a list when any is "
                 "bad)", run_verify},
      {"export", "write every cache entry to one bundle file", run_export},
      {"import", "add the entries of a bundle file (every checksum is verified first)", run_import},
      {"push", "upload every local entry to the remote cache (pre-warm a fleet)", run_push},
      {"pull", "fill the local cache from the remote cache (every entry is verified)", run_pull},
  };
  for (const Command& command : k_commands) {
    auto args = std::make_shared<CacheArgs>();
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    add_cache_dir_option(sub, args->dir,
                    "cache directory (default: $KILN_CACHE_DIR, "
                    "$XDG_CACHE_HOME/kiln, ~/.cache/kiln)")
        ->type_name("DIR");
    add_remote_option(sub, args->remote);
    std::string name = command.name;
    CLI::Option* json = nullptr;
    if (name == "stats" || name == "ls" || name == "show" || name == "verify")
      json = sub->add_flag("--json", args->json, "print JSON");
    if (name == "stats") sub->add_flag("--zero", args->zero, "zero the counters");
    if (name == "show") {
      sub->add_option("KEY", args->target, "a key or a unique prefix of one")->required();
      auto* source = sub->add_flag("--source", args->source, "print the generated source");
      auto* ptx = sub->add_flag("--ptx", args->ptx, "print the PTX of every kernel");
      auto* log = sub->add_flag("--log", args->log, "print the compiler log");
      auto* graph = sub->add_flag("--graph", args->graph_text, "print the cached graph's canonical text");
      source->excludes(ptx)->excludes(log)->excludes(graph);
      ptx->excludes(log)->excludes(graph);
      log->excludes(graph);
      // Those print text as it is; --json describes the entry (it was ignored beside them).
      json->excludes(source)->excludes(ptx)->excludes(log)->excludes(graph);
    }
    if (name == "prune") {
      sub->add_option("--max-size", args->max_size,
                      "evict least recently used entries down to SIZE (500M, 2G, 0); "
                      "without options: down to the cache's size cap")
          ->type_name("SIZE")
          ->check(not_empty);
      sub->add_option("--older-than", args->older_than,
                      "evict entries unused for DURATION (30d, 12h, 15m, 45s)")
          ->type_name("DURATION")
          ->check(not_empty);
    }
    if (name == "verify") sub->add_flag("--fix", args->fix, "remove the bad entries");
    if (name == "pull")
      sub->add_option("--graph", args->graph, "only the entries of this graph hash")
          ->type_name("HASH")
          ->check(not_empty);
    if (name == "export" || name == "import")
      sub->add_option("FILE", args->target, "bundle file")->required();
    if (name == "export") sub->add_flag("--force", args->force, "replace FILE if it exists");
    if (name == "import")
      sub->add_flag("--allow-native-code", args->allow_native,
                    "also import CPU-target and emulated entries (host code; a bundle is not "
                    "signed, so only from a source you trust)");
    args->create = name == "import" || name == "pull";
    auto run = command.run;
    sub->callback([args, run, &exit_code] { exit_code = run(*args); });
  }
}

}  // namespace kiln::tools
