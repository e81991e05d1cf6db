// Recursive-descent parser for .kg graph text with bounded nesting and located errors:
// statements and expressions here, op calls and their arguments in parse_ops.cpp.
#include "ir/parse.h"

#include "ir/parser.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kiln::ir {

namespace detail {

Status Parser::expect(TokenKind kind, const char* what) {
  if (!at(kind)) return expected(what);
  advance();
  return Status::success();
}

Status Parser::check_name(const Token& name_token, const char* role) {
  std::string name(name_token.text);
  std::string what;
  if (keyword_literal(name_token)) {
    what = "a literal (true, false, inf)";
  } else if (parse_dtype(name)) {
    what = "a dtype";
  } else if (auto kind = parse_op_kind(name); kind && *kind != OpKind::input) {
    what = "an op";
  } else if (auto sym = m_builder.find_symbol(name)) {
    const Symbol& s = m_builder.symbols()[static_cast<size_t>(*sym)];
    what = "the dim declared at " + std::to_string(s.line) + ":" + std::to_string(s.column);
  } else if (auto value = m_builder.find(name); value && std::string_view(role) == "a dim") {
    Location was = m_defined_at[static_cast<size_t>(*value)];
    what = "the value defined at " + std::to_string(was.line) + ":" + std::to_string(was.column);
  } else {
    return Status::success();
  }
  return error_at(name_token.location,
                  "'" + name + "' is " + what + "; " + role + " needs another name");
}

Status Parser::define(NodeId id, const Token& name_token) {
  std::string name(name_token.text);
  if (Status s = check_name(name_token, "a value"); !s) return s;
  if (auto previous = m_builder.find(name)) {
    Location was = m_defined_at[static_cast<size_t>(*previous)];
    return error_at(name_token.location, "'" + name + "' is already defined at " +
                                             std::to_string(was.line) + ":" +
                                             std::to_string(was.column));
  }
  if (Status s = m_builder.set_name(id, name); !s) {
    return error_at(name_token.location, s.error().message);
  }
  m_defined_at[static_cast<size_t>(id)] = name_token.location;
  return Status::success();
}

Status Parser::parse_input() {
  m_seen_input = true;
  Location input_at = m_token.location;
  advance();  // 'input'
  if (!at(TokenKind::identifier)) return expected("an input name");
  Token name = m_token;
  advance();
  if (Status s = expect(TokenKind::colon, "':' and a type after the input name"); !s) return s;
  if (!at(TokenKind::identifier)) return expected("a dtype (" + dtype_names() + ")");
  Token dtype_token = m_token;
  auto dtype = parse_dtype(dtype_token.text);
  if (!dtype) {
    return error_at(dtype_token.location, "unknown dtype '" + std::string(dtype_token.text) +
                                              "'; expected " + dtype_names());
  }
  advance();
  Location shape_at = m_token.location;
  if (Status s = expect(TokenKind::lbracket, "'[' and a shape after the dtype"); !s) return s;
  std::vector<int64_t> dims;
  std::vector<SymbolicDim> symbols;
  bool scalar = at(TokenKind::rbracket);  // `[]`: rank 0
  if (scalar) advance();
  while (!scalar) {
    if (dims.size() == static_cast<size_t>(k_max_rank) &&
        (at(TokenKind::number) || at(TokenKind::identifier))) {
      return error_at(m_token.location, "a shape has at most " + std::to_string(k_max_rank) +
                                            " dimensions");
    }
    if (at(TokenKind::identifier)) {
      auto sym = m_builder.find_symbol(m_token.text);
      if (!sym) {
        return error_at(m_token.location, "undeclared dim '" + std::string(m_token.text) +
                                              "'; declare it first: dim " +
                                              std::string(m_token.text) + ": LO..HI");
      }
      dims.push_back(m_builder.symbols()[static_cast<size_t>(*sym)].hi);
      symbols.push_back({*sym, std::string(m_token.text)});
    } else {
      if (!at(TokenKind::number)) {
        return expected("a dimension (a positive integer or a dim name)");
      }
      std::string_view text = m_token.text;
      int64_t value = 0;
      auto [end, ec] = std::from_chars(text.data() + (text[0] == '+'),
                                       text.data() + text.size(), value);
      if (ec == std::errc::result_out_of_range) {
        return error_at(m_token.location, "dimension " + std::string(text) + " is too large");
      }
      if (ec != std::errc() || end != text.data() + text.size()) {
        return error_at(m_token.location,
                        "expected a dimension (a positive integer), got " + std::string(text));
      }
      if (value <= 0) {
        return error_at(m_token.location, "dimension " + std::string(text) + " must be positive");
      }
      dims.push_back(value);
      symbols.push_back({});
    }
    advance();
    if (at(TokenKind::comma)) {
      advance();
      continue;
    }
    if (Status s = expect(TokenKind::rbracket, "',' or ']' in the shape"); !s) return s;
    break;
  }
  auto shape = Shape::make(std::move(dims), std::move(symbols));
  if (!shape) return error_at(shape_at, shape.error().message);
  if (auto previous = m_builder.find(name.text)) {
    return define(*previous, name);  // reports the duplicate with both locations
  }
  if (Status s = check_name(name, "an input"); !s) return s;
  auto id = m_builder.add_input(std::string(name.text), TensorType{*dtype, std::move(*shape)});
  if (!id) return error_at(input_at, id.error().message);
  m_defined_at.resize(m_builder.size(), name.location);
  return Status::success();
}

Status Parser::parse_dim() {
  Location dim_at = m_token.location;
  Token keyword = m_token;
  advance();  // 'dim'
  if (at(TokenKind::equals)) return parse_assignment(keyword);  // a value named "dim"
  if (!at(TokenKind::identifier)) return expected("a dim name after 'dim'");
  Token name = m_token;
  advance();
  if (auto previous = m_builder.find_symbol(name.text)) {
    const Symbol& was = m_builder.symbols()[static_cast<size_t>(*previous)];
    return error_at(name.location, "dim '" + std::string(name.text) +
                                       "' is already declared at " + std::to_string(was.line) +
                                       ":" + std::to_string(was.column));
  }
  if (Status s = check_name(name, "a dim"); !s) return s;
  if (Status s = expect(TokenKind::colon, "':' and a range LO..HI after the dim name"); !s)
    return s;
  // The lexer reads "1..4096" as one number token.
  if (!at(TokenKind::number)) return expected("a range LO..HI (e.g. 1..4096)");
  Token range = m_token;
  std::string_view text = range.text;
  size_t dots = text.find("..");
  int64_t lo = 0, hi = 0;
  std::string_view too_large;
  auto whole = [&too_large](std::string_view part, int64_t& value) {
    if (part.empty()) return false;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (ec == std::errc::result_out_of_range && end == part.data() + part.size()) {
      too_large = part;
      return true;
    }
    return ec == std::errc() && end == part.data() + part.size();
  };
  if (dots == std::string_view::npos || !whole(text.substr(0, dots), lo) ||
      !whole(text.substr(dots + 2), hi)) {
    return error_at(range.location, "expected a range LO..HI of whole numbers written without "
                                    "spaces (e.g. 1..4096), got " + std::string(text));
  }
  if (!too_large.empty()) {
    return error_at(range.location, "dim '" + std::string(name.text) + "': " +
                                        std::string(too_large) +
                                        " is above kiln's limit of 2^31 - 1");
  }
  advance();
  if (m_seen_input) {
    return error_at(dim_at, "dim '" + std::string(name.text) +
                                "' comes after an input; declare dims before the inputs");
  }
  auto index = m_builder.add_symbol(std::string(name.text), lo, hi);
  if (!index) return error_at(range.location, index.error().message);
  m_builder.set_symbol_location(*index, name.location.line, name.location.column);
  return Status::success();
}

Status Parser::parse_output() {
  advance();  // 'output'
  while (true) {
    if (!at(TokenKind::identifier)) return expected("the name of a value to output");
    Token name = m_token;
    auto id = m_builder.find(name.text);
    if (!id) return error_at(name.location, "undefined value '" + std::string(name.text) + "'");
    if (Status s = m_builder.add_output(*id); !s) return error_at(name.location, s.error().message);
    advance();
    if (!at(TokenKind::comma)) return Status::success();
    advance();
  }
}

Status Parser::parse_assignment() {
  Token name = m_token;
  advance();
  return parse_assignment(name);
}

Status Parser::parse_assignment(const Token& name) {
  if (!at(TokenKind::equals)) {
    return error_at(m_token.location, "expected '=' after '" + std::string(name.text) +
                                          "' (or a statement: input, output), got " +
                                          describe(m_token));
  }
  advance();
  Location value_at = m_token.location;
  auto value = parse_expr(1);
  if (!value) return value.error();
  if (value->is_literal) {
    return error_at(value_at, "expected an op call such as relu(x), got the literal " +
                                  std::string(value->text));
  }
  if (!m_builder.node(value->node).name.empty()) {
    return error_at(value_at, "'" + std::string(name.text) + " = " + std::string(value->text) +
                                  "' only renames a value; compute it with an op");
  }
  return define(value->node, name);
}

Expected<Operand> Parser::parse_expr(int depth) {
  Token token = m_token;
  if (at(TokenKind::identifier) && keyword_literal(token)) {
    advance();
    if (at(TokenKind::lparen)) {
      return error_at(token.location, "'" + std::string(token.text) + "' is a literal, not an op");
    }
    return *keyword_literal(token);
  }
  if (at(TokenKind::number)) {
    advance();
    Operand literal;
    literal.is_literal = true;
    literal.location = token.location;
    literal.text = token.text;
    bool infinity = token.text == "-inf" || token.text == "+inf";
    literal.kind = infinity ? LiteralKind::floating
                   : token.text.find_first_of(".eE") == std::string_view::npos
                       ? LiteralKind::integer
                       : LiteralKind::floating;
    if (infinity) {
      literal.literal = token.text[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      return literal;
    }
    std::string_view text = token.text[0] == '+' ? token.text.substr(1) : token.text;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), literal.literal);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(literal.literal))) {
      return error_at(token.location, "literal " + std::string(token.text) + " is out of range");
    }
    if (ec != std::errc() || end != text.data() + text.size()) {
      return error_at(token.location, "malformed number " + std::string(token.text));
    }
    return literal;
  }
  if (!at(TokenKind::identifier)) return expected("a value name, a number or an op call");
  advance();
  if (at(TokenKind::lparen)) return parse_call(token, depth);
  auto id = m_builder.find(token.text);
  if (!id) {
    if (parse_op_kind(token.text)) {
      return error_at(m_token.location, "expected '(' after op '" + std::string(token.text) +
                                            "', got " + describe(m_token));
    }
    return error_at(token.location, "undefined value '" + std::string(token.text) + "'");
  }
  Operand operand;
  operand.node = *id;
  operand.location = token.location;
  operand.text = token.text;
  return operand;
}

// arange(n) or arange(n, dtype=D) after its '(': n a positive integer or a declared dim's name.
Expected<Operand> Parser::parse_arange(const Token& op_token) {
  Token size = m_token;
  std::optional<Shape> shape;
  if (at(TokenKind::number)) {
    int64_t n = 0;
    auto [end, ec] = std::from_chars(size.text.data(), size.text.data() + size.text.size(), n);
    if (ec != std::errc() || end != size.text.data() + size.text.size() || n < 1)
      return error_at(size.location, "arange: expected a positive integer size or a dim name, got " +
                                         describe(size));
    auto made = Shape::make({n});
    if (!made) return error_at(size.location, "arange: " + made.error().message);
    shape = *made;
  } else if (at(TokenKind::identifier)) {
    auto symbol = m_builder.find_symbol(size.text);
    if (!symbol) {
      return error_at(size.location, "arange: '" + std::string(size.text) +
                                         "' is not a declared dim (dim " +
                                         std::string(size.text) + ": LO..HI); its size is a "
                                         "constant or a dim, not a tensor");
    }
    int64_t hi = m_builder.symbols()[static_cast<size_t>(*symbol)].hi;
    shape = *Shape::make({hi}, {SymbolicDim{*symbol, std::string(size.text)}});
  } else {
    return error_at(size.location, "arange: expected a size (an integer or a dim name), got " +
                                       describe(size));
  }
  advance();
  DType dtype = default_attrs(OpKind::arange).cast_to;
  if (at(TokenKind::comma)) {
    advance();
    Token name = m_token;
    if (!at(TokenKind::identifier) || name.text != "dtype") {
      return error_at(name.location, "arange has one argument, dtype=i32, i64 or f32; got " +
                                         describe(name));
    }
    advance();
    if (Status s = expect(TokenKind::equals, "'=' after 'dtype'"); !s) return s.error();
    Token value = m_token;
    auto parsed = at(TokenKind::identifier) ? parse_dtype(value.text) : std::nullopt;
    if (!parsed) return error_at(value.location, "expected a dtype for 'dtype', got " + describe(value));
    dtype = *parsed;
    advance();
  }
  if (Status s = expect(TokenKind::rparen, "')' to close arange"); !s) return s.error();
  auto id = m_builder.add_arange(*shape, dtype);
  if (!id) return error_at(op_token.location, id.error().message);
  m_builder.set_location(*id, op_token.location.line, op_token.location.column);
  return call_result(op_token, *id);
}

Expected<Operand> Parser::parse_call(const Token& op_token, int depth) {
  if (depth > k_max_nesting) {
    return error_at(op_token.location, "expressions nest deeper than " +
                                           std::to_string(k_max_nesting) +
                                           " calls; name intermediate values");
  }
  advance();  // '('
  if (op_token.text == "arange") return parse_arange(op_token);
  std::vector<Operand> args;
  std::vector<NamedArg> named;
  while (!at(TokenKind::rparen)) {
    if (!args.empty() || !named.empty()) {
      if (Status s = expect(TokenKind::comma, "',' or ')' in the argument list"); !s) {
        return s.error();
      }
    }
    if (at(TokenKind::identifier)) {
      // name=value, or an operand that starts with an identifier.
      Token first = m_token;
      advance();
      if (at(TokenKind::equals)) {
        advance();
        for (const NamedArg& seen : named) {
          if (seen.name == first.text) {
            return error_at(first.location,
                            "argument '" + std::string(first.text) + "' is given twice");
          }
        }
        if (at(TokenKind::lbracket)) {
          // A list: [item, item, ...] of identifiers or numbers, at most k_max_list items.
          NamedArg arg{first.text, m_token, true, {}};
          advance();
          while (!at(TokenKind::rbracket)) {
            if (!arg.list.empty()) {
              if (Status s = expect(TokenKind::comma, "',' or ']' in the list"); !s)
                return s.error();
            }
            if (!at(TokenKind::identifier) && !at(TokenKind::number)) {
              return expected("a number or a dim name in the list for '" +
                              std::string(first.text) + "'");
            }
            if (arg.list.size() >= k_max_list) {
              return error_at(m_token.location, "the list for '" + std::string(first.text) +
                                                    "' has more than " +
                                                    std::to_string(k_max_list) + " items");
            }
            arg.list.push_back(m_token);
            advance();
          }
          advance();  // ']'
          named.push_back(std::move(arg));
          continue;
        }
        if (!at(TokenKind::identifier) && !at(TokenKind::number) && !at(TokenKind::string)) {
          return expected("a value for argument '" + std::string(first.text) + "'");
        }
        Token value = m_token;
        advance();
        NamedArg arg{first.text, value, false, {}};
        if (value.kind == TokenKind::identifier && at(TokenKind::lparen)) {
          // An op call as the value (attention's mask=where(keep, 0.0, -inf)).
          auto call = parse_call(value, depth + 1);
          if (!call) return call.error();
          arg.node = call->node;
        }
        named.push_back(std::move(arg));
        continue;
      }
      if (!named.empty()) {
        return error_at(first.location, "operands must come before named arguments");
      }
      Operand operand;
      if (at(TokenKind::lparen)) {
        auto call = parse_call(first, depth + 1);
        if (!call) return call.error();
        operand = *call;
      } else if (auto literal = keyword_literal(first)) {
        operand = *literal;
      } else {
        auto id = m_builder.find(first.text);
        if (!id) {
          return error_at(first.location, "undefined value '" + std::string(first.text) + "'");
        }
        operand.node = *id;
        operand.location = first.location;
        operand.text = first.text;
      }
      args.push_back(operand);
      continue;
    }
    if (!named.empty()) {
      return error_at(m_token.location, "operands must come before named arguments");
    }
    auto operand = parse_expr(depth + 1);
    if (!operand) return operand.error();
    args.push_back(*operand);
  }
  advance();  // ')'
  auto id = build(op_token, args, named);
  if (!id) return id.error();
  return call_result(op_token, id.value());
}

Operand Parser::call_result(const Token& op_token, NodeId id) {
  m_defined_at.resize(m_builder.size(), op_token.location);
  Operand result;
  result.node = id;
  result.location = op_token.location;
  result.text = op_token.text;
  return result;
}

Expected<Graph> Parser::parse() {
  if (at(TokenKind::end)) {
    return error_at(m_token.location, "empty graph file: expected 'graph NAME { ... }'");
  }
  if (!at_word("graph")) return expected("'graph'");
  advance();
  if (!at(TokenKind::identifier)) return expected("a graph name after 'graph'");
  std::string name(m_token.text);
  m_builder = Builder(name);
  m_builder.set_source_file(std::string(m_file));
  advance();
  if (Status s = expect(TokenKind::lbrace, "'{' after the graph name"); !s) return s.error();
  while (!at(TokenKind::rbrace)) {
    Status s;
    if (at(TokenKind::end)) return expected("'}' to close graph '" + name + "'");
    if (!at(TokenKind::identifier)) {
      return expected("a statement (dim, input, output or NAME = op(...))");
    }
    if (at_word("dim")) {
      s = parse_dim();
    } else if (at_word("input")) {
      s = parse_input();
    } else if (at_word("output")) {
      s = parse_output();
    } else {
      s = parse_assignment();
    }
    if (!s) return s.error();
  }
  Location close = m_token.location;
  advance();
  if (!at(TokenKind::end)) return expected("end of file after the graph's closing '}'");

  if (m_builder.outputs().empty()) {
    return error_at(close, "graph '" + name + "' has no output; expected 'output NAME' before '}'");
  }
  std::vector<int> uses(m_builder.size(), 0);
  for (size_t i = 0; i < m_builder.size(); ++i) {
    for (NodeId op : m_builder.node(static_cast<NodeId>(i)).operands) {
      ++uses[static_cast<size_t>(op)];
    }
  }
  for (NodeId out : m_builder.outputs()) ++uses[static_cast<size_t>(out)];
  for (size_t i = 0; i < uses.size(); ++i) {
    const Node& node = m_builder.node(static_cast<NodeId>(i));
    if (node.kind != OpKind::input && uses[i] == 0) {
      return error_at(m_defined_at[i], "value '" + node.name +
                                           "' is never used: output it or remove it");
    }
  }
  for (const Symbol& symbol : m_builder.symbols()) {
    bool used = false;
    for (NodeId id : m_builder.inputs()) {
      const Shape& shape = m_builder.node(id).type.shape;
      for (const SymbolicDim& d : shape.symbols()) used = used || d.name == symbol.name;
    }
    if (!used) {
      return error_at({symbol.line, symbol.column},
                      "dim '" + symbol.name + "' is never used: no input has it");
    }
  }
  auto graph = std::move(m_builder).finish();
  if (!graph) return error_at(close, graph.error().message);
  return graph;
}

}  // namespace detail

Expected<Graph> parse_graph(std::string_view text, std::string_view file) {
  return detail::Parser(text, file).parse();
}

Expected<Graph> parse_graph_file(const std::string& path) {
  std::FILE* file = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  std::string shown = path == "-" ? "<stdin>" : path;
  if (!file) return make_error(shown, ": error: cannot read: ", std::strerror(errno));
  std::string text;
  char chunk[65536];
  bool too_large = false;
  bool failed = false;
  while (size_t got = std::fread(chunk, 1, sizeof chunk, file)) {
    if (text.size() + got > k_max_source_bytes) {
      too_large = true;
      break;
    }
    text.append(chunk, got);
  }
  int saved_errno = errno;
  failed = std::ferror(file) != 0;
  if (file != stdin) std::fclose(file);
  if (too_large) {
    return make_error(shown, ": error: larger than ", std::to_string(k_max_source_bytes >> 20),
                      " MiB; kiln graph files are small text");
  }
  if (failed) return make_error(shown, ": error: cannot read: ", std::strerror(saved_errno));
  return parse_graph(text, shown);
}

}  // namespace kiln::ir