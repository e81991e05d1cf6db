// A cubin's ELF: section and program headers, the symbol table, `.nv.info` attributes and SASS
// words.
#include "compiler/cubin_report.h"

#include "compiler/options.h"
#include "compiler/plan.h"
#include "compiler/ptxas_report.h"

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <map>
#include <optional>

namespace kiln::compiler {

namespace {

constexpr uint16_t k_em_cuda = 190;
constexpr uint32_t k_sht_symtab = 2;
constexpr uint32_t k_sht_strtab = 3;
constexpr uint32_t k_sht_rela = 4;
constexpr uint32_t k_sht_note = 7;
constexpr uint32_t k_sht_nobits = 8;
constexpr uint32_t k_sht_rel = 9;
constexpr uint32_t k_sht_cuda_info = 0x70000000;  // .nv.info and .nv.info.KERNEL
constexpr uint8_t k_format_sized = 4;  // EIFMT_SVAL: a 16-bit size, then that many bytes
constexpr uint8_t k_attr_frame_size = 0x11;  // EIATTR_FRAME_SIZE: symbol, bytes per thread
constexpr uint8_t k_attr_kparam_info = 0x17;  // EIATTR_KPARAM_INFO: one kernel parameter
constexpr uint8_t k_attr_regcount = 0x2f;    // EIATTR_REGCOUNT: symbol, registers per thread
constexpr uint8_t k_attr_param_cbank = 0x0a;  // EIATTR_PARAM_CBANK: bank symbol, offset, size
constexpr uint8_t k_attr_param_bytes = 0x19;  // EIATTR_CBANK_PARAM_SIZE: the parameters' bytes
constexpr uint8_t k_format_half = 3;          // EIFMT_HVAL: a 16-bit value in the record
// Attributes that list instructions of the kernel's code the driver may patch, and the bytes of
// each entry, whose first 32 bits are the instruction's offset: EIATTR_EXIT_INSTR_OFFSETS (an
// offset each) and EIATTR_MBARRIER_INSTR_OFFSETS (16 bytes each), as cuobjdump -elf reads the
// cubins kiln compiles. The other *_OFFSETS attributes' layouts are not known here: unchecked.
constexpr std::pair<uint8_t, uint64_t> k_instruction_lists[] = {{0x1c, 4}, {0x39, 16}};
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
  uint32_t link = 0, info = 0;
  uint64_t entry_bytes = 0;  // sh_entsize
  std::string_view bytes;    // empty for NOBITS
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
  if (phnum == 0xffff) return bad("program headers counted elsewhere (PN_XNUM)");
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
    s.info = load<uint32_t>(cubin, h + 44);
    s.entry_bytes = load<uint64_t>(cubin, h + 56);
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

namespace {

// What every section of a cubin says of the others, checked as a loader would follow it: links
// and targets name sections; string tables end in NUL; one symbol table of 24-byte symbols, each
// named within its string table and in a section that exists; relocations within their symbol
// table and their target section; notes and attribute sections read whole. `symtab` is set to the
// symbol table's index.
Status check_structure(const std::vector<Section>& sections, size_t* symtab) {
  size_t count = sections.size();
  *symtab = count;
  for (size_t i = 0; i < count; ++i) {
    const Section& s = sections[i];
    std::string which = "section '" + std::string(s.name) + "'";
    if (s.link >= count) return bad(which + " links to no section");
    bool targets = s.type == k_sht_rel || s.type == k_sht_rela || s.type == k_sht_cuda_info;
    if (targets && s.info >= count) return bad(which + " names no section");
    if (s.type == k_sht_strtab && !s.bytes.empty() && s.bytes.back() != '\0')
      return bad(which + " does not end its last string");
    if (s.type == k_sht_symtab) {
      if (*symtab != count) return bad("more than one symbol table");
      if (s.entry_bytes != 24 || s.bytes.size() % 24 != 0 ||
          sections[s.link].type != k_sht_strtab) {
        return bad("a symbol table not of 24-byte symbols named in a string table");
      }
      *symtab = i;
    }
    if (s.type == k_sht_note) {
      uint64_t at = 0;
      while (at + 12 <= s.bytes.size()) {
        uint64_t name = (uint64_t{load<uint32_t>(s.bytes, at)} + 3) / 4 * 4;
        uint64_t desc = (uint64_t{load<uint32_t>(s.bytes, at + 4)} + 3) / 4 * 4;
        if (name > s.bytes.size() - at - 12 || desc > s.bytes.size() - at - 12 - name) break;
        at += 12 + name + desc;
      }
      if (at != s.bytes.size()) return bad(which + ": a note runs past it");
    }
    if ((s.type == k_sht_cuda_info || s.name == ".nv.compat") &&
        !for_each_record(s.bytes, [](uint8_t, uint8_t, std::string_view) {})) {
      return bad(which + ": a record of unknown format, or past its end");
    }
  }
  if (*symtab == count) return bad("no symbol table");
  const Section& symbols = sections[*symtab];
  std::string_view strings = sections[symbols.link].bytes;
  for (uint64_t at = 0; at < symbols.bytes.size(); at += 24) {
    uint16_t index = load<uint16_t>(symbols.bytes, at + 6);
    if (!string_at(strings, load<uint32_t>(symbols.bytes, at)))
      return bad("a symbol's name is past its string table");
    // SHN_UNDEF, a section, SHN_ABS or SHN_COMMON; SHN_XINDEX and the other reserved ones no.
    if (index >= count && index != 0xfff1 && index != 0xfff2)
      return bad("a symbol in no section");
  }
  uint64_t symbol_count = symbols.bytes.size() / 24;
  for (const Section& s : sections) {
    if (s.type != k_sht_rel && s.type != k_sht_rela) continue;
    uint64_t width = s.type == k_sht_rela ? 24 : 16;
    const Section& target = sections[s.info];
    std::string which = "relocations '" + std::string(s.name) + "'";
    if (s.entry_bytes != width || s.bytes.size() % width != 0 || target.bytes.empty())
      return bad(which + " are not whole, or patch no bytes");
    for (uint64_t at = 0; at < s.bytes.size(); at += width) {
      uint64_t offset = load<uint64_t>(s.bytes, at), symbol = load<uint64_t>(s.bytes, at + 8) >> 32;
      if (symbol >= symbol_count || offset > target.bytes.size() ||
          target.bytes.size() - offset < 8) {
        return bad(which + ": one names no symbol, or patches past its section");
      }
    }
  }
  return Status::success();
}

// The SM and whether the cubin is arch-specific (sm_XXa), as its ELF ABI version writes them:
// 7 (NVRTC 12 below sm_100) keeps the SM in e_flags' low byte and marks `a` with 0x800; 8 keeps it
// in bits 8..15 and marks `a` with 0x8 or .nv.compat's attribute 9 (NVRTC 13). nullopt for
// another version, whose layout kiln does not know.
std::optional<std::pair<int, bool>> built_for(std::string_view cubin, const Elf& elf) {
  uint8_t abi = static_cast<uint8_t>(cubin[8]);
  if (abi == 7) return std::pair{static_cast<int>(elf.flags & 0xff), (elf.flags & 0x800) != 0};
  if (abi != 8) return std::nullopt;
  bool arch_specific = (elf.flags & 0x8) != 0;
  for (const Section& s : elf.sections) {
    if (s.name != ".nv.compat") continue;
    for_each_record(s.bytes, [&](uint8_t format, uint8_t attribute, std::string_view value) {
      if (format != k_format_sized && attribute == k_compat_arch_specific && value[0] != 0)
        arch_specific = true;
    });
  }
  return std::pair{static_cast<int>((elf.flags >> 8) & 0xff), arch_specific};
}

}  // namespace

Status check_cubin(std::string_view cubin, const std::string& entry,
                   const std::vector<KernelParam>& params, const Target& target) {
  auto elf = read_elf(cubin);
  if (!elf) return elf.error();
  if (cubin[5] != 1) return bad("not a little-endian ELF file");
  const std::vector<Section>& sections = elf->sections;
  size_t symtab = 0;
  if (Status s = check_structure(sections, &symtab); !s) return s;
  // A section without bytes in the file is memory the driver reserves (shared, local, global);
  // any other (code, attributes, constants, symbols) is read from the file.
  for (const Section& s : sections) {
    if (s.type == k_sht_nobits && s.name.substr(0, 11) != ".nv.shared." &&
        s.name.substr(0, 10) != ".nv.local." && s.name.substr(0, 10) != ".nv.global") {
      return bad("section '" + std::string(s.name) + "' has no bytes in the file");
    }
  }
  if (auto built = built_for(cubin, *elf)) {
    auto [sm, arch_specific] = *built;
    if (sm != target.sm || arch_specific != target.arch_specific()) {
      return bad("built for " + arch_name(sm) + (arch_specific ? "a" : "") + ", not for " +
                 target.arch());
    }
  }
  // The kernel: one section of code, named by one function symbol and described by one
  // attribute section, as the driver finds them (the symbol by name, its attributes by the
  // section they describe).
  size_t text = sections.size(), info = sections.size();
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& s = sections[i];
    bool code = s.name.substr(0, 6) == ".text." && s.name.substr(6) == entry;
    bool attributes = s.name.substr(0, 9) == ".nv.info." && s.name.substr(9) == entry;
    if ((code && text != sections.size()) || (attributes && info != sections.size()))
      return bad("two sections named '" + std::string(s.name) + "'");
    if (code) text = i;
    if (attributes) info = i;
  }
  if (text == sections.size() || sections[text].bytes.empty() ||
      sections[text].bytes.size() % 16 != 0) {
    return bad("no code for kernel '" + entry + "'");
  }
  std::string kernel = "kernel '" + entry + "': ";
  const Section& symbols = sections[symtab];
  std::string_view strings = sections[symbols.link].bytes;
  int named = 0;
  for (uint64_t at = 0; at < symbols.bytes.size(); at += 24) {
    if (*string_at(strings, load<uint32_t>(symbols.bytes, at)) != entry) continue;
    ++named;
    uint8_t type = static_cast<uint8_t>(symbols.bytes[at + 4]) & 0xf;
    if (type != 2 || load<uint16_t>(symbols.bytes, at + 6) != text)  // STT_FUNC in its code
      return bad(kernel + "its symbol is not a function in its code");
  }
  if (named != 1) return bad(kernel + std::to_string(named) + " symbols of its name");
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& s = sections[i];
    if (s.type == k_sht_cuda_info && s.info == text && i != info)
      return bad(kernel + "section '" + std::string(s.name) + "' describes its code");
  }
  if (info != sections.size() &&
      (sections[info].type != k_sht_cuda_info || sections[info].info != text ||
       sections[info].link != symtab)) {
    return bad(kernel + "its attributes describe other code");
  }
  // The parameters: EIATTR_KPARAM_INFO records (a 32-bit index, then a 16-bit ordinal, a 16-bit
  // offset and 32 bits of flags, the size in the top 14), within the bytes of parameters
  // (EIATTR_CBANK_PARAM_SIZE), which lie within the constant bank's section (EIATTR_PARAM_CBANK).
  // The offsets are ptxas's: it aligns each parameter in the constant bank, whose parameter window
  // starts at an arch's own address.
  struct Found {
    int64_t bytes = -1, offset = 0;
  };
  std::vector<Found> found(params.size());
  std::string failure;
  int64_t total = -1;
  if (info != sections.size()) {
    for_each_record(sections[info].bytes, [&](uint8_t format, uint8_t attribute,
                                              std::string_view value) {
      if (!failure.empty()) return;
      // Both give the parameters' bytes; they must agree.
      auto size_of_parameters = [&](int64_t bytes) {
        if (total >= 0 && bytes != total) failure = "two sizes of its parameters";
        total = bytes;
      };
      if (format == k_format_half && attribute == k_attr_param_bytes) {
        size_of_parameters(load<uint16_t>(value, 0));
      } else if (format == k_format_sized && attribute == k_attr_param_cbank) {
        if (value.size() != 8) {
          failure = "a bank record of " + std::to_string(value.size()) + " bytes";
          return;
        }
        uint64_t symbol = load<uint32_t>(value, 0), bytes = load<uint16_t>(value, 6);
        uint64_t end = uint64_t{load<uint16_t>(value, 4)} + bytes;
        uint16_t bank = symbol < symbols.bytes.size() / 24
                            ? load<uint16_t>(symbols.bytes, symbol * 24 + 6)
                            : uint16_t{0xffff};
        if (bank >= sections.size() || end > sections[bank].bytes.size())
          failure = "its parameters' bank is not within a section";
        else
          size_of_parameters(static_cast<int64_t>(bytes));
      } else if (format == k_format_sized && attribute == k_attr_kparam_info) {
        uint16_t ordinal = value.size() >= 12 ? load<uint16_t>(value, 4) : uint16_t{0xffff};
        if (value.size() < 12) {
          failure = "a short parameter record";
        } else if (ordinal >= found.size() || found[ordinal].bytes >= 0) {
          failure = "parameter " + std::to_string(ordinal) + " is not one of the " +
                    std::to_string(params.size()) + " kiln passes";
        } else {
          found[ordinal] = {load<uint32_t>(value, 8) >> 18, load<uint16_t>(value, 6)};
        }
      }
      for (auto [listing, stride] : k_instruction_lists) {
        if (format != k_format_sized || attribute != listing) continue;
        uint64_t code = sections[text].bytes.size();
        for (uint64_t at = 0; at < value.size() && failure.empty(); at += stride) {
          if (value.size() - at < stride || load<uint32_t>(value, at) > code - 16)
            failure = "an instruction offset past its code";
        }
      }
    });
  }
  if (!failure.empty()) return bad(kernel + failure);
  // kiln passes a pointer to each value, of which the driver reads as many bytes as the cubin
  // says, into the bank at its offset.
  std::vector<std::pair<int64_t, int64_t>> spans;  // [offset, end) of each parameter
  for (size_t i = 0; i < params.size(); ++i) {
    if (found[i].bytes < 0) return bad(kernel + "no parameter " + std::to_string(i));
    if (uint32_t bytes = param_size(params[i].kind); found[i].bytes != bytes) {
      return bad(kernel + "parameter " + std::to_string(i) + " is " +
                 std::to_string(found[i].bytes) + " bytes, where kiln passes " +
                 std::to_string(bytes));
    }
    spans.push_back({found[i].offset, found[i].offset + found[i].bytes});
  }
  if (!params.empty() && (total < 0 || static_cast<uint64_t>(total) > k_max_param_bytes))
    return bad(kernel + "no size of its parameters, or one past " +
               std::to_string(k_max_param_bytes) + " bytes");
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].second > total || (i + 1 < spans.size() && spans[i].second > spans[i + 1].first))
      return bad(kernel + "its parameters overlap, or pass their bytes");
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
