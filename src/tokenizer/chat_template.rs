//! A chat template's literal text: what a chat model reads around every message (turn markers,
//! role headers, the generation prompt). The Jinja is not rendered: the raw text between its tags
//! and the string literals inside its `{{ }}` and `{% %}` tags are collected, so that a trim can
//! keep the tokens they use. As Jinja reads them: line endings as `\n`; whitespace control
//! (`{%-`, `-%}`, `{{-`, `-}}`, and `{%+` / `+%}` to turn the next two off) and the options
//! transformers renders with (`trim_blocks`: the newline after a block tag dropped;
//! `lstrip_blocks`: the spaces before a block tag on its line dropped) applied to the raw text;
//! comments (`{# #}`) skipped; the text of a `{% raw %}` block kept whole; a string's escapes
//! resolved as Python's. A subscript's key (`message['role']`) is not text and is left out; a
//! string formatted with `.format(…)` gives the pieces between its `{…}` fields.
//! `scripts/chat_template_check.py` checks the pieces against real templates rendered by
//! transformers (docs/trim-vocab.md).

/// What a tag asks of the raw text after it.
#[derive(Clone, Copy, PartialEq)]
enum After {
    Nothing,
    /// `-%}`: every leading whitespace character dropped.
    StripAll,
    /// trim_blocks, after a block or comment tag: one leading newline dropped.
    StripNewline,
}

/// The pieces found so far: each once, in order, none empty.
#[derive(Default)]
struct Pieces(Vec<String>);

impl Pieces {
    fn push(&mut self, s: &str) {
        if !s.is_empty() && !self.0.iter().any(|o| o == s) {
            self.0.push(s.to_string());
        }
    }
}

/// The literal pieces of `template`, each once, in order of first appearance (none empty).
pub fn literals(template: &str) -> Vec<String> {
    let template = template.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = Pieces::default();
    let mut rest = template.as_str();
    let mut after = After::Nothing;
    let mut first = true;
    while let Some(at) = next_tag(rest) {
        let kind = &rest[at..at + 2];
        let marker = rest[at + 2..].chars().next();
        out.push(raw_text(&rest[..at], (kind, marker), after, first));
        first = false;
        let body_start = at + 2;
        let close = match kind {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let Some(len) = body_len(&rest[body_start..], close, kind != "{#") else {
            return out.0;
        };
        let body = &rest[body_start..body_start + len];
        rest = &rest[body_start + len + 2..];
        if kind != "{#" {
            for s in strings(body) {
                out.push(&s);
            }
        }
        after = match (kind, body.chars().last()) {
            (_, Some('-')) => After::StripAll,
            ("{{", _) | (_, Some('+')) => After::Nothing,
            _ => After::StripNewline,
        };
        let word = body.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if kind == "{%" && word == "raw" {
            // Up to `{% endraw %}` the text is output as it is, tags and all.
            let end = rest.find("endraw").and_then(|e| rest[..e].rfind("{%"));
            if let Some(end) = end {
                let marker = rest[end + 2..].chars().next();
                out.push(raw_text(&rest[..end], ("{%", marker), after, false));
                (rest, after) = (&rest[end..], After::Nothing);
            }
        }
    }
    out.push(raw_text(rest, ("", None), after, first));
    out.0
}

/// Where the next tag (`{{`, `{%`, `{#`) opens in `s`.
fn next_tag(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(1)).find(|&i| b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#'))
}

/// The raw `text` before a tag of `kind` opened with `marker` (`-`, `+`, or the body's first
/// character), as Jinja outputs it after a tag that asked `after` (`first`: `text` begins the
/// template).
fn raw_text<'t>(
    text: &'t str,
    (kind, marker): (&str, Option<char>),
    after: After,
    first: bool,
) -> &'t str {
    let mut t = text;
    if marker == Some('-') {
        t = t.trim_end();
    } else if (kind == "{%" || kind == "{#") && marker != Some('+') {
        t = lstrip_block(t, first);
    }
    match after {
        After::StripAll => t.trim_start(),
        After::StripNewline => t.strip_prefix('\n').unwrap_or(t),
        After::Nothing => t,
    }
}

/// lstrip_blocks: the spaces and tabs between the start of a line and a block tag are dropped
/// (`start`: `text` begins the template, so its first line is a line too).
fn lstrip_block(text: &str, start: bool) -> &str {
    let line = text.rfind('\n').map(|p| p + 1).or(start.then_some(0));
    match line {
        Some(p) if text[p..].chars().all(|c| c == ' ' || c == '\t') => &text[..p],
        _ => text,
    }
}

/// The length of a tag's body up to its `close` (string literals skipped when `code`); None when
/// the tag is never closed.
fn body_len(s: &str, close: &str, code: bool) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if code && (c == '\'' || c == '"') => quote = Some(c),
            None if s[i..].starts_with(close) => return Some(i),
            None => {}
        }
    }
    None
}

/// The string literals of a tag's body, escapes resolved ([`string_at`]): a subscript's key left
/// out, a `.format(…)`ed string split at its fields.
fn strings(body: &str) -> Vec<String> {
    let chars: Vec<char> = body.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let q = chars[i];
        if q != '\'' && q != '"' {
            i += 1;
            continue;
        }
        let (s, end) = string_at(&chars, i + 1, q);
        let next: String = chars[end..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take(8)
            .collect();
        if next.starts_with(".format(") {
            out.extend(format_pieces(&s));
        } else if !(next.starts_with(']') && subscript_opens(&chars[..i])) {
            out.push(s);
        }
        i = end;
    }
    out
}

/// Whether the text before a string ends with `[` that subscripts an expression (`m[`, `x.y[`,
/// `f()[`, `a[0][`) rather than opening a list (`= [`, `in [`, `([`, `, [`).
fn subscript_opens(before: &[char]) -> bool {
    let mut b = before.iter().rev().skip_while(|c| c.is_whitespace());
    if b.next() != Some(&'[') {
        return false;
    }
    let rest: Vec<char> = b.skip_while(|c| c.is_whitespace()).copied().collect();
    match rest.first() {
        Some(')' | ']' | '\'' | '"') => true,
        Some(c) if c.is_alphanumeric() || *c == '_' => {
            let word: String = rest
                .iter()
                .take_while(|c| c.is_alphanumeric() || **c == '_')
                .collect::<String>()
                .chars()
                .rev()
                .collect();
            !matches!(
                word.as_str(),
                "in" | "not" | "and" | "or" | "is" | "if" | "else" | "elif" | "return"
            )
        }
        _ => false,
    }
}

/// A `str.format` pattern's literal pieces: the text between its `{…}` fields (`{{` and `}}`
/// read as braces).
fn format_pieces(s: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' | '}' if chars.peek() == Some(&c) => {
                chars.next();
                if let Some(p) = out.last_mut() {
                    p.push(c);
                }
            }
            '{' => {
                chars.by_ref().find(|&d| d == '}');
                out.push(String::new());
            }
            _ => {
                if let Some(p) = out.last_mut() {
                    p.push(c);
                }
            }
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The string starting at `chars[i]` and closed by `q`, its escapes resolved as Python's
/// (`\n \t \r \a \b \f \v \\ \' \"`, octal `\ooo`, `\xNN`, `\uNNNN`, `\UNNNNNNNN`, a
/// backslash before a line break joining the lines; any other kept as written), and the index
/// after it.
fn string_at(chars: &[char], mut i: usize, q: char) -> (String, usize) {
    let mut s = String::new();
    while let Some(&d) = chars.get(i) {
        i += 1;
        if d == q {
            break;
        }
        if d != '\\' {
            s.push(d);
            continue;
        }
        let Some(&e) = chars.get(i) else {
            s.push('\\');
            break;
        };
        i += 1;
        let simple = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            s.push(c);
            continue;
        }
        let (radix, width) = match e {
            '\n' => continue,
            '0'..='7' => (8, 3),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            _ => {
                s.push('\\');
                s.push(e);
                continue;
            }
        };
        let start = if radix == 8 { i - 1 } else { i };
        let digits: String = chars[start..]
            .iter()
            .take(width)
            .take_while(|c| c.is_digit(radix))
            .collect();
        i = start + digits.len();
        let exact = radix == 8 || digits.len() == width;
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(ch) if exact => s.push(ch),
            _ => {
                s.push('\\');
                s.push(e);
                s.push_str(&digits[usize::from(radix == 8)..]);
            }
        }
    }
    (s, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ChatML as Qwen writes it: the messages' own text (roles, contents) is data, everything in
    /// quotes or between tags is literal.
    #[test]
    fn chatml_gives_its_markers_and_generation_prompt_not_subscript_keys() {
        let t = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        assert_eq!(
            literals(t),
            [
                "<|im_start|>",
                "\n",
                "<|im_end|>",
                "<|im_start|>assistant\n"
            ]
        );
    }

    /// Raw text between tags, with transformers' trim_blocks / lstrip_blocks and the `-` markers.
    #[test]
    fn raw_text_follows_jinja_whitespace_rules() {
        let t = "{% for m in messages %}\n  {% if m.role == \"user\" %}\n<start_of_turn>user\n{{ m.content | trim }}<end_of_turn>\n{%- endif %}\n{% endfor %}{# a comment's 'text' #}{%- if add_generation_prompt -%}\n  <start_of_turn>model\n{%- endif %}";
        assert_eq!(
            literals(t),
            [
                "user",
                "<start_of_turn>user\n",
                "<end_of_turn>",
                "<start_of_turn>model"
            ]
        );
    }

    #[test]
    fn escapes_quotes_and_unclosed_tags_are_read_without_panicking() {
        assert_eq!(
            literals(r#"{{ 'it\'s' + "a \"b\"" + '\x41\u00e9\q' }}tail{{ 'open"#),
            ["it's", "a \"b\"", "Aé\\q", "tail"]
        );
        assert_eq!(literals("{% raw %}{{ kept }}{% endraw %}"), ["{{ kept }}"]);
        assert!(literals("").is_empty());
        assert_eq!(literals("{{"), Vec::<String>::new());
    }

    /// What a helper's run over 111 real templates found (muse-glimmer's list literals,
    /// tencent-Hy3's `.format`, Mistral Small 3.1's backslash line breaks, a CRLF Kimi template),
    /// and Jinja's `+` markers and a raw block's `-` markers.
    #[test]
    fn lists_format_line_breaks_and_markers_read_as_jinja_does() {
        let list = "{%- set r = namespace(to=['\"self\"']) -%}{{ r.to + ['\"user\"'] }}{% if x in ['tool'] %}{{ m['role'] + a[0]['k'] + f()['v'] }}{% endif %}";
        assert_eq!(literals(list), ["\"self\"", "\"user\"", "tool"]);
        let format = "{%- set T = ':os' %}{{ '‹｜hy_eos{}｜>'.format(T) + '{{x}}{0}!'.format(1) }}";
        assert_eq!(literals(format), [":os", "‹｜hy_eos", "｜>", "{x}", "!"]);
        assert_eq!(literals("{{ \"in Paris.\\\nYour\" }}"), ["in Paris.Your"]);
        assert_eq!(
            literals("<a>\r\n{{ 'b\r\nc' }}\rd"),
            ["<a>\n", "b\nc", "\nd"]
        );
        assert_eq!(
            literals("a\n  {%+ if x +%}\nb{% endif %}"),
            ["a\n  ", "\nb"]
        );
        assert_eq!(literals("{%- raw -%}  X  {%- endraw -%}"), ["X"]);
        assert_eq!(
            literals(r"{{ '\a\b\f\v\101\0\U0001F600\N{DASH}' }}"),
            ["\x07\x08\x0c\x0bA\0😀\\N{DASH}"]
        );
    }
}
