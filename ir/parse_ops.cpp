// Op calls of the graph text: arity, literal operands and named arguments, checked and handed
// to the builder, with every error located at the call.
#include "ir/parser.h"

#include <charconv>
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

}  // namespace

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

Expected<NodeId> Parser::build(const Token& op_token, const std::vector<Operand>& args,
                               const std::vector<NamedArg>& named) {
  std::string op_name(op_token.text);
  auto kind = parse_op_kind(op_token.text);
  if (!kind || *kind == OpKind::input) {
    return error_at(op_token.location,
                    "unknown op '" + op_name +
                        "'; expected matmul, add, sub, mul, div, relu, gelu, silu, sigmoid, "
                        "tanh, exp, neg, cast or softmax");
  }
  OpCategory cat = category(*kind);
  size_t arity = cat == OpCategory::matmul || cat == OpCategory::binary ? 2 : 1;
  if (args.size() != arity) {
    return error_at(op_token.location, op_name + " takes " + std::to_string(arity) + " operand" +
                                           (arity == 1 ? "" : "s") + ", got " +
                                           std::to_string(args.size()));
  }
  auto unknown_arg = [&](const NamedArg& arg, const char* accepted) {
    return error_at(arg.value.location, op_name + " has no argument '" + std::string(arg.name) +
                                            "'; " + accepted);
  };
  auto bad_value = [&](const NamedArg& arg, const std::string& wanted) {
    return error_at(arg.value.location, "expected " + wanted + " for '" +
                                            std::string(arg.name) + "', got " +
                                            describe(arg.value));
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
      for (const NamedArg& arg : named) {
        if (arg.name == "transpose_a" || arg.name == "transpose_b") {
          auto value = parse_bool(arg.value);
          if (!value) return bad_value(arg, "true or false");
          (arg.name == "transpose_a" ? transpose_a : transpose_b) = *value;
        } else if (arg.name == "precision") {
          precision = arg.value.kind == TokenKind::identifier
                          ? parse_precision(arg.value.text)
                          : std::nullopt;
          if (!precision) return bad_value(arg, "highest, high, tf32x3 or medium");
        } else {
          return unknown_arg(arg, "expected transpose_a, transpose_b or precision");
        }
      }
      auto a = tensor_arg(op_token, args[0], 0);
      if (!a) return a;
      auto b = tensor_arg(op_token, args[1], 1);
      if (!b) return b;
      return located(m_builder.add_matmul(*a, *b, transpose_a, transpose_b, precision));
    }
    case OpCategory::binary: {
      if (!named.empty()) return unknown_arg(named[0], "it takes two operands only");
      if (args[0].is_literal && args[1].is_literal) {
        return error_at(op_token.location, op_name + " needs at least one tensor operand");
      }
      if (args[0].is_literal) {
        return located(m_builder.add_binary_literal(*kind, args[1].node, args[0].literal,
                                                    LiteralSide::lhs));
      }
      if (args[1].is_literal) {
        return located(m_builder.add_binary_literal(*kind, args[0].node, args[1].literal,
                                                    LiteralSide::rhs));
      }
      return located(m_builder.add_binary(*kind, args[0].node, args[1].node));
    }
    case OpCategory::unary: {
      if (!named.empty()) return unknown_arg(named[0], "it takes one operand only");
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      return located(m_builder.add_unary(*kind, *x));
    }
    case OpCategory::cast: {
      std::optional<DType> to;
      for (const NamedArg& arg : named) {
        if (arg.name != "to") return unknown_arg(arg, "expected to");
        to = arg.value.kind == TokenKind::identifier ? parse_dtype(arg.value.text)
                                                     : std::nullopt;
        if (!to) return bad_value(arg, "a dtype (f32, f16 or bf16)");
      }
      if (!to) return error_at(op_token.location, "cast needs a target dtype: cast(x, to=bf16)");
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      return located(m_builder.add_cast(*x, *to));
    }
    case OpCategory::softmax: {
      int axis = -1;
      for (const NamedArg& arg : named) {
        if (arg.name != "axis") return unknown_arg(arg, "expected axis");
        int value = 0;
        std::string_view text = arg.value.text;
        auto [end, ec] = std::from_chars(text.data() + (text[0] == '+'),
                                         text.data() + text.size(), value);
        if (arg.value.kind != TokenKind::number || ec != std::errc() ||
            end != text.data() + text.size()) {
          return bad_value(arg, "an integer axis");
        }
        axis = value;
      }
      auto x = tensor_arg(op_token, args[0], 0);
      if (!x) return x;
      return located(m_builder.add_softmax(*x, axis));
    }
    case OpCategory::input:
      break;
  }
  return error_at(op_token.location, "unknown op '" + op_name + "'");
}

}  // namespace kiln::ir::detail
