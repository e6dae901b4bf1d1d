//! How errors are shown: the whole chain of causes on one line.
//!
//! The crate's error types follow one rule: an error's `Display` says what failed at its own level
//! ("reading the boot catalog", "discovery ignition"), and the error it wraps, if any, is its
//! [`Error::source`], not part of its text. Whatever shows an error to someone (an HTTP body, a
//! condition message, a log line) renders it with [`chain`], which prints each error of the chain
//! joined by `": "` — the form `anyhow` prints with `{:#}`, which the command line uses. The text
//! users see is therefore the same as when each level formatted its cause into its own message, and
//! a log line carries every cause once.
//!
//! A few messages have a fixed wording (coreos-installer's, assisted-service's) that puts the cause
//! inside the sentence rather than after it, and some foreign errors quote their cause in their own
//! text as well as returning it as their source. Those name the cause in `Display` and keep it as
//! the source too; [`chain`] leaves out a cause whose text the line already holds, so it is printed
//! once either way.
//!
//! No function answers `Result<_, String>` (`tests/it/layers.rs` checks it): even a validator whose
//! whole answer is a sentence for a person returns a type of its own (`SelectorError`,
//! `NameError`, ...), so that its origin is in its type and a caller can wrap it as a source. A
//! store error keeps the error it comes from as its source (`StoreError::Backend`), and the host
//! pool's errors reach the store's callers whole. A std lock is taken through
//! [`crate::keylocks::Locked`], whose one policy for a poisoned lock is written there.

use std::error::Error;
use std::fmt;

/// `error` and its causes, for display: `what failed: why: why that`. Use it wherever an error is
/// shown, as `chain(&e).to_string()` for a message or `error = %chain(&e)` in a log event.
pub fn chain<'a>(error: &'a (dyn Error + 'a)) -> Chain<'a> {
    Chain(error)
}

/// An error and its causes; see [`chain`].
#[derive(Clone, Copy)]
pub struct Chain<'a>(&'a (dyn Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = e.source();
        }
        f.write_str(&line)
    }
}

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("reading the catalog")]
        Read(#[source] std::io::Error),
        #[error("Unrecognized image. (no area: {0})")]
        Quoted(#[source] std::io::Error),
        #[error(transparent)]
        Through(#[from] Inner),
    }

    #[derive(Debug, thiserror::Error)]
    #[error("entry {0}")]
    struct Inner(u32, #[source] std::io::Error);

    fn io(text: &str) -> std::io::Error {
        std::io::Error::other(text.to_string())
    }

    #[test]
    fn each_cause_follows_its_context() {
        assert_eq!(chain(&Outer::Read(io("short read"))).to_string(), "reading the catalog: short read");
        assert_eq!(chain(&Outer::Through(Inner(3, io("bad header")))).to_string(), "entry 3: bad header");
        assert_eq!(chain(&io("alone")).to_string(), "alone");
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        assert_eq!(chain(&Outer::Quoted(io("no file"))).to_string(), "Unrecognized image. (no area: no file)");
    }
}
