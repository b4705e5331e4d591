//! TOML read once into a small tree that keeps the byte span of every value, and `Table`, which
//! hands out typed values by key and refuses the keys nobody asked for.
//!
//! Why not `#[derive(Deserialize)]` per table: each derived struct is a visitor per field type,
//! monomorphised for every one of toml's deserializers, and the manifest's and berth.toml's
//! tables together cost the device build about 80 KiB that way (DESIGN.md decision 1 gives it
//! 1.5 MiB). Nor one hand-written serde visitor (the first version of this file): it still
//! pulled toml's serde deserializers in, 28 KiB more than converting toml's own parse tree
//! (`DeTable`, which `toml::from_str` builds first anyway) as below. The typed reads are plain
//! code. The rules stay those of `deny_unknown_fields`: a wrong type or an unknown key is an
//! error that names the key, at the line of its value.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
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

/// Text that is not TOML, or a number that does not fit: a message and where (toml's own for
/// syntax). Shaped like `toml::de::Error`, which cannot be built outside toml with a span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    span: Option<Range<usize>>,
    message: String,
}

impl SyntaxError {
    pub fn span(&self) -> Option<Range<usize>> {
        self.span.clone()
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Entries in toml's map order (sorted by key), as its serde deserializer gave them.
fn entries(table: DeTable) -> Result<Vec<(String, Spanned<Val>)>, SyntaxError> {
    table
        .into_iter()
        .map(|(k, v)| Ok((k.into_inner().into_owned(), val(v)?)))
        .collect()
}

fn val(v: Spanned<DeValue>) -> Result<Spanned<Val>, SyntaxError> {
    let span = v.span();
    let overflow = |message: &str| SyntaxError {
        span: Some(span.clone()),
        message: message.into(),
    };
    let out = match v.into_inner() {
        DeValue::String(s) => Val::Str(s.into_owned()),
        DeValue::Integer(n) => Val::Int(
            i64::from_str_radix(n.as_str(), n.radix())
                .map_err(|_| overflow("integer out of range"))?,
        ),
        DeValue::Float(f) => {
            // toml's rule: `inf` only when written so, not as the overflow of 1e999.
            let x = crate::float::parse(f.as_str());
            match x.filter(|x| !x.is_infinite() || f.as_str().contains("inf")) {
                Some(x) => Val::Float(x),
                None => return Err(overflow("floating-point number overflowed")),
            }
        }
        DeValue::Boolean(b) => Val::Bool(b),
        DeValue::Datetime(d) => Val::Datetime(d.to_string()),
        DeValue::Array(items) => Val::List(items.into_iter().map(val).collect::<Result<_, _>>()?),
        DeValue::Table(t) => Val::Table(entries(t)?),
    };
    Ok(Spanned::new(span, out))
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
pub fn parse(text: &str) -> Result<Table, SyntaxError> {
    let doc = DeTable::parse(text).map_err(|e| SyntaxError {
        span: e.span(),
        message: e.message().into(),
    })?;
    Ok(Table {
        name: String::new(),
        span: 0..0,
        entries: entries(doc.into_inner())?,
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

    pub fn bool(&mut self, key: &str) -> Result<Option<Spanned<bool>>, TreeError> {
        self.typed(key, "true or false", |v| match v {
            Val::Bool(b) => Ok(b),
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
    fn values_convert_like_tomls_deserializer() {
        let text = "h = 0xff\nb = 0b11\nf = 1_000.5\ni = -inf\n\
                    d = 1979-05-27T07:32:00Z\nl = [1, 'x']\n[[t]]\n[[t]]\nk = 1\n";
        let mut doc = parse(text).unwrap();
        let mut take = |k: &str| doc.take(k).unwrap().into_inner();
        assert_eq!(take("h"), Val::Int(255));
        assert_eq!(take("b"), Val::Int(3));
        assert_eq!(take("f"), Val::Float(1000.5));
        assert_eq!(take("i"), Val::Float(f64::NEG_INFINITY));
        assert_eq!(take("d"), Val::Datetime("1979-05-27T07:32:00Z".into()));
        let Val::List(l) = take("l") else { panic!() };
        assert_eq!(&text[l[1].span()], "'x'");
        let Val::List(t) = take("t") else { panic!() };
        assert_eq!(t[0].get_ref(), &Val::Table(Vec::new()));
        // Keys come in toml's map order, sorted: the order unknown keys are reported in.
        let doc = parse("zz = 1\naa = 2\n").unwrap();
        assert_eq!(doc.finish().unwrap_err().message, "unknown key `aa`");
    }

    #[test]
    fn numbers_that_do_not_fit_are_errors_at_their_value() {
        for (text, message) in [
            (
                "a = 1\n[x]\nn = 9223372036854775808\n",
                "integer out of range",
            ),
            ("a = 1\n[x]\nn = -0x1\n", ""),
            (
                "a = 1\n[x]\nn = 1e999\n",
                "floating-point number overflowed",
            ),
        ] {
            let Err(e) = parse(text) else {
                panic!("{text:?} parsed")
            };
            if !message.is_empty() {
                assert_eq!(e.message(), message);
            }
            assert_eq!(line_of(text, e.span().unwrap().start), 3, "{text:?}");
        }
        assert_eq!(
            parse("x = [1, 2\n").unwrap_err().span().map(|s| s.start),
            Some(9)
        );
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
