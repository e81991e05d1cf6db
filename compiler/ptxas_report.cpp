// ptxas -v log parsing.
#include "compiler/ptxas_report.h"

#include <cstdlib>

namespace kiln::compiler {

namespace {

// The integer just before `suffix` in `line` (e.g. "12 bytes spill stores"), or -1.
int number_before(std::string_view line, std::string_view suffix) {
  size_t at = line.find(suffix);
  if (at == std::string_view::npos) return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  if (begin == end || end - begin > 9) return -1;
  return std::atoi(std::string(line.substr(begin, end - begin)).c_str());
}

}  // namespace

std::vector<std::pair<std::string, KernelReport>> parse_ptxas_log(std::string_view log) {
  std::vector<std::pair<std::string, KernelReport>> reports;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string_view::npos) end = log.size();
    std::string_view line = log.substr(pos, end - pos);
    pos = end + 1;
    constexpr std::string_view k_entry = "Compiling entry function '";
    if (size_t at = line.find(k_entry); at != std::string_view::npos) {
      size_t begin = at + k_entry.size();
      size_t close = line.find('\'', begin);
      if (close == std::string_view::npos) continue;
      reports.emplace_back(std::string(line.substr(begin, close - begin)), KernelReport{});
      continue;
    }
    if (reports.empty()) continue;
    KernelReport& r = reports.back().second;
    if (int v = number_before(line, "bytes stack frame"); v >= 0) r.local_bytes = v;
    if (int v = number_before(line, "bytes spill stores"); v >= 0) r.spill_store_bytes = v;
    if (int v = number_before(line, "bytes spill loads"); v >= 0) r.spill_load_bytes = v;
    if (int v = number_before(line, "registers"); v >= 0 && line.find("Used") != line.npos) {
      r.registers = v;
    }
    if (int v = number_before(line, "bytes smem"); v >= 0) r.static_smem_bytes = v;
  }
  return reports;
}

}  // namespace kiln::compiler
