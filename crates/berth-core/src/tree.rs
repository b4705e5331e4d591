//! TOML read once into a small tree that keeps the byte span of every value, and `Table`, which
//! hands out typed values by key and refuses the keys nobody asked for.
//!
//! Why not `#[derive(Deserialize)]` per table: each derived struct is a visitor per field type,
//! monomorphised for every one of toml's deserializers, and the manifest's and berth.toml's
//! tables together cost the device build about 80 KiB that way (DESIGN.md decision 1 gives it
//! 1.5 MiB). One hand-written visitor reads any document; the typed reads below are plain code.
//! The rules stay those of `deny_unknown_fields`: a wrong type or an unknown key is an error
//! that names the key, at the line of its value.

use std::fmt;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
pub use toml::Spanned;

/// One TOML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Datetime(String),
    List(Vec<Spanned<Val>>),
    Table(Vec<(String, Spanned<Val>)>),
}

impl Val {
    /// What the value is, for "expected a string, found an integer".
    pub fn kind(&self) -> &'static str {
        match self {
            Val::Str(_) => "a string",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Bool(_) => "a boolean",
            Val::Datetime(_) => "a date-time",
            Val::List(_) => "an array",
            Val::Table(_) => "a table",
        }
    }
}

/// toml hands a date-time to `deserialize_any` as a one-entry map under this key.
const DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Deserialize<'de> for Val {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Val, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

struct ValVisitor;

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Val, E> {
        Ok(Val::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Val, E> {
        Ok(Val::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Val, E> {
        i64::try_from(v)
            .map(Val::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Val, E> {
        Ok(Val::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Val, E> {
        Ok(Val::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Val, E> {
        Ok(Val::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Spanned<Val>>()? {
            out.push(v);
        }
        Ok(Val::List(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            if k == DATETIME_KEY {
                return Ok(Val::Datetime(map.next_value::<String>()?));
            }
            out.push((k, map.next_value::<Spanned<Val>>()?));
        }
        Ok(Val::Table(out))
    }
}

/// A wrong type, an unknown key or a missing table: where (byte offset) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeError {
    pub offset: usize,
    pub message: String,
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parses a whole document. Syntax errors are toml's own (with their span).
pub fn parse(text: &str) -> Result<Table, toml::de::Error> {
    let entries = match toml::from_str::<Val>(text)? {
        Val::Table(entries) => entries,
        // toml's document deserializer only ever gives a table.
        _ => Vec::new(),
    };
    Ok(Table {
        name: String::new(),
        span: 0..0,
        entries,
    })
}

/// A table whose keys are taken one by one; `finish` refuses what is left.
#[derive(Debug)]
pub struct Table {
    /// Dotted name (`package`, `entrypoint.env`); empty for the document.
    pub name: String,
    pub span: Range<usize>,
    entries: Vec<(String, Spanned<Val>)>,
}

impl Table {
    /// `name.key`, or `key` at the top.
    pub fn path(&self, key: &str) -> String {
        if self.name.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.name)
        }
    }

    /// Removes and returns the raw value of `key`.
    pub fn take(&mut self, key: &str) -> Option<Spanned<Val>> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    fn wrong(&self, key: &str, v: &Spanned<Val>, want: &str) -> TreeError {
        TreeError {
            offset: v.span().start,
            message: format!(
                "{}: expected {want}, found {}",
                self.path(key),
                v.get_ref().kind()
            ),
        }
    }

    fn typed<T>(
        &mut self,
        key: &str,
        want: &str,
        f: impl FnOnce(Val) -> Result<T, Val>,
    ) -> Result<Option<Spanned<T>>, TreeError> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let span = v.span();
        match f(v.into_inner()) {
            Ok(t) => Ok(Some(Spanned::new(span, t))),
            Err(back) => Err(self.wrong(key, &Spanned::new(span, back), want)),
        }
    }

    pub fn str(&mut self, key: &str) -> Result<Option<Spanned<String>>, TreeError> {
        self.typed(key, "a string", |v| match v {
            Val::Str(s) => Ok(s),
            v => Err(v),
        })
    }

    pub fn int(&mut self, key: &str) -> Result<Option<Spanned<i64>>, TreeError> {
        self.typed(key, "an integer", |v| match v {
            Val::Int(n) => Ok(n),
            v => Err(v),
        })
    }

    /// An array of strings.
    pub fn strs(&mut self, key: &str) -> Result<Option<Spanned<Vec<Spanned<String>>>>, TreeError> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let span = v.span();
        let Val::List(items) = v.get_ref() else {
            return Err(self.wrong(key, &v, "an array of strings"));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item.get_ref() {
                Val::Str(s) => out.push(Spanned::new(item.span(), s.clone())),
                _ => return Err(self.wrong(key, item, "a string")),
            }
        }
        Ok(Some(Spanned::new(span, out)))
    }

    /// A sub-table (`[package]`, or an inline `env = { … }`).
    pub fn table(&mut self, key: &str) -> Result<Option<Table>, TreeError> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let name = self.path(key);
        let span = v.span();
        match v.into_inner() {
            Val::Table(entries) => Ok(Some(Table {
                name,
                span,
                entries,
            })),
            other => Err(self.wrong(key, &Spanned::new(span, other), "a table")),
        }
    }

    /// An array of tables (`[[schedule]]`).
    pub fn tables(&mut self, key: &str) -> Result<Option<Vec<Table>>, TreeError> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let name = self.path(key);
        let span = v.span();
        let items = match v.into_inner() {
            Val::List(items) => items,
            other => return Err(self.wrong(key, &Spanned::new(span, other), "an array of tables")),
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let span = item.span();
            match item.into_inner() {
                Val::Table(entries) => out.push(Table {
                    name: name.clone(),
                    span,
                    entries,
                }),
                other => return Err(self.wrong(key, &Spanned::new(span, other), "a table")),
            }
        }
        Ok(Some(out))
    }

    /// Every entry, each of which must be a string (`env`, `[network]`, `[governor]`).
    pub fn strings(self) -> Result<Vec<(String, Spanned<String>)>, TreeError> {
        let mut out = Vec::with_capacity(self.entries.len());
        for (k, v) in &self.entries {
            match v.get_ref() {
                Val::Str(s) => out.push((k.clone(), Spanned::new(v.span(), s.clone()))),
                _ => return Err(self.wrong(k, v, "a string")),
            }
        }
        Ok(out)
    }

    /// Refuses the first key nobody took.
    pub fn finish(self) -> Result<(), TreeError> {
        match self.entries.first() {
            None => Ok(()),
            Some((k, v)) => Err(TreeError {
                offset: v.span().start,
                message: if self.name.is_empty() {
                    format!("unknown key `{k}`")
                } else {
                    format!("unknown key `{k}` in [{}]", self.name)
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_reads_spans_and_unknown_keys() {
        let text = "top = 1\n[a]\ns = \"x\"\nn = 7\nl = [\"p\", \"q\"]\nextra = true\n\
                    [[b]]\nk = \"1\"\n[[b]]\nk = \"2\"\n";
        let mut doc = parse(text).unwrap();
        assert_eq!(*doc.int("top").unwrap().unwrap().get_ref(), 1);
        let mut a = doc.table("a").unwrap().unwrap();
        assert_eq!(a.name, "a");
        let s = a.str("s").unwrap().unwrap();
        assert_eq!(s.get_ref(), "x");
        assert_eq!(line_of(text, s.span().start), 3);
        assert_eq!(*a.int("n").unwrap().unwrap().get_ref(), 7);
        let l = a.strs("l").unwrap().unwrap().into_inner();
        assert_eq!(
            l.iter().map(|s| s.get_ref().as_str()).collect::<Vec<_>>(),
            ["p", "q"]
        );
        assert!(a.str("missing").unwrap().is_none());
        let e = a.finish().unwrap_err();
        assert_eq!(e.message, "unknown key `extra` in [a]");
        assert_eq!(line_of(text, e.offset), 6);
        let b = doc.tables("b").unwrap().unwrap();
        assert_eq!(b.len(), 2);
        doc.finish().unwrap();
    }

    #[test]
    fn wrong_types_name_the_key_and_line() {
        let text = "[p]\nname = 5\nlist = [\"a\", 2]\nt = \"no\"\nd = 1979-05-27\n";
        let mut p = parse(text).unwrap().table("p").unwrap().unwrap();
        let e = p.str("name").unwrap_err();
        assert_eq!(e.message, "p.name: expected a string, found an integer");
        assert_eq!(line_of(text, e.offset), 2);
        let e = p.strs("list").unwrap_err();
        assert_eq!(e.message, "p.list: expected a string, found an integer");
        assert_eq!(line_of(text, e.offset), 3);
        let e = p.table("t").unwrap_err();
        assert_eq!(e.message, "p.t: expected a table, found a string");
        let e = p.str("d").unwrap_err();
        assert_eq!(e.message, "p.d: expected a string, found a date-time");
        let e = parse("[p]\n").unwrap().int("p").unwrap_err();
        assert!(e.message.contains("found a table"), "{}", e.message);
    }

    #[test]
    fn top_level_unknown_table_is_at_its_header() {
        let text = "a = 1\n\n[extra]\nx = 1\n";
        let mut doc = parse(text).unwrap();
        doc.int("a").unwrap();
        let e = doc.finish().unwrap_err();
        assert_eq!(e.message, "unknown key `extra`");
        assert_eq!(line_of(text, e.offset), 3);
    }

    #[test]
    fn strings_refuses_other_types() {
        let mut doc = parse("[g]\na = \"1\"\nb = 2\n").unwrap();
        let e = doc.table("g").unwrap().unwrap().strings().unwrap_err();
        assert_eq!(e.message, "g.b: expected a string, found an integer");
        let mut doc = parse("[g]\na = \"1\"\n").unwrap();
        let g = doc.table("g").unwrap().unwrap().strings().unwrap();
        assert_eq!(g[0].0, "a");
        assert_eq!(g[0].1.get_ref(), "1");
    }
}
