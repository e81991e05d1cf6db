// --input, --save and --save-reference: .npy files checked against a graph's inputs, dims taken
// from them, outputs written in their dtypes and in fp64.
#include "tools/data_flags.h"

#include "support/npy.h"
#include "support/npz.h"
#include "tools/cli.h"

#include <algorithm>
#include <charconv>
#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace kiln::tools {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy '<' data is copied as host-order bytes");

bool descr_fits(npy::Descr descr, ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return descr == npy::Descr::f4;
    case ir::DType::f16: return descr == npy::Descr::f2;
    case ir::DType::bf16: return descr == npy::Descr::u2 || descr == npy::Descr::v2;
    case ir::DType::i32: return descr == npy::Descr::i4;
    case ir::DType::i64: return descr == npy::Descr::i8;
    case ir::DType::boolean: return descr == npy::Descr::b1;
  }
  return false;
}

std::string expected_descr(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "'<f4'";
    case ir::DType::f16: return "'<f2'";
    case ir::DType::bf16: return "'<u2' or '<V2' (bf16 bits)";
    case ir::DType::i32: return "'<i4'";
    case ir::DType::i64: return "'<i8'";
    case ir::DType::boolean: return "'|b1'";
  }
  return "?";
}

npy::Descr descr_of(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return npy::Descr::f4;
    case ir::DType::f16: return npy::Descr::f2;
    case ir::DType::bf16: return npy::Descr::u2;
    case ir::DType::i32: return npy::Descr::i4;
    case ir::DType::i64: return npy::Descr::i8;
    case ir::DType::boolean: return npy::Descr::b1;
  }
  return npy::Descr::f4;
}

// "PATH: error: --input x: expected f32[B, 32] (descr '<f4'), got descr '<f2', shape (4, 32)".
Error mismatch(const std::string& path, const ir::Node& input, const npy::Array& array,
               const std::string& note = {}) {
  return make_error(path, ": error: --input ", input.name, ": expected ",
                    ir::to_string(input.type), " (descr ", expected_descr(input.type.dtype), note,
                    "), got descr '", npy::to_string(array.descr), "', shape ",
                    npy::shape_string(array.shape));
}

// How to convert an array numpy holds in another dtype.
std::string conversion(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "; convert it, e.g. arr.astype('<f4')";
    case ir::DType::f16: return "; convert it, e.g. arr.astype('<f2')";
    case ir::DType::bf16: return "; convert it, e.g. arr.astype(ml_dtypes.bfloat16)";
    case ir::DType::i32: return "; convert it, e.g. arr.astype('<i4')";
    case ir::DType::i64: return "; convert it, e.g. arr.astype('<i8')";
    case ir::DType::boolean: return "; convert it, e.g. arr.astype(bool)";
  }
  return {};
}

// The array fits `input` but for its symbolic dims.
Status check_array(const std::string& path, const ir::Node& input, const npy::Array& array) {
  const ir::Shape& shape = input.type.shape;
  if (!descr_fits(array.descr, input.type.dtype))
    return make_error(mismatch(path, input, array).message, conversion(input.type.dtype));
  if (array.shape.size() != static_cast<size_t>(shape.rank()))
    return mismatch(path, input, array);
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape.symbol(d) < 0 && array.shape[static_cast<size_t>(d)] != shape.dim(d))
      return mismatch(path, input, array);
  }
  return Status::success();
}

// The dims a symbolic graph's given inputs set, each checked against its range and against the
// other files; a dim no file gives is an error.
Expected<std::vector<int64_t>> dims_from_files(const ir::Graph& graph,
                                               const std::vector<std::string>& paths,
                                               const std::vector<std::optional<npy::Array>>& arrays,
                                               const std::string& command) {
  const std::vector<ir::Symbol>& symbols = graph.symbols();
  std::vector<int64_t> values(symbols.size(), 0);
  std::vector<size_t> given_by(symbols.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (!arrays[i]) continue;
    const ir::Node& input = graph.node(graph.inputs()[i]);
    for (int d = 0; d < input.type.shape.rank(); ++d) {
      int32_t s = input.type.shape.symbol(d);
      if (s < 0) continue;
      const ir::Symbol& symbol = symbols[static_cast<size_t>(s)];
      int64_t got = arrays[i]->shape[static_cast<size_t>(d)];
      std::string where = paths[i] + ": error: --input " + input.name + ": dim " +
                          std::to_string(d) + " gives " + symbol.name + " = " + std::to_string(got);
      if (got < symbol.lo || got > symbol.hi)
        return make_error(where, ", outside its range ", std::to_string(symbol.lo), "..",
                          std::to_string(symbol.hi));
      int64_t& value = values[static_cast<size_t>(s)];
      if (value != 0 && value != got) {
        size_t other = given_by[static_cast<size_t>(s)];
        return make_error(where, ", but --input ", graph.node(graph.inputs()[other]).name, " (",
                          paths[other], ") gives ", symbol.name, " = ", std::to_string(value));
      }
      value = got;
      given_by[static_cast<size_t>(s)] = i;
    }
  }
  for (size_t s = 0; s < symbols.size(); ++s) {
    if (values[s] == 0)
      return make_error(command, ": no --input gives dim ", ir::describe(symbols[s]),
                        "; give the sizes with --dims");
  }
  return values;
}

// Creates `dir` for `flag`; the exit code of a failure: k_exit_usage when the path names a file
// (the flag wants a directory), k_exit_failure when the directory cannot be made (no permission,
// a read-only or full disk), as for an output file that cannot be written.
int prepare_directory(const std::string& dir, const char* flag, const std::string& command) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    print_error(command + ": " + flag + " " + dir + ": not a directory");
    return k_exit_usage;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    print_error(command + ": " + flag + " " + dir + ": cannot create: " + ec.message());
    return k_exit_failure;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    print_error(command + ": " + flag + " " + dir + ": not a directory");
    return k_exit_usage;
  }
  return k_exit_ok;
}

// --inputs DIR: each input's path DIR/NAME.npy, into `paths` (where --input gave none: an input
// given by both is an error). An input without its file is an error naming every such input; a
// .npy file that names no input is a warning (a state_dict holds more than one graph reads).
// Warns of the `extra` names (sorted, at most 8 shown) that no input of `graph` reads.
void warn_unread(const ir::Graph& graph, const std::string& command, const std::string& source,
                 const char* what, std::vector<std::string> extra) {
  if (extra.empty()) return;
  std::sort(extra.begin(), extra.end());
  std::string list;
  for (size_t i = 0; i < extra.size() && i < 8; ++i) list += (i ? ", " : "") + extra[i];
  if (extra.size() > 8) list += ", and " + std::to_string(extra.size() - 8) + " more";
  print_warning(command + ": --inputs " + source + ": " + std::to_string(extra.size()) + " " +
                what + " name no input of graph '" + graph.name() + "' and are not read: " + list);
}

// --inputs FILE.npz: each input from the archive's member NAME.npy (or NAME), into `members`
// (where --input gave none: an input given by both is an error). An input without its member is
// an error naming every such input; a member that names no input is a warning.
Status inputs_from_archive(const ir::Graph& graph, const npz::Archive& archive,
                           const std::string& command, const std::vector<std::string>& paths,
                           std::vector<const npz::Member*>& members) {
  std::string missing, twice;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const std::string& name = graph.node(graph.inputs()[i]).name;
    if (!paths[i].empty()) {
      twice += (twice.empty() ? "" : ", ") + name;
      continue;
    }
    members[i] = archive.find(name);
    if (members[i] == nullptr) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!twice.empty())
    return make_error(command, ": --input and --inputs ", archive.path(), " both give ", twice);
  if (!missing.empty())
    return make_error(command, ": --inputs ", archive.path(), " has no member for input(s) ",
                      missing, " (expected NAME.npy for each)");
  std::vector<std::string> extra;
  for (const npz::Member& m : archive.members()) {
    bool known = false;
    for (ir::NodeId id : graph.inputs()) known = known || graph.node(id).name == m.name;
    if (!known) extra.push_back(m.entry);
  }
  warn_unread(graph, command, archive.path(), "member(s)", std::move(extra));
  return Status::success();
}

Status inputs_from_directory(const ir::Graph& graph, const std::string& dir,
                             const std::string& command, std::vector<std::string>& paths) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return make_error(command, ": --inputs ", dir, ": not a directory");
  std::string missing, twice;
  size_t count = graph.inputs().size();
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = graph.node(graph.inputs()[i]).name;
    std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
    if (!paths[i].empty()) {
      twice += (twice.empty() ? "" : ", ") + name;
      continue;
    }
    if (!std::filesystem::is_regular_file(path, ec) && !std::filesystem::exists(path, ec)) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    paths[i] = path;
  }
  if (!twice.empty())
    return make_error(command, ": --input and --inputs ", dir, " both give ", twice);
  if (!missing.empty())
    return make_error(command, ": --inputs ", dir, " has no file for input(s) ", missing,
                      " (expected NAME.npy for each)");
  std::vector<std::string> extra;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string file = it->path().filename().string();
    if (file.size() <= 4 || file.compare(file.size() - 4, 4, ".npy") != 0) continue;
    std::string name = file.substr(0, file.size() - 4);
    bool known = false;
    for (ir::NodeId id : graph.inputs()) known = known || graph.node(id).name == name;
    if (!known) extra.push_back(file);
  }
  warn_unread(graph, command, dir, "file(s)", std::move(extra));
  return Status::success();
}

enum class SaveAs : uint8_t {
  dtype,  // the tensor's dtype in device layout
  fp64,   // a float tensor's values as doubles ('<f8'); integers and bools in their dtype, exact
};

npy::Array to_array(const reference::Tensor& tensor, SaveAs as) {
  // The reference computes integers exactly (an i64 past 2^53 too, see reference/tensor.h): as
  // doubles they would round.
  if (!ir::is_float(tensor.dtype)) as = SaveAs::dtype;
  npy::Array array;
  array.descr = as == SaveAs::fp64 ? npy::Descr::f8 : descr_of(tensor.dtype);
  array.shape = tensor.shape.dims();
  if (as == SaveAs::fp64) {
    array.data.resize(tensor.values.size() * sizeof(double));
    std::memcpy(array.data.data(), tensor.values.data(), array.data.size());
    return array;
  }
  array.data.resize(static_cast<size_t>(tensor.type().bytes()));
  reference::store_device_bytes(tensor, array.data.data());
  return array;
}

std::string output_name(const ir::Graph& graph, size_t i) {
  const std::string& name = graph.node(graph.outputs()[i]).name;
  return name.empty() ? "output" + std::to_string(i) : name;
}

}  // namespace

void add_seed_option(CLI::App* cmd, uint64_t& seed) {
  auto whole = [](const std::string& value) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
      return "expected a whole number from 0 to 2^64 - 1, got '" + value + "'";
    return std::string();
  };
  cmd->add_option("--seed", seed, "seed of the random inputs (default 0)")->check(whole);
}

void add_data_options(CLI::App* cmd, DataFlags& flags, const std::string& saved) {
  cmd->add_option("--input", flags.inputs,
                  "an input from a NumPy file, NAME=PATH.npy (repeatable; the rest are seeded)")
      ->type_name("NAME=PATH")
      ->check(not_empty);
  cmd->add_option("--inputs", flags.inputs_from,
                  "every input from DIR/NAME.npy (NAME as the graph writes it, dots kept; "
                  "--input NAME=PATH.npy then gives none of them again)")
      ->type_name("DIR")
      ->check(not_empty);
  cmd->add_option("--save", flags.save, "write " + saved + " as DIR/NAME.npy")
      ->type_name("DIR")
      ->check(not_empty);
  cmd->add_option("--save-reference", flags.save_reference,
                  "write the fp64 reference's outputs as DIR/NAME.npy ('<f8'; integer and bool "
                  "ones in their dtype)")
      ->type_name("DIR")
      ->check(not_empty);
}

std::optional<RunData> prepare_data(const ir::Graph& graph, const DataFlags& flags,
                                    const std::string& dims, uint64_t seed,
                                    const std::string& command, int& exit_code) {
  exit_code = k_exit_usage;
  size_t count = graph.inputs().size();
  std::vector<std::string> paths(count);
  for (const std::string& flag : flags.inputs) {
    size_t eq = flag.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
      print_error(command + ": --input '" + flag + "' is not NAME=PATH.npy");
      return std::nullopt;
    }
    std::string name = flag.substr(0, eq);
    size_t i = 0;
    while (i < count && graph.node(graph.inputs()[i]).name != name) ++i;
    if (i == count) {
      std::string names;
      for (ir::NodeId id : graph.inputs())
        names += (names.empty() ? "" : ", ") + graph.node(id).name;
      print_error(command + ": --input " + name + ": graph '" + graph.name() +
                  "' has no input '" + name + "'; its inputs: " + names);
      return std::nullopt;
    }
    if (!paths[i].empty()) {
      print_error(command + ": --input " + name + " is given twice");
      return std::nullopt;
    }
    paths[i] = flag.substr(eq + 1);
  }
  // --inputs FILE.npz reads members of one archive; --inputs DIR files.
  std::optional<npz::Archive> archive;
  std::vector<const npz::Member*> members(count, nullptr);
  std::error_code ec;
  if (!flags.inputs_from.empty() && std::filesystem::is_regular_file(flags.inputs_from, ec)) {
    auto opened = npz::Archive::open(flags.inputs_from);
    if (!opened) {
      print_error(opened.error().message);
      return std::nullopt;
    }
    archive = std::move(*opened);
    if (Status s = inputs_from_archive(graph, *archive, command, paths, members); !s) {
      print_error(s.error().message);
      return std::nullopt;
    }
    for (size_t i = 0; i < count; ++i)
      if (members[i]) paths[i] = archive->path() + ":" + members[i]->entry;
  } else if (!flags.inputs_from.empty()) {
    if (Status s = inputs_from_directory(graph, flags.inputs_from, command, paths); !s) {
      print_error(s.error().message);
      return std::nullopt;
    }
  }
  std::vector<std::optional<npy::Array>> arrays(count);
  for (size_t i = 0; i < count; ++i) {
    if (paths[i].empty()) continue;
    // The most data a file of this input can hold, in the widest dtype read (so that a '<f8'
    // array of the right shape is told its dtype is wrong, not its size): a bound that stops an
    // endless stream and an oversized file before either fills memory.
    const ir::Node& input = graph.node(graph.inputs()[i]);
    int64_t elements = input.type.shape.elements();  // a symbolic dim at its upper bound
    std::string why = "--input " + input.name + ", " + ir::to_string(input.type) + ", holds " +
                      (input.type.shape.symbolic() ? "at most " : "") + std::to_string(elements) +
                      " elements";
    auto array = members[i] ? archive->read(*members[i], elements * npy::k_max_item_size, why)
                            : npy::read_file(paths[i], elements * npy::k_max_item_size, why);
    if (!array) {
      print_error(array.error().message);
      return std::nullopt;
    }
    if (Status fits = check_array(paths[i], graph.node(graph.inputs()[i]), *array); !fits) {
      print_error(fits.error().message);
      return std::nullopt;
    }
    arrays[i] = std::move(*array);
  }

  // The dims: --dims, or what the files give a symbolic graph.
  std::vector<int64_t> values;
  bool any_file = false;
  for (const auto& a : arrays) any_file = any_file || a.has_value();
  if (!dims.empty() || !graph.symbolic() || !any_file) {
    auto given = run_dims(dims, graph, command);
    if (!given) return std::nullopt;
    values = std::move(*given);
  } else {
    auto from_files = dims_from_files(graph, paths, arrays, command);
    if (!from_files) {
      print_error(from_files.error().message);
      return std::nullopt;
    }
    values = std::move(*from_files);
  }
  auto bound = graph.bind(values);
  if (!bound) {
    print_error(command + ": " + bound.error().message);
    return std::nullopt;
  }

  reference::InputSource inputs{seed, {}};
  inputs.given.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (!arrays[i]) continue;
    const ir::Node& input = bound->node(bound->inputs()[i]);
    if (arrays[i]->shape != input.type.shape.dims()) {  // a symbolic dim that --dims sets apart
      std::string note =
          "; " + ir::to_string(graph.node(graph.inputs()[i]).type) + " at --dims " + dims;
      print_error(mismatch(paths[i], input, *arrays[i], note).message);
      return std::nullopt;
    }
    inputs.given[i] = reference::load_device_bytes(input.type, arrays[i]->data.data());
    arrays[i].reset();
  }

  // Ids an embedding reads from a given file must be rows of its table.
  for (size_t i = 0; i < count; ++i) {
    if (!inputs.given[i]) continue;
    std::vector<const reference::Tensor*> one(count, nullptr);
    one[i] = &*inputs.given[i];
    if (Status s = reference::check_embedding_ids(*bound, one); !s) {
      print_error(paths[i] + ": error: --input " + bound->node(bound->inputs()[i]).name + ": " +
                  s.error().message);
      return std::nullopt;
    }
  }

  for (auto [dir, flag] : {std::pair{&flags.save, "--save"},
                           std::pair{&flags.save_reference, "--save-reference"}}) {
    if (dir->empty()) continue;
    if (int made = prepare_directory(*dir, flag, command); made != k_exit_ok) {
      exit_code = made;
      return std::nullopt;
    }
  }
  if (!flags.save.empty() && !flags.save_reference.empty() &&
      std::filesystem::equivalent(flags.save, flags.save_reference, ec)) {
    print_error(command + ": --save and --save-reference name the same directory; the "
                "reference's files would replace the outputs'");
    return std::nullopt;
  }
  exit_code = k_exit_ok;
  return RunData{std::move(values), std::move(*bound), std::move(inputs), std::move(paths)};
}

std::string describe_inputs(const RunData& data) {
  std::string given;
  bool drawn = false;
  for (size_t i = 0; i < data.paths.size(); ++i) {
    if (data.paths[i].empty()) {
      drawn = true;
      continue;
    }
    given += (given.empty() ? "" : ", ") + data.bound.node(data.bound.inputs()[i]).name +
             " from " + data.paths[i];
  }
  // Seeded integer inputs are drawn in [0, 16), bools as true or false (reference/tensor.h).
  bool integers = false;
  for (size_t i = 0; i < data.paths.size(); ++i) {
    ir::DType dtype = data.bound.node(data.bound.inputs()[i]).type.dtype;
    if (data.paths[i].empty() && !ir::is_float(dtype)) integers = true;
  }
  std::string drawn_text = std::string("uniform in [-1, 1]") +
                           (integers ? " (integers in [0, 16), bools either)" : "");
  if (given.empty()) return "inputs " + drawn_text;
  return "inputs " + given + (drawn ? ", the rest " + drawn_text : "");
}

Expected<std::vector<std::string>> save_outputs(const ir::Graph& graph, const DataFlags& flags,
                                                const std::vector<reference::Tensor>& outputs,
                                                const std::vector<reference::Tensor>& fp64) {
  std::vector<std::string> written;
  auto save = [&](const std::string& dir, const std::vector<reference::Tensor>& tensors,
                  SaveAs as) -> Status {
    for (size_t i = 0; i < tensors.size() && !dir.empty(); ++i) {
      std::string path = (std::filesystem::path(dir) / (output_name(graph, i) + ".npy")).string();
      if (Status s = npy::write_file(path, to_array(tensors[i], as)); !s) return s;
      written.push_back(path);
    }
    return Status::success();
  };
  if (Status s = save(flags.save, outputs, SaveAs::dtype); !s) return s.error();
  if (Status s = save(flags.save_reference, fp64, SaveAs::fp64); !s) return s.error();
  return written;
}

std::optional<int64_t> parse_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (value > (int64_t{1} << 50)) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  if (i == 0) return std::nullopt;
  if (i == text.size()) return value;
  if (i + 1 != text.size()) return std::nullopt;
  int shift = 0;
  switch (std::toupper(static_cast<unsigned char>(text[i]))) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    default: return std::nullopt;
  }
  if (value > (int64_t{1} << (62 - shift))) return std::nullopt;
  return value << shift;
}

std::string describe_dims(const ir::Graph& graph, const RunData& data) {
  std::string at;
  for (size_t i = 0; i < data.dims.size(); ++i)
    at += (i ? ", " : " at ") + graph.symbols()[i].name + " = " + std::to_string(data.dims[i]);
  return at;
}

void add_data_json(nlohmann::json& out, const ir::Graph& graph, const RunData& data,
                   const std::vector<std::string>& saved) {
  if (!data.dims.empty()) {
    nlohmann::json dims = nlohmann::json::object();
    for (size_t i = 0; i < data.dims.size(); ++i) dims[graph.symbols()[i].name] = data.dims[i];
    out["dims"] = dims;
  }
  nlohmann::json files = nlohmann::json::object();
  for (size_t i = 0; i < data.paths.size(); ++i) {
    if (!data.paths[i].empty()) files[graph.node(graph.inputs()[i]).name] = data.paths[i];
  }
  if (!files.empty()) out["inputs"] = files;
  if (!saved.empty()) out["saved"] = saved;
}

}  // namespace kiln::tools
