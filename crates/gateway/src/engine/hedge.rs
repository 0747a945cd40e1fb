//! Hedging (SPEC §11): when a hop with `hedge.afterMilliseconds` has not committed by then, the
//! next hop starts too, and the first of the two to commit an answer that does not trigger wins.
//! The other attempt's future is dropped — its connection closes — and it is recorded as
//! `CANCELLED` / `hedgeLost`, with no breaker verdict. Nothing of a dropped attempt can reach the
//! caller or any state afterwards: it no longer exists (late-result protection by ownership).
//! When the first to finish triggered, the other is awaited and recorded as usual.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sidetrack_resilience::retry::{self, AttemptKind};
use sidetrack_resilience::Outcome;
use tokio::time::Instant;

use super::attempt::Attempt;
use super::{attempt_one, choose, record_skip, Chosen, Ran, Walker};
use crate::observe::metrics::HedgeResult;
use crate::observe::{ms, AttemptRecord};
use crate::routing::Hop;

/// Which of the raced attempts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    First,
    Hedge,
}

/// Runs `chosen` on `hop`, hedged onto `next` after `after`.
pub(super) async fn race<'a, 'p>(
    w: &mut Walker<'_, 'a, 'p>,
    (hop, chosen, kind): (&'a Hop<'p>, Chosen<'a, 'p>, AttemptKind),
    (next, after): (&'a Hop<'p>, Duration),
) -> Ran {
    let input = w.input;
    let started = Instant::now();
    let span = w.begin(&chosen, kind);
    let in_flight = chosen.health.in_flight();
    let first = attempt_one(chosen.dest, hop, input);
    tokio::pin!(first);
    let early = tokio::select! {
        a = &mut first => Some(a),
        () = tokio::time::sleep(after) => None,
    };
    if let Some(a) = early {
        drop(in_flight);
        return w.finish(hop, chosen, a, (kind, span));
    }
    let mut skips = Vec::new();
    let hedge = choose(next, input, (false, true), (&[], false), &mut skips).filter(|_| {
        retry::hedge_now(
            started.elapsed(),
            Some(after),
            false,
            true,
            w.attempts_made,
            input.max_attempts,
        )
    });
    let Some(hedge) = hedge else {
        let a = first.await;
        drop(in_flight);
        return w.finish(hop, chosen, a, (kind, span));
    };
    for (i, why, detail) in skips {
        record_skip(
            &mut w.out,
            input,
            next,
            &next.destinations[i],
            (why, detail),
        );
    }
    w.out.hedged = true;
    let hedge_span = w.begin(&hedge, AttemptKind::Hedge);
    let hedge_in_flight = hedge.health.in_flight();
    let second = attempt_one(hedge.dest, next, input);
    tokio::pin!(second);
    let first_entrant = Entrant {
        hop,
        chosen,
        kind,
        span,
        started,
    };
    let hedge_entrant = Entrant {
        hop: next,
        chosen: hedge,
        kind: AttemptKind::Hedge,
        span: hedge_span,
        started: Instant::now(),
    };
    let ran = settle_pair(w, (first_entrant, first), (hedge_entrant, second)).await;
    drop((in_flight, hedge_in_flight));
    ran
}

/// One of the two raced attempts: where it runs and how it was started.
struct Entrant<'a, 'p> {
    hop: &'a Hop<'p>,
    chosen: Chosen<'a, 'p>,
    kind: AttemptKind,
    span: Option<std::time::SystemTime>,
    started: Instant,
}

/// Both attempts run: the first to finish is recorded; if it does not trigger it wins and the
/// other is dropped (recorded `CANCELLED`); if it triggered, the other is awaited and decides.
async fn settle_pair<'a, 'p, A, B>(
    w: &mut Walker<'_, 'a, 'p>,
    (first, mut a): (Entrant<'a, 'p>, Pin<&mut A>),
    (hedge, mut b): (Entrant<'a, 'p>, Pin<&mut B>),
) -> Ran
where
    A: Future<Output = Result<Attempt, String>>,
    B: Future<Output = Result<Attempt, String>>,
{
    let (side, result) = tokio::select! {
        r = &mut a => (Side::First, r),
        r = &mut b => (Side::Hedge, r),
    };
    let hedge_target = hedge.chosen.health.clone();
    let (done, pending) = match side {
        Side::First => (first, hedge),
        Side::Hedge => (hedge, first),
    };
    let ran = w.finish(done.hop, done.chosen, result, (done.kind, done.span));
    if let Ran::Settled { fired: false, .. } = ran {
        w.out.attempts.push(cancelled(&pending));
        w.input.health.note_first_attempt(&pending.chosen.health);
        let lost = pending.started.elapsed();
        pending
            .chosen
            .health
            .metrics
            .attempt(Outcome::Cancelled, lost, None);
        let won = side == Side::Hedge;
        hedge_target.metrics.hedge(hedge_result(won));
        return Ran::Settled {
            fired: false,
            hedged: true,
        };
    }
    let result = match side {
        Side::First => b.await,
        Side::Hedge => a.await,
    };
    let ran = w.finish(
        pending.hop,
        pending.chosen,
        result,
        (pending.kind, pending.span),
    );
    let fired = !matches!(ran, Ran::Settled { fired: false, .. });
    // The hedge was the one still running: it won if its answer is the one returned.
    hedge_target
        .metrics
        .hedge(hedge_result(side == Side::First && !fired));
    Ran::Settled {
        fired,
        hedged: true,
    }
}

fn hedge_result(won: bool) -> HedgeResult {
    if won {
        HedgeResult::Won
    } else {
        HedgeResult::Lost
    }
}

/// The record of the attempt that lost the race: dropped before it was decided.
fn cancelled(lost: &Entrant<'_, '_>) -> AttemptRecord {
    AttemptRecord {
        hop: lost.hop.index,
        target: lost.chosen.health.target.clone(),
        model: lost.chosen.health.model.clone(),
        kind: lost.kind,
        outcome: Outcome::Cancelled,
        status: None,
        error_kind: None,
        error_class: None,
        detail: Some("hedgeLost".to_owned()),
        duration_ms: ms(lost.started.elapsed()),
        first_byte_ms: None,
        breaker: sidetrack_resilience::walk::attempt_breaker_label(lost.chosen.admitted),
        stopped_by: None,
    }
}
