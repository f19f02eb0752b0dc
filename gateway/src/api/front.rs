//! The byte-level front (issue 16, "an exact API contract"): the request heads actix-http's
//! HTTP/1 dispatcher would refuse itself — with an empty body, before any service runs —
//! are caught on the bytes it reads and replaced by a request the application answers, so
//! that these errors are the one envelope of [`ApiError`] (`{code, message, request_id}`)
//! like every other. docs/api.md §1.4 ("The HTTP layer") is the contract; `app::start`
//! wraps every accepted connection in a [`FrontStream`].
//!
//! Layout:
//! - [`FrontStream`] (`api::front_stream`): the `AsyncRead + AsyncWrite` wrapper of an
//!   accepted stream: reads go through a [`Framer`], writes through an
//!   `api::answer_framing::AnswerFramer` that tells the framer when each answer is done; it
//!   also keeps the connection's deadlines.
//! - [`Framer`]: the HTTP/1 request framing of one connection, a pure state machine over the
//!   bytes read (unit tests below, including heads split at every byte position). A request
//!   head is buffered until it ends (an empty line), checked ([`check_head`]) and passed on
//!   unchanged; then its body is skipped by `Content-Length` or by chunked framing
//!   (chunk-size lines, data, trailers), so the next pipelined head is found. Gated, it
//!   passes the next head only after the answer to the one before ([`Framer`]'s docs say
//!   why: actix-http encodes an answer with the *last decoded* request's version, `HEAD`-ness
//!   and keep-alive).
//! - [`Refusal`]: why a head is refused, with its code, status and message; [`answer`] is the
//!   handler of [`BAD_REQUEST_PATH`] that answers it as an [`ApiError`].
//!
//! Rules:
//! - A head is refused exactly where actix-http 3.20's `h1::decoder` would refuse it (same
//!   `httparse` settings, same [`MAX_HEAD_FIELDS`], `http::Method` and `http::Uri` for the
//!   request line, the same header checks in the same order), and where actix would accept
//!   what no request may say: a `#fragment` in the target, a websocket upgrade that announces
//!   a body. Anything else passes byte for byte.
//! - A refused head is replaced, in the stream actix reads, by the synthetic request
//!   [`Refusal::synthetic_request`] (`GET BAD_REQUEST_PATH?reason=… HTTP/1.1`, `Connection:
//!   close`), followed by the end of the stream: the rest of the connection's bytes are never
//!   read as requests. Requests before it on the connection are answered first, in order,
//!   each as its own request says, and the refusal is the last answer before the close.
//! - A head not ended within [`MAX_FRONT_HEAD_BYTES`] is refused as too large (431), where
//!   actix answered an empty 431; heads under it reach the application, whose
//!   `edge::limit_head` answers 431 over `edge::MAX_REQUEST_HEAD_BYTES` with the exact size.
//!   A first head not ended within `front_stream::FIRST_HEAD_TIMEOUT_MS` is refused 408
//!   `request_timeout`, where actix answered an empty 408.
//! - After a websocket upgrade (`Upgrade: websocket`), a `CONNECT` without a length, or a
//!   chunked body that does not parse, the rest of the connection passes unchanged
//!   (actix reads it as a payload stream, or fails the payload — the application answers
//!   400 `bad_body` — and closes).
//! - [`BAD_REQUEST_PATH`] is an ordinary route: a client that requests it gets the 400 (or
//!   431, 408) of the reason it names, on a connection that stays open — nothing else, no
//!   state, no authentication involved. It is not in `/openapi.json` (not an operation of
//!   the API).
//! - Cost: one extra `httparse` pass over each head and two copies of the bytes read (into
//!   a per-connection scratch buffer, then to actix's buffer); a partial head is held here,
//!   up to [`MAX_FRONT_HEAD_BYTES`], instead of in actix's buffer. Measured
//!   (`front_stream::tests::front_cost_over_pipelined_requests`, 10,000 pipelined requests
//!   in 8 KiB reads): about 0.16 µs added per 156-byte GET and 0.2 µs per 472-byte POST.
//!
//! Out of reach: a connection closed by actix's keep-alive timer gets no answer (nothing was
//! asked).

use crate::api::edge::{ACTIX_READ_BUFFER_BYTES, MAX_REQUEST_HEAD_BYTES};
use crate::api::error::ApiError;
pub use crate::api::front_stream::FrontStream;
use actix_web::http::{Method, StatusCode, Uri};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};

/// Most header fields in a request head, fields: actix-http 3.20's `h1::decoder::MAX_HEADERS`
/// (not configurable); a head with more answers 431 `headers_too_large`.
pub const MAX_HEAD_FIELDS: usize = 96;

/// Largest request head the front buffers while waiting for its end, bytes: actix-http's read
/// buffer limit ([`ACTIX_READ_BUFFER_BYTES`]), where actix answered an empty 431. A head not
/// ended within it is refused as [`Refusal::HeadTooLarge`]; the bytes buffered are counted
/// from the head's first byte.
pub const MAX_FRONT_HEAD_BYTES: usize = ACTIX_READ_BUFFER_BYTES;

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
    /// A request head not ended within
    /// [`front_stream::FIRST_HEAD_TIMEOUT_MS`](crate::api::front_stream::FIRST_HEAD_TIMEOUT_MS)
    /// of the connection's accept (the first; actix answered an empty 408 at
    /// `client_request_timeout`) or of its own first byte (a later one).
    Timeout,
    /// A websocket upgrade that also announces a body (`Content-Length` or
    /// `Transfer-Encoding`): the bytes after the head are websocket frames, not a body.
    UpgradeWithBody,
}

impl Refusal {
    /// Every refusal.
    pub const ALL: [Refusal; 10] = [
        Refusal::RequestLine,
        Refusal::Target,
        Refusal::Header,
        Refusal::MissingHost,
        Refusal::ConflictingFraming,
        Refusal::BadFraming,
        Refusal::TooManyHeaders,
        Refusal::HeadTooLarge,
        Refusal::Timeout,
        Refusal::UpgradeWithBody,
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
            Refusal::Timeout => "timeout",
            Refusal::UpgradeWithBody => "upgrade_with_body",
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
            Refusal::BadFraming | Refusal::UpgradeWithBody => "bad_framing",
            Refusal::TooManyHeaders | Refusal::HeadTooLarge => "headers_too_large",
            Refusal::Timeout => "request_timeout",
        }
    }

    /// 431 for heads too large, 408 for a head too slow, 400 otherwise.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::TooManyHeaders | Refusal::HeadTooLarge => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            Refusal::Timeout => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// What the client should fix.
    pub fn message(self) -> String {
        match self {
            Refusal::RequestLine => "the request line does not parse: send `METHOD /target \
                 HTTP/1.1` with a token method, one space each side of the target, CRLF line ends"
                .into(),
            Refusal::Target => "the request target has bytes outside visible ASCII, a \
                 `#fragment`, or is not a URI: percent-encode them (e.g. `%C3%A9` for `é`)"
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
            Refusal::Timeout => format!(
                "the request head did not arrive in full within {} ms (of connecting, or of \
                 its first byte); send the whole head at once",
                crate::api::front_stream::FIRST_HEAD_TIMEOUT_MS
            ),
            Refusal::UpgradeWithBody => "a websocket upgrade has no body: send it without \
                 Content-Length and Transfer-Encoding"
                .into(),
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
    // A `#fragment` is no part of any request-target form (RFC 9112 §3.2); http::Uri would
    // accept it.
    if target.contains('#') || Uri::try_from(target.as_bytes()).is_err() {
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
    if f.upgrade_websocket && (f.chunked || f.content_length.is_some_and(|l| l > 0)) {
        return Err(Refusal::UpgradeWithBody);
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
pub(crate) enum Chunk {
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// At (or inside) a request head; a partial head is held in [`Framer::held`].
    #[default]
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
///
/// Gated ([`Framer::gated`], as [`FrontStream`] runs it): a request head is passed only once
/// every request before it has been answered ([`Framer::answered`]); the bytes after the
/// current request wait here. actix-http 3.20's `h1::Codec` keeps one request's version,
/// `HEAD`-ness and keep-alive for encoding the next response, set when it *decodes* a
/// request: with several pipelined requests decoded before the first answer, every answer
/// took the last request's (a pipelined `HEAD` answered with a body, `Connection: close`
/// ignored, HTTP/1.0 answered as HTTP/1.1). One request at a time keeps each answer its own.
#[derive(Debug, Default)]
pub struct Framer {
    state: State,
    /// Bytes not yet passed, from `held_at`: a partial head, or (gated) the requests after
    /// the one being answered.
    held: Vec<u8>,
    held_at: usize,
    /// One request at a time.
    gated: bool,
    /// Request heads passed, and answers seen.
    passed: u64,
    answered: u64,
    /// The last head passed was a `HEAD` request (its answer has no body).
    last_was_head: bool,
}

impl Framer {
    /// A framer that passes one request at a time (type docs).
    pub fn gated() -> Self {
        Framer {
            gated: true,
            ..Framer::default()
        }
    }

    /// Whether a head was refused: the synthetic request was appended, and the stream ends.
    pub fn is_refused(&self) -> bool {
        self.state == State::Refused
    }

    /// Whether everything from here on passes unchanged (after an upgrade).
    pub fn is_opaque(&self) -> bool {
        self.state == State::Opaque
    }

    /// Bytes held back: a partial head, or requests waiting for the answer before them.
    pub fn held_bytes(&self) -> usize {
        self.held.len() - self.held_at
    }

    /// Request heads passed so far (the synthetic request of a refusal included).
    pub fn passed(&self) -> u64 {
        self.passed
    }

    /// Whether the framer is inside a passed request's body.
    pub fn in_body(&self) -> bool {
        matches!(self.state, State::Body(_) | State::Chunked { .. })
    }

    /// Whether a passed request still waits for its answer (gated: the next head waits).
    pub fn awaits_answer(&self) -> bool {
        self.gated && self.passed > self.answered
    }

    /// Whether the last head passed was a `HEAD` request.
    pub fn last_was_head(&self) -> bool {
        self.last_was_head
    }

    /// Feeds the next bytes read; appends to `out` what actix should read of them.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.held_bytes() == 0 {
            self.held.clear();
            self.held_at = 0;
            let used = self.process(input, out);
            self.held.extend_from_slice(&input[used..]);
        } else {
            self.held.extend_from_slice(input);
            self.run_held(out);
        }
    }

    /// One answer was written (gated: the next request may pass); appends to `out` what
    /// actix should read now.
    pub fn answered(&mut self, out: &mut Vec<u8>) {
        self.answered += 1;
        if self.held_bytes() > 0 {
            self.run_held(out);
        }
    }

    /// Stops pacing (the answers can no longer be told apart): appends to `out` what was
    /// held for the answer before it.
    pub fn ungate(&mut self, out: &mut Vec<u8>) {
        self.gated = false;
        if self.held_bytes() > 0 {
            self.run_held(out);
        }
    }

    /// Refuses the connection now (a head that did not arrive in time): appends the
    /// synthetic request of `r`, and the stream ends.
    pub fn refuse(&mut self, r: Refusal, out: &mut Vec<u8>) {
        out.extend_from_slice(&r.synthetic_request());
        self.passed += 1;
        self.last_was_head = false;
        self.state = State::Refused;
        self.held.clear();
        self.held_at = 0;
    }

    fn run_held(&mut self, out: &mut Vec<u8>) {
        let held = std::mem::take(&mut self.held);
        let used = self.process(&held[self.held_at..], out);
        self.held = held;
        self.held_at += used;
        if self.held_at == self.held.len() {
            self.held.clear();
            self.held_at = 0;
        } else if self.held_at >= self.held.len() / 2 {
            self.held.drain(..self.held_at);
            self.held_at = 0;
        }
    }

    /// Processes `input`; answers how many of its bytes were used (the rest is a partial
    /// head, or requests waiting for an answer).
    fn process(&mut self, input: &[u8], out: &mut Vec<u8>) -> usize {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            match self.state {
                State::Refused => return input.len(),
                State::Opaque => {
                    out.extend_from_slice(rest);
                    return input.len();
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
                State::Head if self.awaits_answer() => return pos,
                State::Head => match check_head(rest) {
                    HeadCheck::Partial => return pos,
                    HeadCheck::Complete { len, next } => {
                        out.extend_from_slice(&rest[..len]);
                        self.passed += 1;
                        self.last_was_head = rest.trim_ascii_start().starts_with(b"HEAD ");
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
                        self.refuse(r, out);
                        return input.len();
                    }
                },
            }
        }
        pos
    }
}

/// Where a chunked body's parser ended ([`chunked_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkedEnd {
    /// More to come: the parser's place and size.
    More(Chunk, u64),
    /// The body ended (after its trailers).
    Done,
    /// The bytes are not chunked framing.
    Bad,
}

/// [`chunked`] for other framers (the answers' side, `api::answer_framing`): the bytes used
/// and where the parser ended.
pub(crate) fn chunked_step(at: Chunk, size: u64, input: &[u8]) -> (usize, ChunkedEnd) {
    let (used, state) = chunked(at, size, input);
    let end = match state {
        State::Chunked { at, size } => ChunkedEnd::More(at, size),
        State::Head => ChunkedEnd::Done,
        _ => ChunkedEnd::Bad,
    };
    (used, end)
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
}
