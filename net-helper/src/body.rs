//! What a reply's body may be: text-like media types only, decoded (gzip, deflate) within the
//! size limit, then turned into text by its charset.

use crate::error::{failed, human_bytes, refused, FetchError};
use flate2::read::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
use std::io::Read;

/// The media type (lower case, no parameters) and the charset parameter of a Content-Type.
pub fn parse_content_type(value: &str) -> (String, Option<String>) {
    let mut parts = value.split(';');
    let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset"))
            .then(|| v.trim().trim_matches('"').to_ascii_lowercase())
    });
    (media, charset)
}

/// The Content-Type (media type and charset, when it is text) and the Content-Encoding (`?` when
/// it is not text) of a reply.
pub fn content_headers(
    headers: &http::HeaderMap,
) -> (Option<(String, Option<String>)>, Option<String>) {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(parse_content_type);
    let encoding = headers
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").to_string());
    (content_type, encoding)
}

/// Text-like: `text/*`, JSON, XML, JavaScript, YAML, TOML and their `+json`/`+xml` kin.
pub fn is_text_like(media: &str) -> bool {
    const APPLICATION: &str =
        "json xml javascript ecmascript x-javascript x-ndjson yaml x-yaml toml";
    match media.split_once('/') {
        Some(("text", sub)) => !sub.is_empty(),
        Some(("application", sub)) => {
            APPLICATION.split(' ').any(|t| t == sub)
                || sub.ends_with("+json")
                || sub.ends_with("+xml")
        }
        _ => false,
    }
}

/// Decodes `raw` per `Content-Encoding`, refusing more than `max` decoded bytes.
pub fn decode(raw: Vec<u8>, encoding: Option<&str>, max: usize) -> Result<Vec<u8>, FetchError> {
    let enc = encoding.unwrap_or("identity").trim().to_ascii_lowercase();
    let limit = max as u64 + 1;
    let inflate = |r: &mut dyn Read, out: &mut Vec<u8>| r.take(limit).read_to_end(out);
    let mut out = Vec::new();
    let res = match enc.as_str() {
        "" | "identity" => {
            out = raw;
            Ok(0)
        }
        "gzip" | "x-gzip" => inflate(&mut MultiGzDecoder::new(&raw[..]), &mut out),
        // "deflate" is zlib-wrapped by the spec; some servers send raw deflate.
        "deflate" => inflate(&mut ZlibDecoder::new(&raw[..]), &mut out).or_else(|_| {
            out.clear();
            inflate(&mut DeflateDecoder::new(&raw[..]), &mut out)
        }),
        other => {
            let why =
                format!("content encoding {other:?} is not supported (only gzip and deflate)");
            return Err(refused!(Content, "{why}"));
        }
    };
    res.map_err(|e| failed!("the {enc} body does not decode: {e}"))?;
    if out.len() > max {
        let max = human_bytes(max as u64);
        let why = format!("the decoded body exceeds {max} (the body size limit)");
        return Err(refused!(Limit, "{why}"));
    }
    Ok(out)
}

/// The body as text, by its charset (UTF-8 when none is named or the label is unknown).
pub fn to_text(bytes: &[u8], charset: Option<&str>) -> String {
    let enc = charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = enc.decode(bytes);
    text.into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use ipc_schema::net::RefusalKind;
    use std::io::Write;

    #[test]
    fn text_like_types() {
        for t in [
            "text/html",
            "text/plain",
            "application/json",
            "application/ld+json",
            "application/atom+xml",
            "application/javascript",
            "application/xml",
            "application/yaml",
        ] {
            assert!(is_text_like(t), "{t}");
        }
        for t in [
            "image/png",
            "application/octet-stream",
            "application/pdf",
            "image/svg+xml",
            "text",
            "text/",
            "",
            "application/zip",
        ] {
            assert!(!is_text_like(t), "{t}");
        }
        assert_eq!(
            parse_content_type("Text/HTML; Charset=\"ISO-8859-1\""),
            ("text/html".into(), Some("iso-8859-1".into()))
        );
    }

    #[test]
    fn compression_bomb_stops_at_the_limit() {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![b'a'; 16 << 20]).unwrap();
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 128 * 1024);
        let err = decode(bomb, Some("gzip"), 1 << 20).unwrap_err();
        assert_eq!(
            err,
            FetchError::Refused(
                RefusalKind::Limit,
                "the decoded body exceeds 1 MiB (the body size limit)".into()
            )
        );
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![b'a'; 1 << 20]).unwrap();
        assert_eq!(
            decode(enc.finish().unwrap(), Some("gzip"), 1 << 20)
                .unwrap()
                .len(),
            1 << 20
        );
        assert!(matches!(
            decode(vec![1, 2], Some("br"), 10),
            Err(FetchError::Refused(RefusalKind::Content, _))
        ));
    }

    #[test]
    fn charsets() {
        assert_eq!(to_text(b"caf\xe9", Some("iso-8859-1")), "café");
        assert_eq!(to_text("café".as_bytes(), None), "café");
        assert_eq!(to_text(b"\xff", Some("no-such-charset")), "\u{fffd}");
    }
}
