// The emulator's shim cache (KILN_EMU_CACHE_DIR, emulation/module.cpp): a module builds its
// kernels against a shim compiled once and kept; the result runs as the whole-program build's
// does; edited shims, damaged entries and folders others can write are never used.
#include "emulation/module.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::emulation {
namespace {

namespace fs = std::filesystem;

const char* k_kernel =
    "extern \"C\" __global__ void kiln_lanes(float* out) {\n"
    "  out[threadIdx.x] = (float)threadIdx.x * 2.0f + (float)__shfl_xor_sync(0xffffffffu, "
    "(int)threadIdx.x, 1);\n"
    "}\n";

// What the lanes kernel writes.
std::vector<float> expected_lanes() {
  std::vector<float> v(32);
  for (int lane = 0; lane < 32; ++lane) v[lane] = lane * 2.0f + (lane ^ 1);
  return v;
}

// A private folder, with KILN_EMU_CACHE_DIR pointing into it while this lives (the value it had
// comes back after).
class CacheFolder {
 public:
  CacheFolder() {
    char pattern[] = "/tmp/kiln-emu-cache-test-XXXXXX";
    m_root = mkdtemp(pattern);
    m_cache = m_root + "/cache";
    if (const char* old = std::getenv("KILN_EMU_CACHE_DIR")) m_old = old;
    setenv("KILN_EMU_CACHE_DIR", m_cache.c_str(), 1);
    // A compiler that logs each command line, runs g++, and keeps a copy of the kernels' object.
    m_compiler = m_root + "/logging-g++";
    std::ofstream script(m_compiler);
    script << "#!/bin/sh\necho \"$*\" >> '" << m_root << "/commands'\ng++ \"$@\" || exit $?\n"
           << "for a; do case \"$a\" in *kernels.o) cp \"$a\" '" << m_root << "/kernels.o';; esac; "
           << "done\n";
    script.close();
    chmod(m_compiler.c_str(), 0700);
  }
  ~CacheFolder() {
    if (m_old) setenv("KILN_EMU_CACHE_DIR", m_old->c_str(), 1);
    else unsetenv("KILN_EMU_CACHE_DIR");
    std::error_code ignored;
    fs::remove_all(m_root, ignored);
  }
  const std::string& cache() const { return m_cache; }
  // The kernels' object of the last module built against an entry.
  std::string kernels_object() const { return m_root + "/kernels.o"; }
  const std::string& compiler() const { return m_compiler; }

  // Builds the lanes kernel with `options` and this folder's logging compiler, and runs it over
  // one warp: "" and each lane's value in `out`, or the error.
  std::string run_lanes(ModuleOptions options, std::vector<float>* out) {
    options.compiler = m_compiler;
    options.sm = 80;
    options.entries = {"kiln_lanes"};
    auto module = compile_module(k_kernel, options);
    if (!module) return module.error().message;
    out->assign(32, -1.0f);
    compiler::LaunchShape shape;
    shape.block = {32, 1, 1};
    Status status = (*module)->launch("kiln_lanes", shape, {out->data()}, {{out->data(), 32 * 4}});
    return status.ok() ? "" : status.error().message;
  }

  // run_lanes's values, an empty vector (and a failure) where it does not run.
  std::vector<float> lanes(const ModuleOptions& options = {}) {
    std::vector<float> out;
    std::string error = run_lanes(options, &out);
    if (!error.empty()) {
      ADD_FAILURE() << error;
      return {};
    }
    return out;
  }

  // The compiler's command lines since the last call.
  std::vector<std::string> commands() {
    std::vector<std::string> lines;
    std::ifstream in(m_root + "/commands");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    fs::remove(m_root + "/commands");
    return lines;
  }

  // The cache's entries (folders named by a 32-digit hash).
  std::vector<fs::path> entries() const {
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(m_cache, ec))
      if (e.path().filename().string().size() == 32) found.push_back(e.path());
    return found;
  }

 private:
  std::string m_root, m_cache, m_compiler;
  std::optional<std::string> m_old;
};

bool contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

TEST(EmulatorShimCache, TheSecondModuleCompilesOnlyItsKernelsAgainstTheCachedShim) {
  CacheFolder folder;
  EXPECT_EQ(folder.lanes(), expected_lanes());
  std::vector<std::string> first = folder.commands();
  // The shim's object and precompiled header, then the kernels and the link.
  EXPECT_TRUE(contains(first, "shim_exports.cpp")) << first.size();
  EXPECT_TRUE(contains(first, "-x c++-header"));
  ASSERT_EQ(folder.entries().size(), 1u);
  fs::path entry = folder.entries()[0];
  EXPECT_TRUE(fs::exists(entry / "shim.o"));
  EXPECT_TRUE(fs::exists(entry / "cuda_host.h.gch"));
  EXPECT_TRUE(fs::exists(entry / "kiln_emu_sum.h"));
  // GCC reads the precompiled header where it is valid, and ignores it silently where not: with
  // the header itself gone, the kernels compile only through it.
  fs::remove(entry / "cuda_host.h");

  EXPECT_EQ(folder.lanes(), expected_lanes());
  std::vector<std::string> second = folder.commands();
  EXPECT_FALSE(contains(second, "shim_exports.cpp"));
  EXPECT_FALSE(contains(second, "-x c++-header"));
  ASSERT_EQ(second.size(), 2u) << "the kernels, the link";
  EXPECT_TRUE(contains(second, "-c -I " + entry.string()));
  EXPECT_TRUE(contains(second, entry.string() + "/shim.o"));
  EXPECT_EQ(folder.entries().size(), 1u);

  // Other flags (another arch) are another entry.
  ModuleOptions nearest;
  nearest.shim.mma_sum = MmaSum::nearest;
  EXPECT_EQ(folder.lanes(nearest), expected_lanes());
  EXPECT_EQ(folder.entries().size(), 2u);
}

// `nm`'s line for the function `name` itself (demangled: "ADDRESS T name(params)"; not a lambda
// or clone inside it) in `object`, or "".
std::string symbol_line(const std::string& object, const std::string& name) {
  std::string command = "nm -C '" + object + "' 2>&1";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    std::string found;
    char buffer[4096];
    while (found.empty() && std::fgets(buffer, sizeof buffer, pipe)) {
      std::string line = buffer;
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      // 16 address digits (blank where undefined), the kind letter, the symbol.
      if (line.size() < 19 || line[16] != ' ' || line[18] != ' ') continue;
      std::string symbol = line.substr(19);
      if (symbol.rfind(name + "(", 0) == 0 && symbol.back() == ')' &&
          symbol.find(")::") == std::string::npos && symbol.find("[clone") == std::string::npos)
        found = line;
    }
    pclose(pipe);
    return found;
  }
  return "";
}

// The shim's entry points the kernels call are compiled once, into the entry's shim.o: the
// kernels' object only calls them. The lanes kernel's __shfl_xor_sync reaches the warp
// collective through kiln_emu::collective.
TEST(EmulatorShimCache, TheShimsEntryPointsAreCompiledOnceIntoTheEntry) {
  CacheFolder folder;
  EXPECT_EQ(folder.lanes(), expected_lanes());
  ASSERT_EQ(folder.entries().size(), 1u);
  std::string shim = (folder.entries()[0] / "shim.o").string();
  ASSERT_TRUE(fs::exists(folder.kernels_object()));
  EXPECT_NE(symbol_line(shim, "kiln_emu::collective").find(" T "), std::string::npos)
      << symbol_line(shim, "kiln_emu::collective");
  EXPECT_NE(symbol_line(shim, "kiln_emu::wgmma").find(" T "), std::string::npos);
  std::string called = symbol_line(folder.kernels_object(), "kiln_emu::collective");
  EXPECT_NE(called.find(" U "), std::string::npos) << called;
  EXPECT_EQ(symbol_line(folder.kernels_object(), "kiln_emu::complete_shuffle"), "");
}

TEST(EmulatorShimCache, AnEditedShimIsBuiltWholeAndNotKept) {
  CacheFolder folder;
  ModuleOptions options;
  // An edit that changes the result: shuffles read the lane itself.
  options.shim.edits = {{"kiln_emu_warp.h",
                         "case shfl_xor: src = (lane ^ s.arg) < base + width ? lane ^ s.arg : lane;",
                         "case shfl_xor: src = lane;"}};
  std::vector<float> out = folder.lanes(options);
  ASSERT_EQ(out.size(), 32u);
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[lane], lane * 3.0f) << lane;
  EXPECT_TRUE(folder.entries().empty());
  EXPECT_FALSE(contains(folder.commands(), "shim_exports.cpp"));
  // The unedited shim after it is cached and right.
  EXPECT_EQ(folder.lanes(), expected_lanes());
  EXPECT_EQ(folder.entries().size(), 1u);
}

TEST(EmulatorShimCache, ADamagedEntryFallsBackToTheWholeBuild) {
  CacheFolder folder;
  EXPECT_EQ(folder.lanes(), expected_lanes());
  ASSERT_EQ(folder.entries().size(), 1u);
  std::ofstream(folder.entries()[0] / "shim.o") << "not an object";
  folder.commands();
  EXPECT_EQ(folder.lanes(), expected_lanes());
  // The link failed, the entry went, and the whole program was built; the next module builds
  // the entry again.
  EXPECT_TRUE(contains(folder.commands(), "-shared -I"));
  EXPECT_TRUE(folder.entries().empty());
  EXPECT_EQ(folder.lanes(), expected_lanes());
  EXPECT_EQ(folder.entries().size(), 1u);
}

TEST(EmulatorShimCache, ANewEntryKeepsTheMostRecentlyUsedAndClearsStaleBuilders) {
  CacheFolder folder;
  ASSERT_EQ(mkdir(folder.cache().c_str(), 0700), 0);
  // 30 old entries, the last written the most recently, a builder's folder left for a day, and
  // two folders the cache did not make (no shim_exports.cpp), which stay.
  auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(48);
  auto old_folder = [&](const std::string& name, bool ours, int minutes) {
    fs::path path = fs::path(folder.cache()) / name;
    fs::create_directory(path);
    if (ours) std::ofstream(path / "shim_exports.cpp") << "// made by the cache\n";
    fs::last_write_time(path, long_ago + std::chrono::minutes(minutes));
    return path;
  };
  std::vector<fs::path> old;
  for (int i = 0; i < 30; ++i) {
    char name[40];
    std::snprintf(name, sizeof name, "%032x", i + 1);
    old.push_back(old_folder(name, true, i));
  }
  fs::path builder = old_folder("building-abc123", true, 0);
  fs::path not_ours = old_folder(std::string(32, '0'), false, 0);
  fs::path not_ours_either = old_folder("building-of-something-else", false, 0);
  EXPECT_EQ(folder.lanes(), expected_lanes());
  EXPECT_EQ(folder.entries().size(), 25u) << "24 entries and the folder that is not one";
  EXPECT_FALSE(fs::exists(builder));
  EXPECT_TRUE(fs::exists(not_ours));
  EXPECT_TRUE(fs::exists(not_ours_either));
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(fs::exists(old[i])) << i;  // the 7 oldest went
  for (int i = 7; i < 30; ++i) EXPECT_TRUE(fs::exists(old[i])) << i;
}

TEST(EmulatorShimCache, BadKernelTextIsTheWholeBuildsErrorAndTheEntryStays) {
  CacheFolder folder;
  EXPECT_EQ(folder.lanes(), expected_lanes());
  ASSERT_EQ(folder.entries().size(), 1u);
  folder.commands();
  ModuleOptions options;
  options.compiler = folder.compiler();
  options.sm = 80;  // run_lanes's arch: the same entry
  options.entries = {"kiln_bad"};
  auto module = compile_module("extern \"C\" __global__ void kiln_bad(float* p) { p[0] = nope; }\n",
                               options);
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.error().message.find("nope"), std::string::npos) << module.error().message;
  EXPECT_NE(module.error().message.find("kernels.cu"), std::string::npos) << module.error().message;
  EXPECT_TRUE(contains(folder.commands(), "-shared -I")) << "the whole build, whose errors are told";
  EXPECT_EQ(folder.entries().size(), 1u);
}

TEST(EmulatorShimCache, AFolderOthersCanWriteIsNotUsed) {
  CacheFolder folder;
  fs::create_directories(folder.cache());
  chmod(folder.cache().c_str(), 0777);
  ::testing::internal::CaptureStderr();
  std::vector<float> out;
  std::string result = folder.run_lanes({}, &out);
  std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(result, "");
  EXPECT_EQ(out, expected_lanes());
  EXPECT_TRUE(fs::is_empty(folder.cache()));
  EXPECT_FALSE(contains(folder.commands(), "shim_exports.cpp"));
  EXPECT_NE(said.find("is writable by other users"), std::string::npos) << said;
  EXPECT_NE(said.find("chmod go-w"), std::string::npos) << said;
}

}  // namespace
}  // namespace kiln::emulation
