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
constexpr uint8_t k_format_half = 3;   // EIFMT_HVAL: a 16-bit value in the record
constexpr uint8_t k_format_sized = 4;  // EIFMT_SVAL: a 16-bit size, then that many bytes
// EIATTR_* numbers, as cuobjdump -elf names them.
constexpr uint8_t k_attr_param_cbank = 0x0a;  // PARAM_CBANK: bank symbol, offset, size
constexpr uint8_t k_attr_externs = 0x0f;      // EXTERNS: symbols, 32 bits each
constexpr uint8_t k_attr_frame_size = 0x11;   // FRAME_SIZE: symbol, bytes per thread
constexpr uint8_t k_attr_kparam_info = 0x17;  // KPARAM_INFO: one kernel parameter
constexpr uint8_t k_attr_param_bytes = 0x19;  // CBANK_PARAM_SIZE: the parameters' bytes
constexpr uint8_t k_attr_regcount = 0x2f;     // REGCOUNT: symbol, registers per thread
// The global .nv.info's attributes of a function: symbol, value (MIN_STACK_SIZE, CRS_STACK_SIZE
// and MAX_STACK_SIZE besides the two above).
constexpr uint8_t k_function_attributes[] = {k_attr_frame_size, 0x12, 0x1e, 0x23,
                                             k_attr_regcount};
// A kernel's attributes of one length, as NVRTC 12 and 13 write them: MAX_THREADS and REQNTID
// (x, y, z), CRS_STACK_SIZE, SW_WAR and CUDA_API_VERSION; one of another length is refused, so
// that a reader trusting the attribute does not read past the record.
constexpr std::pair<uint8_t, uint64_t> k_fixed_lengths[] = {
    {0x05, 12}, {0x10, 12}, {0x1e, 4}, {0x36, 4}, {0x37, 4}};
// Parameter attributes kiln does not read (SMEM_PARAM_SIZE, KPARAM_INFO_V2): refused.
constexpr uint8_t k_unread_parameter_attributes[] = {0x18, 0x45};
// Attributes that list instructions of a kernel's code the driver may patch, and the bytes of
// each entry, whose first 32 bits are the instruction's offset: 16 for MBARRIER_INSTR_OFFSETS, 4
// for EXIT, S2RCTAID, LD_CACHEMOD, ATOM_SYS, COOP_GROUP, ATOMF16_EMUL, INT_WARP_WIDE, SYSCALL,
// STACK_CANARY_TRAP, LOCAL_CTA_ASYNC_STORE and IGNOREOOB_CP_ASYNC_BULK (_INSTR_OFFSETS or
// _OFFSETS), as cuobjdump -elf reads them.
constexpr std::pair<uint8_t, uint64_t> k_instruction_lists[] = {
    {0x1c, 4}, {0x1d, 4}, {0x25, 4}, {0x27, 4}, {0x28, 4}, {0x2d, 4},
    {0x31, 4}, {0x39, 16}, {0x46, 4}, {0x57, 4}, {0x59, 4}, {0x65, 4}};
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
  // Section numbers from 0xff00 are reserved (SHN_LORESERVE): a file of so many sections is not
  // one a reader indexes alike.
  if (shentsize != 64 || shnum == 0 || shnum >= 0xff00 || shstrndx >= shnum)
    return bad("section headers of another size or count");
  if (shoff > cubin.size() || uint64_t{shnum} * shentsize > cubin.size() - shoff)
    return bad("section headers past the end of the file");
  uint64_t phoff = load<uint64_t>(cubin, 32);
  uint16_t phentsize = load<uint16_t>(cubin, 54), phnum = load<uint16_t>(cubin, 56);
  if (phnum == 0xffff) return bad("program headers counted elsewhere (PN_XNUM)");
  if (phnum != 0 && (phentsize != 56 || phoff > cubin.size() ||
                     uint64_t{phnum} * phentsize > cubin.size() - phoff)) {
    return bad("program headers past the end of the file");
  }
  for (uint16_t i = 0; i < phnum; ++i) {
    uint64_t h = phoff + uint64_t{i} * phentsize;
    uint64_t offset = load<uint64_t>(cubin, h + 8), file_bytes = load<uint64_t>(cubin, h + 32);
    if (offset > cubin.size() || file_bytes > cubin.size() - offset ||
        file_bytes > load<uint64_t>(cubin, h + 40)) {
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
// table and their target section; notes and .nv.compat read whole. `symtab` is set to the symbol
// table's index.
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
    // (The attribute sections proper are read by check_attributes.)
    if (s.name == ".nv.compat" &&
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

// One parameter of a kernel, as its attributes declare it.
struct Parameter {
  int64_t offset = 0, bytes = -1;
};

// Attribute section `index`: its records whole, and what they name within what they name.
// - The global .nv.info (describing no code): each function attribute names a symbol; no
//   parameter records.
// - A kernel's: it describes a kernel's code and links to the symbol table; its externs name
//   symbols; its instruction lists lie within the code; its parameters (KPARAM_INFO: a 32-bit
//   index, then a 16-bit ordinal, a 16-bit offset and 32 bits of flags, the size in the top 14)
//   are numbered 0 to n - 1 and lie, without overlap, within the bytes of parameters, on which
//   CBANK_PARAM_SIZE and PARAM_CBANK agree, the latter within the kernel's .nv.constant0 section.
//   (The offsets are ptxas's: it aligns each parameter in the constant bank, whose parameter
//   window starts at an arch's own address.) `parameters` gets them, by ordinal.
Status check_attributes(const std::vector<Section>& sections, size_t symtab, size_t index,
                        std::vector<Parameter>* parameters) {
  const Section& s = sections[index];
  const Section& symbols = sections[symtab];
  uint64_t symbol_count = symbols.bytes.size() / 24;
  std::string where = "section '" + std::string(s.name) + "': ";
  auto member = [](const auto& list, uint8_t attribute) {
    return std::find(std::begin(list), std::end(list), attribute) != std::end(list);
  };
  auto parameter_record = [&](uint8_t attribute) {
    return attribute == k_attr_param_cbank || attribute == k_attr_kparam_info ||
           attribute == k_attr_param_bytes || member(k_unread_parameter_attributes, attribute);
  };
  std::string failure;
  if (s.info == 0) {
    bool whole = for_each_record(s.bytes, [&](uint8_t format, uint8_t attribute,
                                              std::string_view value) {
      if (!failure.empty()) return;
      if (parameter_record(attribute)) {
        failure = "a parameter record outside a kernel's attributes";
      } else if (member(k_function_attributes, attribute) &&
                 (format != k_format_sized || value.size() != 8 ||
                  load<uint32_t>(value, 0) >= symbol_count)) {
        failure = "a function attribute that names no symbol";
      }
    });
    if (!whole) return bad(where + "a record of unknown format, or past its end");
    return failure.empty() ? Status::success() : bad(where + failure);
  }
  const Section& code = sections[s.info];
  if (s.link != symtab || code.name.substr(0, 6) != ".text." || code.bytes.empty() ||
      code.bytes.size() % 16 != 0) {
    return bad(where + "it describes no kernel's code");
  }
  std::string constants = ".nv.constant0." + std::string(code.name.substr(6));
  int64_t total = -1;
  bool banked = false;
  // CBANK_PARAM_SIZE and PARAM_CBANK both give the parameters' bytes; they must agree.
  auto size_of_parameters = [&](int64_t bytes) {
    if (total >= 0 && bytes != total) failure = "two sizes of its parameters";
    total = bytes;
  };
  bool whole = for_each_record(s.bytes, [&](uint8_t format, uint8_t attribute,
                                            std::string_view value) {
    if (!failure.empty()) return;
    bool sized = format == k_format_sized;
    if (member(k_unread_parameter_attributes, attribute)) {
      failure = "a parameter record kiln does not read (attribute " +
                std::to_string(attribute) + ")";
    } else if (attribute == k_attr_param_bytes) {
      if (format != k_format_half) failure = "a size of its parameters in another format";
      else size_of_parameters(load<uint16_t>(value, 0));
    } else if (attribute == k_attr_param_cbank) {
      uint64_t symbol = sized && value.size() == 8 ? load<uint32_t>(value, 0) : symbol_count;
      uint16_t bank = symbol < symbol_count ? load<uint16_t>(symbols.bytes, symbol * 24 + 6)
                                            : uint16_t{0xffff};
      if (bank >= sections.size() || sections[bank].name != constants ||
          sections[bank].info != s.info) {
        failure = "its parameters' bank is not its constant section";
        return;
      }
      uint64_t bytes = load<uint16_t>(value, 6);
      if (load<uint16_t>(value, 4) + bytes > sections[bank].bytes.size()) {
        failure = "its parameters' bank runs past its constant section";
        return;
      }
      banked = true;
      size_of_parameters(static_cast<int64_t>(bytes));
    } else if (attribute == k_attr_kparam_info) {
      uint16_t ordinal = sized && value.size() >= 12 ? load<uint16_t>(value, 4) : uint16_t{0xffff};
      if (ordinal == 0xffff) {
        failure = "a short parameter record";
        return;
      }
      if (parameters->size() <= ordinal) parameters->resize(ordinal + 1u);
      if ((*parameters)[ordinal].bytes >= 0) {
        failure = "two records of parameter " + std::to_string(ordinal);
        return;
      }
      (*parameters)[ordinal] = {load<uint16_t>(value, 6), load<uint32_t>(value, 8) >> 18};
    } else if (attribute == k_attr_externs) {
      for (uint64_t at = 0; at < value.size() && failure.empty(); at += 4) {
        if (!sized || value.size() - at < 4 || load<uint32_t>(value, at) >= symbol_count)
          failure = "an extern that names no symbol";
      }
    }
    for (auto [fixed, length] : k_fixed_lengths) {
      if (attribute == fixed && (!sized || value.size() != length))
        failure = "attribute " + std::to_string(attribute) + " of another length";
    }
    for (auto [listing, stride] : k_instruction_lists) {
      if (attribute != listing) continue;
      for (uint64_t at = 0; at < value.size() && failure.empty(); at += stride) {
        if (!sized || value.size() - at < stride ||
            load<uint32_t>(value, at) > code.bytes.size() - 16) {
          failure = "an instruction offset past its code";
        }
      }
    }
  });
  if (!whole) return bad(where + "a record of unknown format, or past its end");
  if (!failure.empty()) return bad(where + failure);
  // Each parameter within the bytes of parameters, the bank that holds them, without overlap.
  std::vector<std::pair<int64_t, int64_t>> spans;  // [offset, end)
  for (size_t i = 0; i < parameters->size(); ++i) {
    const Parameter& p = (*parameters)[i];
    if (p.bytes < 0) return bad(where + "no record of parameter " + std::to_string(i));
    spans.push_back({p.offset, p.offset + p.bytes});
  }
  if (!spans.empty() && (!banked || total > static_cast<int64_t>(k_max_param_bytes)))
    return bad(where + "no bank of its parameters, or one past " +
               std::to_string(k_max_param_bytes) + " bytes");
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].second > total || (i + 1 < spans.size() && spans[i].second > spans[i + 1].first))
      return bad(where + "its parameters overlap, or pass their bytes");
  }
  return Status::success();
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
  // A section without bytes in the file is memory the driver reserves (shared, local, and
  // uninitialised global memory: .nv.global, not .nv.global.init); any other (code, attributes,
  // constants, symbols, initialised data) is read from the file.
  for (const Section& s : sections) {
    if (s.type == k_sht_nobits && s.name.substr(0, 11) != ".nv.shared." &&
        s.name.substr(0, 10) != ".nv.local." && s.name != ".nv.global") {
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
    uint64_t value = load<uint64_t>(symbols.bytes, at + 8);
    uint64_t size = load<uint64_t>(symbols.bytes, at + 16);
    uint64_t code = sections[text].bytes.size();
    // STT_FUNC, in its code and within it.
    if (type != 2 || load<uint16_t>(symbols.bytes, at + 6) != text || value > code ||
        size > code - value) {
      return bad(kernel + "its symbol is not a function within its code");
    }
  }
  if (named != 1) return bad(kernel + std::to_string(named) + " symbols of its name");
  if (info != sections.size() && sections[info].info != text)
    return bad(kernel + "its attributes describe other code");
  // Every attribute section, of every kernel of the file (the driver loads them all).
  std::vector<Parameter> parameters;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type != k_sht_cuda_info) continue;
    if (sections[i].info == text && i != info)
      return bad(kernel + "section '" + std::string(sections[i].name) + "' describes its code");
    std::vector<Parameter> found;
    if (Status s = check_attributes(sections, symtab, i, &found); !s) return s;
    if (i == info) parameters = std::move(found);
  }
  // kiln passes a pointer to each value, of which the driver reads as many bytes as the cubin
  // says.
  if (parameters.size() != params.size()) {
    return bad(kernel + "it takes " + std::to_string(parameters.size()) + " parameters, where " +
               "kiln passes " + std::to_string(params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (uint32_t bytes = param_size(params[i].kind); parameters[i].bytes != bytes) {
      return bad(kernel + "parameter " + std::to_string(i) + " is " +
                 std::to_string(parameters[i].bytes) + " bytes, where kiln passes " +
                 std::to_string(bytes));
    }
  }
  return Status::success();
}

Status check_cubins(const Artifact& artifact) {
  std::vector<size_t> owners = binary_owners(artifact.kernels);
  for (size_t i = 0; i < artifact.kernels.size(); ++i) {
    const KernelArtifact& binary = artifact.kernels[owners[i]];
    Status s = check_cubin(binary.cubin, binary.entry, artifact.kernels[i].params, artifact.target);
    if (!s) return make_error("kernel '", artifact.kernels[i].name, "': ", s.error().message);
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
