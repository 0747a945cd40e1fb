//! Dispatch by dialect: the one place that knows which module speaks which format. The gateway
//! calls these; each forwards to the function of the same name in the dialect's module.

use bytes::Bytes;

use crate::bedrock::{converse, invoke};
use crate::canonical::{ChatRequest, ChatResponse, StreamEvent, TranslateError};
use crate::{anthropic_messages, bedrock, gemini, openai_chat, openai_responses};
use crate::{Dialect, GatewayErrorKind, ParseError, ParsedRequest, RenderedError, Usage};

/// Provider bytes of one format → canonical stream events.
pub trait Decode: Send {
    fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent>;
    /// Bounds one upstream event or frame; past it the decoder reports a 502 `Error` and stops.
    fn set_max_event_bytes(&mut self, n: usize);
    /// The stream broke its framing or its bound: the decoder has stopped (its `Error` event,
    /// status 502, was the last it gave).
    fn failed(&self) -> bool;
    /// The upstream's stream ended: whatever the decoder still held back (a ConverseStream `Stop`
    /// waiting for its `metadata`).
    fn finish(&mut self) -> Vec<StreamEvent> {
        Vec::new()
    }
}

/// Canonical stream events → caller bytes of one format.
pub trait Encode: Send {
    fn encode(&mut self, ev: &StreamEvent) -> Bytes;
}

macro_rules! codec_impls {
    ($($m:ident $(+ $finish:ident)?),*) => {$(
        impl Decode for $m::StreamDecoder {
            fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
                $m::StreamDecoder::push(self, bytes)
            }
            fn set_max_event_bytes(&mut self, n: usize) {
                $m::StreamDecoder::set_max_event_bytes(self, n)
            }
            fn failed(&self) -> bool {
                $m::StreamDecoder::failed(self)
            }
            $(
                fn $finish(&mut self) -> Vec<StreamEvent> {
                    $m::StreamDecoder::$finish(self)
                }
            )?
        }
        impl Encode for $m::StreamEncoder {
            fn encode(&mut self, ev: &StreamEvent) -> Bytes {
                $m::StreamEncoder::encode(self, ev)
            }
        }
    )*};
}

codec_impls!(
    openai_chat,
    openai_responses,
    anthropic_messages,
    converse + finish,
    invoke,
    gemini + finish
);

impl Dialect {
    /// Parses a caller body. Bedrock dialects take the model from the path (`path_model`) and the
    /// streaming choice from the operation (`path_stream`); the others read both from the body.
    pub fn parse_request(
        self,
        body: Bytes,
        path_model: Option<&str>,
        path_stream: bool,
    ) -> Result<ParsedRequest, ParseError> {
        match self {
            Dialect::BedrockInvoke | Dialect::BedrockConverse => {
                bedrock::parse_request(self, path_model.unwrap_or_default(), body, path_stream)
            }
            Dialect::OpenAiEmbeddings => crate::openai_embeddings::parse_request(body),
            Dialect::Gemini => {
                gemini::parse_request(path_model.unwrap_or_default(), body, path_stream)
            }
            _ => ParsedRequest::parse_json_top(self, body),
        }
    }

    /// The caller body in the canonical form. A request that carries a guardrail
    /// (`features.guardrail`) is refused: the canonical form has no place for it, and a guardrail
    /// is never silently dropped (SPEC §11; routing already skips such destinations as
    /// `INELIGIBLE:guardrail`, this keeps any other path honest).
    pub fn to_canonical(self, req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
        if req.features.guardrail.is_some() {
            return Err(TranslateError(
                "the request carries a guardrail (guardrailConfig, safetySettings or \
                 X-Amzn-Bedrock-Guardrail* headers), which cannot be carried into another format"
                    .into(),
            ));
        }
        match self {
            Dialect::OpenAiChat => openai_chat::to_canonical(req),
            Dialect::OpenAiResponses => openai_responses::to_canonical(req),
            Dialect::AnthropicMessages => anthropic_messages::to_canonical(req),
            Dialect::BedrockInvoke => invoke::to_canonical(req),
            Dialect::BedrockConverse => converse::to_canonical(req),
            Dialect::Gemini => gemini::to_canonical(req),
            Dialect::OpenAiEmbeddings => Err(not_chat()),
        }
    }

    /// A canonical request as a body in this format.
    pub fn request_body(self, req: &ChatRequest) -> Result<Bytes, TranslateError> {
        match self {
            Dialect::OpenAiChat => openai_chat::request_body(req),
            Dialect::OpenAiResponses => openai_responses::request_body(req),
            Dialect::AnthropicMessages => anthropic_messages::request_body(req),
            Dialect::BedrockInvoke => invoke::request_body(req),
            Dialect::BedrockConverse => converse::request_body(req),
            Dialect::Gemini => gemini::request_body(req),
            Dialect::OpenAiEmbeddings => Err(not_chat()),
        }
    }

    pub fn parse_response(self, body: &[u8]) -> Result<ChatResponse, TranslateError> {
        match self {
            Dialect::OpenAiChat => openai_chat::parse_response(body),
            Dialect::OpenAiResponses => openai_responses::parse_response(body),
            Dialect::AnthropicMessages => anthropic_messages::parse_response(body),
            Dialect::BedrockInvoke => invoke::parse_response(body),
            Dialect::BedrockConverse => converse::parse_response(body),
            Dialect::Gemini => gemini::parse_response(body),
            Dialect::OpenAiEmbeddings => Err(not_chat()),
        }
    }

    pub fn render_response(self, resp: &ChatResponse) -> Bytes {
        match self {
            Dialect::OpenAiChat => openai_chat::render_response(resp),
            Dialect::OpenAiResponses => openai_responses::render_response(resp),
            Dialect::AnthropicMessages => anthropic_messages::render_response(resp),
            Dialect::BedrockInvoke => invoke::render_response(resp),
            Dialect::BedrockConverse => converse::render_response(resp),
            Dialect::Gemini => gemini::render_response(resp),
            // No chat answer is an embeddings answer: an empty list with the usage.
            Dialect::OpenAiEmbeddings => {
                crate::openai_embeddings::render(&[], &resp.model, resp.usage.input_tokens, false)
            }
        }
    }

    /// The headers a non-streamed response in this dialect states its usage in besides the body:
    /// InvokeModel's token counts; no other dialect has them.
    pub fn usage_headers(self, usage: Usage) -> Option<[(&'static str, u64); 2]> {
        match self {
            Dialect::BedrockInvoke => Some(invoke::usage_headers(usage)),
            _ => None,
        }
    }

    pub fn response_usage(self, body: &[u8]) -> Option<Usage> {
        match self {
            Dialect::OpenAiChat => openai_chat::response_usage(body),
            Dialect::OpenAiResponses => openai_responses::response_usage(body),
            Dialect::AnthropicMessages => anthropic_messages::response_usage(body),
            Dialect::BedrockInvoke => invoke::response_usage(body),
            Dialect::BedrockConverse => converse::response_usage(body),
            Dialect::Gemini => gemini::response_usage(body),
            Dialect::OpenAiEmbeddings => crate::openai_embeddings::response_usage(body),
        }
    }

    pub fn stream_decoder(self) -> Box<dyn Decode> {
        match self {
            // Embeddings never stream; OpenAI's decoder stands in.
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                Box::new(openai_chat::StreamDecoder::new())
            }
            Dialect::OpenAiResponses => Box::new(openai_responses::StreamDecoder::new()),
            Dialect::AnthropicMessages => Box::new(anthropic_messages::StreamDecoder::new()),
            Dialect::BedrockInvoke => Box::new(invoke::StreamDecoder::new()),
            Dialect::BedrockConverse => Box::new(converse::StreamDecoder::new()),
            Dialect::Gemini => Box::new(gemini::StreamDecoder::new()),
        }
    }

    /// The encoder of this format's streams for a translated answer. `usage_chunk`: the caller
    /// asked for usage in the stream (`ParsedRequest::stream_usage == Some(true)`); only the
    /// OpenAI chat encoder reads it (its `choices: []` usage chunk is opt-in; the other formats
    /// always carry usage).
    pub fn stream_encoder(self, id: &str, model: &str, usage_chunk: bool) -> Box<dyn Encode> {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                Box::new(openai_chat::StreamEncoder::new(id, model).with_usage_chunk(usage_chunk))
            }
            Dialect::OpenAiResponses => Box::new(openai_responses::StreamEncoder::new(id, model)),
            Dialect::AnthropicMessages => {
                Box::new(anthropic_messages::StreamEncoder::new(id, model))
            }
            Dialect::BedrockInvoke => Box::new(invoke::StreamEncoder::new(id, model)),
            Dialect::BedrockConverse => Box::new(converse::StreamEncoder::new(id, model)),
            Dialect::Gemini => Box::new(gemini::StreamEncoder::new(id, model)),
        }
    }

    /// Whether this format's streams are server-sent events (else: the Bedrock event stream).
    pub fn is_sse(self) -> bool {
        !matches!(self, Dialect::BedrockInvoke | Dialect::BedrockConverse)
    }

    /// The content type of this format's streams.
    pub fn stream_content_type(self) -> &'static str {
        if self.is_sse() {
            "text/event-stream"
        } else {
            bedrock::EVENT_STREAM_CONTENT_TYPE
        }
    }

    /// A gateway-made error in this dialect's shape (SPEC §6.3).
    pub fn render_error(self, kind: GatewayErrorKind, message: &str) -> RenderedError {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                openai_chat::render_error(kind, message)
            }
            Dialect::OpenAiResponses => openai_responses::render_error(kind, message),
            Dialect::AnthropicMessages => anthropic_messages::render_error(kind, message),
            Dialect::BedrockInvoke => invoke::render_error(kind, message),
            Dialect::BedrockConverse => converse::render_error(kind, message),
            Dialect::Gemini => gemini::render_error(kind, message),
        }
    }

    /// The frame that ends a committed stream after an upstream failure (SPEC §5.6).
    pub fn render_stream_error(self, message: &str) -> Bytes {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                openai_chat::render_stream_error(message)
            }
            Dialect::OpenAiResponses => openai_responses::render_stream_error(message),
            Dialect::AnthropicMessages => anthropic_messages::render_stream_error(message),
            Dialect::BedrockInvoke => invoke::render_stream_error(message),
            Dialect::BedrockConverse => converse::render_stream_error(message),
            Dialect::Gemini => gemini::render_stream_error(message),
        }
    }

    /// A provider error of this format → (error type, message). `error_type_header` is Bedrock's
    /// `x-amzn-ErrorType`.
    pub fn parse_error(
        self,
        status: u16,
        error_type_header: Option<&str>,
        body: &[u8],
    ) -> (String, String) {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                openai_chat::parse_error(status, body)
            }
            Dialect::OpenAiResponses => openai_responses::parse_error(status, body),
            Dialect::AnthropicMessages => anthropic_messages::parse_error(status, body),
            Dialect::BedrockInvoke | Dialect::BedrockConverse => {
                bedrock::parse_error(status, error_type_header, body)
            }
            Dialect::Gemini => gemini::parse_error(status, body),
        }
    }

    /// The error class (SPEC §11) of an upstream error answer in this dialect: its status, the
    /// body, and Bedrock's `x-amzn-ErrorType` when present (ignored by the other dialects).
    /// `None` for an answer that is none of the five classes. See [`crate::error_class`] and
    /// docs/error-classes.md.
    pub fn error_class(
        self,
        status: u16,
        header_type: Option<&str>,
        body: &[u8],
    ) -> Option<sidetrack_resilience::ErrorClass> {
        use crate::error_class::{anthropic, bedrock, gemini, openai};
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiResponses | Dialect::OpenAiEmbeddings => {
                openai(status, body)
            }
            Dialect::AnthropicMessages => anthropic(status, body),
            Dialect::BedrockInvoke | Dialect::BedrockConverse => bedrock(status, header_type, body),
            Dialect::Gemini => gemini(status, body),
        }
    }

    /// The error class of an error this dialect's upstream sent that is already taken apart: a
    /// stream's error event (`StreamEventClass::Error { status, error_type, message }`) or
    /// [`Dialect::parse_error`]'s answer.
    pub fn error_class_of(
        self,
        status: u16,
        error_type: &str,
        message: &str,
    ) -> Option<sidetrack_resilience::ErrorClass> {
        crate::error_class::of_parsed(
            crate::error_class::Family::of(self),
            status,
            error_type,
            message,
        )
    }

    /// A translated upstream error in this dialect (status preserved, type mapped).
    pub fn render_upstream_error(
        self,
        status: u16,
        error_type: &str,
        message: &str,
    ) -> RenderedError {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiEmbeddings => {
                openai_chat::render_upstream_error(status, error_type, message)
            }
            Dialect::OpenAiResponses => {
                openai_responses::render_upstream_error(status, error_type, message)
            }
            Dialect::AnthropicMessages => {
                anthropic_messages::render_upstream_error(status, error_type, message)
            }
            Dialect::BedrockInvoke | Dialect::BedrockConverse => {
                bedrock::render_upstream_error(status, error_type, message)
            }
            Dialect::Gemini => gemini::render_upstream_error(status, error_type, message),
        }
    }
}

/// Embeddings have no canonical (chat) form.
fn not_chat() -> TranslateError {
    TranslateError("an embeddings request is not a chat request".into())
}
