// Op calls of the graph text: arity, literal operands and named arguments, checked and handed
// to the builder, with every error located at the call.
#include "ir/parser.h"

#include <charconv>
#include <cmath>
#include <optional>

namespace kiln::ir::detail {

namespace {

// Reads `true`/`false`.
std::optional<bool> parse_bool(const Token& token) {
  if (token.kind != TokenKind::identifier) return std::nullopt;
  if (token.text == "true") return true;
  if (token.text == "false") return false;
  return std::nullopt;
}

// Reads a whole number token ("-1", "+3", "1e-5") as T.
template <typename T>
std::optional<T> parse_number(const Token& token) {
  if (token.kind != TokenKind::number || token.text.empty()) return std::nullopt;
  std::string_view text = token.text;
  T value = 0;
  auto [end, ec] = std::from_chars(text.data() + (text[0] == '+'), text.data() + text.size(),
                                   value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_int(const Token& token) { return parse_number<int64_t>(token); }

// What a named argument's value is, for an error: "a list", "a call of 'relu'", or its token.
std::string describe_value(const NamedArg& arg) {
  if (arg.is_list) return "a list";
  if (arg.node >= 0) return "a call of '" + std::string(arg.value.text) + "'";
  return describe(arg.value);
}

}  // namespace

Error Parser::bad_value(const NamedArg& arg, const std::string& wanted) const {
  return error_at(arg.value.location, "expected " + wanted + " for '" + std::string(arg.name) +
                                          "', got " + describe_value(arg));
}

Expected<NodeId> Parser::tensor_arg(const Token& op_token, const Operand& operand,
                                    size_t index) {
  if (operand.is_literal) {
    return error_at(operand.location, std::string(op_token.text) + " operand " +
                                          std::to_string(index + 1) +
                                          " must be a tensor, got the literal " +
                                          std::string(operand.text));
  }
  return operand.node;
}

// Checks a literal's spelling against the dtype of the tensor it meets: a number for a float
// tensor, an integer for an integer one, true or false for bool.
Status Parser::check_literal_spelling(const Token& op_token, const Operand& literal,
                                      DType dtype) {
  bool ok = is_float(dtype)     ? literal.kind != LiteralKind::boolean
            : is_integer(dtype) ? literal.kind == LiteralKind::integer
                                : literal.kind == LiteralKind::boolean;
  std::string op(op_token.text);
  if (ok) {
    // Its value too, where it is written (the builder's error would stand at the op), read from
    // its text for an integer: the double it was read into rounds 2^53 + 1 to 2^53.
    double value = literal.literal;
    if (is_integer(dtype)) {
      std::string_view text = literal.text;
      int64_t exact = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), exact);
      bool negative = !text.empty() && text.front() == '-';
      bool whole = ec == std::errc() && end == text.data() + text.size();
      bool past = ec == std::errc::result_out_of_range ||
                  (whole && (exact < -(int64_t{1} << 53) || exact > (int64_t{1} << 53)));
      if (past) value = negative ? -1e300 : 1e300;  // check_literal names the range
    }
    if (Status fits = check_literal(dtype, value); !fits)
      return error_at(literal.location, op + ": " + fits.error().message + ", got " +
                                            std::string(literal.text));
    return Status::success();
  }
  const char* wanted = is_float(dtype)     ? "a number"
                       : is_integer(dtype) ? "an integer (no '.', exponent or inf)"
                                           : "true or false";
  std::string name(to_string(dtype));
  const char* article = name[0] == 'i' || name[0] == 'f' ? "an " : "a ";
  return error_at(literal.location, op + ": the literal " + std::string(literal.text) +
                                        " meets " + article + name + " tensor, which takes " +
                                        wanted + "; tensors and literals never convert: cast");
}

Expected<NodeId> Parser::build(const Token& op_token, const std::vector<Operand>& args,
                               const std::vector<NamedArg>& named) {
  std::string op_name(op_token.text);
  auto kind = parse_op_kind(op_token.text);
  if (!kind || *kind == OpKind::input) {
    return error_at(op_token.location,
                    "unknown op '" + op_name + "'; expected one of " + op_names());
  }
  OpCategory cat = category(*kind);
  auto lo = static_cast<size_t>(min_operands(*kind));
  auto hi = static_cast<size_t>(max_operands(*kind));
  size_t arity = lo;
  if (lo != hi) {
    if (args.size() < lo || args.size() > hi) {
      return error_at(op_token.location, op_name + " takes " + std::to_string(lo) + " to " +
                                             std::to_string(hi) + " operands, got " +
                                             std::to_string(args.size()));
    }
  } else if (args.size() != arity) {
    return error_at(op_token.location, op_name + " takes " + std::to_string(arity) + " operand" +
                                           (arity == 1 ? "" : "s") + ", got " +
                                           std::to_string(args.size()) +
                                           (cat == OpCategory::attention
                                                ? " (a mask is written mask=NAME)"
                                                : ""));
  }
  auto unknown_arg = [&](const NamedArg& arg, const char* accepted) {
    return error_at(arg.value.location, op_name + " has no argument '" + std::string(arg.name) +
                                            "'; " + accepted);
  };
  auto located = [&](Expected<NodeId> id) -> Expected<NodeId> {
    if (!id) return error_at(op_token.location, id.error().message);
    m_builder.set_location(*id, op_token.location.line, op_token.location.column);
    return id;
  };

  switch (cat) {
    case OpCategory::matmul: {
      bool transpose_a = false;
      bool transpose_b = false;
      std::optional<Precision> precision;
      std::optional<DType> out_dtype;
      for (const NamedArg& arg : named) {
        if (arg.name == "transpose_a" || arg.name == "transpose_b") {
          auto value = parse_bool(arg.value);
          if (!value) return bad_value(arg, "true or false");
          (arg.name == "transpose_a" ? transpose_a : transpose_b) = *value;
        } else if (arg.name == "precision") {
          precision = arg.value.kind == TokenKind::identifier && arg.node < 0
                          ? parse_precision(arg.value.text)
                          : std::nullopt;
          if (!precision) return bad_value(arg, "highest, high, tf32x3 or medium");
        } else if (arg.name == "out_dtype") {
          out_dtype = arg.value.kind == TokenKind::identifier && arg.node < 0
                          ? parse_dtype(arg.value.text)
                          : std::nullopt;
          if (!out_dtype) return bad_value(arg, "a dtype (" + dtype_names() + ")");
        } else {
          return unknown_arg(arg, "expected transpose_a, transpose_b, precision or out_dtype");
        }
      }
      auto a = tensor_arg(op_token, args[0], 0);
      if (!a) return a;
      auto b = tensor_arg(op_token, args[1], 1);
      if (!b) return b;
      return located(
          m_builder.add_matmul(*a, *b, transpose_a, transpose_b, precision, {}, out_dtype));
    }
    case OpCategory::binary: {
      if (!named.empty()) return unknown_arg(named[0], "it takes two operands only");
      if (args[0].is_literal && args[1].is_literal) {
        return error_at(op_token.location, op_name + " needs at least one tensor operand");
      }
      if (args[0].is_literal) {
        DType dtype = m_builder.node(args[1].node).type.dtype;
        if (Status st = check_literal_spelling(op_token, args[0], dtype); !st) return st.error();
        return located(m_builder.add_binary_literal(*kind, args[1].node, args[0].literal,
                                                    LiteralSide::lhs));
      }
      if (args[1].is_literal) {
        DType dtype = m_builder.node(args[0].node).type.dtype;
        if (Status st = check_literal_spelling(op_token, args[1], dtype); !st) return st.error();
        return located(m_builder.add_binary_literal(*kind, args[0].node, args[1].literal,
                                                    LiteralSide::rhs));
      }
      return located(m_builder.add_binary(*kind, args[0].node, args[1].node));
    }
    case OpCategory::unary: {
      OpKind unary = *kind;
      for (const NamedArg& arg : named) {
        if (*kind != OpKind::gelu) return unknown_arg(arg, "it takes one operand only");
        if (arg.name != "approximate") return unknown_arg(arg, "expected approximate");
        std::optional<OpKind> approximate;
        if (!arg.is_list && arg.node < 0 && arg.value.kind == TokenKind::string && arg.value.text.size() >= 2) {
          approximate = approximate_kind(*kind, arg.value.text.substr(1, arg.value.text.size() - 2));
        }
        if (!approximate) return bad_value(arg, "\"none\" or \"tanh\"");
        unary = *approximate;
      }
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      return located(m_builder.add_unary(unary, *x));
    }
    case OpCategory::cast: {
      std::optional<DType> to;
      for (const NamedArg& arg : named) {
        if (arg.name != "to") return unknown_arg(arg, "expected to");
        to = arg.value.kind == TokenKind::identifier && arg.node < 0 ? parse_dtype(arg.value.text)
                                                     : std::nullopt;
        if (!to) return bad_value(arg, "a dtype (" + dtype_names() + ")");
      }
      if (!to) return error_at(op_token.location, "cast needs a target dtype: cast(x, to=bf16)");
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      return located(m_builder.add_cast(*x, *to));
    }
    case OpCategory::softmax:
    case OpCategory::scan:
    case OpCategory::reduce: {
      int axis = default_attrs(*kind).axis;
      bool keepdim = false;
      for (const NamedArg& arg : named) {
        if (arg.name == "axis") {
          auto value = arg.is_list || arg.node >= 0 ? std::nullopt : parse_int(arg.value);
          if (!value || *value < -k_max_rank || *value >= k_max_rank)
            return bad_value(arg, "an integer axis");
          axis = static_cast<int>(*value);
        } else if (arg.name == "keepdim" && cat == OpCategory::reduce) {
          auto value = arg.is_list || arg.node >= 0 ? std::nullopt : parse_bool(arg.value);
          if (!value) return bad_value(arg, "true or false");
          keepdim = *value;
        } else {
          return unknown_arg(arg, cat == OpCategory::reduce ? "expected axis or keepdim"
                                                             : "expected axis");
        }
      }
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      if (cat == OpCategory::softmax) return located(m_builder.add_softmax(*x, axis));
      if (cat == OpCategory::scan) return located(m_builder.add_scan(*kind, *x, axis));
      return located(m_builder.add_reduce(*kind, *x, axis, keepdim));
    }
    case OpCategory::norm: {
      double eps = default_attrs(*kind).eps;
      for (const NamedArg& arg : named) {
        if (arg.name != "eps") return unknown_arg(arg, "expected eps");
        auto value = arg.is_list || arg.node >= 0 ? std::nullopt : parse_number<double>(arg.value);
        if (!value || !(*value > 0.0) || !std::isfinite(*value))
          return bad_value(arg, "a positive number");
        eps = *value;
      }
      std::vector<NodeId> ops;
      for (size_t i = 0; i < args.size(); ++i) {
        auto t = tensor_arg(op_token, args[i], i);
        if (!t) return t;
        ops.push_back(*t);
      }
      if (*kind == OpKind::rms_norm) return located(m_builder.add_rms_norm(ops[0], ops[1], eps));
      return located(m_builder.add_layer_norm(ops[0], ops[1], ops[2], eps));
    }
    case OpCategory::layout:
      return build_layout(op_token, *kind, args, named);
    case OpCategory::attention:
      return build_attention(op_token, args, named);
    case OpCategory::arange:
      break;  // parse_arange reads it
    case OpCategory::gather: {
      if (!named.empty()) return unknown_arg(named[0], "it takes a table and ids only");
      auto table = tensor_arg(op_token, args[0], 0);
      if (!table) return table;
      auto ids = tensor_arg(op_token, args[1], 1);
      if (!ids) return ids;
      return located(m_builder.add_embedding(*table, *ids));
    }
    case OpCategory::select: {
      if (!named.empty()) return unknown_arg(named[0], "it takes three operands only");
      auto cond = tensor_arg(op_token, args[0], 0);
      if (!cond) return cond;
      std::optional<NodeId> a, b;
      if (!args[1].is_literal) a = args[1].node;
      if (!args[2].is_literal) b = args[2].node;
      // Literals take the other value's dtype; two literals give f32.
      DType dtype = a ? m_builder.node(*a).type.dtype : b ? m_builder.node(*b).type.dtype
                                                         : DType::f32;
      for (size_t i : {size_t{1}, size_t{2}}) {
        if (!args[i].is_literal) continue;
        if (!a && !b && args[i].kind == LiteralKind::boolean) {  // no tensor to give a dtype
          return error_at(args[i].location,
                          "where: two literals make an f32 result, and " +
                              std::string(args[i].text) + " is no number; for a bool, write " +
                              "the condition itself (or logical_not of it)");
        }
        if (Status st = check_literal_spelling(op_token, args[i], dtype); !st) return st.error();
      }
      return located(m_builder.add_where(*cond, a, b, args[1].literal, args[2].literal));
    }
    case OpCategory::input:
      break;
  }
  return error_at(op_token.location, "unknown op '" + op_name + "'");
}

Expected<NodeId> Parser::build_layout(const Token& op_token, OpKind kind,
                                      const std::vector<Operand>& args,
                                      const std::vector<NamedArg>& named) {
  std::string op_name(op_token.text);
  auto unknown_arg = [&](const NamedArg& arg, const char* accepted) {
    return error_at(arg.value.location, op_name + " has no argument '" + std::string(arg.name) +
                                            "'; " + accepted);
  };
  auto bad_item = [&](const Token& at, std::string_view arg, const std::string& wanted) {
    return error_at(at.location, "expected " + wanted + " for '" + std::string(arg) + "', got " +
                                     describe(at));
  };
  auto located = [&](Expected<NodeId> id) -> Expected<NodeId> {
    if (!id) return error_at(op_token.location, id.error().message);
    m_builder.set_location(*id, op_token.location.line, op_token.location.column);
    return id;
  };
  auto missing = [&](const char* arg, const char* example) {
    return error_at(op_token.location, op_name + " needs " + arg + ": " + example);
  };
  std::vector<NodeId> ops;
  for (size_t i = 0; i < args.size(); ++i) {
    auto t = tensor_arg(op_token, args[i], i);
    if (!t) return t;
    ops.push_back(*t);
  }
  // Layout ops only (build() sends nothing else here).
  if (kind == OpKind::reshape || kind == OpKind::expand) {
    std::optional<std::vector<int64_t>> dims;
    std::vector<SymbolicDim> symbols;
    for (const NamedArg& arg : named) {
      if (arg.name != "shape") return unknown_arg(arg, "expected shape");
      if (!arg.is_list) return bad_value(arg, "a list of dims, [2, -1, 64]");
      dims.emplace();
      for (const Token& item : arg.list) {
        SymbolicDim sym;
        int64_t value = 0;
        if (item.kind == TokenKind::identifier) {
          auto index = m_builder.find_symbol(item.text);
          if (!index) {
            return error_at(item.location, "'" + std::string(item.text) +
                                               "' is not a declared dim");
          }
          sym = {*index, std::string(item.text)};
        } else {
          auto v = parse_int(item);
          if (!v) return bad_item(item, arg.name, "an integer dim or a dim name");
          value = *v;
        }
        dims->push_back(value);
        symbols.push_back(std::move(sym));
      }
    }
    if (kind == OpKind::expand) {
      if (!dims) return missing("a shape", "expand(x, shape=[B, 4, -1, 64])");
      return located(m_builder.add_expand(ops[0], std::move(*dims), std::move(symbols)));
    }
    if (!dims) return missing("a shape", "reshape(x, shape=[2, -1, 64])");
    return located(m_builder.add_reshape(ops[0], std::move(*dims), std::move(symbols)));
  }
  if (kind == OpKind::permute) {
    std::optional<std::vector<int>> dims;
    for (const NamedArg& arg : named) {
      if (arg.name != "dims") return unknown_arg(arg, "expected dims");
      if (!arg.is_list) return bad_value(arg, "a list of axes, [0, 2, 1, 3]");
      dims.emplace();
      for (const Token& item : arg.list) {
        auto v = parse_int(item);
        if (!v || *v < -k_max_rank || *v >= k_max_rank)
          return bad_item(item, arg.name, "an axis");
        dims->push_back(static_cast<int>(*v));
      }
    }
    if (!dims) return missing("dims", "permute(x, dims=[0, 2, 1, 3])");
    return located(m_builder.add_permute(ops[0], std::move(*dims)));
  }
  if (kind == OpKind::slice || kind == OpKind::roll) {
    // slice(x, axis, start, end) and roll(x, shift, axis): integers, the axis optional.
    bool slice = kind == OpKind::slice;
    std::optional<int64_t> axis, start, end, shift;
    for (const NamedArg& arg : named) {
      std::optional<int64_t>* target = arg.name == "axis"             ? &axis
                                       : slice && arg.name == "start" ? &start
                                       : slice && arg.name == "end"   ? &end
                                       : !slice && arg.name == "shift" ? &shift
                                                                       : nullptr;
      if (!target)
        return unknown_arg(arg, slice ? "expected axis, start or end" : "expected shift or axis");
      auto v = arg.is_list ? std::nullopt : parse_int(arg.value);
      bool is_axis = target == &axis;
      int64_t limit = is_axis ? k_max_rank : k_max_elements;
      if (!v || *v < -limit || *v > limit - is_axis)
        return bad_value(arg, is_axis ? "an integer axis" : "an integer");
      *target = *v;
    }
    int a = axis ? static_cast<int>(*axis) : default_attrs(kind).axis;
    if (!slice) {
      if (!shift) return missing("a shift", "roll(x, shift=1, axis=-1)");
      return located(m_builder.add_roll(ops[0], *shift, a));
    }
    if (!start || !end) return missing("start and end", "slice(x, axis=-1, start=0, end=32)");
    return located(m_builder.add_slice(ops[0], a, *start, *end));
  }
  if (kind == OpKind::concat) {
    int axis = default_attrs(kind).axis;
    for (const NamedArg& arg : named) {
      if (arg.name != "axis") return unknown_arg(arg, "expected axis");
      auto v = arg.is_list ? std::nullopt : parse_int(arg.value);
      if (!v || *v < -k_max_rank || *v >= k_max_rank)
        return bad_value(arg, "an integer axis");
      axis = static_cast<int>(*v);
    }
    return located(m_builder.add_concat(ops, axis));
  }
  return error_at(op_token.location, "unknown op '" + op_name + "'");
}

Expected<NodeId> Parser::build_attention(const Token& op_token, const std::vector<Operand>& args,
                                         const std::vector<NamedArg>& named) {
  std::optional<NodeId> mask;
  std::optional<double> scale;
  bool causal = false;
  for (const NamedArg& arg : named) {
    if (arg.name == "mask") {
      if (arg.node >= 0) {  // mask=where(...): any expression
        mask = arg.node;
        continue;
      }
      if (arg.is_list || arg.value.kind != TokenKind::identifier)
        return bad_value(arg, "the name of a value or an expression");
      mask = m_builder.find(arg.value.text);
      if (!mask) {
        return error_at(arg.value.location,
                        "undefined value '" + std::string(arg.value.text) + "'");
      }
    } else if (arg.name == "scale") {
      scale = arg.is_list ? std::nullopt : parse_number<double>(arg.value);
      if (!scale) return bad_value(arg, "a number");
    } else if (arg.name == "causal") {
      auto value = arg.is_list ? std::nullopt : parse_bool(arg.value);
      if (!value) return bad_value(arg, "true or false");
      causal = *value;
    } else {
      return error_at(arg.value.location, "attention has no argument '" +
                                              std::string(arg.name) +
                                              "'; expected mask, scale or causal");
    }
  }
  std::vector<NodeId> ops;
  for (size_t i = 0; i < args.size(); ++i) {
    auto t = tensor_arg(op_token, args[i], i);
    if (!t) return t;
    ops.push_back(*t);
  }
  if (!scale) {
    // The usual 1/sqrt(D), D being q's head dim; a symbolic D has no single value.
    const Shape& q = m_builder.node(ops[0]).type.shape;
    int last = q.rank() - 1;
    if (last < 0) {
      scale = 1.0;  // a rank-0 q has no head dim: add_attention refuses it, naming its rank
    } else if (q.symbol(last) >= 0 && q.rank() >= 2) {
      return error_at(op_token.location,
                      "attention needs scale= when q's head dim is the symbolic dim " +
                          q.symbols()[static_cast<size_t>(last)].name +
                          ": attention(q, k, v, scale=0.125)");
    } else {
      scale = 1.0 / std::sqrt(static_cast<double>(q.dim(last)));
    }
  }
  auto id = m_builder.add_attention(ops[0], ops[1], ops[2], mask, *scale, causal);
  if (!id) return error_at(op_token.location, id.error().message);
  m_builder.set_location(*id, op_token.location.line, op_token.location.column);
  return id;
}

}  // namespace kiln::ir::detail
