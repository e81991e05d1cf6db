// Splits graph text into located tokens; the parser's only view of the source.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::ir {

struct Location {
  int line = 1;
  int column = 1;
};

enum class TokenKind : uint8_t {
  identifier,
  number,
  lbrace,
  rbrace,
  lparen,
  rparen,
  lbracket,
  rbracket,
  comma,
  colon,
  equals,
  string,   // a double-quoted string ("tanh"): `text` holds it quotes included; no escapes
  end,
  invalid,  // a character the format does not use; `text` holds a printable description
};

struct Token {
  TokenKind kind = TokenKind::end;
  std::string_view text;  // points into the source (or a static description when invalid)
  Location location;
};

// Describes a token for messages: "identifier 'foo'", "'{'", "end of file".
std::string describe(const Token& token);

class Lexer {
public:
  explicit Lexer(std::string_view source) : m_source(source) {}
  // The next token; comments and white space are skipped. After the end, returns end forever.
  Token next();

private:
  void skip_space_and_comments();
  char peek(size_t ahead = 0) const {
    return m_pos + ahead < m_source.size() ? m_source[m_pos + ahead] : '\0';
  }
  void advance();

  std::string_view m_source;
  size_t m_pos = 0;
  size_t m_name_end = std::string_view::npos;  // where the last identifier ended
  Location m_location;
};

}  // namespace kiln::ir
