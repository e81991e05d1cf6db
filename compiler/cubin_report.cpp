// A cubin's ELF: section headers, the symbol table, `.nv.info` attributes and SASS words.
#include "compiler/cubin_report.h"

#include "compiler/ptxas_report.h"

#include <cstdint>
#include <cstring>
#include <map>

namespace kiln::compiler {

namespace {

constexpr uint16_t k_em_cuda = 190;
constexpr uint32_t k_sht_symtab = 2;
constexpr uint32_t k_sht_nobits = 8;
constexpr uint8_t k_format_sized = 4;  // EIFMT_SVAL: a 16-bit size, then that many bytes
constexpr uint8_t k_attr_frame_size = 0x11;  // EIATTR_FRAME_SIZE: symbol, bytes per thread
constexpr uint8_t k_attr_regcount = 0x2f;    // EIATTR_REGCOUNT: symbol, registers per thread
constexpr uint64_t k_reserved_smem = 1024;
constexpr uint32_t k_op_stl = 0x387;
constexpr uint32_t k_op_ldl = 0x983;

template <typename T>
T load(std::string_view bytes, uint64_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

struct Section {
  std::string_view name;
  uint32_t type = 0;
  uint64_t offset = 0, size = 0;
  uint32_t link = 0;
  std::string_view bytes;  // empty for NOBITS
};

// The NUL-terminated string at `at` of string table `table`, or nullopt past its end.
std::optional<std::string_view> string_at(std::string_view table, uint64_t at) {
  if (at >= table.size()) return std::nullopt;
  size_t end = table.find('\0', at);
  if (end == std::string_view::npos) return std::nullopt;
  return table.substr(at, end - at);
}

// Bytes an STL/LDL moves by its width field: U8, S8, U16, S16, 32, 64, 128, U.128.
int access_bytes(uint32_t width) {
  constexpr int k_bytes[8] = {1, 1, 2, 2, 4, 8, 16, 16};
  return k_bytes[width & 7];
}

}  // namespace

Expected<std::vector<std::pair<std::string, KernelReport>>> read_cubin_report(
    std::string_view cubin) {
  auto bad = [](const std::string& what) { return make_error("cubin: ", what); };
  if (cubin.size() < 64 || cubin.substr(0, 4) != "\x7f" "ELF" || cubin[4] != 2) {
    return bad("not a 64-bit ELF file");
  }
  if (load<uint16_t>(cubin, 18) != k_em_cuda) return bad("not a CUDA ELF file (e_machine)");
  uint64_t shoff = load<uint64_t>(cubin, 40);
  uint16_t shentsize = load<uint16_t>(cubin, 58), shnum = load<uint16_t>(cubin, 60),
           shstrndx = load<uint16_t>(cubin, 62);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || shoff > cubin.size() ||
      uint64_t{shnum} * shentsize > cubin.size() - shoff) {
    return bad("section headers past the end of the file");
  }
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + uint64_t{i} * shentsize;
    Section& s = sections[i];
    s.type = load<uint32_t>(cubin, h + 4);
    s.offset = load<uint64_t>(cubin, h + 24);
    s.size = load<uint64_t>(cubin, h + 32);
    s.link = load<uint32_t>(cubin, h + 40);
    if (s.type != k_sht_nobits) {
      if (s.offset > cubin.size() || s.size > cubin.size() - s.offset) {
        return bad("section " + std::to_string(i) + " past the end of the file");
      }
      s.bytes = cubin.substr(s.offset, s.size);
    }
  }
  std::string_view names = sections[shstrndx].bytes;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t name = load<uint32_t>(cubin, shoff + uint64_t{i} * shentsize);
    auto text = string_at(names, name);
    if (!text) return bad("section " + std::to_string(i) + " has no name");
    sections[i].name = *text;
  }

  // Symbol index -> name, from the symbol table (Elf64_Sym: 24 bytes, st_name first).
  std::map<uint32_t, std::string_view> symbols;
  bool reserved_window = false;
  int symbol_tables = 0;
  for (const Section& s : sections) {
    if (s.type != k_sht_symtab) continue;
    if (++symbol_tables > 1) return bad("more than one symbol table");
    if (s.link >= shnum) return bad("symbol table names no string table");
    std::string_view strings = sections[s.link].bytes;
    for (uint64_t at = 0; at + 24 <= s.bytes.size(); at += 24) {
      auto name = string_at(strings, load<uint32_t>(s.bytes, at));
      if (!name) return bad("a symbol's name is past its string table");
      symbols[static_cast<uint32_t>(at / 24)] = *name;
      if (name->substr(0, 16) == ".nv.reservedSmem") reserved_window = true;
    }
  }

  // The global .nv.info: registers and frame size per symbol.
  std::map<std::string_view, int32_t> registers, frames;
  for (const Section& s : sections) {
    if (s.name != ".nv.info") continue;
    uint64_t at = 0;
    while (at + 4 <= s.bytes.size()) {
      uint8_t format = static_cast<uint8_t>(s.bytes[at]);
      uint8_t attribute = static_cast<uint8_t>(s.bytes[at + 1]);
      if (format < 1 || format > k_format_sized) {
        return bad(".nv.info: unknown attribute format " + std::to_string(format));
      }
      if (format != k_format_sized) {
        at += 4;
        continue;
      }
      uint16_t length = load<uint16_t>(s.bytes, at + 2);
      if (length > s.bytes.size() - at - 4) return bad(".nv.info: an attribute runs past it");
      if ((attribute == k_attr_regcount || attribute == k_attr_frame_size) && length == 8) {
        uint32_t symbol = load<uint32_t>(s.bytes, at + 4);
        uint32_t value = load<uint32_t>(s.bytes, at + 8);
        auto it = symbols.find(symbol);
        if (it == symbols.end()) return bad(".nv.info: an attribute names no symbol");
        if (value > (1u << 24)) return bad(".nv.info: an implausible register or frame size");
        (attribute == k_attr_regcount ? registers : frames)[it->second] =
            static_cast<int32_t>(value);
      }
      at += 4 + uint64_t{length};
    }
  }

  std::vector<std::pair<std::string, KernelReport>> reports;
  for (const Section& text : sections) {
    if (text.name.substr(0, 6) != ".text.") continue;
    std::string_view kernel = text.name.substr(6);
    if (text.type == k_sht_nobits || text.bytes.size() % 16 != 0 ||
        text.bytes.size() > (uint64_t{1} << 28)) {
      return bad("the code of '" + std::string(kernel) + "' is not whole 16-byte instructions");
    }
    KernelReport r;
    if (auto it = registers.find(kernel); it != registers.end()) r.registers = it->second;
    if (auto it = frames.find(kernel); it != frames.end()) r.local_bytes = it->second;
    for (uint64_t at = 0; at + 16 <= text.bytes.size(); at += 16) {
      uint64_t lo = load<uint64_t>(text.bytes, at), hi = load<uint64_t>(text.bytes, at + 8);
      uint32_t op = static_cast<uint32_t>(lo & 0xfff);
      uint32_t width = static_cast<uint32_t>(hi >> 9) & 7;  // bits 73..75
      if (op == k_op_stl) r.spill_store_bytes += access_bytes(width);
      if (op == k_op_ldl) r.spill_load_bytes += access_bytes(width);
    }
    for (const Section& s : sections) {
      if (s.name.substr(0, 11) == ".nv.shared." && s.name.substr(11) == kernel) {
        if (s.size > (1u << 24)) return bad("an implausible static shared memory size");
        uint64_t own = s.size;
        // sm_90 and newer cubins mark the 1 KiB the driver reserves per block
        // (.nv.reservedSmem.*) and start each kernel's shared window with it: not the kernel's.
        if (reserved_window && own >= k_reserved_smem) own -= k_reserved_smem;
        r.static_smem_bytes = static_cast<int32_t>(own);
      }
    }
    reports.emplace_back(std::string(kernel), r);
  }
  return reports;
}

KernelReport kernel_report(std::string_view cubin, const std::string& entry, std::string_view log,
                           std::string& note) {
  KernelReport logged;
  for (const auto& [name, report] : parse_ptxas_log(log)) {
    if (name == entry) logged = report;
  }
  auto from_cubin = read_cubin_report(cubin);
  if (from_cubin) {
    for (const auto& [name, report] : *from_cubin) {
      if (name != entry) continue;
      KernelReport r = report;
      if (r.registers < 0) r.registers = logged.registers;  // no EIATTR_REGCOUNT
      if (logged.registers >= 0) {
        r.spill_store_bytes = logged.spill_store_bytes;
        r.spill_load_bytes = logged.spill_load_bytes;
      }
      return r;
    }
  }
  note = "kiln: the report is ptxas's log's: " +
         (from_cubin ? "the cubin has no '" + entry + "'" : from_cubin.error().message);
  return logged;
}

}  // namespace kiln::compiler
