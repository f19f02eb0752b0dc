//! The byte-level front (issue 16, "an exact API contract"): the request heads actix-http's
//! HTTP/1 dispatcher would refuse itself — with an empty body, before any service runs —
//! are caught on the bytes it reads and replaced by a request the application answers, so
//! that these errors are the one envelope of [`ApiError`] (`{code, message, request_id}`)
//! like every other. docs/api.md §1.4 ("The HTTP layer") is the contract; `app::start`
//! wraps every accepted connection in a [`FrontStream`].
//!
//! Layout:
//! - [`FrontStream`]: an `AsyncRead + AsyncWrite` wrapper of the accepted stream. Writes pass
//!   unchanged; reads go through a [`Framer`].
//! - [`Framer`]: the HTTP/1 request framing of one connection, a pure state machine over the
//!   bytes read (unit tests below, including heads split at every byte position). A request
//!   head is buffered until it ends (an empty line), checked ([`check_head`]) and passed on
//!   unchanged; then its body is skipped by `Content-Length` or by chunked framing
//!   (chunk-size lines, data, trailers), so the next pipelined head is found.
//! - [`Refusal`]: why a head is refused, with its code, status and message; [`answer`] is the
//!   handler of [`BAD_REQUEST_PATH`] that answers it as an [`ApiError`].
//!
//! Rules:
//! - A head is refused exactly where actix-http 3.20's `h1::decoder` would refuse it (same
//!   `httparse` settings, same [`MAX_HEAD_FIELDS`], `http::Method` and `http::Uri` for the
//!   request line, the same header checks in the same order); anything actix accepts passes
//!   byte for byte, so the front changes no answer but the refused ones.
//! - A refused head is replaced, in the stream actix reads, by the synthetic request
//!   [`Refusal::synthetic_request`] (`GET BAD_REQUEST_PATH?reason=… HTTP/1.1`, `Connection:
//!   close`), followed by the end of the stream: the rest of the connection's bytes are never
//!   read as requests. Requests before it on the connection are passed unchanged, so their
//!   answers keep their order, and the refusal is the last answer before the close.
//! - A head not ended within [`MAX_FRONT_HEAD_BYTES`] is refused as too large (431), where
//!   actix answered an empty 431; heads under it reach the application, whose
//!   `edge::limit_head` answers 431 over `edge::MAX_REQUEST_HEAD_BYTES` with the exact size.
//! - After a websocket upgrade (`Upgrade: websocket`), a `CONNECT` without a length, or a
//!   chunked body that does not parse, the rest of the connection passes unchanged
//!   (actix reads it as a payload stream, or fails the payload and closes, as before).
//! - [`BAD_REQUEST_PATH`] is an ordinary route: a client that requests it gets the 400 (or
//!   431) of the reason it names, on a connection that stays open — nothing else, no state,
//!   no authentication involved. It is not in `/openapi.json` (not an operation of the API).
//! - Cost: one extra `httparse` pass over each head and two copies of the bytes read (into
//!   a per-connection scratch buffer of [`READ_CHUNK_BYTES`], then to actix's buffer); a
//!   partial head is held here, up to [`MAX_FRONT_HEAD_BYTES`], instead of in actix's buffer.
//!   Measured (`tests::front_cost_over_pipelined_requests`, 10,000 pipelined requests in
//!   8 KiB reads): about 0.16 µs added per 156-byte GET and 0.2 µs per 472-byte POST.
//!
//! Out of reach: the 408 actix answers (empty) when a connection's first head does not end
//! within `client_request_timeout`, and a connection closed by its keep-alive timer.

use crate::api::edge::{ACTIX_READ_BUFFER_BYTES, MAX_REQUEST_HEAD_BYTES};
use crate::api::error::ApiError;
use actix_web::http::{Method, StatusCode, Uri};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most header fields in a request head, fields: actix-http 3.20's `h1::decoder::MAX_HEADERS`
/// (not configurable); a head with more answers 431 `headers_too_large`.
pub const MAX_HEAD_FIELDS: usize = 96;

/// Largest request head the front buffers while waiting for its end, bytes: actix-http's read
/// buffer limit ([`ACTIX_READ_BUFFER_BYTES`]), where actix answered an empty 431. A head not
/// ended within it is refused as [`Refusal::HeadTooLarge`]; the bytes buffered are counted
/// from the head's first byte.
pub const MAX_FRONT_HEAD_BYTES: usize = ACTIX_READ_BUFFER_BYTES;

/// Bytes read from the socket at a time into the per-connection scratch buffer: actix-http's
/// own read step (`h1::dispatcher::HW_BUFFER_SIZE`, 8 KiB).
pub const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Most bytes of a refused connection read and discarded when actix shuts it down, bytes:
/// the client's bytes already received are taken off the socket first, so that closing it
/// does not reset the connection (an RST can discard the refusal before the client reads it).
pub const DRAIN_AFTER_REFUSAL_BYTES: usize = 256 * 1024;

/// The internal path the synthetic request of a refused head names (module docs).
pub const BAD_REQUEST_PATH: &str = "/.well-known/gpux/bad-request";

/// Why a request head is refused: each is a code of the envelope and a status (docs/api.md
/// §1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request line does not parse (method, spacing, version, line ends) — also a
    /// connection that does not speak HTTP/1.
    RequestLine,
    /// The request target has a byte outside visible ASCII (raw UTF-8 or other non-ASCII
    /// bytes, controls) or is not a URI `http::Uri` accepts.
    Target,
    /// A header field does not parse, or its value is invalid for its name (a
    /// `Content-Length` that is not a decimal number, a second `Host`).
    Header,
    /// An HTTP/1.1 request without `Host`.
    MissingHost,
    /// Two `Content-Length`s, two `Transfer-Encoding`s, or both.
    ConflictingFraming,
    /// A `Transfer-Encoding` other than `chunked` (or any on HTTP/1.0), or an HTTP/1.0 `POST`
    /// without `Content-Length`.
    BadFraming,
    /// More than [`MAX_HEAD_FIELDS`] header fields.
    TooManyHeaders,
    /// A head not ended within [`MAX_FRONT_HEAD_BYTES`].
    HeadTooLarge,
}

impl Refusal {
    /// Every refusal.
    pub const ALL: [Refusal; 8] = [
        Refusal::RequestLine,
        Refusal::Target,
        Refusal::Header,
        Refusal::MissingHost,
        Refusal::ConflictingFraming,
        Refusal::BadFraming,
        Refusal::TooManyHeaders,
        Refusal::HeadTooLarge,
    ];

    /// The `reason` of the synthetic request, one per refusal.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::RequestLine => "request_line",
            Refusal::Target => "target",
            Refusal::Header => "header",
            Refusal::MissingHost => "missing_host",
            Refusal::ConflictingFraming => "conflicting_framing",
            Refusal::BadFraming => "bad_framing",
            Refusal::TooManyHeaders => "too_many_headers",
            Refusal::HeadTooLarge => "head_too_large",
        }
    }

    /// The refusal a `reason` names.
    pub fn from_reason(reason: &str) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|r| r.reason() == reason)
    }

    /// The envelope's code.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::RequestLine => "bad_request_line",
            Refusal::Target => "bad_request_target",
            Refusal::Header => "bad_header",
            Refusal::MissingHost => "missing_host",
            Refusal::ConflictingFraming => "conflicting_framing",
            Refusal::BadFraming => "bad_framing",
            Refusal::TooManyHeaders | Refusal::HeadTooLarge => "headers_too_large",
        }
    }

    /// 431 for heads too large, 400 otherwise.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::TooManyHeaders | Refusal::HeadTooLarge => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// What the client should fix.
    pub fn message(self) -> String {
        match self {
            Refusal::RequestLine => "the request line does not parse: send `METHOD /target \
                 HTTP/1.1` with a token method, one space each side of the target, CRLF line ends"
                .into(),
            Refusal::Target => "the request target has bytes outside visible ASCII or is not \
                 a URI: percent-encode them (e.g. `%C3%A9` for `é`)"
                .into(),
            Refusal::Header => "a header field does not parse or has an invalid value (a \
                 Content-Length that is not a decimal number, a second Host)"
                .into(),
            Refusal::MissingHost => "an HTTP/1.1 request needs a Host header".into(),
            Refusal::ConflictingFraming => "the body's length is given twice: send one \
                 Content-Length or one Transfer-Encoding: chunked, not both"
                .into(),
            Refusal::BadFraming => "the body's framing is not supported: use Content-Length \
                 or, on HTTP/1.1, Transfer-Encoding: chunked (an HTTP/1.0 POST needs \
                 Content-Length)"
                .into(),
            Refusal::TooManyHeaders => {
                format!("the request head has more than {MAX_HEAD_FIELDS} header fields")
            }
            Refusal::HeadTooLarge => format!(
                "the request head does not end within {MAX_FRONT_HEAD_BYTES} bytes; at most \
                 {MAX_REQUEST_HEAD_BYTES} are accepted"
            ),
        }
    }

    /// The answer: this refusal as an [`ApiError`].
    pub fn to_error(self) -> ApiError {
        ApiError::new(self.status(), self.code(), self.message())
    }

    /// The well-formed request that stands in for the refused head.
    pub fn synthetic_request(self) -> Vec<u8> {
        format!(
            "GET {BAD_REQUEST_PATH}?reason={} HTTP/1.1\r\nHost: gpux\r\nConnection: close\r\n\r\n",
            self.reason()
        )
        .into_bytes()
    }
}

/// The handler of [`BAD_REQUEST_PATH`]: the refusal its `reason` names as an [`ApiError`]
/// answer (400 `bad_request` for an unknown reason: a client's own request).
pub async fn answer(req: HttpRequest) -> HttpResponse {
    let reason = req
        .query_string()
        .split('&')
        .find_map(|pair| pair.strip_prefix("reason="))
        .unwrap_or("");
    let e = Refusal::from_reason(reason).map_or_else(
        || {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "this path answers refused request heads only",
            )
        },
        Refusal::to_error,
    );
    e.error_response()
}

/// Registers [`answer`] at [`BAD_REQUEST_PATH`] (GET only).
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(crate::server::resource(BAD_REQUEST_PATH).route(web::get().to(answer)));
}

/// The verdict on the bytes at the start of a head.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadCheck {
    /// The head has not ended yet.
    Partial,
    /// A head actix accepts, of `len` bytes, followed by a body framed as `next` says.
    Complete {
        /// Bytes of the head, its final empty line included.
        len: usize,
        /// What follows the head.
        next: Next,
    },
    /// A head actix would refuse.
    Refused(Refusal),
}

/// What follows an accepted head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Another head (no body).
    Head,
    /// A body of this many bytes, then a head.
    Body(u64),
    /// A chunked body, then a head.
    Chunked,
    /// The rest of the connection (websocket upgrade, `CONNECT`).
    Opaque,
}

/// Checks the head at the start of `buf` as actix-http 3.20's `h1::decoder` does
/// (`MessageType::decode` for `Request`, `set_headers`), in the same order.
pub fn check_head(buf: &[u8]) -> HeadCheck {
    // Uninitialized slots, as actix parses (no 3 KiB of empty fields written per head).
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEAD_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_FRONT_HEAD_BYTES => {
            return HeadCheck::Refused(Refusal::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return HeadCheck::Partial,
        Err(e) => return HeadCheck::Refused(parse_refusal(e, buf)),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return HeadCheck::Refused(Refusal::RequestLine);
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return HeadCheck::Refused(Refusal::RequestLine);
    };
    if Uri::try_from(target.as_bytes()).is_err() {
        return HeadCheck::Refused(Refusal::Target);
    }
    match framing(&method, version == 1, req.headers) {
        Ok(next) => HeadCheck::Complete { len, next },
        Err(r) => HeadCheck::Refused(r),
    }
}

/// The refusal for an `httparse` error. A token error after a valid method and a space, with
/// a byte outside visible ASCII in the target (up to the next space or line end), is in the
/// target: httparse refuses non-UTF-8 and control bytes there.
fn parse_refusal(e: httparse::Error, buf: &[u8]) -> Refusal {
    match e {
        httparse::Error::TooManyHeaders => Refusal::TooManyHeaders,
        httparse::Error::HeaderName | httparse::Error::HeaderValue => Refusal::Header,
        httparse::Error::Token => {
            let line = buf.trim_ascii_start();
            let Some(sp) = line.iter().position(|&b| b == b' ') else {
                return Refusal::RequestLine;
            };
            let target = line[sp + 1..]
                .split(|&b| matches!(b, b' ' | b'\r' | b'\n'))
                .next()
                .unwrap_or_default();
            let method_ok = sp > 0 && Method::from_bytes(&line[..sp]).is_ok();
            if method_ok && target.iter().any(|b| !(b'!'..=b'~').contains(b)) {
                Refusal::Target
            } else {
                Refusal::RequestLine
            }
        }
        _ => Refusal::RequestLine,
    }
}

/// A header value as actix's `HeaderValue::to_str` sees it: visible ASCII, spaces and tabs.
fn value_str(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// What a head's fields say about its body, as actix's `set_headers` reads them.
#[derive(Default)]
struct Fields<'a> {
    content_length: Option<u64>,
    chunked: bool,
    host: bool,
    upgrade_websocket: bool,
    /// The first `Transfer-Encoding` value (any version).
    first_te: Option<&'a [u8]>,
}

/// Reads the fields in order, refusing where actix's `set_headers` refuses.
fn scan_fields<'a>(fields: &[httparse::Header<'a>], http11: bool) -> Result<Fields<'a>, Refusal> {
    let mut f = Fields::default();
    let mut seen_te = false;
    for field in fields {
        let (name, value) = (field.name, field.value);
        if name.eq_ignore_ascii_case("content-length") {
            if f.content_length.is_some() {
                return Err(Refusal::ConflictingFraming);
            }
            let v = value_str(value).ok_or(Refusal::Header)?.trim();
            if v.starts_with('+') {
                return Err(Refusal::Header);
            }
            f.content_length = Some(v.parse::<u64>().map_err(|_| Refusal::Header)?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            f.first_te.get_or_insert(value);
            if seen_te {
                return Err(Refusal::ConflictingFraming);
            }
            if http11 {
                seen_te = true;
                let v = value_str(value).ok_or(Refusal::Header)?.trim();
                if v.eq_ignore_ascii_case("chunked") {
                    f.chunked = true;
                } else if !v.eq_ignore_ascii_case("identity") {
                    return Err(Refusal::BadFraming);
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            if f.host {
                return Err(Refusal::Header);
            }
            f.host = true;
        } else if name.eq_ignore_ascii_case("upgrade") {
            f.upgrade_websocket |=
                value_str(value).is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
        }
    }
    Ok(f)
}

/// The body framing of an accepted request line with these fields, or why actix refuses them
/// (`MessageType::decode` after `set_headers`).
fn framing(
    method: &Method,
    http11: bool,
    fields: &[httparse::Header<'_>],
) -> Result<Next, Refusal> {
    let f = scan_fields(fields, http11)?;
    if http11 && !f.host {
        return Err(Refusal::MissingHost);
    }
    if let Some(te) = f.first_te {
        if !http11 {
            return Err(Refusal::BadFraming);
        }
        let te = value_str(te).ok_or(Refusal::Header)?;
        let last_is_chunked = te
            .rsplit(',')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
        if !last_is_chunked {
            return Err(Refusal::BadFraming);
        }
        if f.content_length.is_some() {
            return Err(Refusal::ConflictingFraming);
        }
    }
    let length_none = !f.chunked && !f.upgrade_websocket && f.content_length.is_none();
    if !http11 && method == Method::POST && length_none {
        return Err(Refusal::BadFraming);
    }
    Ok(if f.chunked {
        Next::Chunked
    } else if f.upgrade_websocket {
        Next::Opaque
    } else if let Some(len) = f.content_length.filter(|&l| l > 0) {
        Next::Body(len)
    } else if method == Method::CONNECT {
        Next::Opaque
    } else {
        Next::Head
    })
}

/// Where a chunked body's parser stands (actix-http 3.20's `h1::chunked::ChunkedState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    SizeFirst,
    SizeRest,
    SizeLws,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
}

/// Where a connection's framing stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// At (or inside) a request head; a partial head is held in [`Framer::head`].
    Head,
    /// Inside a body of known length, this many bytes to go.
    Body(u64),
    /// Inside a chunked body; `size` is the chunk size read, or the data left in the chunk.
    Chunked { at: Chunk, size: u64 },
    /// Everything else passes unchanged.
    Opaque,
    /// A head was refused: nothing more is passed.
    Refused,
}

/// The HTTP/1 request framing of one connection (module docs): fed the bytes read, it
/// appends what actix should read.
#[derive(Debug)]
pub struct Framer {
    state: State,
    /// The partial head, from its first byte.
    head: Vec<u8>,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            state: State::Head,
            head: Vec::new(),
        }
    }
}

impl Framer {
    /// Whether a head was refused: the synthetic request was appended, and the stream ends.
    pub fn is_refused(&self) -> bool {
        self.state == State::Refused
    }

    /// Whether everything from here on passes unchanged (after an upgrade).
    pub fn is_opaque(&self) -> bool {
        self.state == State::Opaque
    }

    /// Bytes of a partial head held back.
    pub fn held_bytes(&self) -> usize {
        self.head.len()
    }

    /// Feeds the next bytes read; appends to `out` what actix should read of them.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.head.is_empty() {
            self.process(input, out);
        } else {
            let mut joined = std::mem::take(&mut self.head);
            joined.extend_from_slice(input);
            self.process(&joined, out);
        }
    }

    fn process(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            match self.state {
                State::Refused => return,
                State::Opaque => {
                    out.extend_from_slice(rest);
                    return;
                }
                State::Body(left) => {
                    let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    out.extend_from_slice(&rest[..n]);
                    pos += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Body(left)
                    };
                }
                State::Chunked { at, size } => {
                    let (used, state) = chunked(at, size, rest);
                    out.extend_from_slice(&rest[..used]);
                    pos += used;
                    self.state = state;
                }
                State::Head => match check_head(rest) {
                    HeadCheck::Partial => {
                        self.head = rest.to_vec();
                        return;
                    }
                    HeadCheck::Complete { len, next } => {
                        out.extend_from_slice(&rest[..len]);
                        pos += len;
                        self.state = match next {
                            Next::Head => State::Head,
                            Next::Body(n) => State::Body(n),
                            Next::Chunked => State::Chunked {
                                at: Chunk::SizeFirst,
                                size: 0,
                            },
                            Next::Opaque => State::Opaque,
                        };
                    }
                    HeadCheck::Refused(r) => {
                        out.extend_from_slice(&r.synthetic_request());
                        self.state = State::Refused;
                        return;
                    }
                },
            }
        }
    }
}

/// Runs the chunked-body parser over `input` from `at` (with `size`): the bytes that belong
/// to the body and the state after them (`Head` at its end, `Opaque` where actix's parser
/// would fail — the payload error is then actix's, as before).
fn chunked(mut at: Chunk, mut size: u64, input: &[u8]) -> (usize, State) {
    let hex = |b: u8| (b as char).to_digit(16).map(u64::from);
    let mut pos = 0;
    while pos < input.len() {
        if at == Chunk::Data {
            let n = usize::try_from(size).map_or(input.len() - pos, |s| s.min(input.len() - pos));
            pos += n;
            size -= n as u64;
            if size == 0 {
                at = Chunk::DataCr;
            }
            continue;
        }
        let b = input[pos];
        pos += 1;
        let next = match (at, b) {
            (Chunk::SizeFirst, b) => hex(b).map(|d| {
                size = d;
                Chunk::SizeRest
            }),
            (Chunk::SizeRest, b'\t' | b' ') => Some(Chunk::SizeLws),
            (Chunk::SizeRest | Chunk::SizeLws, b';') => Some(Chunk::Extension),
            (Chunk::SizeRest | Chunk::SizeLws | Chunk::Extension, b'\r') => Some(Chunk::SizeLf),
            (Chunk::SizeRest, b) => hex(b).and_then(|d| {
                size = size.checked_mul(16)?.checked_add(d)?;
                Some(Chunk::SizeRest)
            }),
            (Chunk::SizeLws, b'\t' | b' ') => Some(Chunk::SizeLws),
            (Chunk::Extension, 0x00..=0x08 | 0x0a..=0x1f | 0x7f) => None,
            (Chunk::Extension, _) => Some(Chunk::Extension),
            (Chunk::SizeLf, b'\n') if size > 0 => Some(Chunk::Data),
            (Chunk::SizeLf, b'\n') => Some(Chunk::EndCr),
            (Chunk::DataCr, b'\r') => Some(Chunk::DataLf),
            (Chunk::DataLf, b'\n') => Some(Chunk::SizeFirst),
            (Chunk::Trailer, b'\r') => Some(Chunk::TrailerLf),
            (Chunk::Trailer, _) => Some(Chunk::Trailer),
            (Chunk::TrailerLf, b'\n') => Some(Chunk::EndCr),
            (Chunk::EndCr, b'\r') => Some(Chunk::EndLf),
            (Chunk::EndCr, _) => Some(Chunk::Trailer),
            (Chunk::EndLf, b'\n') => return (pos, State::Head),
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return (input.len(), State::Opaque),
        }
    }
    (pos, State::Chunked { at, size })
}

/// An accepted connection as actix-http reads it: the bytes read go through a [`Framer`]
/// (module docs); writes pass unchanged.
#[derive(Debug)]
pub struct FrontStream<S> {
    inner: S,
    framer: Framer,
    /// Bytes for actix not yet read, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// The read scratch buffer ([`READ_CHUNK_BYTES`]), allocated on the first read.
    scratch: Vec<u8>,
    /// The socket's end was read.
    eof: bool,
}

impl<S> FrontStream<S> {
    /// Wraps an accepted stream.
    pub fn new(inner: S) -> Self {
        FrontStream {
            inner,
            framer: Framer::default(),
            out: Vec::new(),
            out_at: 0,
            scratch: Vec::new(),
            eof: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrontStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof || this.framer.is_refused() || buf.remaining() == 0 {
                // The end (a refusal ends the stream after its synthetic request).
                return Poll::Ready(Ok(()));
            }
            if this.framer.is_opaque() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.scratch.is_empty() {
                this.scratch = vec![0; READ_CHUNK_BYTES];
            }
            let want = buf.remaining().min(READ_CHUNK_BYTES);
            let mut rb = ReadBuf::new(&mut this.scratch[..want]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                // A partial head at the end is dropped: nothing could answer it.
                this.eof = true;
                continue;
            }
            this.framer.feed(&this.scratch[..n], &mut this.out);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for FrontStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    /// After a refusal, first takes the client's bytes already received off the socket (up to
    /// [`DRAIN_AFTER_REFUSAL_BYTES`], without waiting), then shuts the stream down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.framer.is_refused() && !this.eof {
            let mut drained = 0;
            if this.scratch.is_empty() {
                this.scratch = vec![0; READ_CHUNK_BYTES];
            }
            while drained < DRAIN_AFTER_REFUSAL_BYTES {
                let mut rb = ReadBuf::new(&mut this.scratch);
                match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) if !rb.filled().is_empty() => drained += rb.filled().len(),
                    _ => break,
                }
            }
            this.eof = true;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces cut at `cuts` and answers what actix reads and whether the
    /// stream was refused.
    fn run(input: &[u8], cuts: &[usize]) -> (Vec<u8>, bool) {
        let mut f = Framer::default();
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([&input.len()]) {
            f.feed(&input[at..c], &mut out);
            at = c;
        }
        (out, f.is_refused())
    }

    fn check(input: &[u8]) -> HeadCheck {
        check_head(input)
    }

    const GET: &[u8] = b"GET /v1/catalog HTTP/1.1\r\nHost: a\r\n\r\n";
    const CHUNKED_POST: &[u8] = b"POST /internal/ops HTTP/1.1\r\nHost: a\r\n\
        Transfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n10\r\n0123456789abcdef\r\n0\r\n\
        Trailer-A: x\r\n\r\n";
    const LENGTH_POST: &[u8] =
        b"POST /internal/ops HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nGET /";

    #[test]
    fn good_heads_and_bodies_pass_unchanged_at_every_split() {
        let mut input = Vec::new();
        for part in [GET, CHUNKED_POST, LENGTH_POST, b"\r\n\r\n", GET] {
            input.extend_from_slice(part);
        }
        for cut in 0..=input.len() {
            assert_eq!(run(&input, &[cut]), (input.clone(), false), "cut at {cut}");
        }
        // Every byte on its own.
        let ones: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(&input, &ones), (input.clone(), false));
        // The framer is at a head after all of it: a refusal after it is found.
        let mut bad = input.clone();
        bad.extend_from_slice(b"HELLO\r\n\r\n");
        let mut want = input.clone();
        want.extend_from_slice(&Refusal::RequestLine.synthetic_request());
        for cut in 0..=bad.len() {
            assert_eq!(run(&bad, &[cut]), (want.clone(), true), "cut at {cut}");
        }
    }

    #[test]
    fn a_refused_head_is_replaced_and_ends_the_stream() {
        let mut input = GET.to_vec();
        input.extend_from_slice(b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: a\r\n\r\n");
        input.extend_from_slice(GET);
        let mut want = GET.to_vec();
        want.extend_from_slice(&Refusal::Target.synthetic_request());
        for cut in 0..=input.len() {
            assert_eq!(run(&input, &[cut]), (want.clone(), true), "cut at {cut}");
        }
    }

    #[test]
    fn heads_are_refused_where_actix_refuses_them() {
        let cases: &[(&[u8], Refusal)] = &[
            (b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: a\r\n\r\n", Refusal::Target),
            ("GET /caf\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n".as_bytes(), Refusal::Target),
            (b"GET /a<b HTTP/1.1\r\nHost: a\r\n\r\n", Refusal::Target),
            (b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", Refusal::Target),
            (b"GET  /a HTTP/1.1\r\nHost: a\r\n\r\n", Refusal::RequestLine),
            (b"HELLO THERE\r\n\r\n", Refusal::RequestLine),
            (b"\x16\x03\x01\x02\x00\x01\x00", Refusal::RequestLine),
            (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", Refusal::RequestLine),
            (b"GET / HTTP/1.1\r\nBad Name: a\r\n\r\n", Refusal::Header),
            (b"GET / HTTP/1.1\r\n\r\n", Refusal::MissingHost),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Refusal::Header),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::ConflictingFraming,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                Refusal::ConflictingFraming,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::ConflictingFraming,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
                Refusal::Header,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
                Refusal::Header,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
                Refusal::BadFraming,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
                Refusal::BadFraming,
            ),
            (
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::BadFraming,
            ),
            (b"POST / HTTP/1.0\r\n\r\n", Refusal::BadFraming),
        ];
        for (head, want) in cases {
            assert_eq!(
                check(head),
                HeadCheck::Refused(*want),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..MAX_HEAD_FIELDS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(check(&many), HeadCheck::Refused(Refusal::TooManyHeaders));
    }

    #[test]
    fn accepted_heads_say_what_follows() {
        let cases: &[(&[u8], Next)] = &[
            (GET, Next::Head),
            (b"GET / HTTP/1.0\r\n\r\n", Next::Head),
            (b"POST / HTTP/1.0\r\nContent-Length: 0\r\n\r\n", Next::Head),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", Next::Head),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  12 \r\n\r\n", Next::Body(12)),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: Chunked\r\n\r\n",
                Next::Chunked,
            ),
            (
                b"GET /v1/ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
                Next::Opaque,
            ),
            (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", Next::Opaque),
            (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", Next::Head),
            (b"GET / HTTP/1.1\nHost: a\n\n", Next::Head),
        ];
        for (head, want) in cases {
            assert_eq!(
                check(head),
                HeadCheck::Complete {
                    len: head.len(),
                    next: *want
                },
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn a_head_that_does_not_end_is_refused_at_the_limit() {
        let mut head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ".to_vec();
        head.resize(MAX_FRONT_HEAD_BYTES - 1, b'p');
        assert_eq!(check(&head), HeadCheck::Partial);
        let (out, refused) = run(&head, &[1000, 70_000]);
        assert_eq!((out.len(), refused), (0, false));
        head.push(b'p');
        let (out, refused) = run(&head, &[1000, 70_000]);
        assert_eq!(out, Refusal::HeadTooLarge.synthetic_request());
        assert!(refused);
        // A complete head one byte under the limit passes.
        let mut head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ".to_vec();
        head.resize(MAX_FRONT_HEAD_BYTES - 1 - 4, b'p');
        head.extend_from_slice(b"\r\n\r\n");
        assert_eq!(run(&head, &[1000, 70_000]), (head.clone(), false));
    }

    #[test]
    fn chunked_framing_matches_actix() {
        // A malformed chunk-size line: the rest passes (actix fails the payload itself).
        let mut input =
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        input.extend_from_slice(b"zz\r\n");
        input.extend_from_slice(b"HELLO\r\n\r\n");
        for cut in 0..=input.len() {
            let (out, refused) = run(&input, &[cut]);
            assert_eq!((out, refused), (input.clone(), false), "cut at {cut}");
        }
        // Size, LWS, extension, trailers.
        let body = b"5 ;a=b\r\nhello\r\n0\r\nX: y\r\nZ: w\r\n\r\n";
        let (used, state) = chunked(Chunk::SizeFirst, 0, body);
        assert_eq!((used, state), (body.len(), State::Head));
        // An overflowing size.
        let (_, state) = chunked(Chunk::SizeFirst, 0, b"11111111111111111\r\n");
        assert_eq!(state, State::Opaque);
    }

    #[test]
    fn every_refusal_has_its_own_reason_and_a_well_formed_request() {
        for r in Refusal::ALL {
            assert_eq!(Refusal::from_reason(r.reason()), Some(r));
            let req = r.synthetic_request();
            assert!(matches!(
                check(&req),
                HeadCheck::Complete { len, next: Next::Head } if len == req.len()
            ));
            assert!(!r.message().is_empty());
        }
        assert_eq!(Refusal::from_reason("nope"), None);
    }

    #[tokio::test]
    async fn the_stream_passes_good_requests_then_the_refusal_then_ends() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64);
        let mut input = GET.to_vec();
        input.extend_from_slice(CHUNKED_POST);
        input.extend_from_slice(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let writer = tokio::spawn({
            let input = input.clone();
            async move {
                for piece in input.chunks(7) {
                    client.write_all(piece).await.expect("write");
                }
                client
            }
        });
        let mut front = FrontStream::new(server);
        let mut read = Vec::new();
        front.read_to_end(&mut read).await.expect("read");
        let mut want = GET.to_vec();
        want.extend_from_slice(CHUNKED_POST);
        want.extend_from_slice(&Refusal::MissingHost.synthetic_request());
        assert_eq!(read, want);
        drop(writer);
    }

    /// Reads `input` to its end in reads of at most [`READ_CHUNK_BYTES`] (actix's read step);
    /// answers the time taken.
    async fn drain<R: AsyncRead + Unpin>(mut r: R, len: usize) -> std::time::Duration {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        let started = std::time::Instant::now();
        let mut total = 0;
        loop {
            let n = r.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            total += n;
            std::hint::black_box(&buf);
        }
        assert_eq!(total, len);
        started.elapsed()
    }

    /// The front's cost (issue 16): 10,000 pipelined requests read through a [`FrontStream`]
    /// and straight from the same bytes, alternating, 11 rounds each; prints the
    /// median and spread per request. Run by hand:
    /// `cargo test --release -p gateway --lib front::tests::front_cost -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "a measurement, run by hand"]
    async fn front_cost_over_pipelined_requests() {
        const REQUESTS: usize = 10_000;
        const ROUNDS: usize = 11;
        let get = "GET /v1/catalog HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\
                   User-Agent: gpux-pipeline-test\r\nAccept: */*\r\n\
                   Authorization: Bearer gpux_0123456789abcdef0123456789abcdef\r\n\r\n";
        let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(300));
        let post = format!(
            "POST /v1/bids HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n\
             Authorization: Bearer gpux_0123456789abcdef0123456789abcdef\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for (what, one) in [("GET", get.to_string()), ("POST 313 B", post)] {
            let input = one.repeat(REQUESTS).into_bytes();
            let mut plain = Vec::new();
            let mut front = Vec::new();
            for _ in 0..ROUNDS {
                plain.push(drain(&input[..], input.len()).await);
                front.push(drain(FrontStream::new(&input[..]), input.len()).await);
            }
            plain.sort();
            front.sort();
            let per = |d: std::time::Duration| d.as_nanos() as f64 / REQUESTS as f64;
            println!(
                "{what} ({} B a request): plain median {:.0} ns/request (min {:.0}, max {:.0}); \
                 front median {:.0} ns/request (min {:.0}, max {:.0}); added {:.0} ns/request",
                one.len(),
                per(plain[ROUNDS / 2]),
                per(plain[0]),
                per(plain[ROUNDS - 1]),
                per(front[ROUNDS / 2]),
                per(front[0]),
                per(front[ROUNDS - 1]),
                per(front[ROUNDS / 2]) - per(plain[ROUNDS / 2]),
            );
        }
    }
}
