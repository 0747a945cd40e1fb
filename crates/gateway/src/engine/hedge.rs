//! Hedging (SPEC §11): when a hop with `hedge.afterMilliseconds` has not committed by then, the
//! next hop starts too, and the first of the two to commit an answer that does not trigger wins.
//! The other attempt's future is dropped — its connection closes — and it is recorded as
//! `CANCELLED` / `hedgeLost`, with no breaker verdict. Nothing of a dropped attempt can reach the
//! caller or any state afterwards: it no longer exists (late-result protection by ownership).
//! When the first to finish triggered, the other is awaited and recorded as usual.

use std::time::Duration;

use sidetrack_resilience::retry::{self, AttemptKind};
use sidetrack_resilience::Outcome;
use tokio::time::Instant;

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
    let hedge_started = Instant::now();
    let hedge_span = w.begin(&hedge, AttemptKind::Hedge);
    let hedge_in_flight = hedge.health.in_flight();
    let second = attempt_one(hedge.dest, next, input);
    tokio::pin!(second);
    let (side, result) = tokio::select! {
        a = &mut first => (Side::First, a),
        b = &mut second => (Side::Hedge, b),
    };
    // The first to finish is recorded; if it does not trigger, it wins and the other is dropped.
    let (done, pending) = match side {
        Side::First => (
            (hop, chosen, kind, span),
            (next, hedge, hedge_started, AttemptKind::Hedge),
        ),
        Side::Hedge => (
            (next, hedge, AttemptKind::Hedge, hedge_span),
            (hop, chosen, started, kind),
        ),
    };
    let hedge_target = match side {
        Side::First => pending.1.health.clone(),
        Side::Hedge => done.1.health.clone(),
    };
    let ran = w.finish(done.0, done.1, result, (done.2, done.3));
    if let Ran::Settled { fired: false, .. } = ran {
        let (lost_hop, lost, lost_started, lost_kind) = pending;
        w.out
            .attempts
            .push(cancelled(lost_hop, &lost, lost_started, lost_kind));
        lost.health
            .metrics
            .attempt(Outcome::Cancelled, lost_started.elapsed(), None);
        let result = if side == Side::Hedge {
            HedgeResult::Won
        } else {
            HedgeResult::Lost
        };
        hedge_target.metrics.hedge(result);
        drop((in_flight, hedge_in_flight));
        return Ran::Settled {
            fired: false,
            hedged: true,
        };
    }
    // The first to finish triggered (or could not be translated): the other decides.
    let (rest_hop, rest, _, rest_kind) = pending;
    let rest_span = if side == Side::First {
        hedge_span
    } else {
        span
    };
    let result = match side {
        Side::First => second.await,
        Side::Hedge => first.await,
    };
    drop((in_flight, hedge_in_flight));
    let ran = w.finish(rest_hop, rest, result, (rest_kind, rest_span));
    let fired = !matches!(ran, Ran::Settled { fired: false, .. });
    let won = side == Side::First && !fired;
    hedge_target.metrics.hedge(if won {
        HedgeResult::Won
    } else {
        HedgeResult::Lost
    });
    Ran::Settled {
        fired,
        hedged: true,
    }
}

/// The record of the attempt that lost the race: dropped before it was decided.
fn cancelled(
    hop: &Hop<'_>,
    lost: &Chosen<'_, '_>,
    started: Instant,
    kind: AttemptKind,
) -> AttemptRecord {
    AttemptRecord {
        hop: hop.index,
        target: lost.health.target.clone(),
        model: lost.health.model.clone(),
        kind,
        outcome: Outcome::Cancelled,
        status: None,
        error_kind: None,
        error_class: None,
        detail: Some("hedgeLost".to_owned()),
        duration_ms: ms(started.elapsed()),
        first_byte_ms: None,
        breaker: sidetrack_resilience::walk::attempt_breaker_label(lost.admitted),
        stopped_by: None,
    }
}
