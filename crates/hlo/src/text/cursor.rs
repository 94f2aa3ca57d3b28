//! The byte-level scanner under the parser: whitespace and comments, names, numbers, strings.
//!
//! There is no token stream: the parser asks for the token it expects next, so nothing is
//! allocated for names, keywords or punctuation (names are slices of the input).

use super::ParseError;

pub(super) struct Cursor<'a> {
    pub src: &'a str,
    pub b: &'a [u8],
    pub pos: usize,
}

/// Bytes that may appear in a name: letters, digits, `_`, `.`, `-` (a table: this test runs for
/// every byte of every name).
static NAME_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-';
        c += 1;
    }
    t
};

#[inline(always)]
pub(super) fn is_name_byte(c: u8) -> bool {
    NAME_BYTES[c as usize]
}

/// Whitespace, or the `/` that may start a comment: what [`Cursor::skip_ws`] has to look at.
#[inline(always)]
fn is_ws_or_slash(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'/')
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Cursor<'a> {
        Cursor {
            src,
            b: src.as_bytes(),
            pos: 0,
        }
    }

    /// Line and column (1-based, columns counted in characters) of a byte offset.
    pub fn line_col(&self, at: usize) -> (usize, usize) {
        let at = at.min(self.b.len());
        let before = &self.b[..at];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1);
        let col = self.src[line_start..at].chars().count() + 1;
        (line, col)
    }

    #[cold]
    pub fn error_at(&self, at: usize, message: impl Into<String>) -> ParseError {
        let (line, column) = self.line_col(at);
        ParseError {
            line,
            column,
            message: message.into(),
        }
    }

    /// An error at the next token: `expected <what>, found <token>`.
    #[cold]
    pub fn expected(&mut self, what: &str) -> ParseError {
        let _ = self.skip_ws();
        let found = self.describe_here();
        self.error_at(self.pos, format!("expected {what}, found {found}"))
    }

    /// A short description of the token at the cursor, for error messages.
    pub fn describe_here(&self) -> String {
        let rest = &self.b[self.pos.min(self.b.len())..];
        let Some(&c) = rest.first() else {
            return "end of input".to_string();
        };
        if is_name_byte(c) || c == b'%' {
            let n = 1 + rest[1..].iter().take_while(|&&c| is_name_byte(c)).count();
            let n = n.min(40);
            return format!("'{}'", String::from_utf8_lossy(&rest[..n]));
        }
        if c == b'"' {
            let n = rest.len().min(20);
            let text = String::from_utf8_lossy(&rest[..n]);
            return format!("string {}", text.split('\n').next().unwrap_or(""));
        }
        let ch = self.src[self.pos..].chars().next().unwrap_or('?');
        format!("'{ch}'")
    }

    /// Skips spaces, newlines, `// ...` and `/* ... */` comments.
    ///
    /// Most tokens are followed by nothing or by one space, so those two cases are decided here
    /// (inlined into every caller); anything else goes to [`Cursor::skip_ws_slow`].
    #[inline(always)]
    pub fn skip_ws(&mut self) -> Result<(), ParseError> {
        match self.b.get(self.pos) {
            Some(&c) if !is_ws_or_slash(c) => return Ok(()),
            None => return Ok(()),
            Some(b' ') => match self.b.get(self.pos + 1) {
                Some(&c) if !is_ws_or_slash(c) => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => {}
            },
            _ => {}
        }
        self.skip_ws_slow()
    }

    #[inline(never)]
    fn skip_ws_slow(&mut self) -> Result<(), ParseError> {
        loop {
            match self.b.get(self.pos) {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') => match self.b.get(self.pos + 1) {
                    Some(b'/') => {
                        while self.pos < self.b.len() && self.b[self.pos] != b'\n' {
                            self.pos += 1;
                        }
                    }
                    Some(b'*') => {
                        let start = self.pos;
                        self.pos += 2;
                        loop {
                            if self.pos + 1 >= self.b.len() {
                                return Err(self.error_at(start, "unterminated /* comment"));
                            }
                            if self.b[self.pos] == b'*' && self.b[self.pos + 1] == b'/' {
                                self.pos += 2;
                                break;
                            }
                            self.pos += 1;
                        }
                    }
                    _ => return Ok(()),
                },
                _ => return Ok(()),
            }
        }
    }

    /// The next byte after whitespace, not consumed.
    #[inline(always)]
    pub fn peek(&mut self) -> Result<Option<u8>, ParseError> {
        self.skip_ws()?;
        Ok(self.b.get(self.pos).copied())
    }

    /// The byte `n` places after the cursor (no whitespace skipping).
    #[inline]
    pub fn byte_at(&self, n: usize) -> Option<u8> {
        self.b.get(self.pos + n).copied()
    }

    #[inline]
    pub fn at_end(&mut self) -> Result<bool, ParseError> {
        Ok(self.peek()?.is_none())
    }

    /// Consumes `c` if it is the next byte.
    #[inline(always)]
    pub fn eat(&mut self, c: u8) -> Result<bool, ParseError> {
        if self.peek()? == Some(c) {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Consumes `c` or fails with `expected '<c>' <context>, found ...`.
    #[inline(always)]
    pub fn expect(&mut self, c: u8, context: &str) -> Result<(), ParseError> {
        if self.eat(c)? {
            Ok(())
        } else {
            Err(self.expect_failed(c, context))
        }
    }

    #[cold]
    #[inline(never)]
    fn expect_failed(&mut self, c: u8, context: &str) -> ParseError {
        let what = if context.is_empty() {
            format!("'{}'", c as char)
        } else {
            format!("'{}' {}", c as char, context)
        };
        self.expected(&what)
    }

    /// Like [`Cursor::expect`] with the context made of `parts`, joined only on error.
    #[inline(always)]
    pub fn expect_parts(&mut self, c: u8, parts: &[&str]) -> Result<(), ParseError> {
        if self.eat(c)? {
            Ok(())
        } else {
            Err(self.expect_failed(c, &parts.concat()))
        }
    }

    /// Consumes the punctuation `s` (e.g. `->`, `<=`) if it comes next.
    pub fn eat_str(&mut self, s: &str) -> Result<bool, ParseError> {
        self.skip_ws()?;
        if self.b[self.pos..].starts_with(s.as_bytes()) {
            self.pos += s.len();
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Consumes the keyword `kw` if the next word is exactly it.
    pub fn eat_keyword(&mut self, kw: &str) -> Result<bool, ParseError> {
        self.skip_ws()?;
        let rest = &self.b[self.pos..];
        if rest.starts_with(kw.as_bytes()) && !rest.get(kw.len()).is_some_and(|&c| is_name_byte(c))
        {
            self.pos += kw.len();
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// The next word made of name bytes (letters, digits, `_`, `.`, `-`), if any, not consumed.
    pub fn peek_word(&mut self) -> Result<&'a str, ParseError> {
        self.skip_ws()?;
        let start = self.pos;
        let end = self.name_end(start);
        Ok(self.slice(start, end))
    }

    /// An identifier: a letter or `_` followed by name bytes.
    #[inline]
    pub fn ident(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_ws()?;
        let start = self.pos;
        match self.b.get(start) {
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {}
            _ => return Err(self.expected(what)),
        }
        let end = self.name_end(start + 1);
        self.pos = end;
        Ok(self.slice(start, end))
    }

    /// A name with or without its `%` sigil; returns it without the sigil.
    #[inline]
    pub fn name(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_ws()?;
        let sigil = self.b.get(self.pos) == Some(&b'%');
        let start = self.pos + sigil as usize;
        let end = self.name_end(start);
        if end == start {
            return Err(self.expected(what));
        }
        self.pos = end;
        Ok(self.slice(start, end))
    }

    /// The end of the run of name bytes starting at `start`.
    #[inline(always)]
    fn name_end(&self, start: usize) -> usize {
        let b = self.b;
        let mut end = start;
        while end < b.len() && is_name_byte(b[end]) {
            end += 1;
        }
        end
    }

    /// `src[start..end]` for a range of ASCII name bytes (always on character boundaries).
    #[inline(always)]
    fn slice(&self, start: usize, end: usize) -> &'a str {
        // Every caller passes a range of ASCII bytes, which `get` accepts; the fallback is
        // never taken.
        self.src.get(start..end).unwrap_or("")
    }

    /// A signed decimal 64-bit integer (`0x0_1` in a padding is `0`, `x`, `0_1`: no hex here).
    #[inline]
    pub fn int(&mut self, what: &str) -> Result<i64, ParseError> {
        self.skip_ws()?;
        // Fast path: an unsigned number of at most 18 digits, which cannot overflow.
        let b = self.b;
        let start = self.pos;
        let mut p = start;
        let mut v: i64 = 0;
        while p < b.len() && b[p].is_ascii_digit() && p - start < 18 {
            v = v * 10 + (b[p] - b'0') as i64;
            p += 1;
        }
        if p > start && !b.get(p).is_some_and(|c| c.is_ascii_digit()) {
            self.pos = p;
            return Ok(v);
        }
        self.int_slow(what)
    }

    #[inline(never)]
    fn int_slow(&mut self, what: &str) -> Result<i64, ParseError> {
        let start = self.pos;
        let mut p = self.pos;
        let negative = match self.b.get(p) {
            Some(b'-') => {
                p += 1;
                true
            }
            Some(b'+') => {
                p += 1;
                false
            }
            _ => false,
        };
        let digits_start = p;
        while p < self.b.len() && self.b[p].is_ascii_digit() {
            p += 1;
        }
        if p == digits_start {
            return Err(self.expected(what));
        }
        let text = &self.src[digits_start..p];
        let magnitude = text
            .parse::<u64>()
            .map_err(|_| self.error_at(start, format!("integer {text} is out of range")))?;
        let value = if negative {
            if magnitude > i64::MAX as u64 + 1 {
                return Err(self.error_at(start, "integer out of range for s64"));
            }
            (magnitude as i64).wrapping_neg()
        } else {
            if magnitude > i64::MAX as u64 {
                return Err(self.error_at(start, "integer out of range for s64"));
            }
            magnitude as i64
        };
        self.pos = p;
        Ok(value)
    }

    /// A non-negative integer that fits an `i32`-sized count.
    pub fn int32(&mut self, what: &str) -> Result<i32, ParseError> {
        let start = self.pos;
        let v = self.int(what)?;
        i32::try_from(v).map_err(|_| self.error_at(start, format!("{v} does not fit in 32 bits")))
    }

    /// The raw text of a number: `-12`, `1.5e-3`, `0x1f`, `inf`, `-nan`, `nan(0x7)`.
    pub fn number_text(&mut self) -> Result<(usize, &'a str), ParseError> {
        self.skip_ws()?;
        let start = self.pos;
        let mut p = self.pos;
        if matches!(self.b.get(p), Some(b'-' | b'+')) {
            p += 1;
        }
        let body = p;
        if self.b[p..].starts_with(b"inf") {
            p += 3;
        } else if self.b[p..].starts_with(b"nan") {
            p += 3;
            if self.b.get(p) == Some(&b'(') {
                while p < self.b.len() && self.b[p] != b')' {
                    p += 1;
                }
                p = (p + 1).min(self.b.len());
            }
        } else {
            while p < self.b.len() {
                let c = self.b[p];
                if c.is_ascii_alphanumeric()
                    || c == b'.'
                    || ((c == b'-' || c == b'+') && matches!(self.b[p - 1], b'e' | b'E'))
                {
                    p += 1;
                } else {
                    break;
                }
            }
        }
        if p == body {
            return Err(self.expected("a number"));
        }
        self.pos = p;
        Ok((start, &self.src[start..p]))
    }

    /// A double-quoted string with C escapes (`\n`, `\"`, `\\`, `\x41`, `\101`, ...).
    pub fn string(&mut self, what: &str) -> Result<String, ParseError> {
        self.skip_ws()?;
        if self.b.get(self.pos) != Some(&b'"') {
            return Err(self.expected(what));
        }
        self.quoted_from(b'"')
    }

    /// A string in single or double quotes, with C escapes (XLA's lexer reads both).
    pub fn any_quoted(&mut self, what: &str) -> Result<String, ParseError> {
        self.skip_ws()?;
        match self.b.get(self.pos) {
            Some(&q @ (b'"' | b'\'')) => self.quoted_from(q),
            _ => Err(self.expected(what)),
        }
    }

    /// The string whose opening `quote` is at the cursor.
    fn quoted_from(&mut self, quote: u8) -> Result<String, ParseError> {
        let start = self.pos;
        let mut p = self.pos + 1;
        // Fast path: no escapes.
        let mut simple = true;
        while p < self.b.len() {
            match self.b[p] {
                c if c == quote => break,
                b'\\' => {
                    simple = false;
                    p += 2;
                }
                _ => p += 1,
            }
        }
        if p >= self.b.len() {
            return Err(self.error_at(start, "unterminated string"));
        }
        if simple {
            let s = self.src[start + 1..p].to_string();
            self.pos = p + 1;
            return Ok(s);
        }
        let raw = &self.b[start + 1..p];
        let mut out: Vec<u8> = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            let c = raw[i];
            if c != b'\\' {
                out.push(c);
                i += 1;
                continue;
            }
            i += 1;
            let Some(&e) = raw.get(i) else { break };
            i += 1;
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'a' => out.push(7),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut v: u32 = (e - b'0') as u32;
                    let mut k = 0;
                    while k < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                        v = v * 8 + (raw[i] - b'0') as u32;
                        i += 1;
                        k += 1;
                    }
                    out.push(v as u8);
                }
                b'x' => {
                    let mut v: u32 = 0;
                    let mut k = 0;
                    while i < raw.len() && raw[i].is_ascii_hexdigit() && k < 2 {
                        v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                        i += 1;
                        k += 1;
                    }
                    out.push(v as u8);
                }
                other => out.push(other),
            }
        }
        self.pos = p + 1;
        Ok(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
    }

    /// The text of a `{...}` block with balanced braces (strings respected), braces included.
    pub fn braced_raw(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_ws()?;
        if self.b.get(self.pos) != Some(&b'{') {
            return Err(self.expected(what));
        }
        let start = self.pos;
        let mut depth = 0usize;
        let mut p = self.pos;
        while p < self.b.len() {
            match self.b[p] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos = p + 1;
                        return Ok(&self.src[start..p + 1]);
                    }
                }
                b'"' => {
                    p += 1;
                    while p < self.b.len() && self.b[p] != b'"' {
                        if self.b[p] == b'\\' {
                            p += 1;
                        }
                        p += 1;
                    }
                }
                _ => {}
            }
            p += 1;
        }
        Err(self.error_at(start, format!("unterminated {what}")))
    }
}
