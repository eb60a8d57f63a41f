//! Key template syntax: `"order:{<tenant>}:<id>"`.
//!
//! `<` and `>` always delimit a placeholder (`<name>`, `<name.field.0>`,
//! `<self.field>`). `{` and `}` are plain text because Redis Cluster reads
//! `{...}` as a hash tag, and users need it to keep related keys in one slot.
//! This module only knows the string; matching roots to parameters is done by
//! `validate`, which has the fn signature.

use std::ops::Range;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Literal(Literal),
    Placeholder(Placeholder),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Literal {
    pub text: String,
    /// Byte range in the template value, for sub-spans.
    pub range: Range<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placeholder {
    /// A parameter binding or `self`.
    pub root: String,
    /// Field names or tuple indices after the root (`<user.id>` -> `["id"]`).
    pub fields: Vec<String>,
    /// Byte range of the whole `<...>`, delimiters included.
    pub range: Range<usize>,
}

impl Placeholder {
    /// The placeholder as written, e.g. `<user.id>`, for messages.
    pub fn written(&self) -> String {
        let mut path = self.root.clone();
        for field in &self.fields {
            path.push('.');
            path.push_str(field);
        }
        format!("<{path}>")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    pub message: String,
    /// Byte range of the offending text in the template value.
    pub range: Range<usize>,
}

/// Splits a template into segments, reporting every malformed part at once.
pub fn parse(template: &str) -> Result<Vec<Segment>, Vec<TemplateError>> {
    if let Some(error) = check_not_blank(template) {
        return Err(vec![error]);
    }
    let mut parser = Parser::default();
    let bytes = template.as_bytes();
    let mut index = 0;
    // `<` and `>` are ASCII, so byte scanning never splits a UTF-8 character.
    while index < bytes.len() {
        match bytes[index] {
            b'<' => index = parser.placeholder(template, index),
            b'>' => {
                parser.errors.push(TemplateError {
                    message: "unmatched `>` in key: `<` and `>` delimit placeholders such as `<id>`, so they cannot appear on their own".into(),
                    range: index..index + 1,
                });
                index += 1;
            }
            _ => {
                let end = template[index..]
                    .find(['<', '>'])
                    .map_or(template.len(), |offset| index + offset);
                parser.literal(template, index..end);
                index = end;
            }
        }
    }
    if parser.errors.is_empty() {
        Ok(parser.segments)
    } else {
        Err(parser.errors)
    }
}

fn check_not_blank(template: &str) -> Option<TemplateError> {
    let message = if template.is_empty() {
        "empty key: two fns using `key = \"\"` would share one lock; write a name such as `key = \"order:<id>\"`"
    } else if template.trim().is_empty() {
        "the key is only whitespace: write a name such as `key = \"order:<id>\"`"
    } else {
        return None;
    };
    Some(TemplateError {
        message: message.into(),
        range: 0..template.len(),
    })
}

#[derive(Default)]
struct Parser {
    segments: Vec<Segment>,
    errors: Vec<TemplateError>,
}

impl Parser {
    fn literal(&mut self, template: &str, range: Range<usize>) {
        self.segments.push(Segment::Literal(Literal {
            text: template[range.clone()].to_owned(),
            range,
        }));
    }

    /// Parses the placeholder opening at `start`; returns where to continue.
    fn placeholder(&mut self, template: &str, start: usize) -> usize {
        let after = start + 1;
        let close = template[after..]
            .find(['<', '>'])
            .map(|offset| after + offset);
        let Some(end) = close.filter(|&end| template.as_bytes()[end] == b'>') else {
            // Resume at the next `<` (if any) so later placeholders are still checked.
            let resume = close.unwrap_or(template.len());
            let written = &template[start..resume];
            self.errors.push(TemplateError {
                message: format!(
                    "unterminated placeholder `{written}` in key: close it with `>`, e.g. `{written}>`"
                ),
                range: start..resume,
            });
            return resume;
        };
        let range = start..end + 1;
        match placeholder_path(&template[after..end]) {
            Ok((root, fields)) => self.segments.push(Segment::Placeholder(Placeholder {
                root,
                fields,
                range,
            })),
            Err(message) => self.errors.push(TemplateError { message, range }),
        }
        end + 1
    }
}

/// Splits `user.id` into root and fields, checking each part's syntax.
fn placeholder_path(inner: &str) -> Result<(String, Vec<String>), String> {
    if inner.is_empty() {
        return Err(
            "empty placeholder `<>` in key: put a parameter name inside, e.g. `<id>`".into(),
        );
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default();
    if !(root == "self" || is_identifier(root)) {
        return Err(format!(
            "placeholder `<{inner}>` must start with a parameter name, and `{root}` is not a Rust identifier"
        ));
    }
    let fields: Vec<String> = parts.map(str::to_owned).collect();
    if let Some(bad) = fields.iter().find(|field| !is_field(field)) {
        let what = if bad.is_empty() {
            "has an empty field name".to_owned()
        } else {
            format!("has `{bad}`, which is not a field name or tuple index")
        };
        return Err(format!(
            "placeholder `<{inner}>` {what}; write fields as `<param.field>` or `<param.0>`"
        ));
    }
    Ok((root.to_owned(), fields))
}

/// A Rust identifier that can name a binding (keywords excluded, raw `r#` allowed).
fn is_identifier(text: &str) -> bool {
    // Comparing the round trip rejects input that syn would trim or normalise.
    syn::parse_str::<syn::Ident>(text).is_ok_and(|ident| ident == text)
}

/// A named field (`id`) or a tuple index (`0`): decimal, no leading zero, within `u32` as
/// rustc requires (and as the expansion builds it: a longer run of digits is no identifier).
fn is_field(text: &str) -> bool {
    let is_index = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
        && text.parse::<u32>().is_ok();
    is_index || is_identifier(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str, range: Range<usize>) -> Segment {
        Segment::Literal(Literal {
            text: text.into(),
            range,
        })
    }

    fn ph(root: &str, fields: &[&str], range: Range<usize>) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            range,
        })
    }

    fn errors(template: &str) -> Vec<TemplateError> {
        parse(template).expect_err(template)
    }

    fn only_error(template: &str) -> TemplateError {
        let mut all = errors(template);
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    #[test]
    fn splits_literals_and_placeholders() {
        assert_eq!(
            parse("order:<id>").unwrap(),
            [lit("order:", 0..6), ph("id", &[], 6..10)]
        );
        assert_eq!(parse("static").unwrap(), [lit("static", 0..6)]);
        assert_eq!(
            parse("<a><b>").unwrap(),
            [ph("a", &[], 0..3), ph("b", &[], 3..6)]
        );
        assert_eq!(
            parse("a:<x>:b").unwrap(),
            [lit("a:", 0..2), ph("x", &[], 2..5), lit(":b", 5..7)]
        );
    }

    #[test]
    fn keeps_braces_literal_for_hash_tags() {
        assert_eq!(
            parse("cart:{<user.id>}:items").unwrap(),
            [
                lit("cart:{", 0..6),
                ph("user", &["id"], 6..15),
                lit("}:items", 15..22),
            ]
        );
        assert_eq!(parse("{}").unwrap(), [lit("{}", 0..2)]);
    }

    #[test]
    fn parses_field_paths_and_self() {
        assert_eq!(
            parse("<self.tenant.id>").unwrap(),
            [ph("self", &["tenant", "id"], 0..16)]
        );
        assert_eq!(parse("<pair.0>").unwrap(), [ph("pair", &["0"], 0..8)]);
        assert_eq!(parse("<_x>").unwrap(), [ph("_x", &[], 0..4)]);
        assert_eq!(parse("<r#type>").unwrap(), [ph("r#type", &[], 0..8)]);
        assert_eq!(parse("<café>").unwrap(), [ph("café", &[], 0..7)]);
    }

    #[test]
    fn byte_ranges_account_for_multibyte_text() {
        assert_eq!(
            parse("é<id>").unwrap(),
            [lit("é", 0..2), ph("id", &[], 2..6)]
        );
    }

    #[test]
    fn rejects_blank_keys() {
        assert!(only_error("").message.contains("empty key"));
        let blank = only_error("  \t");
        assert!(blank.message.contains("only whitespace"));
        assert_eq!(blank.range, 0..3);
    }

    #[test]
    fn rejects_unterminated_placeholders() {
        let error = only_error("order:<id");
        assert!(
            error.message.contains("unterminated placeholder `<id`"),
            "{error:?}"
        );
        assert_eq!(error.range, 6..9);
        let nested = errors("<a<b>");
        assert_eq!(nested.len(), 1, "{nested:?}");
        assert_eq!(nested[0].range, 0..2);
    }

    #[test]
    fn rejects_empty_and_invalid_placeholders() {
        assert!(only_error("a:<>")
            .message
            .contains("empty placeholder `<>`"));
        let error = only_error("a:<1x>");
        assert!(
            error.message.contains("`1x` is not a Rust identifier"),
            "{error:?}"
        );
        assert_eq!(error.range, 2..6);
        assert!(only_error("<type>").message.contains("`type`"));
        assert!(only_error("< id>")
            .message
            .contains("not a Rust identifier"));
        assert!(only_error("<_>").message.contains("not a Rust identifier"));
        assert!(only_error("<a.>").message.contains("empty field name"));
        assert!(only_error("<a..b>").message.contains("empty field name"));
        assert!(only_error("<a.b-c>").message.contains("`b-c`"));
        assert!(only_error("<a.01>").message.contains("`01`"));
    }

    #[test]
    fn tuple_indices_fit_u32() {
        // Found by `cargo fuzz run key_template`: a longer index reached the expansion, which
        // panicked building it as an identifier.
        assert_eq!(
            parse("<a.4294967295>").unwrap(),
            [ph("a", &["4294967295"], 0..14)]
        );
        let error = only_error("<a.4294967296>");
        assert!(
            error
                .message
                .contains("has `4294967296`, which is not a field name or tuple index"),
            "{error:?}"
        );
        assert!(only_error("<a.99999999999999999999>")
            .message
            .contains("not a field name or tuple index"));
    }

    #[test]
    fn rejects_stray_closing_bracket() {
        let error = only_error("a>b");
        assert!(error.message.contains("unmatched `>`"));
        assert_eq!(error.range, 1..2);
    }

    #[test]
    fn reports_every_error() {
        let all = errors("<>:<1x>:>:<ok>:<open");
        let ranges: Vec<_> = all.iter().map(|e| e.range.clone()).collect();
        assert_eq!(ranges, [0..2, 3..7, 8..9, 15..20]);
    }

    #[test]
    fn writes_placeholders_back() {
        let Segment::Placeholder(p) = &parse("<a.b.0>").unwrap()[0] else {
            panic!("expected a placeholder");
        };
        assert_eq!(p.written(), "<a.b.0>");
    }
}
