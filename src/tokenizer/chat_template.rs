//! A chat template's literal text: what a chat model reads around every message (turn markers,
//! role headers, the generation prompt). The Jinja is not rendered: the raw text between its tags
//! and the string literals inside its `{{ }}` and `{% %}` tags are collected, so that a trim can
//! keep the tokens they use. Whitespace control (`{%-`, `-%}`, `{{-`, `-}}`) and the options
//! transformers renders with (`trim_blocks`: the newline after a block tag dropped;
//! `lstrip_blocks`: the spaces before a block tag on its line dropped) are applied to the raw
//! text; comments (`{# #}`) and the text of `{% raw %}` blocks are skipped.

/// The literal pieces of `template`, each once, in order of first appearance (none empty).
pub fn literals(template: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        if !s.is_empty() && !out.iter().any(|o| o == s) {
            out.push(s.to_string());
        }
    };
    let mut rest = template;
    // What the previous tag asks of the text after it: strip all leading whitespace (`-%}`), or
    // one newline (trim_blocks, after a block or comment tag).
    let (mut strip_all, mut strip_newline) = (false, false);
    loop {
        let open = ["{{", "{%", "{#"].iter().filter_map(|o| rest.find(o)).min();
        let mut text = &rest[..open.unwrap_or(rest.len())];
        let kind = open.map_or("", |at| &rest[at..at + 2]);
        let minus = open.is_some_and(|at| rest[at + 2..].starts_with('-'));
        if minus {
            text = text.trim_end();
        } else if kind == "{%" || kind == "{#" {
            text = lstrip_block(text, rest.as_ptr() == template.as_ptr());
        }
        if strip_all {
            text = text.trim_start();
        } else if strip_newline {
            text = text
                .strip_prefix("\r\n")
                .or_else(|| text.strip_prefix('\n'))
                .unwrap_or(text);
        }
        let Some(at) = open else {
            push(text);
            return out;
        };
        let body_start = at + 2;
        push(text);
        let close = match kind {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let Some(len) = body_len(&rest[body_start..], close, kind != "{#") else {
            return out;
        };
        let body = &rest[body_start..body_start + len];
        rest = &rest[body_start + len + 2..];
        if kind != "{#" {
            for s in strings(body) {
                push(&s);
            }
        }
        strip_all = body.ends_with('-');
        strip_newline = kind != "{{";
        if kind == "{%" && body.trim_matches(|c: char| c == '-' || c.is_whitespace()) == "raw" {
            // The text up to `{% endraw %}` is output as it is: keep it whole, unparsed.
            let end = rest.find("endraw").and_then(|e| rest[..e].rfind("{%"));
            if let Some(end) = end {
                push(rest[..end].trim_end_matches([' ', '\t']));
                rest = &rest[end..];
            }
        }
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

/// The string literals of a tag's body, their escapes resolved as Python's (`\n`, `\t`, `\r`,
/// `\\`, `\'`, `\"`, `\xNN`, `\uNNNN`; any other kept as written); a subscript's key
/// (`message['role']`) is not text and is left out.
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
        let before = chars[..i].iter().rev().find(|c| !c.is_whitespace());
        let (s, end) = string_at(&chars, i + 1, q);
        let after = chars[end.min(chars.len())..]
            .iter()
            .find(|c| !c.is_whitespace());
        if !(before == Some(&'[') && after == Some(&']')) {
            out.push(s);
        }
        i = end;
    }
    out
}

/// The string starting at `chars[i]` and closed by `q`, escapes resolved, and the index after it.
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
        match e {
            'n' => s.push('\n'),
            't' => s.push('\t'),
            'r' => s.push('\r'),
            '\\' | '\'' | '"' => s.push(e),
            'x' | 'u' => {
                let width = if e == 'x' { 2 } else { 4 };
                let hex: String = chars[i..]
                    .iter()
                    .take(width)
                    .take_while(|c| c.is_ascii_hexdigit())
                    .collect();
                i += hex.len();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) if hex.len() == width => s.push(ch),
                    _ => {
                        s.push('\\');
                        s.push(e);
                        s.push_str(&hex);
                    }
                }
            }
            _ => {
                s.push('\\');
                s.push(e);
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
}
