// The parser's state and steps, shared by parse.cpp (statements) and parse_ops.cpp (op calls).
#pragma once

#include "ir/graph.h"
#include "ir/lexer.h"

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::detail {

// How a literal is written: `3`, `2.5` / `1e-5` / `inf` / `-inf`, `true` / `false`.
enum class LiteralKind : uint8_t { integer, floating, boolean };

// An expression's value: a graph value or a literal.
struct Operand {
  bool is_literal = false;
  LiteralKind kind = LiteralKind::floating;  // when is_literal
  NodeId node = -1;
  double literal = 0.0;
  Location location;
  std::string_view text;
};

// `true`, `false` and `inf` as literal operands (the lexer reads `-inf` as a number); nullopt for
// any other token.
inline std::optional<Operand> keyword_literal(const Token& token) {
  if (token.kind != TokenKind::identifier) return std::nullopt;
  Operand literal;
  literal.is_literal = true;
  literal.location = token.location;
  literal.text = token.text;
  if (token.text == "true" || token.text == "false") {
    literal.kind = LiteralKind::boolean;
    literal.literal = token.text == "true" ? 1.0 : 0.0;
  } else if (token.text == "inf") {
    literal.literal = HUGE_VAL;
  } else {
    return std::nullopt;
  }
  return literal;
}

// The most items a list argument holds (a shape has at most k_max_rank dims; concat's operands
// are positional).
inline constexpr size_t k_max_list = 16;

struct NamedArg {
  std::string_view name;
  Token value;              // the value, or the '[' of a list
  bool is_list = false;     // name=[a, b, ...]
  std::vector<Token> list;  // the list's items (identifiers or numbers)
  NodeId node = -1;         // name=op(...): the call's value (`value` is its op's name)
};

class Parser {
public:
  Parser(std::string_view source, std::string_view file)
      : m_lexer(source), m_file(file), m_builder("") {
    m_token = m_lexer.next();
  }

  Expected<Graph> parse();

private:
  Error error_at(Location at, const std::string& message) const {
    return Error{std::string(m_file) + ":" + std::to_string(at.line) + ":" +
                 std::to_string(at.column) + ": error: " + message};
  }
  // "expected WANTED for 'NAME', got a list" (or a call, or the token), at the argument's value.
  Error bad_value(const NamedArg& arg, const std::string& wanted) const;
  Error expected(const std::string& what) const {
    return error_at(m_token.location, "expected " + what + ", got " + describe(m_token));
  }
  void advance() { m_token = m_lexer.next(); }
  bool at(TokenKind kind) const { return m_token.kind == kind; }
  bool at_word(std::string_view word) const {
    return m_token.kind == TokenKind::identifier && m_token.text == word;
  }

  Status expect(TokenKind kind, const char* what);
  Status parse_dim();
  Status parse_input();
  Status parse_output();
  Status parse_assignment();
  Status parse_assignment(const Token& name);  // after the name
  Expected<Operand> parse_expr(int depth);
  Expected<Operand> parse_call(const Token& op_token, int depth);
  Expected<Operand> parse_arange(const Token& op_token);
  // The operand an op call gives: node `id`, located at its op, its location recorded.
  Operand call_result(const Token& op_token, NodeId id);
  Expected<NodeId> build(const Token& op_token, const std::vector<Operand>& args,
                         const std::vector<NamedArg>& named);
  Expected<NodeId> build_layout(const Token& op_token, OpKind kind,
                                const std::vector<Operand>& args,
                                const std::vector<NamedArg>& named);
  Expected<NodeId> build_attention(const Token& op_token, const std::vector<Operand>& args,
                                   const std::vector<NamedArg>& named);
  Expected<NodeId> tensor_arg(const Token& op_token, const Operand& operand, size_t index);
  Status check_literal_spelling(const Token& op_token, const Operand& literal, DType dtype);
  Status define(NodeId id, const Token& name_token);
  // A name may not be a literal, a dtype, an op or a declared dim (nor a dim a value's name);
  // `role` is "a value", "an input" or "a dim", for the message.
  Status check_name(const Token& name_token, const char* role);

  Lexer m_lexer;
  std::string_view m_file;
  Builder m_builder;
  Token m_token;
  std::vector<Location> m_defined_at;  // by NodeId
  bool m_seen_input = false;
};

}  // namespace kiln::ir::detail
