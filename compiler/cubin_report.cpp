// A cubin's ELF: section and program headers, the symbol table, `.nv.info` attributes and SASS
// words.
#include "compiler/cubin_report.h"

#include "compiler/options.h"
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
constexpr uint8_t k_attr_kparam_info = 0x17;  // EIATTR_KPARAM_INFO: one kernel parameter
constexpr uint8_t k_attr_regcount = 0x2f;    // EIATTR_REGCOUNT: symbol, registers per thread
constexpr uint8_t k_compat_arch_specific = 0x09;  // .nv.compat: 1 in an sm_XXa cubin
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

Error bad(const std::string& what) { return make_error("cubin: ", what); }

// A cubin's ELF header and sections, every header, section and segment checked to lie within its
// bytes (the driver takes a cubin's size from these headers).
struct Elf {
  uint32_t flags = 0;  // e_flags: the SM in bits 8..15
  std::vector<Section> sections;
};

Expected<Elf> read_elf(std::string_view cubin) {
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
  uint64_t phoff = load<uint64_t>(cubin, 32);
  uint16_t phentsize = load<uint16_t>(cubin, 54), phnum = load<uint16_t>(cubin, 56);
  if (phnum != 0 && (phentsize < 56 || phoff > cubin.size() ||
                     uint64_t{phnum} * phentsize > cubin.size() - phoff)) {
    return bad("program headers past the end of the file");
  }
  for (uint16_t i = 0; i < phnum; ++i) {
    uint64_t h = phoff + uint64_t{i} * phentsize;
    uint64_t offset = load<uint64_t>(cubin, h + 8), file_bytes = load<uint64_t>(cubin, h + 32);
    if (offset > cubin.size() || file_bytes > cubin.size() - offset) {
      return bad("segment " + std::to_string(i) + " past the end of the file");
    }
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
  Elf elf;
  elf.flags = load<uint32_t>(cubin, 48);
  elf.sections = std::move(sections);
  return elf;
}

// The `.nv.info`-style records of `bytes` (format, attribute, then a 16-bit value, or a 16-bit
// size and that many bytes), each passed to `each(format, attribute, value)`: for a sized record
// its bytes, else the record's last two. False when a record's format is unknown or it runs past.
template <class Each>
bool for_each_record(std::string_view bytes, Each each) {
  uint64_t at = 0;
  while (at + 4 <= bytes.size()) {
    uint8_t format = static_cast<uint8_t>(bytes[at]);
    uint8_t attribute = static_cast<uint8_t>(bytes[at + 1]);
    if (format < 1 || format > k_format_sized) return false;
    if (format != k_format_sized) {
      each(format, attribute, bytes.substr(at + 2, 2));
      at += 4;
      continue;
    }
    uint16_t length = load<uint16_t>(bytes, at + 2);
    if (length > bytes.size() - at - 4) return false;
    each(format, attribute, bytes.substr(at + 4, length));
    at += 4 + uint64_t{length};
  }
  return at == bytes.size();
}

}  // namespace

Expected<std::vector<std::pair<std::string, KernelReport>>> read_cubin_report(
    std::string_view cubin) {
  auto elf = read_elf(cubin);
  if (!elf) return elf.error();
  std::vector<Section>& sections = elf->sections;
  uint16_t shnum = static_cast<uint16_t>(sections.size());

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
    std::string failure;
    bool whole = for_each_record(s.bytes, [&](uint8_t format, uint8_t attribute,
                                              std::string_view value) {
      if (format != k_format_sized || value.size() != 8 || !failure.empty() ||
          (attribute != k_attr_regcount && attribute != k_attr_frame_size)) {
        return;
      }
      auto it = symbols.find(load<uint32_t>(value, 0));
      uint32_t count = load<uint32_t>(value, 4);
      if (it == symbols.end()) {
        failure = "an attribute names no symbol";
      } else if (count > (1u << 24)) {
        failure = "an implausible register or frame size";
      } else {
        (attribute == k_attr_regcount ? registers : frames)[it->second] =
            static_cast<int32_t>(count);
      }
    });
    if (!whole) return bad(".nv.info: a record of unknown format, or past its end");
    if (!failure.empty()) return bad(".nv.info: " + failure);
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

Status check_cubin(std::string_view cubin, const std::string& entry,
                   const std::vector<KernelParam>& params, const Target& target) {
  auto elf = read_elf(cubin);
  if (!elf) return elf.error();
  if (cubin[5] != 1) return bad("not a little-endian ELF file");
  int sm = static_cast<int>((elf->flags >> 8) & 0xff);
  bool arch_specific = false, seen_compat = false;
  const Section* text = nullptr;
  const Section* info = nullptr;
  for (const Section& s : elf->sections) {
    // A section without bytes in the file is memory the driver reserves (shared, local, global);
    // any other (code, attributes, constants, symbols) is read from the file.
    if (s.type == k_sht_nobits && s.name.substr(0, 11) != ".nv.shared." &&
        s.name.substr(0, 10) != ".nv.local." && s.name.substr(0, 10) != ".nv.global") {
      return bad("section '" + std::string(s.name) + "' has no bytes in the file");
    }
    bool compat = s.name == ".nv.compat";
    bool code = s.name.substr(0, 6) == ".text." && s.name.substr(6) == entry;
    bool attributes = s.name.substr(0, 9) == ".nv.info." && s.name.substr(9) == entry;
    // One of each: a reader that took the first and a check that took the last would differ.
    if ((compat && seen_compat) || (code && text) || (attributes && info))
      return bad("two sections named '" + std::string(s.name) + "'");
    if (compat) {
      seen_compat = true;
      bool whole = for_each_record(s.bytes, [&](uint8_t format, uint8_t attribute,
                                                std::string_view value) {
        if (format != k_format_sized && attribute == k_compat_arch_specific)
          arch_specific = value[0] != 0;
      });
      if (!whole) return bad(".nv.compat: a record of unknown format, or past its end");
    } else if (code) {
      text = &s;
    } else if (attributes) {
      info = &s;
    }
  }
  std::string built = arch_name(sm) + (arch_specific ? "a" : "");
  if (sm != target.sm || arch_specific != target.arch_specific())
    return bad("built for " + built + ", not for " + target.arch());
  if (!text || text->bytes.empty() || text->bytes.size() % 16 != 0)
    return bad("no code for kernel '" + entry + "'");
  // The parameters: EIATTR_KPARAM_INFO records (a 32-bit index, then a 16-bit ordinal, a 16-bit
  // offset and 32 bits of flags, the size in the top 14). The offsets are ptxas's: it aligns each
  // parameter in the constant bank, whose parameter window starts at an arch's own address.
  std::vector<int64_t> sizes(params.size(), -1);
  std::string failure;
  bool whole = !info || for_each_record(info->bytes, [&](uint8_t format, uint8_t attribute,
                                                          std::string_view value) {
    if (format != k_format_sized || attribute != k_attr_kparam_info || !failure.empty()) return;
    if (value.size() < 12) {
      failure = "a short parameter record";
      return;
    }
    uint16_t ordinal = load<uint16_t>(value, 4);
    if (ordinal >= sizes.size() || sizes[ordinal] >= 0) {
      failure = "parameter " + std::to_string(ordinal) + " is not one of the " +
                std::to_string(params.size()) + " kiln passes";
      return;
    }
    sizes[ordinal] = load<uint32_t>(value, 8) >> 18;
  });
  std::string kernel = "kernel '" + entry + "': ";
  if (!whole) return bad(kernel + "a record of unknown format, or past its end");
  if (!failure.empty()) return bad(kernel + failure);
  // kiln passes a pointer to each value, of which the driver reads as many bytes as the cubin
  // says.
  for (size_t i = 0; i < params.size(); ++i) {
    if (sizes[i] < 0) return bad(kernel + "no parameter " + std::to_string(i));
    if (uint32_t bytes = param_size(params[i].kind); sizes[i] != bytes) {
      return bad(kernel + "parameter " + std::to_string(i) + " is " + std::to_string(sizes[i]) +
                 " bytes, where kiln passes " + std::to_string(bytes));
    }
  }
  return Status::success();
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
