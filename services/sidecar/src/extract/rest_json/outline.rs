//! A body's JSON outlined before it is parsed: where its top-level members start and end, found
//! by a scan that skips the tensors' data, and the JSON part split from the binary data.

use bytes::Bytes;
use serde::Deserialize;

use super::{HEADER_LENGTH, RestBodyError, malformed};

/// A `data` value's place in the body's JSON: its first byte and length.
#[derive(Deserialize, Clone, Copy)]
pub(super) struct Span(pub(super) usize, pub(super) usize);

/// The JSON text with each tensor's `data` value (the member `data` of an object in an array
/// in the top object: `inputs[i].data`, `outputs[i].data`) replaced by its [`Span`] in `json`.
/// serde then reads the few hundred bytes of the call's structure instead of every number of
/// every tensor: skipping values it does not keep cost serde ~all of the parse (143 of 145 us
/// for a 66 kB body of 51 tensors, 11 of them wanted), and here they are stepped over by
/// searching for brackets and quotes only; the request's `id` is found on the way (see
/// [`HeaderCache`]). `None` when the text ends inside a value.
pub(super) fn outline(json: &[u8]) -> Option<Outline> {
    walk(json, false)
}

/// [`outline`]'s walk; with `only_id`, it stops at the top-level `id` (and outlines nothing).
pub(super) fn walk(json: &[u8], only_id: bool) -> Option<Outline> {
    let mut out = Vec::with_capacity(if only_id { 0 } else { 1024 });
    let mut id = None;
    let (mut at, mut copied, mut depth) = (0usize, 0usize, 0usize);
    while at < json.len() {
        match json[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(json, at)?;
                // An escaped key is what it decodes to, as serde will read it.
                let is = |name: &str| {
                    let key = &json[at..end];
                    (key.len() == name.len() + 2 && &key[1..key.len() - 1] == name.as_bytes())
                        || (key.contains(&b'\\')
                            && serde_json::from_slice::<String>(key).is_ok_and(|k| k == name))
                };
                let is_data = depth == 3 && is("data");
                if depth == 1 && id.is_none() && is("id") {
                    let colon = skip_ws(json, end);
                    if json.get(colon) == Some(&b':') {
                        let start = skip_ws(json, colon + 1);
                        id = Some((start, value_end(json, start)?));
                        if only_id {
                            return Some(Outline { text: out, id });
                        }
                    }
                }
                at = end;
                if is_data && !only_id {
                    let colon = skip_ws(json, at);
                    if json.get(colon) == Some(&b':') {
                        let start = skip_ws(json, colon + 1);
                        let stop = value_end(json, start)?;
                        out.extend_from_slice(&json[copied..start]);
                        out.extend_from_slice(format!("[{start},{}]", stop - start).as_bytes());
                        (at, copied) = (stop, stop);
                    }
                }
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    out.extend_from_slice(&json[copied..]);
    Some(Outline { text: out, id })
}

/// What [`outline`] makes of a body's JSON.
pub(super) struct Outline {
    /// The JSON with each tensor's `data` replaced by its [`Span`].
    pub(super) text: Vec<u8>,
    /// Where the value of the top-level member `id` is (its first): start and end.
    pub(super) id: Option<(usize, usize)>,
}

fn skip_ws(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// One past the closing quote of the string whose opening quote is at `at`.
fn string_end(json: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let found = from + memchr::memchr2(b'"', b'\\', json.get(from..)?)?;
        if json[found] == b'"' {
            return Some(found + 1);
        }
        // An escape: the next byte is never the string's end.
        from = found + 2;
    }
}

/// One past the end of the JSON value that starts at `at`: an array or object by its matching
/// bracket (strings stepped over whole), or a scalar up to the next delimiter (`None` if that
/// is no scalar).
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    match *json.get(at)? {
        b'"' => string_end(json, at),
        open @ (b'[' | b'{') => {
            let close = if open == b'[' { b']' } else { b'}' };
            let (mut depth, mut from) = (0usize, at);
            loop {
                let found = from + memchr::memchr3(b'"', open, close, json.get(from..)?)?;
                from = found + 1;
                match json[found] {
                    b'"' => from = string_end(json, found)?,
                    b if b == open => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(from);
                        }
                    }
                }
            }
        }
        _ => {
            let len = json[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(json.len() - at);
            // Only a number, `true`, `false` or `null`: text that is no value (`1x`, `:1`, or
            // nothing before the next comma) would otherwise be cut out of the body, which
            // then read as JSON where it is not (and `1x` as the number 1).
            serde_json::from_slice::<serde::de::IgnoredAny>(&json[at..at + len]).ok()?;
            Some(at + len)
        }
    }
}

/// Splits a body into its JSON part and its binary part: with the extension header, the first
/// `header_length` bytes are JSON; without it, all of it is.
pub(super) fn split(
    body: &Bytes,
    header_length: Option<usize>,
) -> Result<(Bytes, Bytes), RestBodyError> {
    match header_length {
        None => Ok((body.clone(), Bytes::new())),
        Some(n) if n <= body.len() => Ok((body.slice(..n), body.slice(n..))),
        Some(n) => Err(malformed(format!(
            "{HEADER_LENGTH} is {n} but the body has {} bytes",
            body.len()
        ))),
    }
}

/// A body's JSON part outlined (see [`outline`]; `what` names it in errors), with the JSON
/// text (where the outline's spans point) and the binary part.
pub(super) fn outlined(
    body: &Bytes,
    header_length: Option<usize>,
    what: &str,
) -> Result<(Outline, Bytes, Bytes), RestBodyError> {
    let (json, binary) = split(body, header_length)?;
    let outlined =
        outline(&json).ok_or_else(|| malformed(format!("{what} JSON: ends inside a value")))?;
    Ok((outlined, json, binary))
}

/// An outlined body's JSON read as `T`, which may borrow from it.
pub(super) fn read<'a, T: Deserialize<'a>>(
    outlined: &'a [u8],
    what: &str,
) -> Result<T, RestBodyError> {
    serde_json::from_slice(outlined).map_err(|e| malformed(format!("{what} JSON: {e}")))
}
