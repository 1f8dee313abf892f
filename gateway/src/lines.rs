//! stdin framing: MCP's stdio transport sends one JSON-RPC message per line. Bytes are pushed in
//! as they arrive; a line longer than [`MAX_LINE`] is never buffered whole: its bytes are counted
//! and dropped up to the next newline (its id picked out on the way), and the caller answers it
//! with an error and reads on.

use crate::jsonrpc::IdSniffer;
use serde_json::Value;

/// The longest line accepted (4 MiB), newline excluded.
pub const MAX_LINE: usize = 4 << 20;

/// One complete line, or one too long to keep.
#[derive(Debug, PartialEq)]
pub enum LineEvent {
    /// One line, without its newline (a last line without a newline counts too).
    Line(Vec<u8>),
    /// A line over the limit: how many bytes it had (dropped), and the request id found in it
    /// as it streamed past (null if none).
    TooLong { bytes: usize, id: Value },
}

/// Splits pushed bytes into lines of at most `max` bytes.
pub struct LineSplitter {
    max: usize,
    line: Vec<u8>,
    /// Once the current line went over the limit: its length so far, and the id sniffer it
    /// streams through (then `line` stays empty).
    over: Option<(usize, IdSniffer)>,
}

impl LineSplitter {
    pub fn new(max: usize) -> Self {
        LineSplitter {
            max,
            line: Vec::new(),
            over: None,
        }
    }

    fn take(&mut self) -> LineEvent {
        match self.over.take() {
            Some((bytes, sniffer)) => LineEvent::TooLong {
                bytes,
                id: sniffer.finish(),
            },
            None => LineEvent::Line(std::mem::take(&mut self.line)),
        }
    }

    fn extend(&mut self, chunk: &[u8]) {
        match self.over.as_mut() {
            Some((bytes, sniffer)) => {
                *bytes += chunk.len();
                sniffer.feed(chunk);
            }
            None if self.line.len() + chunk.len() > self.max => {
                let mut sniffer = IdSniffer::default();
                sniffer.feed(&self.line);
                sniffer.feed(chunk);
                self.over = Some((self.line.len() + chunk.len(), sniffer));
                self.line = Vec::new();
            }
            None => self.line.extend_from_slice(chunk),
        }
    }

    /// Adds bytes read from stdin; every line they complete goes to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<LineEvent>) {
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            self.extend(&data[..i]);
            out.push(self.take());
            data = &data[i + 1..];
        }
        if !data.is_empty() {
            self.extend(data);
        }
    }

    /// stdin ended: a last line without its newline.
    pub fn finish(&mut self, out: &mut Vec<LineEvent>) {
        if self.over.is_some() || !self.line.is_empty() {
            out.push(self.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(input: &[u8], max: usize, chunk: usize) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out.into_iter()
            .map(|e| match e {
                LineEvent::Line(l) => format!("line {}", String::from_utf8_lossy(&l)),
                LineEvent::TooLong { bytes, id } => format!("too long {bytes} {id}"),
            })
            .collect()
    }

    #[test]
    fn lines_split_on_newlines_whatever_the_chunks() {
        for chunk in [1, 2, 3, 7, 64] {
            assert_eq!(
                events(b"ab\n\ncde\nf", 10, chunk),
                ["line ab", "line ", "line cde", "line f"],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn an_overlong_line_is_counted_dropped_and_reading_goes_on() {
        for chunk in [1, 3, 8, 64] {
            assert_eq!(
                events(b"12345\n123456789\nok\n", 5, chunk),
                ["line 12345", "too long 9 null", "line ok"],
                "chunks of {chunk}"
            );
            assert_eq!(
                events(b"1234567", 5, chunk),
                ["too long 7 null"],
                "chunks of {chunk}"
            );
            assert_eq!(
                events(br#"{"x":"0123456789","id":4}"#, 5, chunk),
                ["too long 25 4"],
                "chunks of {chunk}"
            );
        }
    }
}
