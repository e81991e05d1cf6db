// NVRTC loading: a missing library is a clear error; the search honours KILN_NVRTC_PATH exactly.
#include "compiler/nvrtc.h"

#include "compiler/compiler.h"
#include "compiler/prelude.h"
#include "compiler/schedule.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

// A fresh folder under /tmp, removed with its contents.
class StoreDir {
 public:
  StoreDir() {
    char name[] = "/tmp/kiln-kernel-store-XXXXXX";
    m_path = ::mkdtemp(name) ? name : "";
  }
  ~StoreDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const std::string& path() const { return m_path; }
  // The entries' file names, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(m_path)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string m_path;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// `log` without ptxas's "Compile time = ... ms" lines, which differ from compile to compile.
std::string without_times(const std::string& log) {
  std::string out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("Compile time =") == std::string::npos) out += line + "\n";
  return out;
}

// Two kernels: an f16 matmul, then a softmax of its rows.
ir::Graph matmul_then_softmax() {
  return test::parse(R"(graph g {
    input a: f16[64, 96]
    input b: f16[96, 128]
    y = softmax(matmul(a, b), axis=1)
    output y
  })");
}

// Sets KILN_KERNEL_CACHE_DIR (unset for ""), and puts back what it was.
class KernelCacheEnv {
 public:
  explicit KernelCacheEnv(const std::string& dir) {
    if (const char* was = std::getenv("KILN_KERNEL_CACHE_DIR")) m_was = was;
    set(dir);
  }
  ~KernelCacheEnv() { set(m_was ? *m_was : ""); }
  static void set(const std::string& dir) {
    if (dir.empty()) ::unsetenv("KILN_KERNEL_CACHE_DIR");
    else ::setenv("KILN_KERNEL_CACHE_DIR", dir.c_str(), 1);
  }

 private:
  std::optional<std::string> m_was;
};

TEST(Nvrtc, ExplicitMissingPathIsAnErrorNamingNvrtc) {
  auto lib = load_nvrtc("/nonexistent/libnvrtc.so.13");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("NVRTC"), std::string::npos) << lib.error().message;
  EXPECT_NE(lib.error().message.find("/nonexistent/libnvrtc.so.13"), std::string::npos);
}

TEST(Nvrtc, EnvironmentPathIsTheOnlyPlaceTried) {
  ::setenv("KILN_NVRTC_PATH", "/nonexistent/libnvrtc.so", 1);
  auto lib = load_nvrtc();
  ::unsetenv("KILN_NVRTC_PATH");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().message.find("/usr/local/cuda"), std::string::npos) << lib.error().message;
}

TEST(Nvrtc, CompileWithoutNvrtcFailsWithAClearError) {
  CompileOptions o = test::options(90, ir::Precision::high);
  o.nvrtc_path = "/nonexistent/libnvrtc.so";
  auto artifact = compile(test::example("mlp"), o);
  ASSERT_FALSE(artifact.ok());
  EXPECT_NE(artifact.error().message.find("nvrtc"), std::string::npos);
}

TEST(Nvrtc, LowerWorksWithoutNvrtc) {
  CompileOptions o = test::options(90, ir::Precision::high);
  o.nvrtc_path = "/nonexistent/libnvrtc.so";
  EXPECT_TRUE(lower(test::example("mlp"), o).ok());
}

TEST(Nvrtc, ListsTheArchitecturesItSupports) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  const auto& archs = (*lib)->archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 80), archs.end());
  EXPECT_FALSE((*lib)->version().empty());
}

TEST(Nvrtc, IdentityNamesTheLibraryFileWithoutLoadingIt) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto id = nvrtc_identity();
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->rfind("libnvrtc", 0), 0u) << *id;
  // The same file, found through the loaded library, gives the same identity.
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ((*lib)->identity(), *id);
  EXPECT_FALSE(nvrtc_identity("/nonexistent/libnvrtc.so").ok());
}

TEST(Nvrtc, UnsupportedArchIsRefusedByName) {
  auto program = lower(test::example("mlp"), test::options(61, ir::Precision::highest));
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.error().message.find("sm_61"), std::string::npos);
}

// NVRTC is asked for sm_90a itself: Hopper's own instructions assemble there and not for sm_90,
// and a graph compiled for sm_90a says so in its PTX and artifact.
TEST(Nvrtc, Sm90aCompilesHoppersOwnInstructionsAndSm90DoesNot) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  const char* source =
      "extern \"C\" __global__ void __launch_bounds__(128) k(float* p) {\n"
      "  asm volatile(\"wgmma.fence.sync.aligned;\");\n"
      "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\");\n"
      "  p[threadIdx.x] = 1.0f;\n"
      "}\n";
  auto specific = (*lib)->compile(source, "hopper", "sm_90a");
  ASSERT_TRUE(specific.ok()) << specific.error().message;
  EXPECT_NE(specific->ptx.find(".target sm_90a"), std::string::npos);
  auto plain = (*lib)->compile(source, "hopper", "sm_90");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.error().message.find("for sm_90 failed"), std::string::npos)
      << plain.error().message;
  EXPECT_NE(plain.error().message.find("not supported on .target 'sm_90'"), std::string::npos)
      << plain.error().message;

  CompileOptions options = test::options(90, ir::Precision::high);
  options.target.suffix = "a";
  auto artifact = compile(test::example("mlp"), options);
  ASSERT_TRUE(artifact.ok()) << artifact.error().message;
  EXPECT_EQ(artifact->arch, "sm_90a");
  EXPECT_EQ(artifact->target, Target::cuda(90, "a"));
  for (const KernelArtifact& k : artifact->kernels) {
    EXPECT_NE(k.ptx.find(".target sm_90a"), std::string::npos) << k.name;
    EXPECT_EQ(k.report.spill_bytes(), 0) << k.name;
  }
}

// The prelude's mbarrier functions assemble where they run (sm_90a: a producer/consumer ring as
// the emulator's tests run it), and a wait used for an older arch fails to assemble rather than
// compile to nothing.
TEST(Nvrtc, ThePreludesMbarrierFunctionsAssembleForSm90aAndRefuseOlderArchs) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  std::string source = std::string(prelude_source()) +
                       "\nextern \"C\" __global__ void ring(int* out) {\n"
                       "  extern __shared__ __align__(16) unsigned char smem[];\n"
                       "  unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem);\n"
                       "  if (threadIdx.x == 0) kiln_mbarrier_init(bar, 32);\n"
                       "  __syncthreads();\n"
                       "  if (threadIdx.x < 32) kiln_mbarrier_arrive(bar);\n"
                       "  else kiln_mbarrier_arrive_expect_tx(bar + 1, 16);\n"
                       "  kiln_mbarrier_wait(bar, 0);\n"
                       "  out[threadIdx.x] = 1;\n"
                       "}\n";
  auto hopper = (*lib)->compile(source, "ring", "sm_90a");
  ASSERT_TRUE(hopper.ok()) << hopper.error().message;
  for (const char* instruction : {"mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
                                  "mbarrier.arrive.expect_tx.shared::cta.b64",
                                  "mbarrier.try_wait.parity.shared::cta.b64"})
    EXPECT_NE(hopper->ptx.find(instruction), std::string::npos) << instruction;
  EXPECT_EQ(hopper->log.find("warning"), std::string::npos) << hopper->log;
  auto ampere = (*lib)->compile(source, "ring", "sm_80");
  ASSERT_FALSE(ampere.ok());
  EXPECT_NE(ampere.error().message.find("mbarrier"), std::string::npos) << ampere.error().message;
}

// Compiles that share a KernelMemo (kiln tune's candidates: one graph, the matmul's tile changed
// each time) compile each kernel once: the softmax after the matmul is compiled for the first
// tile only, and the memo's outputs are NVRTC's own.
TEST(Nvrtc, CompilesSharingAKernelMemoCompileEachKernelOnce) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  KernelCacheEnv env("");  // every compile here runs NVRTC, or the memo
  ir::Graph g = matmul_then_softmax();
  auto request = check_request(g, test::options(80, ir::Precision::high));
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto model = lower(g, *request);
  ASSERT_TRUE(model.ok()) << model.error().message;
  ASSERT_EQ(model->plan.kernels.size(), 2u) << "a matmul kernel, then the softmax";
  std::vector<MatmulTile> tiles = candidate_tiles(model->plan.kernels[0].shape, 80);
  ASSERT_GE(tiles.size(), 2u);
  auto memo = std::make_shared<KernelMemo>();
  CompileOptions shared = request->options;
  shared.kernel_memo = memo;
  auto compile_at = [&](const MatmulTile& tile, const CompileOptions& o) -> Artifact {
    auto program = lower(g, *request, FixedSchedule(tile));
    EXPECT_TRUE(program.ok()) << program.error().message;
    if (!program.ok()) return {};
    auto a = compile_lowered(*program, o);
    EXPECT_TRUE(a.ok()) << a.error().message;
    return a.ok() ? *a : Artifact{};
  };
  Artifact first = compile_at(tiles[0], shared);
  EXPECT_EQ(memo->compiled(), 2u);
  EXPECT_EQ(memo->reused(), 0u);
  Artifact second = compile_at(tiles[1], shared);
  EXPECT_EQ(memo->compiled(), 3u) << "the second tile's matmul";
  EXPECT_EQ(memo->reused(), 1u) << "the softmax";
  Artifact again = compile_at(tiles[0], shared);
  EXPECT_EQ(memo->compiled(), 3u);
  EXPECT_EQ(memo->reused(), 3u);
  // What the memo gave is what a compile without it makes.
  Artifact alone = compile_at(tiles[1], request->options);
  ASSERT_EQ(second.kernels.size(), 2u);
  ASSERT_EQ(alone.kernels.size(), 2u);
  ASSERT_EQ(again.kernels.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(second.kernels[k].cubin, alone.kernels[k].cubin) << k;
    EXPECT_EQ(second.kernels[k].ptx, alone.kernels[k].ptx) << k;
    EXPECT_EQ(second.kernels[k].report, alone.kernels[k].report) << k;
    EXPECT_EQ(again.kernels[k].cubin, first.kernels[k].cubin) << k;
  }
  EXPECT_NE(first.kernels[0].cubin, second.kernels[0].cubin) << "two tiles, two matmul kernels";
  EXPECT_EQ(first.kernels[1].cubin, second.kernels[1].cubin);
}

// A failed compile is answered as it failed but not kept: the next call compiles again.
TEST(Nvrtc, AKernelMemoKeepsOutputsNotFailures) {
  KernelMemo memo;
  int runs = 0;
  auto failing = [&]() -> Expected<NvrtcOutput> {
    ++runs;
    return make_error("nvrtc: out of memory");
  };
  auto working = [&]() -> Expected<NvrtcOutput> {
    ++runs;
    NvrtcOutput out;
    out.cubin = "cubin";
    return out;
  };
  auto first = memo.get("k", failing);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().message, "nvrtc: out of memory");
  auto second = memo.get("k", working);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->cubin, "cubin");
  auto third = memo.get("k", failing);
  ASSERT_TRUE(third.ok()) << "kept from the second call";
  EXPECT_EQ(third->cubin, "cubin");
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(memo.compiled(), 2u);
  EXPECT_EQ(memo.reused(), 1u);
}

TEST(Nvrtc, AFailedCompileCarriesTheProgramLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  auto out =
      (*lib)->compile("extern \"C\" __global__ void k() { undefined_name(); }", "broken", "sm_80");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("undefined_name"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("'broken'"), std::string::npos);
}

TEST(Nvrtc, AFailedCompileLeadsWithItsFirstErrorBeforeTheLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  // Two warnings (an unused static function, an unused variable) come before the error.
  auto out = (*lib)->compile(
      "static __device__ float unused_helper(float x) { return x; }\n"
      "extern \"C\" __global__ void k(float* p) {\n"
      "  int unused_variable = 1;\n"
      "  p[0] = undefined_name;\n"
      "}\n",
      "warned", "sm_90");
  ASSERT_FALSE(out.ok());
  const std::string& message = out.error().message;
  std::string first_line = message.substr(0, message.find('\n'));
  EXPECT_NE(first_line.find("'warned'"), std::string::npos) << message;
  EXPECT_NE(first_line.find("error"), std::string::npos) << message;
  EXPECT_NE(first_line.find("undefined_name"), std::string::npos) << message;
  EXPECT_NE(message.find("unused_helper", first_line.size()), std::string::npos)
      << "the full log follows: " << message;
}

// ---- KernelStore (KILN_KERNEL_CACHE_DIR) ---------------------------------------------------

// Compiles through the folder KILN_KERNEL_CACHE_DIR names: the first compile keeps each kernel it
// compiled, a second finds them all there, and what it gives is what NVRTC makes without the
// folder. An entry damaged (a byte flipped, cut short) is removed, compiled again and kept anew.
TEST(Nvrtc, KernelsKeptInTheKernelCacheFolderAreNvrtcsOwnAndADamagedOneIsCompiledAgain) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph g = matmul_then_softmax();
  CompileOptions o = test::options(80, ir::Precision::high);
  StoreDir dir;
  ASSERT_FALSE(dir.path().empty());
  KernelCacheEnv env("");
  ASSERT_EQ(KernelStore::from_environment(), nullptr);
  auto alone = compile(g, o);
  ASSERT_TRUE(alone.ok()) << alone.error().message;
  ASSERT_EQ(alone->kernels.size(), 2u);

  KernelCacheEnv::set(dir.path());
  std::shared_ptr<KernelStore> store = KernelStore::from_environment();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(KernelStore::from_environment(), store) << "one store a folder and process";
  auto first = compile(g, o);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(store->hits(), 0u);
  std::vector<std::string> entries = dir.entries();
  ASSERT_EQ(entries.size(), 2u) << "the matmul and the softmax";
  for (const std::string& name : entries) {
    EXPECT_EQ(name.size(), 32u + 7u) << name;
    EXPECT_EQ(name.substr(32), ".kernel") << name;
    struct stat st {};
    ASSERT_EQ(::stat((dir.path() + "/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name << ": the user's alone";
  }
  auto expect_as_alone = [&](const Artifact& a, const std::string& what) {
    ASSERT_EQ(a.kernels.size(), alone->kernels.size()) << what;
    for (size_t k = 0; k < a.kernels.size(); ++k) {
      EXPECT_EQ(a.kernels[k].cubin, alone->kernels[k].cubin) << what << " " << k;
      EXPECT_EQ(a.kernels[k].ptx, alone->kernels[k].ptx) << what << " " << k;
      EXPECT_EQ(a.kernels[k].report, alone->kernels[k].report) << what << " " << k;
    }
    EXPECT_EQ(without_times(a.log), without_times(alone->log)) << what;
  };
  expect_as_alone(*first, "the compile that kept them");
  auto second = compile(g, o);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(store->hits(), 2u) << "both kernels from the folder";
  expect_as_alone(*second, "the compile that found them");
  EXPECT_EQ(second->log, first->log) << "the log the kept compile wrote, its times included";

  // Damaged entries: one with a byte of its cubin flipped, one cut short.
  std::string a = dir.path() + "/" + entries[0], b = dir.path() + "/" + entries[1];
  std::string flipped = read_bytes(a), b_bytes = read_bytes(b);
  flipped[100] = static_cast<char>(flipped[100] ^ 0x01);
  write_bytes(a, flipped);
  write_bytes(b, b_bytes.substr(0, b_bytes.size() / 2));
  auto third = compile(g, o);
  ASSERT_TRUE(third.ok()) << third.error().message;
  EXPECT_EQ(store->hits(), 2u) << "neither damaged entry is used";
  EXPECT_EQ(store->damaged(), 2u);
  expect_as_alone(*third, "the compile after the damage");
  EXPECT_EQ(dir.entries(), entries) << "kept anew; no file of a save is left behind";
  for (const std::string& name : entries) {
    auto kept = store->load(name.substr(0, 32));
    ASSERT_TRUE(kept) << name;
    EXPECT_TRUE(kept->cubin == alone->kernels[0].cubin || kept->cubin == alone->kernels[1].cubin)
        << name;
  }
}

// What load() takes: only an entry written under its own key by save(), whole, as a regular file.
TEST(Nvrtc, AKernelStoreGivesBackWhatWasSavedAndNothingElse) {
  StoreDir dir;
  auto store = KernelStore::open(dir.path() + "/store");
  ASSERT_TRUE(store.ok()) << store.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() + "/store").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "created as the user's alone";
  const std::string k1 = "0123456789abcdef0123456789abcdef";
  const std::string k2 = "fedcba9876543210fedcba9876543210";
  NvrtcOutput out;
  out.cubin = std::string("\x7f" "ELF\0\0binary", 12);
  out.ptx = "ptx text";
  out.log = "ptxas info    : Used 32 registers";
  EXPECT_FALSE((*store)->load(k1)) << "nothing kept yet";
  ASSERT_TRUE((*store)->save(k1, out));
  auto back = (*store)->load(k1);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->cubin, out.cubin);
  EXPECT_EQ(back->ptx, out.ptx);
  EXPECT_EQ(back->log, out.log);
  EXPECT_EQ((*store)->hits(), 1u);
  // Keys that are not 32 lower-case hex digits (a path among them) are neither kept nor read.
  for (const std::string& bad : {std::string("../x"), std::string("0123"), k1 + "0",
                                 std::string("0123456789ABCDEF0123456789ABCDEF")}) {
    EXPECT_FALSE((*store)->save(bad, out)) << bad;
    EXPECT_FALSE((*store)->load(bad)) << bad;
  }
  NvrtcOutput empty = out;
  empty.cubin.clear();
  EXPECT_FALSE((*store)->save(k2, empty)) << "an output without a cubin is not one NVRTC gives";
  // An entry copied under another key is refused and removed.
  std::string p1 = dir.path() + "/store/" + k1 + ".kernel";
  std::string p2 = dir.path() + "/store/" + k2 + ".kernel";
  fs::copy_file(p1, p2);
  EXPECT_FALSE((*store)->load(k2));
  EXPECT_FALSE(fs::exists(p2));
  EXPECT_EQ((*store)->damaged(), 1u);
  // A link is not followed.
  ASSERT_EQ(::symlink(p1.c_str(), p2.c_str()), 0);
  EXPECT_FALSE((*store)->load(k2));
  // Sizes that claim more than the file holds.
  std::string bytes = read_bytes(p1);
  std::string lying = bytes;
  lying[std::string("kiln kernel 1\n").size() + 33 + 7] = '\x7f';  // the cubin's size's top byte
  write_bytes(p1, lying);
  EXPECT_FALSE((*store)->load(k1));
  EXPECT_EQ((*store)->damaged(), 2u);
}

// A folder others can write is not used: its cubins would run as the user.
TEST(Nvrtc, AKernelCacheFolderOthersCanWriteIsRefusedSayingSo) {
  StoreDir dir;
  std::string open_folder = dir.path() + "/open";
  ASSERT_EQ(::mkdir(open_folder.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_folder.c_str(), 0777), 0);
  auto store = KernelStore::open(open_folder);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("writable by other users"), std::string::npos)
      << store.error().message;
  EXPECT_NE(store.error().message.find("chmod go-w"), std::string::npos) << store.error().message;
  KernelCacheEnv env(open_folder);
  testing::internal::CaptureStderr();
  EXPECT_EQ(KernelStore::from_environment(), nullptr);
  EXPECT_EQ(KernelStore::from_environment(), nullptr);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("KILN_KERNEL_CACHE_DIR"), std::string::npos) << said;
  EXPECT_NE(said.find("compiled without it"), std::string::npos) << said;
  EXPECT_EQ(said.find("KILN_KERNEL_CACHE_DIR"), said.rfind("KILN_KERNEL_CACHE_DIR"))
      << "said once: " << said;
  std::string file = dir.path() + "/file";
  write_bytes(file, "x");
  EXPECT_FALSE(KernelStore::open(file).ok()) << "a file is not a folder";
}

// Past its limit, opening the folder removes the least recently used entries, down to three
// quarters of the limit; a read counts as a use.
TEST(Nvrtc, AKernelStorePastItsLimitLosesItsLeastRecentlyUsedEntries) {
  StoreDir dir;
  auto store = KernelStore::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.error().message;
  NvrtcOutput out;
  out.cubin = std::string(1000, 'c');
  std::vector<std::string> keys;
  for (char c : std::string("0123")) keys.push_back(std::string(32, c));
  auto when = fs::file_time_type::clock::now() - std::chrono::hours(10);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE((*store)->save(keys[i], out));
    fs::last_write_time(dir.path() + "/" + keys[i] + ".kernel", when + std::chrono::hours(i));
  }
  ASSERT_TRUE((*store)->load(keys[0])) << "the oldest, now the most recently used";
  size_t entry = fs::file_size(dir.path() + "/" + keys[0] + ".kernel");
  // Four entries over a limit of three: two go (down to 2.25 entries), the two oldest unread.
  auto pruned = KernelStore::open(dir.path(), 3 * entry);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{keys[0] + ".kernel", keys[3] + ".kernel"}));
}

// A store that stays open prunes again each time it has saved a quarter of its limit: a
// long-lived process does not grow the folder past it.
TEST(Nvrtc, AKernelStoreKeptOpenPrunesAsItSaves) {
  StoreDir dir;
  NvrtcOutput out;
  out.cubin = std::string(1000, 'c');
  uint64_t entry = 0;
  {
    StoreDir sizing;
    auto first = KernelStore::open(sizing.path());
    ASSERT_TRUE(first.ok()) << first.error().message;
    ASSERT_TRUE((*first)->save(std::string(32, 'f'), out));
    entry = fs::file_size(sizing.path() + "/" + std::string(32, 'f') + ".kernel");
  }
  // A limit of four entries: each save is a quarter of it, so each save past four prunes to three.
  auto store = KernelStore::open(dir.path(), 4 * entry);
  ASSERT_TRUE(store.ok()) << store.error().message;
  std::string last;
  for (char c : std::string("0123456789")) {
    last = std::string(32, c);
    ASSERT_TRUE((*store)->save(last, out));
    EXPECT_LE(dir.entries().size(), 4u) << "after saving " << last;
  }
  std::vector<std::string> left = dir.entries();
  EXPECT_GE(left.size(), 3u);
  EXPECT_NE(std::find(left.begin(), left.end(), last + ".kernel"), left.end())
      << "the newest entry stays";
  EXPECT_TRUE((*store)->load(last));
}

}  // namespace
}  // namespace kiln::compiler
