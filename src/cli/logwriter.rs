//! The log's writer: one event makes one line, whatever the values in it hold.
//!
//! Values from requests reach log messages: an agent's step error, names and messages of
//! resources, headers. A line break in one would start a log line of the sender's choosing (a
//! fake `ERROR` of another component, a forged audit entry); an ESC would send terminal control
//! sequences to whoever reads the log in a terminal. tracing's formatter escapes ESC and a few
//! other codes in field values, but not line breaks. [`EscapedLines`] wraps the writer instead, so
//! that it holds whatever the field, the formatter or the call site: it takes each event as
//! formatted and writes it with every control character escaped except the event's final newline.
//!
//! Escapes: `\n`, `\r`, `\t`; other ASCII controls (C0, DEL) as `\x1b`; C1 controls (U+0080 to
//! U+009F, among them NEL U+0085 and the 8-bit CSI U+009B), the line and paragraph separators
//! U+2028 and U+2029, and the bidirectional formatting characters as `\u{85}`. The separators are
//! escaped because some log viewers and terminals break lines at them, so they could forge a line
//! as well as `\n` can; the bidirectional controls because they make a line display in another
//! order than it reads (hiding or moving `level=ERROR`). Other Unicode is written as it is.
//! Backslashes are left alone: a value holding the two characters `\n` looks like an escaped line
//! break, but neither starts a line.

use std::borrow::Cow;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// A [`MakeWriter`] whose writers write each event as one line (see the module documentation).
///
/// The formatter must not color its output (`with_ansi(false)`): colors are the same ESC
/// sequences a value could carry, and this writer cannot tell them apart, so it escapes them too.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedLines<M> {
    inner: M,
    style: Escapes,
}

/// How an escaped character is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Escapes {
    /// `\n`, `\x1b`, `\u{2028}`: for text lines.
    #[default]
    Text,
    /// `\u000a`, `\u001b`, `\u2028`: for JSON lines, where they can only be inside strings (the
    /// formatter escapes ASCII controls itself, and writes the rest, valid JSON, as they are).
    Json,
}

impl<M> EscapedLines<M> {
    pub fn new(inner: M) -> Self {
        Self { inner, style: Escapes::Text }
    }

    /// For a formatter that writes an event as one JSON object.
    pub fn json(inner: M) -> Self {
        Self { inner, style: Escapes::Json }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for EscapedLines<M> {
    type Writer = EscapedEvent<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapedEvent { inner: self.inner.make_writer(), event: Vec::new(), style: self.style }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        EscapedEvent { inner: self.inner.make_writer_for(meta), event: Vec::new(), style: self.style }
    }
}

/// The writer of one event: collects what the formatter writes and writes it, escaped, to the
/// inner writer when dropped. The formatter takes one writer per event, so a newline that ends
/// one of several writes of an event is escaped like any other.
pub struct EscapedEvent<W: Write> {
    inner: W,
    event: Vec<u8>,
    style: Escapes,
}

impl<W: Write> Write for EscapedEvent<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.event.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    /// Nothing goes out before the event is complete (see [`EscapedEvent`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for EscapedEvent<W> {
    fn drop(&mut self) {
        if self.event.is_empty() {
            return;
        }
        // A log write that fails has nowhere to be reported; tracing's formatter drops such errors too.
        let _ = self.inner.write_all(&escape_event_as(&self.event, self.style));
        let _ = self.inner.flush();
    }
}

/// `event` with every control character escaped except a final `\n`.
pub fn escape_event(event: &[u8]) -> Cow<'_, [u8]> {
    escape_event_as(event, Escapes::Text)
}

/// [`escape_event`], with the escapes of `style`.
pub fn escape_event_as(event: &[u8], style: Escapes) -> Cow<'_, [u8]> {
    let text = String::from_utf8_lossy(event);
    let (line, newline) = match text.strip_suffix('\n') {
        Some(line) => (line, true),
        None => (&*text, false),
    };
    if !line.chars().any(needs_escape) && matches!(text, Cow::Borrowed(_)) {
        return Cow::Borrowed(event);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in line.chars() {
        match c {
            c if style == Escapes::Json && needs_escape(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    if newline {
        out.push('\n');
    }
    Cow::Owned(out.into_bytes())
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{061c}' | '\u{200e}' | '\u{200f}' // Arabic letter mark, left-to-right and right-to-left marks
            | '\u{202a}'..='\u{202e}' // embeddings, overrides and their end
            | '\u{2066}'..='\u{2069}' // isolates and their end
        )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn escaped(event: &str) -> String {
        String::from_utf8(escape_event(event.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn control_characters_are_escaped_but_the_final_newline() {
        assert_eq!(
            escaped("WARN reclaim download failed: x\nFAKE LOG LINE level=ERROR\n"),
            "WARN reclaim download failed: x\\nFAKE LOG LINE level=ERROR\n"
        );
        assert_eq!(escaped("a\r\nb\tc\n\n"), "a\\r\\nb\\tc\\n\n");
        assert_eq!(
            escaped("clear \x1b[2J bell \x07 del \x7f nul \0\n"),
            "clear \\x1b[2J bell \\x07 del \\x7f nul \\x00\n"
        );
        assert_eq!(escaped("nel \u{85} csi \u{9b}\n"), "nel \\u{85} csi \\u{9b}\n");
        assert_eq!(escaped("ls \u{2028} ps \u{2029}\n"), "ls \\u{2028} ps \\u{2029}\n");
        assert_eq!(escaped("rlo \u{202e}RORRE\u{202c} fsi \u{2068}\n"), "rlo \\u{202e}RORRE\\u{202c} fsi \\u{2068}\n");
        // Everything else as it is, without a copy; an event without a final newline gets none.
        let plain = "INFO bootstream: ünïcode — 名前 \\n is two characters\n";
        assert!(matches!(escape_event(plain.as_bytes()), Cow::Borrowed(_)));
        assert_eq!(escaped(plain), plain);
        assert_eq!(escaped("no newline\r"), "no newline\\r");
        assert_eq!(escaped(""), "");
    }

    /// Through tracing's JSON formatter, as `cli --log-format json` sets it up: one object a line,
    /// each valid JSON, whose strings read back as the values logged.
    #[test]
    fn json_events_are_one_valid_object_a_line() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(EscapedLines::json(out.clone()))
            .finish();
        let agent_error = "x\nFAKE\r\u{2028}\u{2029}\u{85}\u{9b}\u{202e}\x1b[2J\u{0}é";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(host = "h1", "reclaim download failed: {}", agent_error);
            tracing::info!(shown = %agent_error, "second event");
        });
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in &lines {
            assert!(!line.chars().any(needs_escape), "{line:?}");
        }
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["fields"]["message"], format!("reclaim download failed: {agent_error}"));
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["fields"]["shown"], agent_error);
    }

    /// A shared buffer standing for standard error.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn an_event_written_in_pieces_is_one_line() {
        let out = Captured::default();
        let lines = EscapedLines::new(out.clone());
        let mut writer = lines.make_writer();
        writer.write_all(b"first part\n").unwrap();
        writer.write_all(b"second part\n").unwrap();
        writer.flush().unwrap();
        assert_eq!(out.text(), "", "nothing before the event is complete");
        drop(writer);
        assert_eq!(out.text(), "first part\\nsecond part\n");
    }

    /// Through tracing's own formatter, as `cli` sets it up: values with line breaks and terminal
    /// escapes in the message and in fields, and still one line per event.
    #[test]
    fn formatted_events_stay_one_line_each() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(EscapedLines::new(out.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let agent_error = "x\nFAKE LOG LINE level=ERROR\r\u{2028}\x1b[2J";
            tracing::warn!(host = "h1", "reclaim download failed: {}", agent_error);
            tracing::info!(shown = %agent_error, "second event");
        });
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let shown = "x\\nFAKE LOG LINE level=ERROR\\r\\u{2028}\\x1b[2J";
        assert!(
            lines[0].contains(" WARN ") && lines[0].contains(&format!("reclaim download failed: {shown}")),
            "{text}"
        );
        assert!(lines[1].contains(" INFO ") && lines[1].ends_with(&format!("second event shown={shown}")), "{text}");
        for line in lines {
            assert!(!line.chars().any(needs_escape), "{line:?}");
        }
    }
}
