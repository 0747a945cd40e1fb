//! Test clients: a raw HTTP/1.1 client that shows every chunk of a chunked body as it came off the
//! wire, and hyper-util's pooled client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub const CHAT: &str = "/v1/chat/completions";

/// One response as read off the socket.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Lowercased names.
    pub headers: HashMap<String, String>,
    /// Chunked body: one entry per HTTP chunk. Content-Length body: one entry.
    pub frames: Vec<Vec<u8>>,
    /// The body ended properly (terminating chunk / full length).
    pub complete: bool,
    /// Time from writing the request to reading the status line.
    pub time_to_head: Duration,
}

impl RawResponse {
    pub fn body(&self) -> Vec<u8> {
        self.frames.concat()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body()).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A keep-alive HTTP/1.1 connection.
pub struct RawConn {
    reader: BufReader<TcpStream>,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> RawConn {
        RawConn {
            reader: BufReader::new(TcpStream::connect(addr).await.unwrap()),
        }
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        extra_headers: &[(&str, &str)],
        body: &str,
    ) -> RawResponse {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (k, v) in extra_headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let started = Instant::now();
        self.reader
            .get_mut()
            .write_all(req.as_bytes())
            .await
            .unwrap();
        self.read_response(started).await
    }

    async fn read_response(&mut self, started: Instant) -> RawResponse {
        let mut line = String::new();
        self.reader.read_line(&mut line).await.unwrap();
        let time_to_head = started.elapsed();
        let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = HashMap::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).await.unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.insert(k.to_ascii_lowercase(), v.trim().to_owned());
        }
        let (frames, complete) =
            if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
                self.read_chunks().await
            } else {
                let len: usize = headers["content-length"].parse().unwrap();
                let mut body = vec![0; len];
                let complete = self.reader.read_exact(&mut body).await.is_ok();
                (vec![body], complete)
            };
        RawResponse {
            status,
            headers,
            frames,
            complete,
            time_to_head,
        }
    }

    /// Reads chunks until the terminating chunk (complete) or a dead connection (incomplete).
    async fn read_chunks(&mut self) -> (Vec<Vec<u8>>, bool) {
        let mut frames = Vec::new();
        loop {
            let mut size_line = String::new();
            match self.reader.read_line(&mut size_line).await {
                Ok(0) | Err(_) => return (frames, false),
                Ok(_) => {}
            }
            let size = usize::from_str_radix(size_line.trim_end(), 16).unwrap();
            let mut data = vec![0; size + 2];
            if self.reader.read_exact(&mut data).await.is_err() {
                return (frames, false);
            }
            assert_eq!(&data[size..], b"\r\n", "chunk not followed by CRLF");
            if size == 0 {
                return (frames, true);
            }
            data.truncate(size);
            frames.push(data);
        }
    }

    /// Waits until the server closes or resets the connection; true when it did.
    pub async fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.reader.read(&mut buf).await, Ok(0) | Err(_))
    }
}

/// One request on a fresh connection.
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> RawResponse {
    RawConn::connect(addr)
        .await
        .send(method, path, &[], body)
        .await
}

pub async fn chat(addr: SocketAddr, body: &Value) -> RawResponse {
    request(addr, "POST", CHAT, &body.to_string()).await
}

/// The SSE events of a body: each `data: ...` payload, in order.
pub fn sse_payloads(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "body ends mid-event: {text:?}"
    );
    text.split_terminator("\n\n")
        .map(|event| {
            event
                .strip_prefix("data: ")
                .expect("event is one data line")
                .to_owned()
        })
        .collect()
}

pub type HyperClient = Client<HttpConnector, Full<Bytes>>;

pub fn hyper_client() -> HyperClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn post(uri: String, body: &Value) -> http::Request<Full<Bytes>> {
    http::Request::post(uri)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// Reads a body frame by frame; returns the bytes received and whether it ended with an error.
pub async fn read_body(mut body: hyper::body::Incoming) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(bytes) = frame.data_ref() {
                    data.extend_from_slice(bytes);
                }
            }
            Err(_) => return (data, true),
        }
    }
    (data, false)
}

pub const MESSAGES: &str = "/v1/messages";
pub const RESPONSES: &str = "/v1/responses";

/// `POST path` with a JSON body and extra headers on a fresh connection.
pub async fn post_json(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> RawResponse {
    RawConn::connect(addr)
        .await
        .send("POST", path, headers, &body.to_string())
        .await
}

/// The SSE events of a body as `(event name, data)`: every event must have exactly one `event:`
/// line followed by one `data:` line.
pub fn sse_named_events(body: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "body ends mid-event: {text:?}"
    );
    text.split_terminator("\n\n")
        .map(|event| {
            let (name_line, data_line) = event.split_once('\n').expect("event + data lines");
            let name = name_line.strip_prefix("event: ").expect("an event: line");
            let data = data_line.strip_prefix("data: ").expect("a data: line");
            assert!(!data.contains('\n'), "one data line: {event:?}");
            (name.to_owned(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// One decoded event-stream message: its string headers and JSON payload.
#[derive(Debug, Clone)]
pub struct EventFrame {
    pub headers: HashMap<String, String>,
    pub payload: Value,
}

impl EventFrame {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or_else(|| panic!("no header {name} in {self:?}"), String::as_str)
    }
}

/// Decodes a whole `application/vnd.amazon.eventstream` body with aws-smithy-eventstream's
/// incremental decoder (which checks both CRCs), fed in small slices like a network would.
/// Returns the messages and the bytes left over (a partial frame).
pub fn decode_event_stream(body: &[u8]) -> (Vec<EventFrame>, usize) {
    use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
    use bytes::{Buf, BytesMut};
    let mut decoder = MessageFrameDecoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in body.chunks(7) {
        buf.extend_from_slice(piece);
        while let DecodedFrame::Complete(message) = decoder
            .decode_frame(&mut buf)
            .expect("valid frame and CRCs")
        {
            let headers = message
                .headers()
                .iter()
                .map(|h| {
                    let value = h.value().as_string().expect("string header");
                    (h.name().as_str().to_owned(), value.as_str().to_owned())
                })
                .collect();
            let payload = serde_json::from_slice(message.payload()).unwrap();
            out.push(EventFrame { headers, payload });
        }
    }
    (out, buf.remaining())
}
