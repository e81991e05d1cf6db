// Tokenizer for the graph text format: identifiers, numbers, punctuation, '#' comments.
#include "ir/lexer.h"

#include <array>
#include <cstdio>

namespace kiln::ir {

namespace {

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

// Printable names for bytes that cannot start a token, kept static so tokens can point at them.
// `in_name` says the same of a non-ASCII byte met inside a name.
struct ByteNames {
  std::array<std::array<char, 8>, 256> names{};
  std::array<std::array<char, 40>, 128> in_name{};
  ByteNames() {
    for (int b = 0; b < 256; ++b) {
      if (b >= 0x21 && b < 0x7f) {
        std::snprintf(names[b].data(), names[b].size(), "'%c'", b);
      } else {
        std::snprintf(names[b].data(), names[b].size(), "'\\x%02x'", b);
      }
    }
    for (int b = 0x80; b < 256; ++b) {
      std::snprintf(in_name[b - 0x80].data(), in_name[b - 0x80].size(),
                    "'\\x%02x' in a name (names are ASCII)", b);
    }
  }
};
const ByteNames k_byte_names;
constexpr std::string_view k_unterminated_string =
    "'\"' that opens a string not closed on its line";
constexpr std::string_view k_dot_after_name =
    "'.' after a name (a name's segments are joined by single dots, and it does not end with one)";

}  // namespace

std::string describe(const Token& token) {
  std::string out;
  switch (token.kind) {
    case TokenKind::identifier:
      out.append("identifier '").append(token.text).append("'");
      break;
    case TokenKind::number:
      out.append("number ").append(token.text);
      break;
    case TokenKind::string:
      out.append("string ").append(token.text);
      break;
    case TokenKind::end:
      out.append("end of file");
      break;
    case TokenKind::invalid:
      out.append("unexpected character ").append(token.text);
      break;
    default:
      out.append("'").append(token.text).append("'");
      break;
  }
  return out;
}

void Lexer::advance() {
  if (m_source[m_pos] == '\n') {
    ++m_location.line;
    m_location.column = 1;
  } else {
    ++m_location.column;
  }
  ++m_pos;
}

void Lexer::skip_space_and_comments() {
  while (m_pos < m_source.size()) {
    char c = m_source[m_pos];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ';') {
      advance();
    } else if (c == '#') {
      while (m_pos < m_source.size() && m_source[m_pos] != '\n') advance();
    } else {
      return;
    }
  }
}

Token Lexer::next() {
  skip_space_and_comments();
  Token token;
  token.location = m_location;
  if (m_pos >= m_source.size()) {
    token.kind = TokenKind::end;
    token.text = "end of file";
    return token;
  }
  size_t begin = m_pos;
  char c = peek();
  if (c == '.' && begin == m_name_end) {
    // A dot right after a name that does not start another segment: "a." or "a..b".
    token.kind = TokenKind::invalid;
    token.text = k_dot_after_name;
    advance();
    return token;
  }
  if (is_ident_start(c)) {
    while (is_ident_char(peek())) advance();
    // Dot-joined segments, as a state_dict names its tensors (model.layers.0.q_proj.weight): a
    // later segment may start with a digit.
    while (peek() == '.' && is_ident_char(peek(1))) {
      advance();
      while (is_ident_char(peek())) advance();
    }
    if (static_cast<unsigned char>(peek()) >= 0x80) {
      // "relé": the name does not end at the non-ASCII byte, it is refused there.
      token.kind = TokenKind::invalid;
      token.location = m_location;
      token.text = k_byte_names.in_name[static_cast<unsigned char>(peek()) - 0x80].data();
      advance();
      return token;
    }
    token.kind = TokenKind::identifier;
    m_name_end = m_pos;
  } else if ((c == '-' || c == '+') && peek(1) == 'i' && peek(2) == 'n' && peek(3) == 'f' &&
             !is_ident_char(peek(4))) {
    // A signed infinity, "-inf" or "+inf" (plain "inf" is an identifier the parser takes as one).
    for (int i = 0; i < 4; ++i) advance();
    token.kind = TokenKind::number;
  } else if (is_digit(c) || ((c == '-' || c == '+' || c == '.') &&
                             (is_digit(peek(1)) || (peek(1) == '.' && is_digit(peek(2)))))) {
    // Sign, digits, fraction, exponent; the parser converts and range-checks the text.
    if (c == '-' || c == '+') advance();
    while (is_digit(peek()) || peek() == '.') advance();
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '-' || peek(1) == '+') && is_digit(peek(2))))) {
      advance();
      if (peek() == '-' || peek() == '+') advance();
      while (is_digit(peek())) advance();
    }
    token.kind = TokenKind::number;
  } else if (c == '"') {
    // A string: printable characters up to the closing quote, on one line, no escapes.
    advance();
    while (m_pos < m_source.size() && peek() != '"' && peek() != '\n') advance();
    if (peek() != '"') {
      token.kind = TokenKind::invalid;
      token.text = k_unterminated_string;
      return token;
    }
    advance();
    token.kind = TokenKind::string;
  } else {
    static constexpr std::string_view k_punct = "{}()[],:=";
    static constexpr std::array<TokenKind, 9> k_kinds = {
        TokenKind::lbrace,   TokenKind::rbrace, TokenKind::lparen,
        TokenKind::rparen,   TokenKind::lbracket, TokenKind::rbracket,
        TokenKind::comma,    TokenKind::colon,  TokenKind::equals};
    size_t which = k_punct.find(c);
    if (which == std::string_view::npos) {
      token.kind = TokenKind::invalid;
      token.text = k_byte_names.names[static_cast<unsigned char>(c)].data();
      advance();
      return token;
    }
    advance();
    token.kind = k_kinds[which];
  }
  token.text = m_source.substr(begin, m_pos - begin);
  return token;
}

}  // namespace kiln::ir
