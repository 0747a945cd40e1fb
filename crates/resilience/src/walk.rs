//! The walk's rules (SPEC §5.3–5.8) as pure decisions: which members of a hop may be attempted,
//! which one is picked, whether a breaker-open member is tried anyway because nothing is left,
//! what an attempt's outcome means for its destination's breaker, and whether the walk moves on.
//!
//! The gateway's loop (`engine::walk`) does the I/O — admitting through the shared breaker,
//! sending, timing — and asks these functions at each step, so every rule is tested here without
//! a socket or a runtime.

use std::time::{Duration, Instant};

use crate::{Outcome, Triggers};

/// Why a destination was not attempted: the routing log's `skipped[].why` and the
/// `sidetrack_skips_total{why}` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    /// Switched off by an operator (`POST /admin/destinations/.../disable`).
    Disabled,
    /// Its breaker is open (or half-open with the probe slot taken).
    BreakerOpen,
    /// It cannot carry this request (SPEC §5.7). Never a breaker failure.
    Ineligible(Ineligible),
}

/// What makes a destination unable to carry a request (SPEC §5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ineligible {
    /// The request has tools; the target declares `capabilities.tools: false`.
    Tools,
    /// The request asks for a JSON schema; the target declares `capabilities.jsonSchema: false`.
    JsonSchema,
    /// The estimated prompt is larger than the target's `capabilities.contextWindow`.
    ContextWindow,
    /// The request uses a feature the target's wire format cannot express.
    Translation,
    /// The hop's expected time to first byte exceeds the time left before the request deadline
    /// (SPEC §11 Deadline; see [`crate::retry::fits_deadline`]).
    Deadline,
    /// The request carries a guardrail or safety setting the destination cannot enforce
    /// (SPEC §11: never served unguarded).
    Guardrail,
}

impl Skip {
    /// The label, e.g. `BREAKER_OPEN`, `INELIGIBLE:tools`.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Disabled => "DISABLED",
            Skip::BreakerOpen => "BREAKER_OPEN",
            Skip::Ineligible(Ineligible::Tools) => "INELIGIBLE:tools",
            Skip::Ineligible(Ineligible::JsonSchema) => "INELIGIBLE:jsonSchema",
            Skip::Ineligible(Ineligible::ContextWindow) => "INELIGIBLE:contextWindow",
            Skip::Ineligible(Ineligible::Translation) => "INELIGIBLE:translation",
            Skip::Ineligible(Ineligible::Deadline) => "INELIGIBLE:deadline",
            Skip::Ineligible(Ineligible::Guardrail) => "INELIGIBLE:guardrail",
        }
    }

    /// Every skip, for metric pre-registration and docs.
    pub const ALL: [Skip; 8] = [
        Skip::Disabled,
        Skip::BreakerOpen,
        Skip::Ineligible(Ineligible::Tools),
        Skip::Ineligible(Ineligible::JsonSchema),
        Skip::Ineligible(Ineligible::ContextWindow),
        Skip::Ineligible(Ineligible::Translation),
        Skip::Ineligible(Ineligible::Deadline),
        Skip::Ineligible(Ineligible::Guardrail),
    ];
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Skip {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for Skip {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What a request needs from a destination (SPEC §5.7), read once from the parsed request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub tools: bool,
    pub json_schema: bool,
    pub estimated_prompt_tokens: u64,
    /// The request carries a guardrail or safety setting (SPEC §11), e.g. Bedrock's
    /// `guardrailConfig` or `X-Amzn-Bedrock-Guardrail*` headers.
    pub guardrail: bool,
}

/// What a target declares it can do; `None` is "not declared" (assumed able).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub context_window: Option<u64>,
    /// The destination would enforce the request's guardrail: it is sent the request in the very
    /// format that carried the guardrail (see [`guardrail_carried`]). Not declarable: a guardrail
    /// is enforced by the upstream that understands it, never by translation.
    pub guardrail: bool,
}

/// Whether a destination sent its request in `format` receives a guardrail that arrived in
/// `carrier` (the format whose untranslated request holds it; `None`: no guardrail). Only the
/// very same format does: translation through the canonical form has no place for a guardrail,
/// and a provider of another format would not understand it, so the request would be served
/// unguarded.
pub fn guardrail_carried<F: PartialEq>(carrier: Option<F>, format: F) -> bool {
    carrier.is_some_and(|c| c == format)
}

/// Eligibility (SPEC §5.7, §11): a guardrail the destination cannot enforce first (never served
/// unguarded), then the first capability the request needs and the target declares it lacks, in
/// the order tools, JSON schema, context window.
pub fn ineligible(needs: Needs, caps: Capabilities) -> Option<Ineligible> {
    if needs.guardrail && !caps.guardrail {
        return Some(Ineligible::Guardrail);
    }
    if needs.tools && caps.tools == Some(false) {
        return Some(Ineligible::Tools);
    }
    if needs.json_schema && caps.json_schema == Some(false) {
        return Some(Ineligible::JsonSchema);
    }
    if caps
        .context_window
        .is_some_and(|w| needs.estimated_prompt_tokens > w)
    {
        return Some(Ineligible::ContextWindow);
    }
    None
}

/// One member of a hop as the walk sees it before admission.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member {
    pub disabled: bool,
    pub ineligible: Option<Ineligible>,
    /// The breaker would let a request through now (closed, or half-open with the probe slot free).
    pub admissible: bool,
}

/// Where a member stands before the pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// May be picked.
    Candidate,
    /// Skipped for good on this hop, with this reason.
    Skipped(Skip),
    /// Its breaker is open: skipped unless the hop is the last remaining one (see [`forced`]).
    Open,
}

/// A member's standing. Disabled wins over ineligible, which wins over the breaker: an operator's
/// switch and a capability are facts about the destination; the breaker is only a guess. A rule
/// whose `circuitBreaker.mode` is `DISABLED` (`respect_breakers == false`) never skips for it.
pub fn standing(member: Member, respect_breakers: bool) -> Standing {
    if member.disabled {
        Standing::Skipped(Skip::Disabled)
    } else if let Some(why) = member.ineligible {
        Standing::Skipped(Skip::Ineligible(why))
    } else if respect_breakers && !member.admissible {
        Standing::Open
    } else {
        Standing::Candidate
    }
}

/// The pick inside a priority group (SPEC §5.8): power of two choices. Two distinct candidates
/// are drawn (`draw(n)` returns a uniform index below `n`); the higher score wins, the first
/// drawn on a tie. Returns a position in `scores`; `None` when there is no candidate.
pub fn pick(scores: &[f64], draw: impl FnMut(usize) -> usize) -> Option<usize> {
    pick_by(scores.len(), |i| scores[i], draw)
}

/// [`pick`] over `n` candidates whose scores are read through `score_of(position)`, so a caller
/// can pick among a subset (e.g. the members of a group not yet tried, [`crate::retry::next_member`])
/// without collecting their scores first.
pub fn pick_by(
    n: usize,
    score_of: impl Fn(usize) -> f64,
    mut draw: impl FnMut(usize) -> usize,
) -> Option<usize> {
    match n {
        0 => None,
        1 => Some(0),
        n => {
            let a = draw(n);
            let b = (a + 1 + draw(n - 1)) % n;
            Some(if score_of(b) > score_of(a) { b } else { a })
        }
    }
}

/// A destination's pick score: its health (0–100) scaled down by its time to first byte (EWMA,
/// ms) and by the requests it has in flight. Higher is better.
pub fn score(health: f64, ttfb_ms: f64, in_flight: u32) -> f64 {
    (health / 100.0) / ((1.0 + ttfb_ms) * (1.0 + f64::from(in_flight)))
}

/// The last-hop rule (SPEC §5.5): when no member of a hop can be admitted and no later hop has a
/// usable member, the member whose breaker reopens soonest is attempted anyway — the last
/// remaining destination is never skipped by a breaker. `open` lists each open member's reopening
/// time (`None` when unknown, e.g. half-open with the probe slot taken: it counts as soonest).
/// Returns a position in `open`.
pub fn forced(last_remaining: bool, open: &[Option<Instant>]) -> Option<usize> {
    if !last_remaining {
        return None;
    }
    open.iter()
        .enumerate()
        .min_by_key(|(_, until)| **until)
        .map(|(i, _)| i)
}

/// Whether a hop is the last remaining one: no later hop has a member that is neither switched
/// off nor ineligible (breakers do not count: a later hop whose breakers are all open is itself
/// the last remaining one when the walk reaches it). `later` yields, per later member, whether it
/// is usable.
pub fn last_remaining(mut later_members_usable: impl Iterator<Item = bool>) -> bool {
    !later_members_usable.any(|usable| usable)
}

/// What an attempt means for its destination's breaker (SPEC §5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Success,
    /// A counted failure, with the delay the upstream asked for (a counted 429/503's Retry-After).
    Failure(Option<Duration>),
    /// Neither: UNROUTABLE, or an error that matched no trigger and no `unhealthyCondition`.
    Neutral,
}

/// The breaker's reading of a classified attempt. Counted: an outcome that matched the hop's
/// triggers (`fired`) — or, when the target sets `unhealthyCondition`, what the expression said
/// (`condition`; an evaluation error falls back to the triggers) — never UNROUTABLE. Only a
/// counted 429 or 503 passes on `retry_after`.
pub fn verdict(
    outcome: Outcome,
    fired: bool,
    condition: Option<Result<bool, ()>>,
    retry_after: Option<Duration>,
) -> Verdict {
    if matches!(outcome, Outcome::Error(crate::ErrorKind::Unroutable)) {
        return Verdict::Neutral;
    }
    let counted = match condition {
        Some(Ok(unhealthy)) => unhealthy,
        Some(Err(())) | None => fired,
    };
    match outcome {
        _ if counted => Verdict::Failure(match outcome {
            Outcome::Status(429 | 503) => retry_after,
            _ => None,
        }),
        Outcome::Success(_) => Verdict::Success,
        _ => Verdict::Neutral,
    }
}

/// After an attempt: hand the answer back, or move on to the next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This answer goes to the caller (success, an error no trigger matched, or the chain ran out).
    Return,
    /// A trigger fired and a later hop exists: keep this answer only as the fallback-of-last-resort.
    Advance,
}

/// The walk's step after an attempt on `hop` of `hops`: a fired trigger moves on unless this is
/// the last hop (SPEC §5.3). An outcome fires when its status, its kind or its error `class`
/// (SPEC §11) is listed. Skipped hops are not attempts and never reach here.
pub fn step(
    outcome: Outcome,
    class: Option<crate::ErrorClass>,
    triggers: &Triggers,
    is_last_hop: bool,
) -> (bool, Step) {
    let fired = triggers.fires_with(&outcome, class);
    let step = if fired && !is_last_hop {
        Step::Advance
    } else {
        Step::Return
    };
    (fired, step)
}

/// The breaker label an attempt ran under: a probe is `HALF_OPEN`; an ordinary admission is
/// `CLOSED`; a forced attempt on the last remaining hop reports the breaker's own state.
pub fn attempt_breaker_label(admission: Admitted) -> &'static str {
    match admission {
        Admitted::Closed => "CLOSED",
        Admitted::Probe => "HALF_OPEN",
        Admitted::Forced(state) => state.as_str(),
        Admitted::Unguarded(state) => state.as_str(),
    }
}

/// How a destination came to be attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The breaker is closed.
    Closed,
    /// The breaker is half-open and this attempt holds the probe slot.
    Probe,
    /// The last-hop rule: tried although its breaker is open; counted, but it does not move a
    /// half-open breaker.
    Forced(crate::BreakerState),
    /// The rule's `circuitBreaker.mode` is `DISABLED`: attempted whatever the state.
    Unguarded(crate::BreakerState),
}

/// Which deadline bounds an attempt until its first body byte (SPEC §5.4): the hop's
/// `firstByteTimeoutMilliseconds` from `sent`, or the request deadline when that comes first (or
/// the hop has none). Returns the deadline and the knob a timeout there is named after.
pub fn first_byte_deadline<T>(
    sent: T,
    first_byte_timeout: Option<Duration>,
    request_deadline: T,
) -> (T, &'static str)
where
    T: Copy + PartialOrd + std::ops::Add<Duration, Output = T>,
{
    match first_byte_timeout.map(|d| sent + d) {
        Some(fbt) if fbt <= request_deadline => (fbt, "firstByteTimeoutMilliseconds"),
        _ => (request_deadline, "requestTimeoutMilliseconds"),
    }
}

/// When a stream is committed (SPEC §5.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitRule {
    /// At the first byte (AgentCore's rule).
    FirstByte,
    /// At the first content-bearing event; the preamble is held (the default).
    FirstToken,
}

/// What a held stream has said so far, as the commit decision reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    /// A content-bearing event (text, tool call, refusal, finish).
    pub content: bool,
    /// The stream's explicit end.
    pub done: bool,
    /// An error event, as the status its type stands for (e.g. `overloaded_error` → 529).
    pub error: Option<u16>,
}

/// Bytes a `firstToken` stream may say before an event decides; past it the attempt is a protocol
/// failure (SPEC §5.6, §14).
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// The commit decision for a streamed answer with HTTP `status`: its outcome once known, `None`
/// while the preamble is still held. `firstByte` decides at once; `firstToken` on the first
/// content, the end, or an error event — which is the attempt's outcome, so a fallback can follow.
pub fn commit_decision(rule: CommitRule, status: u16, heard: Heard) -> Option<Outcome> {
    match (rule, heard.error) {
        (CommitRule::FirstByte, _) => Some(Outcome::from_status(status)),
        (CommitRule::FirstToken, Some(code)) => Some(Outcome::Status(code)),
        _ if heard.content || heard.done => Some(Outcome::from_status(status)),
        _ => None,
    }
}

/// A weighted route's leg (SPEC §5.8) for a `roll` below the total weight: leg `i` owns the
/// weights `[sum of earlier weights, + weight_i)`. The roll is random, or a hash of the
/// stickiness header's value so the same value always lands on the same leg.
pub fn pick_leg(weights: &[u32], roll: u64) -> usize {
    let mut upto = 0u64;
    for (i, w) in weights.iter().enumerate() {
        upto += u64::from(*w);
        if roll < upto {
            return i;
        }
    }
    0
}

/// The total a leg roll is drawn below (at least 1).
pub fn total_weight(weights: &[u32]) -> u64 {
    weights.iter().map(|w| u64::from(*w)).sum::<u64>().max(1)
}

/// Why the walk ended as it did: the routing log's `reason` (SPEC §7.1), for a walk that
/// returned hop `hop` after `attempts` attempts. (`noEligibleDestination` — nothing attempted —
/// and the gateway's rejections are decided before there is a hop to return.)
pub fn reason(outcome: Outcome, fired: bool, hop: usize, attempts: usize) -> Reason {
    if matches!(outcome, Outcome::Error(crate::ErrorKind::Unroutable)) && attempts == 1 {
        Reason::Unroutable
    } else if fired {
        Reason::ChainExhausted
    } else if hop == 0 {
        Reason::ServedByPrimary
    } else {
        Reason::ServedViaFallbackHop(hop)
    }
}

/// The routing log's `reason` for a walk that returned a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ServedByPrimary,
    ServedViaFallbackHop(usize),
    /// The last hop's answer matched its triggers: every hop was used.
    ChainExhausted,
    /// The only attempt was UNROUTABLE: nothing can serve the model.
    Unroutable,
}

impl Reason {
    /// The label; a fallback hop's is made for it (`servedViaFallbackHop:<n>`).
    pub fn label(self) -> std::borrow::Cow<'static, str> {
        match self {
            Reason::ServedByPrimary => "servedByPrimary".into(),
            Reason::ServedViaFallbackHop(n) => format!("servedViaFallbackHop:{n}").into(),
            Reason::ChainExhausted => "chainExhausted".into(),
            Reason::Unroutable => "unroutable".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BreakerState, ErrorKind, StatusMatcher};

    fn member(disabled: bool, ineligible: Option<Ineligible>, admissible: bool) -> Member {
        Member {
            disabled,
            ineligible,
            admissible,
        }
    }

    // §5.7 eligibility
    #[test]
    fn eligibility_checks_tools_then_schema_then_context_window() {
        let all = Needs {
            tools: true,
            json_schema: true,
            estimated_prompt_tokens: 10_000,
            guardrail: false,
        };
        let none = Capabilities {
            tools: Some(false),
            json_schema: Some(false),
            context_window: Some(8_000),
            guardrail: false,
        };
        assert_eq!(ineligible(all, none), Some(Ineligible::Tools));
        let tools_ok = Capabilities {
            tools: Some(true),
            ..none
        };
        assert_eq!(ineligible(all, tools_ok), Some(Ineligible::JsonSchema));
        let schema_ok = Capabilities {
            json_schema: None,
            ..tools_ok
        };
        assert_eq!(ineligible(all, schema_ok), Some(Ineligible::ContextWindow));
        // Undeclared capabilities are assumed; a prompt exactly at the window fits.
        assert_eq!(ineligible(all, Capabilities::default()), None);
        let fits = Needs {
            estimated_prompt_tokens: 8_000,
            ..all
        };
        assert_eq!(
            ineligible(
                fits,
                Capabilities {
                    context_window: Some(8_000),
                    ..Capabilities::default()
                }
            ),
            None
        );
        // A request without tools is not refused by a target without them.
        assert_eq!(ineligible(Needs::default(), none), None);
    }

    // §11: guardrails are never dropped
    #[test]
    fn a_guardrail_is_enforceable_only_in_the_format_that_carried_it_and_comes_first() {
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum Format {
            Converse,
            Invoke,
            Chat,
        }
        use Format::*;
        assert!(guardrail_carried(Some(Converse), Converse));
        assert!(guardrail_carried(Some(Invoke), Invoke));
        assert!(
            !guardrail_carried(Some(Converse), Chat),
            "translated: dropped"
        );
        assert!(
            !guardrail_carried(Some(Converse), Invoke),
            "another Bedrock format"
        );
        assert!(!guardrail_carried(None, Converse));

        let guarded = Needs {
            guardrail: true,
            ..Needs::default()
        };
        let able = |format| Capabilities {
            guardrail: guardrail_carried(Some(Converse), format),
            ..Capabilities::default()
        };
        assert_eq!(ineligible(guarded, able(Converse)), None);
        assert_eq!(ineligible(guarded, able(Chat)), Some(Ineligible::Guardrail));
        assert_eq!(
            ineligible(guarded, Capabilities::default()),
            Some(Ineligible::Guardrail),
            "a destination is never assumed to enforce it"
        );
        // Without a guardrail nothing changes.
        assert_eq!(ineligible(Needs::default(), able(Chat)), None);
        // It is reported before any declared capability the destination also lacks.
        let everything = Needs {
            tools: true,
            json_schema: true,
            estimated_prompt_tokens: 10_000,
            guardrail: true,
        };
        let lacking = Capabilities {
            tools: Some(false),
            json_schema: Some(false),
            context_window: Some(8),
            guardrail: false,
        };
        assert_eq!(ineligible(everything, lacking), Some(Ineligible::Guardrail));
        assert_eq!(
            ineligible(
                everything,
                Capabilities {
                    guardrail: true,
                    ..lacking
                }
            ),
            Some(Ineligible::Tools)
        );
        assert_eq!(
            Skip::Ineligible(Ineligible::Guardrail).as_str(),
            "INELIGIBLE:guardrail"
        );
    }

    // §5.5 / §5.7: the order of skip reasons, and DISABLED mode
    #[test]
    fn disabled_beats_ineligible_beats_breaker_and_disabled_mode_ignores_breakers() {
        let m = member(true, Some(Ineligible::Tools), false);
        assert_eq!(standing(m, true), Standing::Skipped(Skip::Disabled));
        let m = member(false, Some(Ineligible::Tools), false);
        assert_eq!(
            standing(m, true),
            Standing::Skipped(Skip::Ineligible(Ineligible::Tools))
        );
        let m = member(false, None, false);
        assert_eq!(standing(m, true), Standing::Open);
        assert_eq!(standing(m, false), Standing::Candidate);
        // An operator's switch holds even when the rule ignores breakers.
        assert_eq!(
            standing(member(true, None, true), false),
            Standing::Skipped(Skip::Disabled)
        );
        assert_eq!(
            standing(member(false, None, true), true),
            Standing::Candidate
        );
    }

    #[test]
    fn skip_labels_are_the_routing_log_vocabulary() {
        let labels: Vec<&str> = Skip::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            labels,
            [
                "DISABLED",
                "BREAKER_OPEN",
                "INELIGIBLE:tools",
                "INELIGIBLE:jsonSchema",
                "INELIGIBLE:contextWindow",
                "INELIGIBLE:translation",
                "INELIGIBLE:deadline",
                "INELIGIBLE:guardrail"
            ]
        );
    }

    // §5.8 priority groups: P2C
    #[test]
    fn p2c_draws_two_distinct_members_and_takes_the_better_score() {
        assert_eq!(pick(&[], |_| 0), None);
        assert_eq!(pick(&[0.1], |_| unreachable!()), Some(0));
        // draws: a = 0, then b = (0 + 1 + 1) % 3 = 2
        let mut draws = [0, 1].into_iter();
        assert_eq!(pick(&[0.5, 0.9, 0.7], |_| draws.next().unwrap()), Some(2));
        // a tie keeps the first drawn
        let mut draws = [1, 0].into_iter();
        assert_eq!(pick(&[0.5, 0.5], |_| draws.next().unwrap()), Some(1));
        // the two draws are never the same member, whatever the generator returns
        for a in 0..4 {
            for r in 0..3 {
                let mut seen = Vec::new();
                let mut draws = [a, r].into_iter();
                let _ = pick(&[1.0; 4], |n| {
                    let d = draws.next().unwrap();
                    assert!(d < n);
                    seen.push(d);
                    d
                });
                assert_ne!(seen[0], (seen[0] + 1 + seen[1]) % 4);
            }
        }
    }

    #[test]
    fn p2c_spreads_equal_members_and_favours_the_healthy_one() {
        // A deterministic generator over every pair: equal scores split evenly...
        let mut counts = [0usize; 2];
        for i in 0..1000 {
            let mut k = i;
            let p = pick(&[1.0, 1.0], |n| {
                let d = k % n;
                k /= n;
                d
            })
            .unwrap();
            counts[p] += 1;
        }
        assert_eq!(counts, [500, 500]);
        // ...and a member with the lower score is never picked out of two.
        for first in 0..2 {
            let mut draws = [first, 0].into_iter();
            assert_eq!(pick(&[0.2, 0.9], |_| draws.next().unwrap()), Some(1));
        }
    }

    #[test]
    fn the_score_falls_with_failures_latency_and_load() {
        let base = score(100.0, 10.0, 0);
        assert!(score(50.0, 10.0, 0) < base);
        assert!(score(100.0, 100.0, 0) < base);
        assert!(score(100.0, 10.0, 3) < base);
        assert_eq!(score(0.0, 0.0, 0), 0.0);
    }

    // §5.5 the last remaining destination is never skipped by a breaker
    #[test]
    fn the_last_remaining_hop_tries_the_member_that_reopens_soonest() {
        let now = Instant::now();
        let open = [
            Some(now + Duration::from_secs(30)),
            Some(now + Duration::from_secs(5)),
            Some(now + Duration::from_secs(60)),
        ];
        assert_eq!(forced(true, &open), Some(1));
        assert_eq!(forced(false, &open), None, "a later hop may still answer");
        assert_eq!(forced(true, &[]), None, "nothing open: nothing to force");
        // a half-open member whose probe slot is taken has no reopening time: it goes first
        assert_eq!(forced(true, &[open[1], None]), Some(1));
    }

    #[test]
    fn a_hop_is_last_remaining_when_no_later_member_is_usable() {
        assert!(last_remaining(std::iter::empty()));
        assert!(last_remaining([false, false].into_iter()));
        assert!(!last_remaining([false, true].into_iter()));
    }

    // §5.5 what a breaker counts
    #[test]
    fn the_breaker_counts_what_the_triggers_fire_on_never_unroutable() {
        let ra = Some(Duration::from_secs(7));
        assert_eq!(
            verdict(Outcome::Status(503), true, None, ra),
            Verdict::Failure(ra)
        );
        assert_eq!(
            verdict(Outcome::Status(429), true, None, ra),
            Verdict::Failure(ra)
        );
        // Retry-After is passed on for 429 and 503 only.
        assert_eq!(
            verdict(Outcome::Status(500), true, None, ra),
            Verdict::Failure(None)
        );
        assert_eq!(
            verdict(Outcome::Error(ErrorKind::ConnectionError), true, None, None),
            Verdict::Failure(None)
        );
        // A status no trigger fired on is neutral; a success is a success.
        assert_eq!(
            verdict(Outcome::Status(400), false, None, None),
            Verdict::Neutral
        );
        assert_eq!(
            verdict(Outcome::Success(200), false, None, None),
            Verdict::Success
        );
        // UNROUTABLE is never counted, even when a trigger lists it.
        assert_eq!(
            verdict(
                Outcome::Error(ErrorKind::Unroutable),
                true,
                Some(Ok(true)),
                None
            ),
            Verdict::Neutral
        );
    }

    #[test]
    fn an_unhealthy_condition_replaces_the_triggers_and_falls_back_to_them_on_error() {
        // The condition counts a 429 the triggers do not fire on...
        assert_eq!(
            verdict(Outcome::Status(429), false, Some(Ok(true)), None),
            Verdict::Failure(None)
        );
        // ...and can spare a 503 they do fire on.
        assert_eq!(
            verdict(Outcome::Status(503), true, Some(Ok(false)), None),
            Verdict::Neutral
        );
        // An evaluation error uses the triggers.
        assert_eq!(
            verdict(Outcome::Status(503), true, Some(Err(())), None),
            Verdict::Failure(None)
        );
        assert_eq!(
            verdict(Outcome::Status(503), false, Some(Err(())), None),
            Verdict::Neutral
        );
        // A success the condition calls unhealthy (e.g. slow) counts as a failure.
        assert_eq!(
            verdict(Outcome::Success(200), false, Some(Ok(true)), None),
            Verdict::Failure(None)
        );
    }

    // §5.3 walking: a fired trigger moves on, except on the last hop
    #[test]
    fn a_fired_trigger_advances_unless_the_hop_is_the_last() {
        let defaults = Triggers::default_set();
        assert_eq!(
            step(Outcome::Status(503), None, &defaults, false),
            (true, Step::Advance)
        );
        assert_eq!(
            step(Outcome::Status(503), None, &defaults, true),
            (true, Step::Return)
        );
        // 429 is not a default trigger: the 429 goes back to the caller.
        assert_eq!(
            step(Outcome::Status(429), None, &defaults, false),
            (false, Step::Return)
        );
        assert_eq!(
            step(Outcome::Success(200), None, &defaults, false),
            (false, Step::Return)
        );
        assert_eq!(
            step(
                Outcome::Error(ErrorKind::Unroutable),
                None,
                &defaults,
                false
            ),
            (true, Step::Advance)
        );
        // FIRST_BYTE_TIMEOUT is a default trigger.
        assert_eq!(
            step(
                Outcome::Error(ErrorKind::FirstByteTimeout),
                None,
                &defaults,
                false
            ),
            (true, Step::Advance)
        );
        // A written triggerOn is the whole set: only what it lists moves on.
        let only_429 = Triggers::explicit(vec![StatusMatcher::parse("429").unwrap()], &[]);
        assert_eq!(
            step(Outcome::Status(429), None, &only_429, false),
            (true, Step::Advance)
        );
        assert_eq!(
            step(Outcome::Status(503), None, &only_429, false),
            (false, Step::Return)
        );
        assert_eq!(
            step(
                Outcome::Error(ErrorKind::ConnectionError),
                None,
                &only_429,
                false
            ),
            (false, Step::Return)
        );
        // SPEC §11: a class listed in triggerOn.errors fires although the status (400) is not.
        let context = Triggers::explicit_names(
            Vec::new(),
            &[crate::TriggerName::Class(
                crate::ErrorClass::ContextLengthExceeded,
            )],
        );
        assert_eq!(
            step(
                Outcome::Status(400),
                Some(crate::ErrorClass::ContextLengthExceeded),
                &context,
                false
            ),
            (true, Step::Advance)
        );
        assert_eq!(
            step(Outcome::Status(400), None, &context, false),
            (false, Step::Return)
        );
    }

    #[test]
    fn the_attempt_reports_the_breaker_it_ran_under() {
        assert_eq!(attempt_breaker_label(Admitted::Closed), "CLOSED");
        assert_eq!(attempt_breaker_label(Admitted::Probe), "HALF_OPEN");
        assert_eq!(
            attempt_breaker_label(Admitted::Forced(BreakerState::Open {
                until: Instant::now()
            })),
            "OPEN"
        );
        assert_eq!(
            attempt_breaker_label(Admitted::Unguarded(BreakerState::Closed)),
            "CLOSED"
        );
    }

    // §5.4: which deadline bounds the first byte, and what a timeout there is called
    #[test]
    fn the_first_byte_waits_for_the_hop_timeout_or_the_request_deadline_whichever_is_sooner() {
        let sent = Instant::now();
        let request = sent + Duration::from_secs(60);
        assert_eq!(
            first_byte_deadline(sent, Some(Duration::from_secs(2)), request),
            (
                sent + Duration::from_secs(2),
                "firstByteTimeoutMilliseconds"
            )
        );
        assert_eq!(
            first_byte_deadline(sent, Some(Duration::from_secs(90)), request),
            (request, "requestTimeoutMilliseconds")
        );
        // No first-byte timeout on the hop: only the request deadline bounds it (SPEC §5.4).
        assert_eq!(
            first_byte_deadline(sent, None, request),
            (request, "requestTimeoutMilliseconds")
        );
    }

    // §5.6 the commit point
    #[test]
    fn first_byte_commits_at_once_and_first_token_holds_until_an_event_decides() {
        let nothing = Heard::default();
        let error = Heard {
            error: Some(529),
            ..Heard::default()
        };
        assert_eq!(
            commit_decision(CommitRule::FirstByte, 200, nothing),
            Some(Outcome::Success(200))
        );
        // firstByte: an error event later is a mid-stream failure, not the attempt's outcome.
        assert_eq!(
            commit_decision(CommitRule::FirstByte, 200, error),
            Some(Outcome::Success(200))
        );
        assert_eq!(commit_decision(CommitRule::FirstToken, 200, nothing), None);
        let content = Heard {
            content: true,
            ..Heard::default()
        };
        assert_eq!(
            commit_decision(CommitRule::FirstToken, 200, content),
            Some(Outcome::Success(200))
        );
        let done = Heard {
            done: true,
            ..Heard::default()
        };
        assert_eq!(
            commit_decision(CommitRule::FirstToken, 200, done),
            Some(Outcome::Success(200))
        );
        // An error event before the first token is the attempt's outcome: a fallback can follow.
        assert_eq!(
            commit_decision(CommitRule::FirstToken, 200, error),
            Some(Outcome::Status(529))
        );
        let both = Heard {
            content: true,
            error: Some(529),
            ..Heard::default()
        };
        assert_eq!(
            commit_decision(CommitRule::FirstToken, 200, both),
            Some(Outcome::Status(529))
        );
        assert_eq!(MAX_HELD_BYTES, 65_536);
    }

    // §5.8 weighted legs
    #[test]
    fn a_leg_owns_a_share_of_the_rolls_equal_to_its_weight() {
        let weights = [70, 20, 10];
        assert_eq!(total_weight(&weights), 100);
        let mut counts = [0usize; 3];
        for roll in 0..total_weight(&weights) {
            counts[pick_leg(&weights, roll)] += 1;
        }
        assert_eq!(counts, [70, 20, 10]);
        assert_eq!(pick_leg(&weights, 69), 0);
        assert_eq!(pick_leg(&weights, 70), 1);
        assert_eq!(pick_leg(&weights, 99), 2);
        // The same roll (a sticky header's hash) is always the same leg.
        assert_eq!(pick_leg(&weights, 85), pick_leg(&weights, 85));
        assert_eq!(total_weight(&[]), 1);
    }

    // §7.1 the reason a walk ended
    #[test]
    fn the_reason_names_the_hop_that_answered_or_the_exhausted_chain() {
        let ok = Outcome::Success(200);
        assert_eq!(reason(ok, false, 0, 1), Reason::ServedByPrimary);
        assert_eq!(reason(ok, false, 2, 3), Reason::ServedViaFallbackHop(2));
        assert_eq!(
            Reason::ServedViaFallbackHop(2).label(),
            "servedViaFallbackHop:2"
        );
        // The last hop's answer matched its triggers: the chain is exhausted, whatever the hop.
        assert_eq!(
            reason(Outcome::Status(503), true, 1, 2),
            Reason::ChainExhausted
        );
        // A 400 no trigger fired on goes back as the hop's answer.
        assert_eq!(
            reason(Outcome::Status(400), false, 0, 1),
            Reason::ServedByPrimary
        );
        let unroutable = Outcome::Error(crate::ErrorKind::Unroutable);
        assert_eq!(reason(unroutable, true, 0, 1), Reason::Unroutable);
        // UNROUTABLE after other attempts is an exhausted chain.
        assert_eq!(reason(unroutable, true, 1, 2), Reason::ChainExhausted);
        assert_eq!(Reason::ChainExhausted.label(), "chainExhausted");
        assert_eq!(Reason::Unroutable.label(), "unroutable");
        assert_eq!(Reason::ServedByPrimary.label(), "servedByPrimary");
    }
}
