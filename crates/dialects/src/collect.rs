//! A whole answer and its stream, both ways: [`Collector`] rebuilds a [`ChatResponse`] from the
//! canonical events of a stream (so a streamed answer can be stored, SPEC §12), and
//! [`stream_events`] replays a stored answer as events (so a stored answer can be streamed in any
//! dialect through that dialect's encoder).

use crate::canonical::{ChatResponse, Part, StopReason, StreamEvent};
use crate::Usage;

/// Rebuilds the answer a stream carries, within `max_bytes` of text, tool names and arguments.
/// A stream that errs, overflows the bound, or never says how it stopped yields nothing.
#[derive(Debug)]
pub struct Collector {
    id: String,
    model: String,
    /// Blocks in the order they opened, by the stream's block index.
    blocks: Vec<(usize, Part)>,
    stop: Option<StopReason>,
    usage: Usage,
    input_tokens: Option<u64>,
    bytes: usize,
    max_bytes: usize,
    spoiled: bool,
}

impl Collector {
    pub fn new(max_bytes: usize) -> Collector {
        Collector {
            id: String::new(),
            model: String::new(),
            blocks: Vec::new(),
            stop: None,
            usage: Usage::default(),
            input_tokens: None,
            bytes: 0,
            max_bytes,
            spoiled: false,
        }
    }

    /// False once the stream erred or outgrew the bound: nothing more is kept.
    pub fn usable(&self) -> bool {
        !self.spoiled
    }

    fn grow(&mut self, n: usize) -> bool {
        self.bytes += n;
        if self.bytes > self.max_bytes {
            self.spoil();
        }
        !self.spoiled
    }

    fn spoil(&mut self) {
        self.spoiled = true;
        self.blocks = Vec::new();
    }

    fn block(&mut self, index: usize) -> Option<&mut Part> {
        self.blocks
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, p)| p)
    }

    pub fn push(&mut self, ev: &StreamEvent) {
        if self.spoiled {
            return;
        }
        match ev {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                if self.grow(id.len() + model.len()) {
                    self.id.clone_from(id);
                    self.model.clone_from(model);
                    self.input_tokens = *input_tokens;
                }
            }
            StreamEvent::TextDelta { index, text } => {
                if !self.grow(text.len()) {
                    return;
                }
                match self.block(*index) {
                    Some(Part::Text(t)) => t.push_str(text),
                    Some(_) => self.spoil(),
                    None => self.blocks.push((*index, Part::Text(text.clone()))),
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.grow(id.len() + name.len()) {
                    let call = Part::ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                    };
                    self.blocks.push((*index, call));
                }
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if !self.grow(arguments.len()) {
                    return;
                }
                match self.block(*index) {
                    Some(Part::ToolCall { arguments: a, .. }) => a.push_str(arguments),
                    _ => self.spoil(),
                }
            }
            StreamEvent::BlockStop { .. } => {}
            StreamEvent::Stop { reason, usage } => {
                self.stop = Some(*reason);
                if let Some(u) = usage {
                    self.usage = *u;
                }
            }
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Error { .. } => self.spoil(),
        }
    }

    /// The whole answer, when the stream said how it stopped and nothing spoiled it.
    pub fn finish(self) -> Option<ChatResponse> {
        let stop_reason = self.stop.filter(|_| !self.spoiled)?;
        let mut usage = self.usage;
        if usage.input_tokens == 0 {
            usage.input_tokens = self.input_tokens.unwrap_or(0);
        }
        Some(ChatResponse {
            id: self.id,
            model: self.model,
            content: self.blocks.into_iter().map(|(_, p)| p).collect(),
            stop_reason,
            usage,
        })
    }
}

/// A whole answer as the events of a stream: the message start, each text or tool call as one
/// block, and the stop with the usage.
pub fn stream_events(resp: &ChatResponse) -> Vec<StreamEvent> {
    let mut out = Vec::with_capacity(resp.content.len() * 3 + 2);
    out.push(StreamEvent::Start {
        id: resp.id.clone(),
        model: resp.model.clone(),
        input_tokens: Some(resp.usage.input_tokens),
    });
    let mut index = 0;
    for part in &resp.content {
        match part {
            Part::Text(text) => out.push(StreamEvent::TextDelta {
                index,
                text: text.clone(),
            }),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                out.push(StreamEvent::ToolCallDelta {
                    index,
                    arguments: arguments.clone(),
                });
            }
            // An answer carries no images or tool results.
            Part::Image { .. } | Part::ToolResult { .. } => continue,
        }
        out.push(StreamEvent::BlockStop { index });
        index += 1;
    }
    out.push(StreamEvent::Stop {
        reason: resp.stop_reason,
        usage: Some(resp.usage),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> ChatResponse {
        ChatResponse {
            id: "msg_1".into(),
            model: "m".into(),
            content: vec![
                Part::Text("hello there".into()),
                Part::ToolCall {
                    id: "call_1".into(),
                    name: "get".into(),
                    arguments: "{\"a\":1}".into(),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 7,
                output_tokens: 3,
            },
        }
    }

    #[test]
    fn an_answer_survives_being_streamed_and_collected() {
        let mut c = Collector::new(1 << 20);
        for ev in stream_events(&answer()) {
            c.push(&ev);
        }
        assert_eq!(c.finish(), Some(answer()));
    }

    #[test]
    fn deltas_join_per_block() {
        let mut c = Collector::new(1 << 20);
        for ev in [
            StreamEvent::TextDelta {
                index: 0,
                text: "a".into(),
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "b".into(),
            },
            StreamEvent::Stop {
                reason: StopReason::EndTurn,
                usage: None,
            },
            StreamEvent::Usage(Usage {
                input_tokens: 1,
                output_tokens: 2,
            }),
        ] {
            c.push(&ev);
        }
        let r = c.finish().unwrap();
        assert_eq!(r.content, vec![Part::Text("ab".into())]);
        assert_eq!(r.usage.output_tokens, 2);
    }

    #[test]
    fn an_error_an_overflow_or_no_stop_yields_nothing() {
        let text = |t: &str| StreamEvent::TextDelta {
            index: 0,
            text: t.into(),
        };
        let stop = StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: None,
        };
        let mut c = Collector::new(1 << 20);
        c.push(&text("a"));
        assert_eq!(c.finish(), None, "no stop: cut mid-stream");
        let mut c = Collector::new(1 << 20);
        c.push(&text("a"));
        c.push(&StreamEvent::protocol_failure("x"));
        c.push(&stop);
        assert_eq!(c.finish(), None);
        let mut c = Collector::new(4);
        c.push(&text("abc"));
        assert!(c.usable());
        c.push(&text("de"));
        assert!(!c.usable());
        c.push(&stop);
        assert_eq!(c.finish(), None);
    }
}
