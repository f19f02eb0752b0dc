//! The HTTP/1 framing of the answers actix-http writes on one connection, as the byte-level
//! front sees them ([`crate::api::front_stream::FrontStream`]): it tells the front when each
//! answer has been written in full, and whether it closes the connection, so that the next
//! pipelined request is passed only then (`api::front::Framer`'s docs say why) and a
//! connection whose answer said `Connection: close` ends at once.
//!
//! Rules (RFC 9112 §6.3, for the answers actix writes):
//! - An interim answer (`1xx` but `101`) is not an answer: the final one follows.
//! - `101 Switching Protocols` ends the framing: the rest is the upgraded protocol.
//! - The answer to a `HEAD` request, and `204` and `304`, end with their head.
//! - Otherwise `Transfer-Encoding: chunked` frames the body, else `Content-Length`, else the
//!   body runs to the close (never "done").
//! - An answer closes the connection when it says `Connection: close`, or is HTTP/1.0
//!   without `Connection: keep-alive`.
//! - Bytes that do not parse as an answer end the framing ([`Written::lost`]): the front then
//!   stops pacing the connection rather than guess.

use crate::api::front::{Chunk, ChunkedEnd, chunked_step};

/// Most header fields in an answer head the framer reads, fields (actix's answers carry
/// about ten); an answer with more ends the framing ([`Written::lost`]).
pub const MAX_ANSWER_FIELDS: usize = 64;

/// Largest answer head the framer buffers while waiting for its end, bytes; a longer one
/// ends the framing.
pub const MAX_ANSWER_HEAD_BYTES: usize = 64 * 1024;

/// Where the answers' framing stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum At {
    /// At (or inside) an answer head, held in [`AnswerFramer::head`].
    #[default]
    Head,
    /// Inside a body of known length, this many bytes to go.
    Body(u64),
    /// Inside a chunked body.
    Chunked(Chunk, u64),
    /// A body that runs to the close, an upgrade, or bytes that did not parse.
    Unframed,
}

/// What a write held ([`AnswerFramer::wrote`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Answers completed by these bytes.
    pub answers: u32,
    /// One of them closes the connection.
    pub close: bool,
    /// The framing ended here for good (upgrade, a body to the close, or bytes that are not
    /// an answer): nothing more will be counted.
    pub lost: bool,
}

/// The answers' framing of one connection (module docs).
#[derive(Debug, Default)]
pub struct AnswerFramer {
    at: At,
    /// A partial answer head.
    head: Vec<u8>,
    /// The current answer closes the connection.
    closes: bool,
}

impl AnswerFramer {
    /// Takes `bytes` written to the client, in order; `to_head` says whether the request being
    /// answered is a `HEAD` request. Answers what they completed.
    pub fn wrote(&mut self, bytes: &[u8], to_head: bool) -> Written {
        let mut w = Written::default();
        let mut pos = 0;
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            match self.at {
                At::Unframed => return w,
                At::Body(left) => {
                    let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    pos += n;
                    let left = left - n as u64;
                    if left == 0 {
                        self.done(&mut w);
                    } else {
                        self.at = At::Body(left);
                    }
                }
                At::Chunked(at, size) => {
                    let (used, end) = chunked_step(at, size, rest);
                    pos += used;
                    match end {
                        ChunkedEnd::More(at, size) => self.at = At::Chunked(at, size),
                        ChunkedEnd::Done => self.done(&mut w),
                        ChunkedEnd::Bad => return self.lose(w),
                    }
                }
                At::Head => {
                    let used = if self.head.is_empty() {
                        self.read_head(rest, to_head, &mut w)
                    } else {
                        let mut joined = std::mem::take(&mut self.head);
                        let before = joined.len();
                        joined.extend_from_slice(rest);
                        self.read_head(&joined, to_head, &mut w)
                            .map(|used| used.saturating_sub(before))
                    };
                    // None: a partial head (held) or lost framing; either way, done here.
                    let Some(used) = used else { return w };
                    pos += used;
                }
            }
        }
        w
    }

    /// Reads an answer head at the start of `buf`: the bytes it took, or `None` when it is
    /// partial (held) or the framing was lost (`w.lost`).
    fn read_head(&mut self, buf: &[u8], to_head: bool, w: &mut Written) -> Option<usize> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_ANSWER_FIELDS];
        let mut answer = httparse::Response::new(&mut fields);
        let len = match answer.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() < MAX_ANSWER_HEAD_BYTES => {
                self.head = buf.to_vec();
                return None;
            }
            _ => {
                *w = self.lose(*w);
                return None;
            }
        };
        let code = answer.code.unwrap_or(0);
        let mut length = None;
        let mut chunked = false;
        let mut close = answer.version == Some(0);
        for field in answer.headers.iter() {
            let value = std::str::from_utf8(field.value).unwrap_or("");
            if field.name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<u64>().ok();
            } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
            } else if field.name.eq_ignore_ascii_case("connection") {
                for token in value.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        close = false;
                    }
                }
            }
        }
        if code == 101 {
            // The answer is complete; what follows is the upgraded protocol.
            w.answers += 1;
            *w = self.lose(*w);
            return Some(len);
        }
        if (100..200).contains(&code) {
            return Some(len);
        }
        self.closes = close;
        if to_head || code == 204 || code == 304 {
            self.done(w);
        } else if chunked {
            self.at = At::Chunked(Chunk::SizeFirst, 0);
        } else if let Some(n) = length {
            if n == 0 {
                self.done(w);
            } else {
                self.at = At::Body(n);
            }
        } else {
            // To the close: never counted as done, so nothing after it is passed.
            *w = self.lose(*w);
        }
        Some(len)
    }

    fn done(&mut self, w: &mut Written) {
        w.answers += 1;
        w.close |= self.closes;
        self.closes = false;
        self.at = At::Head;
    }

    fn lose(&mut self, mut w: Written) -> Written {
        self.at = At::Unframed;
        self.head.clear();
        w.lost = true;
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `bytes` in pieces cut at `cuts`; the sum of what the pieces completed.
    fn run(bytes: &[u8], cuts: &[usize], to_head: bool) -> Written {
        let mut f = AnswerFramer::default();
        let mut total = Written::default();
        let mut at = 0;
        for &c in cuts.iter().chain([&bytes.len()]) {
            let w = f.wrote(&bytes[at..c], to_head);
            total.answers += w.answers;
            total.close |= w.close;
            total.lost |= w.lost;
            at = c;
        }
        total
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 15\r\ncontent-type: application/json\r\n\r\n{\"status\":\"ok\"}";
    const CLOSE: &[u8] =
        b"HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
    const CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";

    fn answers(n: u32, close: bool) -> Written {
        Written {
            answers: n,
            close,
            lost: false,
        }
    }

    #[test]
    fn answers_are_counted_at_every_split() {
        let mut all = OK.to_vec();
        all.extend_from_slice(CHUNKED);
        all.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        all.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
        all.extend_from_slice(CLOSE);
        for cut in 0..=all.len() {
            assert_eq!(run(&all, &[cut], false), answers(4, true), "cut at {cut}");
        }
        let ones: Vec<usize> = (1..all.len()).collect();
        assert_eq!(run(&all, &ones, false), answers(4, true));
        // A piece that ends before the last answer does: three done, not the fourth.
        assert_eq!(run(&all[..all.len() - 1], &[], false), answers(3, false));
    }

    #[test]
    fn a_head_request_is_answered_without_a_body() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n";
        assert_eq!(run(head, &[], true), answers(1, false));
        // The same head to a GET waits for its 15 bytes.
        assert_eq!(run(head, &[], false), answers(0, false));
    }

    #[test]
    fn http_1_0_closes_unless_kept_alive() {
        let plain = b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(run(plain, &[], false), answers(1, true));
        let kept = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(run(kept, &[], false), answers(1, false));
    }

    #[test]
    fn an_upgrade_or_a_body_to_the_close_ends_the_framing() {
        let upgrade =
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n\x81\x05hello";
        assert_eq!(
            run(upgrade, &[], false),
            Written {
                answers: 1,
                close: false,
                lost: true
            }
        );
        let to_close = b"HTTP/1.1 200 OK\r\n\r\nand so on";
        assert_eq!(
            run(to_close, &[], false),
            Written {
                answers: 0,
                close: false,
                lost: true
            }
        );
        assert!(run(b"garbage\r\n\r\n", &[], false).lost);
    }
}
