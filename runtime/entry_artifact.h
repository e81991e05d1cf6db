// An artifact as cache contents and back, and what an entry's artifact is checked for without a
// device: its key and graph, and its kernels as the CUDA launcher checks them. A library of its
// own (kiln_entry_artifact: the compiler and the cache, no driver and no LLVM), which the runtime
// and the fuzzer of the records a cache or a peer hands over share.
#pragma once

#include "cache/entry.h"
#include "cache/types.h"
#include "compiler/artifact.h"
#include "compiler/tensor_map.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

// An artifact as cache contents and back: cubin and PTX per kernel, source and log become
// their own payloads (so `kiln show --ptx` reads them), the rest one "artifact" payload.
// from_entry needs "artifact" and every kernel's cubin; PTX, source and log are filled when the
// entry holds them (run_payloads() leaves them out).
cache::Contents to_contents(const compiler::Artifact& artifact, const std::string& graph_hash,
                            double compile_ms);
Expected<compiler::Artifact> from_entry(cache::Entry entry);
// "its artifact does not decode: WHY" (or "it has no artifact payload") for from_entry's error
// on the entry `key` (WHY without the "cache entry KEY" it starts with).
std::string undecodable(const std::string& key, const Error& error);

// The payloads a run reads, and so compile_prepared on a hit: "artifact" and "cubin:*" (the CPU
// target's "object", the emulate target's "object:emulator").
cache::PayloadSelection run_payloads();

// The bytes the artifact says buffer `ref` holds (0 for an index out of range: a run refuses
// those).
uint64_t buffer_bytes(const compiler::Artifact& a, const compiler::BufferRef& ref);

// What an artifact says of its buffers and kernels against the graph it claims to run: the
// bucket's dims, buffer counts, a static graph's buffer sizes, the size terms' symbols, and per
// kernel its grid terms and dim parameters (CUDA) or work items (CPU). Only a damaged or foreign
// entry fails; the error names what does not match. Every backend's maker checks it.
Status check_artifact_fits(const compiler::Artifact& a, const ir::Graph& graph);

// What this launcher cannot launch, refused by name before anything runs: a tensor map whose
// description does not read back, breaks the driver's rules or reaches past its buffer (as the
// artifact sizes the buffer, not as the parameter says; a symbolic graph's at the bucket's upper
// bounds, where its size terms give the map's largest dims and the buffers their largest sizes,
// and again at each run's sizes); a thread-block cluster (cuLaunchKernelEx comes with the kernels
// that use one). Each map's description, read back, goes to (*maps)[param], so that a run does
// not read its text again. Needs no device.
Status check_launchable(const compiler::KernelArtifact& kernel, const compiler::Artifact& artifact,
                        std::vector<compiler::TensorMapSpec>* maps);

// What would fail every run of `artifact`, short of a device: an artifact for another target
// (arch and NVRTC, CPU or emulation) or bucket than its key `info` says, one that does not fit
// the key's graph (check_artifact_fits), and for CUDA a cubin the launcher would not load
// (compiler::check_cubins) or a kernel it would not launch (check_launchable). "" when none.
// `graph`, when given, is the key's graph (a request's whose key fields the entry's equal),
// which is then not read back from the key.
std::string artifact_problem(const cache::EntryInfo& info, const compiler::Artifact& artifact,
                             const ir::Graph* graph = nullptr);

// What the cache checks of an entry from another machine (cache::Options::check_foreign), short
// of a device: the checksums of the payloads a run reads, then artifact_problem. "" when they
// hold, else why not: such an entry would fail every run; an artifact of this kiln's codegen
// version that does not decode (undecodable: damaged or forged, as `kiln verify` would call it).
// Not refused here: an entry of another codegen version (this kiln never looks it up), a CPU
// target's object (taken from the remote tier only signed, from a bundle only with
// --allow-native-code; not loaded here), a tuning record.
// `verified`, when given and holding every payload a run reads, is read in place of decoding
// them again (cache::ForeignCheck); `graph` is passed to artifact_problem; `decoded`, when
// given, receives the artifact when it passes (compile_prepared checks a remote value with the
// request's graph and returns the artifact the check decoded).
std::string foreign_entry_problem(const cache::StoredEntry& stored,
                                  const cache::Entry* verified = nullptr,
                                  const ir::Graph* graph = nullptr,
                                  std::optional<compiler::Artifact>* decoded = nullptr);

}  // namespace kiln::runtime
