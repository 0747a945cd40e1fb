//! One test per SPEC §4 validation rule, each asserting the exact `FILE:LINE:COL: path: message`.

use std::time::Duration;

use sidetrack_resilience::{ErrorClass, ErrorKind, TriggerName};

use super::{errors, load, one_error};
use crate::*;

/// Every name `triggerOn.errors` / `retry.on.errors` take, as the unknown-name error lists them.
const ALL_NAMES: &str = "CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, FIRST_TOKEN_TIMEOUT, \
                         STREAM_IDLE_TIMEOUT, CONTEXT_LENGTH_EXCEEDED, CONTENT_FILTERED, \
                         RATE_LIMITED, QUOTA_EXHAUSTED, OVERLOADED";

/// Two valid targets on lines 1–5; tests append from line 6.
const BASE: &str = "\
targets:
  - name: a
    provider: openai
  - name: b
    provider: anthropic
";

/// `BASE` + `rules:` on line 6; the first rule starts on line 7.
fn with_rules(rules: &str) -> String {
    format!("{BASE}rules:\n{rules}")
}

/// A valid one-rule body with a replaceable priority, for tests about other parts.
fn simple_rule(priority: &str) -> String {
    format!("  - priority: {priority}\n    routeToTarget:\n      staticRoute: {{ target: a }}\n")
}

#[test]
fn duplicated_destination_unknown_target_and_status_399_give_exactly_three_errors() {
    let src = with_rules(
        r#"  - name: r
    priority: 10
    routeToTarget:
      staticRoute: { target: a, model: m1 }
      fallback:
        triggerOn: { statusCodes: ["429", "399"] }
        targetFallback:
          - { target: a, model: m1 }
          - { target: nope, model: m2 }
"#,
    );
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:12:43: rules[0].routeToTarget.fallback.triggerOn.statusCodes[1]: status code \
             `399` is outside 400-599 (only 4xx/5xx answers can trigger a fallback)",
            "t.yaml:14:13: rules[0].routeToTarget.fallback.targetFallback[0]: destination a/m1 is \
             already used in this route at rules[0].routeToTarget.staticRoute; every destination \
             in a route must be distinct",
            "t.yaml:15:23: rules[0].routeToTarget.fallback.targetFallback[1].target: unknown \
             target `nope` (defined targets: `a`, `b`)",
        ]
    );
}

// ---- rules: priority, name, matchers --------------------------------------------------------

#[test]
fn priority_must_be_in_range() {
    assert_eq!(
        one_error(&with_rules(&simple_rule("0"))),
        "t.yaml:7:15: rules[0].priority: must be between 1 and 1000000 (got 0)"
    );
    assert_eq!(
        one_error(&with_rules(&simple_rule("1000001"))),
        "t.yaml:7:15: rules[0].priority: must be between 1 and 1000000 (got 1000001)"
    );
    assert!(load(&with_rules(&simple_rule("1000000"))).is_ok());
}

#[test]
fn priorities_must_be_unique() {
    let src = with_rules(&format!("{}{}", simple_rule("5"), simple_rule("5")));
    assert_eq!(
        one_error(&src),
        "t.yaml:10:15: rules[1].priority: priority 5 is already used by rules[0]; priorities \
         must be unique"
    );
}

#[test]
fn priority_is_required() {
    let src = with_rules("  - name: x\n    routeToTarget:\n      staticRoute: { target: a }\n");
    assert_eq!(
        one_error(&src),
        "t.yaml:7:5: rules[0].priority: required key is missing"
    );
}

#[test]
fn rule_name_defaults_to_rule_priority_and_must_be_unique() {
    let c = load(&with_rules(&simple_rule("42"))).unwrap();
    assert_eq!(c.rules[0].name, "rule-42");

    let src = with_rules(
        "  - priority: 1\n    routeToTarget: { staticRoute: { target: a } }\n  - name: rule-1\n    \
         priority: 2\n    routeToTarget: { staticRoute: { target: b } }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:9:11: rules[1].name: rule name `rule-1` is already used by rules[0]"
    );
}

#[test]
fn match_models_needs_a_non_blank_value() {
    let src = with_rules(
        "  - priority: 1\n    matchModels: [\"\", \" \"]\n    routeToTarget: { staticRoute: { target: a } }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:8:18: rules[0].matchModels: needs at least one non-blank value"
    );
    let src = with_rules(
        "  - priority: 1\n    matchModels: { operator: StringEquals, values: [] }\n    \
         routeToTarget: { staticRoute: { target: a } }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:8:52: rules[0].matchModels.values: needs at least one non-blank value"
    );
    // One non-blank value is enough (AgentCore's rule).
    let ok = with_rules(
        "  - priority: 1\n    matchModels: [\"gpt-4o\", \"\"]\n    routeToTarget: { staticRoute: { target: a } }\n",
    );
    assert!(load(&ok).is_ok());
}

#[test]
fn match_principals_needs_a_non_blank_value_and_defaults_to_string_equals() {
    let src = with_rules(
        "  - priority: 1\n    matchPrincipals: []\n    routeToTarget: { staticRoute: { target: a } }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:8:22: rules[0].matchPrincipals: needs at least one non-blank value"
    );
    let ok = with_rules(
        "  - priority: 1\n    matchModels: gpt-4o\n    matchPrincipals: [team-a]\n    \
         routeToTarget: { staticRoute: { target: a } }\n",
    );
    let c = load(&ok).unwrap();
    assert_eq!(
        c.rules[0].match_principals.as_ref().unwrap().operator,
        MatchOperator::StringEquals
    );
    let mm = c.rules[0].match_models.as_ref().unwrap();
    assert_eq!(
        (mm.operator, mm.values.clone()),
        (MatchOperator::StringLike, vec!["gpt-4o".into()])
    );
}

#[test]
fn match_operator_must_be_known() {
    let src = with_rules(
        "  - priority: 1\n    matchModels: { operator: Glob, values: [x] }\n    \
         routeToTarget: { staticRoute: { target: a } }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:8:30: rules[0].matchModels.operator: unknown value `Glob`; expected one of \
         `StringLike`, `StringEquals`"
    );
}

// ---- routeToTarget shape ----------------------------------------------------------------------

#[test]
fn route_to_target_needs_exactly_one_route() {
    let src = with_rules("  - priority: 1\n    routeToTarget: {}\n");
    assert_eq!(
        one_error(&src),
        "t.yaml:8:20: rules[0].routeToTarget: needs one of `staticRoute`, `priorityGroups` or \
         `weightedRoute`"
    );
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         priorityGroups: [ { destinations: [ { target: b } ] } ]\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:9:7: rules[0].routeToTarget: has `staticRoute` and `priorityGroups`; write \
         exactly one route"
    );
}

#[test]
fn fallback_belongs_to_static_route() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      priorityGroups: [ { destinations: [ { target: b } ] } ]\n      \
         fallback: { targetFallback: [ { target: a } ] }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:10:17: rules[0].routeToTarget.fallback: `fallback` belongs beside `staticRoute`; \
         priority groups carry their own `triggerOn` and weighted legs their own `fallback`"
    );
}

const NEEDS_HOPS: &str = "a fallback needs at least one targetFallback, unless it sets \
                          primary-hop keys (retry, firstByteTimeoutMilliseconds, \
                          firstTokenTimeoutMilliseconds, streamIdleTimeoutMilliseconds)";

#[test]
fn a_fallback_needs_at_least_one_target_fallback() {
    // Only a trigger (nothing for a single hop to do with it) or an empty written list.
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback: { triggerOn: { statusCodes: [\"429\"] } }\n",
    );
    assert_eq!(
        one_error(&src),
        format!("t.yaml:10:17: rules[0].routeToTarget.fallback.targetFallback: {NEEDS_HOPS}")
    );
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback:\n        retry: { attempts: 1 }\n        targetFallback: []\n",
    );
    assert_eq!(
        one_error(&src),
        format!("t.yaml:12:25: rules[0].routeToTarget.fallback.targetFallback: {NEEDS_HOPS}")
    );
    // A hedge alone has no next hop to start.
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback: { hedge: { afterMilliseconds: 100 } }\n",
    );
    assert_eq!(
        one_error(&src),
        format!("t.yaml:10:17: rules[0].routeToTarget.fallback.targetFallback: {NEEDS_HOPS}")
    );
}

/// SPEC §11: "A `fallback` block that sets only primary-hop keys (`retry`, timeouts) may omit
/// `targetFallback`: the route is then a single hop with those keys."
#[test]
fn a_fallback_with_only_primary_hop_keys_is_a_single_hop() {
    for body in [
        "retry: { attempts: 2 }",
        "firstByteTimeoutMilliseconds: 1000",
        "firstTokenTimeoutMilliseconds: 1000",
        "streamIdleTimeoutMilliseconds: 1000",
    ] {
        let src = with_rules(&format!(
            "  - priority: 1\n    routeToTarget:\n      staticRoute: {{ target: a }}\n      \
             fallback: {{ {body} }}\n"
        ));
        let c = load(&src).unwrap_or_else(|e| panic!("{body}: {e}"));
        let Route::Static(r) = &c.rules[0].route else {
            panic!("static")
        };
        assert!(r.fallbacks.is_empty(), "{body}");
    }
    let c = load(&with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback: { retry: { attempts: 3 }, streamIdleTimeoutMilliseconds: 700 }\n",
    ))
    .unwrap();
    let Route::Static(r) = &c.rules[0].route else {
        panic!("static")
    };
    assert_eq!(r.primary_policy.retry.as_ref().unwrap().attempts, 3);
    assert_eq!(
        r.primary_policy.stream_idle_timeout,
        Some(std::time::Duration::from_millis(700))
    );
}

#[test]
fn destinations_in_a_route_are_distinct_and_callers_model_is_its_own_identity() {
    // (a, caller's model) and (a, pinned m) are different destinations.
    let ok = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback: { targetFallback: [ { target: a, model: m } ] }\n",
    );
    assert!(load(&ok).is_ok());
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback: { targetFallback: [ { target: b }, { target: a } ] }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:10:52: rules[0].routeToTarget.fallback.targetFallback[1]: destination a (caller's \
         model) is already used in this route at rules[0].routeToTarget.staticRoute; every \
         destination in a route must be distinct"
    );
}

#[test]
fn destinations_are_distinct_across_priority_groups() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      priorityGroups:\n        \
         - destinations: [ { target: a, model: x }, { target: b } ]\n        \
         - destinations: [ { target: b } ]\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:27: rules[0].routeToTarget.priorityGroups[1].destinations[0]: destination b \
         (caller's model) is already used in this route at \
         rules[0].routeToTarget.priorityGroups[0].destinations[1]; every destination in a route \
         must be distinct"
    );
}

#[test]
fn priority_groups_need_groups_and_destinations() {
    let src = with_rules("  - priority: 1\n    routeToTarget:\n      priorityGroups: []\n");
    assert_eq!(
        one_error(&src),
        "t.yaml:9:23: rules[0].routeToTarget.priorityGroups: needs at least one group"
    );
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      priorityGroups: [ { destinations: [] } ]\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:9:41: rules[0].routeToTarget.priorityGroups[0].destinations: needs at least one \
         destination"
    );
}

#[test]
fn every_referenced_target_exists() {
    let src = with_rules("  - priority: 1\n    routeToTarget:\n      staticRoute: { target: c }\n");
    assert_eq!(
        one_error(&src),
        "t.yaml:9:30: rules[0].routeToTarget.staticRoute.target: unknown target `c` (defined \
         targets: `a`, `b`)"
    );
}

#[test]
fn a_pinned_model_must_not_be_blank() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a, model: \"\" }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:9:40: rules[0].routeToTarget.staticRoute.model: must not be blank; omit `model` \
         to send the caller's model"
    );
}

// ---- triggers and timeouts --------------------------------------------------------------------

/// A rule whose primary has `fallback: { <fallback_body>, targetFallback: [b] }` on line 10.
fn with_fallback(fallback_body: &str) -> String {
    with_rules(&format!(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: {{ target: a }}\n      \
         fallback: {{ {fallback_body}, targetFallback: [ {{ target: b }} ] }}\n"
    ))
}

#[test]
fn status_codes_must_be_4xx_or_5xx() {
    assert_eq!(
        one_error(&with_fallback("triggerOn: { statusCodes: [\"600\"] }")),
        "t.yaml:10:46: rules[0].routeToTarget.fallback.triggerOn.statusCodes[0]: status code \
         `600` is outside 400-599 (only 4xx/5xx answers can trigger a fallback)"
    );
    assert_eq!(
        one_error(&with_fallback("triggerOn: { statusCodes: [\"3XX\"] }")),
        "t.yaml:10:46: rules[0].routeToTarget.fallback.triggerOn.statusCodes[0]: status code \
         `3XX` is outside 400-599 (only 4xx/5xx answers can trigger a fallback)"
    );
    assert_eq!(
        one_error(&with_fallback("triggerOn: { statusCodes: [oops] }")),
        "t.yaml:10:46: rules[0].routeToTarget.fallback.triggerOn.statusCodes[0]: `oops` is not a \
         status code (write e.g. \"503\" or \"5XX\")"
    );
}

#[test]
fn status_codes_may_be_integers_or_strings() {
    let c = load(&with_fallback(
        "triggerOn: { statusCodes: [429, \"5XX\", 4xx] }",
    ))
    .unwrap();
    let Route::Static(r) = &c.rules[0].route else {
        panic!("static")
    };
    assert_eq!(
        r.primary_policy.triggers.statuses(),
        &[
            sidetrack_resilience::StatusMatcher::Exact(429),
            sidetrack_resilience::StatusMatcher::Class(5),
            sidetrack_resilience::StatusMatcher::Class(4),
        ]
    );
    assert!(
        r.primary_policy.triggers.errors().is_empty(),
        "a written triggerOn replaces the default"
    );
}

#[test]
fn between_one_and_ten_status_codes() {
    assert_eq!(
        one_error(&with_fallback("triggerOn: { statusCodes: [] }")),
        "t.yaml:10:45: rules[0].routeToTarget.fallback.triggerOn.statusCodes: needs 1 to 10 \
         status codes (got 0)"
    );
    let eleven = (0..11)
        .map(|i| (500 + i).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(
        one_error(&with_fallback(&format!(
            "triggerOn: {{ statusCodes: [{eleven}] }}"
        ))),
        "t.yaml:10:45: rules[0].routeToTarget.fallback.triggerOn.statusCodes: needs 1 to 10 \
         status codes (got 11)"
    );
}

#[test]
fn error_names_must_be_known() {
    assert_eq!(
        one_error(&with_fallback(
            "triggerOn: { errors: [CONNECTION_ERROR, TIMEOUT] }"
        )),
        format!(
            "t.yaml:10:59: rules[0].routeToTarget.fallback.triggerOn.errors[1]: unknown error \
             `TIMEOUT` (expected one of {ALL_NAMES})"
        )
    );
}

#[test]
fn trigger_on_must_list_something() {
    assert_eq!(
        one_error(&with_fallback("triggerOn: { errors: [] }")),
        "t.yaml:10:30: rules[0].routeToTarget.fallback.triggerOn: lists no statusCodes and no \
         errors, so this hop could never fall back; omit `triggerOn` to use the defaults"
    );
}

#[test]
fn first_byte_timeout_is_50_to_900000() {
    assert_eq!(
        one_error(&with_fallback("firstByteTimeoutMilliseconds: 49")),
        "t.yaml:10:49: rules[0].routeToTarget.fallback.firstByteTimeoutMilliseconds: must be \
         between 50 and 900000 (got 49)"
    );
    assert_eq!(
        one_error(&with_fallback("firstByteTimeoutMilliseconds: 900001")),
        "t.yaml:10:49: rules[0].routeToTarget.fallback.firstByteTimeoutMilliseconds: must be \
         between 50 and 900000 (got 900001)"
    );
    // The same bound on a fallback hop, at its own path.
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      fallback:\n        \
         targetFallback:\n          - target: b\n            firstByteTimeoutMilliseconds: 10\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:13:43: rules[0].routeToTarget.fallback.targetFallback[0].\
         firstByteTimeoutMilliseconds: must be between 50 and 900000 (got 10)"
    );
}

// ---- the retry controller's keys (SPEC §11) -----------------------------------------------------

/// The primary's policy of a config with one static rule.
fn primary_policy(c: &Config) -> &HopPolicy {
    match &c.rules[0].route {
        Route::Static(r) => &r.primary_policy,
        _ => panic!("static"),
    }
}

#[test]
fn trigger_errors_take_kinds_stream_timeouts_and_classes() {
    let c = load(&with_fallback(
        "triggerOn: { errors: [CONTEXT_LENGTH_EXCEEDED, FIRST_TOKEN_TIMEOUT, RATE_LIMITED, \
         UNROUTABLE, STREAM_IDLE_TIMEOUT, CONTENT_FILTERED, QUOTA_EXHAUSTED, OVERLOADED] }, \
         retry: { on: { errors: [OVERLOADED, STREAM_IDLE_TIMEOUT] } }",
    ))
    .unwrap();
    let p = primary_policy(&c);
    assert_eq!(
        p.triggers.errors(),
        vec![
            ErrorKind::Unroutable,
            ErrorKind::FirstTokenTimeout,
            ErrorKind::StreamIdleTimeout
        ]
    );
    assert_eq!(p.triggers.classes(), ErrorClass::ALL.to_vec());
    let on = p.retry.as_ref().unwrap().on.as_ref().unwrap();
    assert_eq!(
        on.names(),
        vec![
            TriggerName::Kind(ErrorKind::StreamIdleTimeout),
            TriggerName::Class(ErrorClass::Overloaded)
        ]
    );
    assert!(!on.is_default());
    assert!(std::ptr::eq(p.retry_on(), on));
}

#[test]
fn first_token_and_stream_idle_timeouts_are_50_to_900000() {
    for key in [
        "firstTokenTimeoutMilliseconds",
        "streamIdleTimeoutMilliseconds",
    ] {
        for bad in ["49", "900001"] {
            assert_eq!(
                one_error(&with_fallback(&format!("{key}: {bad}"))),
                format!(
                    "t.yaml:10:50: rules[0].routeToTarget.fallback.{key}: must be between 50 and \
                     900000 (got {bad})"
                )
            );
        }
    }
    let c = load(&with_fallback(
        "firstTokenTimeoutMilliseconds: 50, streamIdleTimeoutMilliseconds: 900000",
    ))
    .unwrap();
    let p = primary_policy(&c);
    assert_eq!(p.first_token_timeout, Some(Duration::from_millis(50)));
    assert_eq!(p.stream_idle_timeout, Some(Duration::from_millis(900_000)));
    assert!(p.retry.is_none() && p.hedge.is_none());
}

#[test]
fn retry_defaults_and_the_hops_triggers() {
    let c = load(&with_fallback(
        "triggerOn: { statusCodes: [\"429\"] }, retry: {}",
    ))
    .unwrap();
    let p = primary_policy(&c);
    let r = p.retry.as_ref().unwrap();
    assert_eq!(r.attempts, 0);
    assert_eq!(r.backoff, Duration::from_millis(100));
    assert_eq!(r.max_backoff, Duration::from_millis(2000));
    assert!(r.on.is_none());
    assert!(
        std::ptr::eq(p.retry_on(), &p.triggers),
        "on omitted = the hop's triggers"
    );
    let c = load(&with_fallback(
        "retry: { attempts: 10, backoffMilliseconds: 60000, maxBackoffMilliseconds: 300000 }",
    ))
    .unwrap();
    let r = primary_policy(&c).retry.clone().unwrap();
    assert_eq!(
        (r.attempts, r.backoff, r.max_backoff),
        (
            10,
            Duration::from_millis(60_000),
            Duration::from_millis(300_000)
        )
    );
    let c = load(&with_fallback(
        "retry: { attempts: 0, backoffMilliseconds: 0, maxBackoffMilliseconds: 0 }",
    ))
    .unwrap();
    let r = primary_policy(&c).retry.clone().unwrap();
    assert_eq!((r.backoff, r.max_backoff), (Duration::ZERO, Duration::ZERO));
}

#[test]
fn retry_attempts_is_0_to_10() {
    for bad in ["-1", "11"] {
        assert_eq!(
            one_error(&with_fallback(&format!("retry: {{ attempts: {bad} }}"))),
            format!(
                "t.yaml:10:38: rules[0].routeToTarget.fallback.retry.attempts: must be between 0 \
                 and 10 (got {bad})"
            )
        );
    }
}

#[test]
fn retry_backoffs_are_in_range() {
    for bad in ["-1", "60001"] {
        assert_eq!(
            one_error(&with_fallback(&format!(
                "retry: {{ backoffMilliseconds: {bad}, maxBackoffMilliseconds: 300000 }}"
            ))),
            format!(
                "t.yaml:10:49: rules[0].routeToTarget.fallback.retry.backoffMilliseconds: must be \
                 between 0 and 60000 (got {bad})"
            )
        );
    }
    for bad in ["-1", "300001"] {
        assert_eq!(
            one_error(&with_fallback(&format!(
                "retry: {{ maxBackoffMilliseconds: {bad} }}"
            ))),
            format!(
                "t.yaml:10:52: rules[0].routeToTarget.fallback.retry.maxBackoffMilliseconds: must \
                 be between 0 and 300000 (got {bad})"
            )
        );
    }
}

#[test]
fn max_backoff_is_at_least_backoff() {
    assert_eq!(
        one_error(&with_fallback(
            "retry: { backoffMilliseconds: 500, maxBackoffMilliseconds: 400 }"
        )),
        "t.yaml:10:78: rules[0].routeToTarget.fallback.retry.maxBackoffMilliseconds: \
         maxBackoffMilliseconds (400) must be at least backoffMilliseconds (500)"
    );
    // Against the default maximum (2000), at the written base.
    assert_eq!(
        one_error(&with_fallback("retry: { backoffMilliseconds: 3000 }")),
        "t.yaml:10:49: rules[0].routeToTarget.fallback.retry.backoffMilliseconds: \
         maxBackoffMilliseconds (2000) must be at least backoffMilliseconds (3000)"
    );
    // Equal is fine.
    assert!(load(&with_fallback(
        "retry: { backoffMilliseconds: 500, maxBackoffMilliseconds: 500 }"
    ))
    .is_ok());
}

#[test]
fn retry_on_is_checked_like_trigger_on() {
    assert_eq!(
        one_error(&with_fallback("retry: { on: {} }")),
        "t.yaml:10:32: rules[0].routeToTarget.fallback.retry.on: lists no statusCodes and no \
         errors, so no outcome could retry; omit `on` to retry on the hop's triggers"
    );
    assert_eq!(
        one_error(&with_fallback("retry: { on: { errors: [NOPE] } }")),
        format!(
            "t.yaml:10:43: rules[0].routeToTarget.fallback.retry.on.errors[0]: unknown error \
             `NOPE` (expected one of {ALL_NAMES})"
        )
    );
    assert_eq!(
        one_error(&with_fallback("retry: { on: { statusCodes: [\"200\"] } }")),
        "t.yaml:10:48: rules[0].routeToTarget.fallback.retry.on.statusCodes[0]: status code \
         `200` is outside 400-599 (only 4xx/5xx answers can trigger a fallback)"
    );
}

#[test]
fn unknown_keys_in_retry_and_hedge_are_refused() {
    assert_eq!(
        one_error(&with_fallback("retry: { attempt: 1 }")),
        "t.yaml:10:28: rules[0].routeToTarget.fallback.retry.attempt: unknown key; expected one \
         of `attempts`, `backoffMilliseconds`, `maxBackoffMilliseconds`, `on`"
    );
    assert_eq!(
        one_error(&with_fallback("retry: { on: { status: [\"429\"] } }")),
        "t.yaml:10:34: rules[0].routeToTarget.fallback.retry.on.status: unknown key; expected \
         `statusCodes` or `errors`"
    );
    assert_eq!(
        one_error(&with_fallback(
            "hedge: { afterMilliseconds: 100, after: 1 }"
        )),
        "t.yaml:10:52: rules[0].routeToTarget.fallback.hedge.after: unknown key; expected \
         `afterMilliseconds`"
    );
    assert_eq!(
        one_error(&with_fallback("hedge: {}")),
        "t.yaml:10:26: rules[0].routeToTarget.fallback.hedge.afterMilliseconds: required key is \
         missing"
    );
    assert_eq!(
        one_error(&with_fallback("retry: 2")),
        "t.yaml:10:26: rules[0].routeToTarget.fallback.retry: invalid type: integer `2`, \
         expected struct RawRetry"
    );
}

#[test]
fn hedge_after_is_10_to_900000() {
    for bad in ["9", "900001"] {
        assert_eq!(
            one_error(&with_fallback(&format!(
                "hedge: {{ afterMilliseconds: {bad} }}"
            ))),
            format!(
                "t.yaml:10:47: rules[0].routeToTarget.fallback.hedge.afterMilliseconds: must be \
                 between 10 and 900000 (got {bad})"
            )
        );
    }
    let c = load(&with_fallback("hedge: { afterMilliseconds: 10 }")).unwrap();
    assert_eq!(
        primary_policy(&c).hedge,
        Some(HedgePolicy {
            after: Duration::from_millis(10)
        })
    );
}

/// The keys sit on every kind of hop, at that hop's own path, and are never inherited.
#[test]
fn hop_keys_on_every_hop_kind_are_never_inherited() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      fallback:\n        \
         retry: { attempts: 2 }\n        hedge: { afterMilliseconds: 500 }\n        targetFallback:\n          \
         - target: b\n            streamIdleTimeoutMilliseconds: 900\n",
    );
    let c = load(&src).unwrap();
    let Route::Static(r) = &c.rules[0].route else {
        panic!("static")
    };
    assert_eq!(r.primary_policy.retry.as_ref().unwrap().attempts, 2);
    assert!(r.primary_policy.stream_idle_timeout.is_none());
    let hop = &r.fallbacks[0].policy;
    assert!(hop.retry.is_none() && hop.hedge.is_none(), "not inherited");
    assert_eq!(hop.stream_idle_timeout, Some(Duration::from_millis(900)));

    // A targetFallback entry, at its own line.
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      fallback:\n        \
         targetFallback:\n          - target: b\n            retry: { attempts: 12 }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:13:32: rules[0].routeToTarget.fallback.targetFallback[0].retry.attempts: must be \
         between 0 and 10 (got 12)"
    );
    // A priority group.
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      priorityGroups:\n        \
         - destinations: [ { target: a } ]\n          hedge: { afterMilliseconds: 5 }\n        \
         - destinations: [ { target: b } ]\n          firstTokenTimeoutMilliseconds: 40\n",
    );
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:11:39: rules[0].routeToTarget.priorityGroups[0].hedge.afterMilliseconds: must \
             be between 10 and 900000 (got 5)",
            "t.yaml:13:42: rules[0].routeToTarget.priorityGroups[1].firstTokenTimeoutMilliseconds: \
             must be between 50 and 900000 (got 40)",
        ]
    );
    // A weighted leg's fallback (a single hop with only a retry is fine there too).
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs:\n          \
         - { target: a, weight: 1, fallback: { retry: { attempts: 1, backoffMilliseconds: 70000 } } }\n          \
         - { target: b, weight: 1 }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:92: rules[0].routeToTarget.weightedRoute.legs[0].fallback.retry.\
         backoffMilliseconds: must be between 0 and 60000 (got 70000)"
    );
}

#[test]
fn max_attempts_is_1_to_100() {
    for bad in ["0", "101"] {
        assert_eq!(
            one_error(&format!("{BASE}defaults:\n  maxAttempts: {bad}\n")),
            format!("t.yaml:7:16: defaults.maxAttempts: must be between 1 and 100 (got {bad})")
        );
    }
    assert_eq!(load(BASE).unwrap().defaults.max_attempts, 8);
    let c = load(&format!("{BASE}defaults:\n  maxAttempts: 100\n")).unwrap();
    assert_eq!(c.defaults.max_attempts, 100);
    let c = load(&format!("{BASE}defaults:\n  maxAttempts: 1\n")).unwrap();
    assert_eq!(c.defaults.max_attempts, 1);
}

#[test]
fn retry_budget_is_in_range() {
    let budget = |body: &str| format!("{BASE}defaults:\n  retryBudget: {{ {body} }}\n");
    for bad in ["-0.1", "10.5"] {
        assert_eq!(
            one_error(&budget(&format!("ratio: {bad}"))),
            format!(
                "t.yaml:7:25: defaults.retryBudget.ratio: must be between 0 and 10 (got {bad})"
            )
        );
    }
    assert_eq!(
        one_error(&budget("ratio: .nan")),
        "t.yaml:7:25: defaults.retryBudget.ratio: infinite and NaN numbers are not supported"
    );
    for bad in ["-1", "100001"] {
        assert_eq!(
            one_error(&budget(&format!("minPerSecond: {bad}"))),
            format!(
                "t.yaml:7:32: defaults.retryBudget.minPerSecond: must be between 0 and 100000 \
                 (got {bad})"
            )
        );
    }
    assert_eq!(
        one_error(&budget("ratio: 0.1, windowSeconds: 10")),
        "t.yaml:7:30: defaults.retryBudget.windowSeconds: unknown key; expected `ratio` or \
         `minPerSecond`"
    );
    let d = load(BASE).unwrap().defaults.retry_budget;
    assert_eq!((d.ratio, d.min_per_second), (0.2, 5.0));
    let d = load(&budget("ratio: 10, minPerSecond: 0"))
        .unwrap()
        .defaults
        .retry_budget;
    assert_eq!((d.ratio, d.min_per_second), (10.0, 0.0));
    let d = load(&budget("ratio: 0, minPerSecond: 100000"))
        .unwrap()
        .defaults
        .retry_budget;
    assert_eq!((d.ratio, d.min_per_second), (0.0, 100_000.0));
}

#[test]
fn caller_deadline_and_overrides_are_booleans_default_true() {
    let c = load(BASE).unwrap();
    assert!(c.server.caller_deadline && c.server.caller_overrides);
    let c = load(&with_server(
        "  callerDeadline: false\n  callerOverrides: false\n",
    ))
    .unwrap();
    assert!(!c.server.caller_deadline && !c.server.caller_overrides);
    assert_eq!(
        one_error(&with_server("  callerDeadline: sometimes\n")),
        "t.yaml:7:19: server.callerDeadline: invalid type: string \"sometimes\", expected a \
         boolean"
    );
}

#[test]
fn breaker_mode_is_enabled_or_disabled() {
    assert_eq!(
        one_error(&with_fallback("circuitBreaker: { mode: OFF }")),
        "t.yaml:10:43: rules[0].routeToTarget.fallback.circuitBreaker.mode: unknown value `OFF`; \
         expected one of `ENABLED`, `DISABLED`"
    );
    let c = load(&with_fallback("circuitBreaker: { mode: DISABLED }")).unwrap();
    let Route::Static(r) = &c.rules[0].route else {
        panic!("static")
    };
    assert_eq!(r.breaker_mode, BreakerMode::Disabled);
}

// ---- weighted routes ---------------------------------------------------------------------------

#[test]
fn weights_are_positive() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs:\n          \
         - { target: a, weight: 0 }\n          - { target: b, weight: 1 }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:34: rules[0].routeToTarget.weightedRoute.legs[0].weight: must be at least 1 \
         (got 0)"
    );
}

#[test]
fn weighted_route_needs_two_legs() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs:\n          \
         - { target: a, weight: 1 }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:11: rules[0].routeToTarget.weightedRoute.legs: needs at least two legs (got 1)"
    );
}

#[test]
fn weighted_legs_go_to_different_destinations_but_may_fall_back_to_each_other() {
    let ok = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs:\n          \
         - { target: a, weight: 1, fallback: { targetFallback: [ { target: b } ] } }\n          \
         - { target: b, weight: 1, fallback: { targetFallback: [ { target: a } ] } }\n",
    );
    assert!(load(&ok).is_ok());
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs:\n          \
         - { target: a, weight: 1 }\n          \
         - { target: a, weight: 1, fallback: { targetFallback: [ { target: a } ] } }\n",
    );
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:12:13: rules[0].routeToTarget.weightedRoute.legs[1]: destination a (caller's \
             model) is already used in this route at rules[0].routeToTarget.weightedRoute.legs[0]; \
             every destination in a route must be distinct",
            "t.yaml:12:67: rules[0].routeToTarget.weightedRoute.legs[1].fallback.targetFallback[0]: \
             destination a (caller's model) is already used in this route at \
             rules[0].routeToTarget.weightedRoute.legs[1]; every destination in a route must be \
             distinct",
        ]
    );
}

#[test]
fn stickiness_header_must_be_a_header_name() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      weightedRoute:\n        legs: [ { target: a, \
         weight: 1 }, { target: b, weight: 1 } ]\n        stickiness: { header: \"x session\" }\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:31: rules[0].routeToTarget.weightedRoute.stickiness.header: `x session` is not \
         a valid HTTP header name"
    );
}

// ---- targets -----------------------------------------------------------------------------------

#[test]
fn at_least_one_target() {
    assert_eq!(
        one_error("server: {}\n"),
        "t.yaml:1:1: targets: at least one target is required"
    );
}

#[test]
fn target_names_are_unique_and_slash_free() {
    let src = "targets:\n  - name: a\n    provider: openai\n  - name: a\n    provider: openai\n  \
               - name: x/y\n    provider: openai\n";
    assert_eq!(
        errors(src),
        vec![
            "t.yaml:4:11: targets[1].name: duplicate target name `a` (first defined at targets[0])",
            "t.yaml:6:11: targets[2].name: must not contain `/` (a model written `target/model` \
             pins a target)",
        ]
    );
}

#[test]
fn provider_must_be_known() {
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: cohere\n"),
        "t.yaml:3:15: targets[0].provider: unknown value `cohere`; expected one of `openai`, \
         `anthropic`, `bedrock`, `azure`, `vertex`, `gemini`"
    );
}

#[test]
fn bedrock_needs_region_or_base_url() {
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: bedrock\n"),
        "t.yaml:2:5: targets[0].region: a bedrock target needs `region` or `baseUrl`"
    );
    let c =
        load("targets:\n  - name: a\n    provider: bedrock\n    baseUrl: http://127.0.0.1:9001/\n")
            .unwrap();
    assert_eq!(
        c.targets[0].base_url, "http://127.0.0.1:9001",
        "trailing slash trimmed"
    );
}

#[test]
fn default_base_urls_for_openai_and_anthropic() {
    let c = load(BASE).unwrap();
    assert_eq!(c.targets[0].base_url, "https://api.openai.com/v1");
    assert_eq!(c.targets[1].base_url, "https://api.anthropic.com");
}

#[test]
fn base_url_must_be_http() {
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: openai\n    baseUrl: api.openai.com\n"),
        "t.yaml:4:14: targets[0].baseUrl: `api.openai.com` is not an http:// or https:// URL"
    );
}

#[test]
fn base_url_must_not_carry_credentials() {
    // It would be sent in `Host` and shown by /admin/config; the message never echoes it.
    assert_eq!(
        one_error(
            "targets:\n  - name: a\n    provider: openai\n    baseUrl: https://u:hunter22@api.example.com/v1\n"
        ),
        "t.yaml:4:14: targets[0].baseUrl: must not carry credentials (user info in \
         `https://u:***@api.example.com/v1`); give the key as `apiKey`"
    );
    assert_eq!(
        one_error(
            "targets:\n  - name: a\n    provider: openai\n    baseUrl: \"http://tok3n@10.0.0.1:8000?key=k\"\n"
        ),
        "t.yaml:4:14: targets[0].baseUrl: must not carry credentials (user info in \
         `http://***@10.0.0.1:8000?key=***`); give the key as `apiKey`"
    );
    // An `@` in the path or query is not user info.
    assert!(load(
        "targets:\n  - name: a\n    provider: openai\n    baseUrl: http://h:1/v1/@team?x=a@b\n"
    )
    .is_ok());
    // A mistyped URL is shown without its credentials either.
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: openai\n    baseUrl: u:pw@api.example.com\n"),
        "t.yaml:4:14: targets[0].baseUrl: `u:***@api.example.com` is not an http:// or https:// URL"
    );
}

#[test]
fn connect_timeout_is_1_to_300000() {
    assert_eq!(
        one_error(
            "targets:\n  - name: a\n    provider: openai\n    connectTimeoutMilliseconds: 0\n"
        ),
        "t.yaml:4:33: targets[0].connectTimeoutMilliseconds: must be between 1 and 300000 (got 0)"
    );
    assert_eq!(
        one_error(
            "targets:\n  - name: a\n    provider: openai\n    connectTimeoutMilliseconds: 300001\n"
        ),
        "t.yaml:4:33: targets[0].connectTimeoutMilliseconds: must be between 1 and 300000 (got \
         300001)"
    );
}

#[test]
fn target_models_and_capabilities() {
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: openai\n    models: [\"gpt-*\", \"\"]\n"),
        "t.yaml:4:23: targets[0].models[1]: must not be blank"
    );
    assert_eq!(
        one_error("targets:\n  - name: a\n    provider: openai\n    models: []\n"),
        "t.yaml:4:13: targets[0].models: empty list; omit `models` to let this target serve any \
         model it is sent"
    );
    assert_eq!(
        one_error(
            "targets:\n  - name: a\n    provider: openai\n    capabilities: { contextWindow: 0 }\n"
        ),
        "t.yaml:4:36: targets[0].capabilities.contextWindow: must be greater than 0 (got 0)"
    );
}

// ---- breaker knobs -----------------------------------------------------------------------------

fn with_breaker(knobs: &str) -> String {
    format!("{BASE}defaults:\n  circuitBreaker: {{ {knobs} }}\n")
}

#[test]
fn breaker_knobs_in_range() {
    let cases = [
        (
            "consecutiveFailures: 0",
            "consecutiveFailures: must be at least 1 (got 0)",
        ),
        (
            "openMilliseconds: 0",
            "openMilliseconds: must be at least 1 (got 0)",
        ),
        (
            "backoffMultiplier: 0.5",
            "backoffMultiplier: must be at least 1.0 (got 0.5)",
        ),
        (
            "halfOpenProbes: 0",
            "halfOpenProbes: must be at least 1 (got 0)",
        ),
        (
            "healthThreshold: 101",
            "healthThreshold: must be between 0 and 100 (got 101)",
        ),
        (
            "restoreHealth: -1",
            "restoreHealth: must be between 0 and 100 (got -1)",
        ),
        (
            "unhealthyCondition: \"\"",
            "unhealthyCondition: must not be blank",
        ),
    ];
    for (knob, message) in cases {
        let col = "  circuitBreaker: { ".len() + knob.find(':').unwrap() + 3;
        assert_eq!(
            one_error(&with_breaker(knob)),
            format!("t.yaml:7:{col}: defaults.circuitBreaker.{message}"),
            "{knob}"
        );
    }
    // A CEL syntax error is located at the expression; the parser's own words follow.
    let got = one_error(&with_breaker("unhealthyCondition: \"response.code ==\""));
    assert!(
        got.starts_with(
            "t.yaml:7:41: defaults.circuitBreaker.unhealthyCondition: invalid CEL expression: "
        ),
        "{got}"
    );
}

#[test]
fn max_open_is_at_least_open() {
    assert_eq!(
        one_error(&with_breaker("openMilliseconds: 600000")),
        "t.yaml:7:39: defaults.circuitBreaker.openMilliseconds: maxOpenMilliseconds (300000) \
         must be at least openMilliseconds (600000)"
    );
    // A target's layer is checked against what it inherits.
    let src =
        "defaults:\n  circuitBreaker: { maxOpenMilliseconds: 60000 }\ntargets:\n  - name: a\n    \
               provider: openai\n    circuitBreaker: { openMilliseconds: 90000 }\n";
    assert_eq!(
        one_error(src),
        "t.yaml:6:41: targets[0].circuitBreaker.openMilliseconds: maxOpenMilliseconds (60000) \
         must be at least openMilliseconds (90000)"
    );
}

// ---- server ------------------------------------------------------------------------------------

fn with_server(body: &str) -> String {
    format!("{BASE}server:\n{body}")
}

#[test]
fn listen_and_admin_are_socket_addresses_and_differ() {
    assert_eq!(
        one_error(&with_server("  listen: localhost:8080\n")),
        "t.yaml:7:11: server.listen: `localhost:8080` is not a socket address (write IP:PORT, \
         e.g. 127.0.0.1:8080)"
    );
    assert_eq!(
        one_error(&with_server("  listen: 0.0.0.0:9090\n")),
        "t.yaml:7:3: server.admin: the admin listener 127.0.0.1:9090 must differ from \
         server.listen 0.0.0.0:9090"
    );
    assert_eq!(
        one_error(&with_server(
            "  listen: 127.0.0.1:7000\n  admin: 127.0.0.1:7000\n"
        )),
        "t.yaml:8:10: server.admin: the admin listener 127.0.0.1:7000 must differ from \
         server.listen 127.0.0.1:7000"
    );
    assert!(load(&with_server(
        "  listen: \"[::1]:7000\"\n  admin: 127.0.0.1:7000\n"
    ))
    .is_ok());
    // An unparsable listen address is reported once, not also as a collision.
    assert_eq!(
        one_error(&with_server("  listen: nowhere\n  admin: 127.0.0.1:8080\n")),
        "t.yaml:7:11: server.listen: `nowhere` is not a socket address (write IP:PORT, e.g. \
         127.0.0.1:8080)"
    );
}

#[test]
fn server_sizes_and_timeouts_are_positive() {
    let src = with_server(
        "  maxRequestBytes: 0\n  requestTimeoutMilliseconds: 0\n  shutdownGraceMilliseconds: -5\n",
    );
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:7:20: server.maxRequestBytes: must be greater than 0 (got 0)",
            "t.yaml:8:31: server.requestTimeoutMilliseconds: must be greater than 0 (got 0)",
            "t.yaml:9:30: server.shutdownGraceMilliseconds: must be greater than 0 (got -5)",
        ]
    );
}

#[test]
fn server_enumerations() {
    let src = with_server("  callerRetryHint: always\n  streamCommit: first_token\n");
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:7:20: server.callerRetryHint: unknown value `always`; expected one of `auto`, \
             `off`",
            "t.yaml:8:17: server.streamCommit: unknown value `first_token`; expected one of \
             `firstToken`, `firstByte`",
        ]
    );
}

// ---- secrets and auth --------------------------------------------------------------------------

#[test]
fn env_secrets_must_exist_and_never_echo_values() {
    let src = "server:\n  adminToken: env:NOPE\ntargets:\n  - name: a\n    provider: openai\n    \
               apiKey: env:EMPTY_VAR\n  - name: b\n    provider: openai\n    apiKey: \"env:\"\n";
    assert_eq!(
        errors(src),
        vec![
            "t.yaml:2:15: server.adminToken: environment variable `NOPE` is not set",
            "t.yaml:6:13: targets[0].apiKey: environment variable `EMPTY_VAR` is set but empty",
            "t.yaml:9:13: targets[1].apiKey: `env:` needs a variable name, e.g. env:OPENAI_API_KEY",
        ]
    );
}

#[test]
fn sha256_keys_are_64_hex_digits() {
    let src = format!(
        "{BASE}auth:\n  keys:\n    - principal: p\n      key: sha256:abc\n    - principal: q\n      \
         key: sha256:{}\n",
        "g".repeat(64)
    );
    let msg = "`sha256:` must be followed by 64 hex digits (the key's SHA-256)";
    assert_eq!(
        errors(&src),
        vec![
            format!("t.yaml:9:12: auth.keys[0].key: {msg}"),
            format!("t.yaml:11:12: auth.keys[1].key: {msg}"),
        ]
    );
}

#[test]
fn auth_keys_are_checked() {
    assert_eq!(
        one_error(&format!("{BASE}auth:\n  keys: []\n")),
        "t.yaml:7:9: auth.keys: lists no keys; omit `auth` to run without authentication"
    );
    let src = format!(
        "{BASE}auth:\n  keys:\n    - principal: \" \"\n      key: k\n      models: []\n      \
         limits: {{ requestsPerMinute: 0 }}\n"
    );
    assert_eq!(
        errors(&src),
        vec![
            "t.yaml:8:18: auth.keys[0].principal: must not be blank",
            "t.yaml:10:15: auth.keys[0].models: an empty allow-list permits no model; omit \
             `models` to allow every model",
            "t.yaml:11:36: auth.keys[0].limits.requestsPerMinute: must be greater than 0 (got 0)",
        ]
    );
}

#[test]
fn redis_url_is_a_redis_url() {
    assert_eq!(
        one_error(&format!("{BASE}state:\n  redis: {{ url: \"http://x\" }}\n")),
        "t.yaml:7:17: state.redis.url: must start with redis://, rediss:// or unix://"
    );
}

// ---- logging -----------------------------------------------------------------------------------

#[test]
fn logging_level_and_routing() {
    assert_eq!(
        one_error(&format!("{BASE}logging:\n  level: verbose\n")),
        "t.yaml:7:10: logging.level: unknown value `verbose`; expected one of `trace`, `debug`, \
         `info`, `warn`, `error`"
    );
    let c = load(&format!(
        "{BASE}logging:\n  routing: /var/log/sidetrack.jsonl\n  level: debug\n"
    ))
    .unwrap();
    assert_eq!(
        c.logging.routing,
        RoutingSink::File("/var/log/sidetrack.jsonl".into())
    );
    assert_eq!(c.logging.level, "debug");
    let c = load(&format!("{BASE}logging:\n  routing: \"off\"\n")).unwrap();
    assert_eq!(c.logging.routing, RoutingSink::Off);
    assert_eq!(
        one_error(&format!("{BASE}logging:\n  routing: \"\"\n")),
        "t.yaml:7:12: logging.routing: must be stdout, stderr, off or a file path"
    );
}

#[test]
fn otlp_endpoint_must_not_carry_credentials() {
    assert_eq!(
        one_error(&format!(
            "{BASE}logging:\n  otlpEndpoint: https://me:pw@collector:4318\n"
        )),
        "t.yaml:7:17: logging.otlpEndpoint: must not carry credentials (user info in \
         `https://me:***@collector:4318`); send them as headers with OTEL_EXPORTER_OTLP_HEADERS"
    );
    assert!(load(&format!(
        "{BASE}logging:\n  otlpEndpoint: http://collector:4318\n"
    ))
    .is_ok());
}

// ---- structural errors -------------------------------------------------------------------------

#[test]
fn unknown_keys_point_at_the_key() {
    let src = with_rules(
        "  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
         fallback:\n        targetFallback: [ { target: b, tigger: x } ]\n",
    );
    assert_eq!(
        one_error(&src),
        "t.yaml:11:40: rules[0].routeToTarget.fallback.targetFallback[0].tigger: unknown key; \
         expected one of `target`, `model`, `triggerOn`, `firstByteTimeoutMilliseconds`, \
         `firstTokenTimeoutMilliseconds`, `streamIdleTimeoutMilliseconds`, `retry`, `hedge`"
    );
}

#[test]
fn wrong_types_point_at_the_value() {
    assert_eq!(
        one_error(&with_server("  watchConfig: sometimes\n")),
        "t.yaml:7:16: server.watchConfig: invalid type: string \"sometimes\", expected a boolean"
    );
    assert_eq!(
        one_error(&with_rules(&simple_rule("high"))),
        "t.yaml:7:15: rules[0].priority: invalid type: string \"high\", expected i64"
    );
}

#[test]
fn yaml_syntax_errors_are_located() {
    let e = one_error("targets:\n  - name: a\n   provider: openai\n");
    assert!(e.starts_with("t.yaml:3:"), "{e}");
    assert!(e.contains("YAML syntax error"), "{e}");
}

#[test]
fn idempotency_defaults_values_and_located_range_errors() {
    let c = load(BASE).unwrap();
    assert_eq!(c.idempotency, Idempotency::default());
    assert_eq!(c.idempotency.ttl, Duration::from_millis(86_400_000));
    let dump = c.redacted_json();
    assert_eq!(dump["idempotency"]["ttlMilliseconds"], 86_400_000);
    assert_eq!(dump["idempotency"]["maxEntries"], 100_000);

    let c = load(&format!(
        "{BASE}idempotency:\n  ttlMilliseconds: 5000\n  maxEntries: 10\n  maxAnswerBytes: 4096\n  maxBytes: 65536\n"
    ))
    .unwrap();
    assert_eq!(c.idempotency.ttl, Duration::from_millis(5000));
    assert_eq!(
        (
            c.idempotency.max_entries,
            c.idempotency.max_answer_bytes,
            c.idempotency.max_bytes
        ),
        (10, 4096, 65536)
    );

    assert_eq!(
        one_error(&format!("{BASE}idempotency:\n  ttlMilliseconds: 999\n")),
        "t.yaml:7:20: idempotency.ttlMilliseconds: must be between 1000 and 31536000000 (got 999)"
    );
    assert_eq!(
        one_error(&format!("{BASE}idempotency:\n  maxEntries: 0\n")),
        "t.yaml:7:15: idempotency.maxEntries: must be between 1 and 10000000 (got 0)"
    );
    assert!(
        one_error(&format!("{BASE}idempotency:\n  ttl: 5\n"))
            .contains("idempotency.ttl: unknown key"),
        "unknown keys are rejected"
    );
}

#[test]
fn cache_defaults_ranges_and_rule_overrides() {
    let c = load(BASE).unwrap();
    assert_eq!(c.cache, Cache::default());
    assert_eq!(c.cache_mode(None), CacheMode::Off);
    assert!(!c.cache.in_use);
    let cache = |body: &str| format!("{BASE}cache:\n{body}");
    let c = load(&cache(
        "  mode: lastResort\n  ttlMilliseconds: 1000\n  maxEntries: 5\n  maxBytes: 4096\n  \
         scope: shared\n  semantic:\n    embeddings: { target: a, model: e }\n",
    ))
    .unwrap();
    assert_eq!(c.cache.mode, CacheMode::LastResort);
    assert_eq!(c.cache.ttl, std::time::Duration::from_secs(1));
    assert_eq!((c.cache.max_entries, c.cache.max_bytes), (5, 4096));
    assert_eq!(c.cache.scope, CacheScope::Shared);
    let s = c.cache.semantic.as_ref().unwrap();
    assert_eq!(
        (s.similarity_threshold, s.embedding_timeout.as_millis()),
        (0.95, 300)
    );
    assert!(c.cache.in_use);
    assert_eq!(
        one_error(&cache("  mode: sometimes\n")),
        "t.yaml:7:9: cache.mode: unknown value `sometimes`; expected one of `off`, \
         `lastResort`, `always`"
    );
    assert_eq!(
        one_error(&cache("  ttlMilliseconds: 999\n")),
        "t.yaml:7:20: cache.ttlMilliseconds: must be between 1000 and 31536000000 (got 999)"
    );
    assert_eq!(
        one_error(&cache("  maxEntries: 0\n")),
        "t.yaml:7:15: cache.maxEntries: must be between 1 and 10000000 (got 0)"
    );
    assert_eq!(
        one_error(&cache(
            "  semantic:\n    embeddings: { target: nope, model: e }\n"
        )),
        "t.yaml:8:27: cache.semantic.embeddings.target: no target named `nope`"
    );
    assert_eq!(
        one_error(&cache(
            "  semantic:\n    embeddings: { target: a, model: e }\n    similarityThreshold: 1.5\n"
        )),
        "t.yaml:9:26: cache.semantic.similarityThreshold: must be between 0 and 1 (got 1.5)"
    );
    assert_eq!(
        one_error(&cache(
            "  semantic:\n    embeddings: { target: a, model: e }\n    \
             embeddingTimeoutMilliseconds: 5\n"
        )),
        "t.yaml:9:35: cache.semantic.embeddingTimeoutMilliseconds: must be between 10 and \
         60000 (got 5)"
    );
    // A rule's own mode overrides the top level, and turns the store on by itself.
    let rules =
        "  - name: r\n    priority: 1\n    matchModels: [m]\n    cache: { mode: always }\n    \
                 routeToTarget:\n      staticRoute: { target: a }\n";
    let c = load(&with_rules(rules)).unwrap();
    assert!(c.cache.in_use);
    assert_eq!(c.cache_mode(Some("r")), CacheMode::Always);
    assert_eq!(c.cache_mode(None), CacheMode::Off);
    assert_eq!(
        one_error(&with_rules(&rules.replace("always", "never"))),
        "t.yaml:10:20: rules[0].cache.mode: unknown value `never`; expected one of `off`, \
         `lastResort`, `always`"
    );
    let json = c.redacted_json();
    assert_eq!(json["rules"][0]["cache"]["mode"], "always");
    assert_eq!(json["cache"]["maxBytes"], 256 * 1024 * 1024);
}

// --- provider: azure and per-target headers (SPEC §13) ---

#[test]
fn azure_target_loads_with_its_keys_and_headers_resolved() {
    let c = load(
        "targets:\n  - name: az\n    provider: azure\n    baseUrl: https://res.openai.azure.com/\n    apiKey: env:OPENAI_API_KEY\n    apiVersion: \"2024-10-21\"\n    headers: { X-Tenant: acme, x-token: env:TEAM_A_KEY }\n",
    )
    .unwrap();
    let t = &c.targets[0];
    assert_eq!(t.provider, ProviderKind::Azure);
    assert_eq!(t.base_url, "https://res.openai.azure.com");
    assert_eq!(t.api_version.as_deref(), Some("2024-10-21"));
    assert!(t.entra_token.is_none());
    let h: Vec<(&str, &str)> = t
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.expose()))
        .collect();
    assert_eq!(h, [("x-tenant", "acme"), ("x-token", "team-a-secret")]);
    // Preview versions are accepted too.
    let c = load("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    entraToken: env:OPENAI_API_KEY\n    apiVersion: 2025-04-01-preview\n").unwrap();
    assert_eq!(
        c.targets[0].entra_token.as_ref().unwrap().expose(),
        "sk-openai-secret"
    );
    assert!(c.targets[0].api_key.is_none());
}

#[test]
fn azure_target_needs_base_url_api_version_and_exactly_one_credential() {
    let e = errors("targets:\n  - name: az\n    provider: azure\n");
    assert_eq!(
        e,
        [
            "t.yaml:2:5: targets[0].baseUrl: an azure target needs `baseUrl` (https://<resource>.openai.azure.com)",
            "t.yaml:2:5: targets[0].apiVersion: an azure target needs `apiVersion` (e.g. \"2024-10-21\")",
            "t.yaml:2:5: targets[0].apiKey: an azure target needs `apiKey` (sent as `api-key`) or `entraToken` (a Microsoft Entra ID token)",
        ]
    );
    assert_eq!(
        one_error("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    apiKey: k1234\n    entraToken: t1234\n    apiVersion: \"2024-10-21\"\n"),
        "t.yaml:6:17: targets[0].entraToken: give either `apiKey` (sent as `api-key`) or `entraToken` (sent as a Bearer token), not both"
    );
    assert_eq!(
        one_error("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    apiKey: k1234\n    apiVersion: \"21-10-2024\"\n"),
        "t.yaml:6:17: targets[0].apiVersion: `21-10-2024` is not an Azure OpenAI API version (YYYY-MM-DD, optionally with -preview)"
    );
    assert_eq!(
        one_error("targets:\n  - name: o\n    provider: openai\n    apiVersion: \"2024-10-21\"\n"),
        "t.yaml:4:17: targets[0].apiVersion: only an azure target takes this key"
    );
}

#[test]
fn headers_are_checked_where_they_are_written() {
    let src = "targets:\n  - name: o\n    provider: openai\n    headers:\n      Authorization: x1234\n      x-amz-date: x1234\n      \"bad name\": x1234\n      x-missing: env:NOPE_NOT_SET\n      x-ok: ok12\n";
    assert_eq!(
        errors(src),
        [
            format!("t.yaml:5:22: targets[0].headers.Authorization: `Authorization` is set by the gateway itself and cannot be configured (reserved: {}, x-amz-*)", crate::validate::RESERVED_HEADERS.join(", ")),
            format!("t.yaml:6:19: targets[0].headers.x-amz-date: `x-amz-date` is set by the gateway itself and cannot be configured (reserved: {}, x-amz-*)", crate::validate::RESERVED_HEADERS.join(", ")),
            "t.yaml:7:19: targets[0].headers.bad name: `bad name` is not a valid header name (RFC 9110 token characters only)".to_string(),
            "t.yaml:8:18: targets[0].headers.x-missing: environment variable `NOPE_NOT_SET` is not set".to_string(),
        ]
    );
}

#[test]
fn headers_are_bounded_in_count_and_value_size() {
    let many: String = (0..33).map(|i| format!("      x-h{i}: v1234\n")).collect();
    let e = errors(&format!(
        "targets:\n  - name: o\n    provider: openai\n    headers:\n{many}"
    ));
    assert_eq!(
        e,
        ["t.yaml:5:7: targets[0].headers: 33 headers; at most 32 are allowed"]
    );
    let big = "v".repeat(8 * 1024 + 1);
    assert_eq!(
        one_error(&format!(
            "targets:\n  - name: o\n    provider: openai\n    headers: {{ x-big: {big} }}\n"
        )),
        "t.yaml:4:23: targets[0].headers.x-big: value is 8193 bytes; at most 8192 are allowed"
    );
    let dup =
        "targets:\n  - name: o\n    provider: openai\n    headers: { X-A: v1234, x-a: v5678 }\n";
    assert!(
        one_error(dup).contains("header `x-a` is given twice"),
        "{dup}"
    );
}

#[test]
fn admin_config_shows_header_names_and_hides_values() {
    let c = load("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    entraToken: env:OPENAI_API_KEY\n    apiVersion: \"2024-10-21\"\n    headers: { x-tenant: acme-tenant, x-token: env:TEAM_A_KEY }\n").unwrap();
    let v = c.redacted_json();
    let t = &v["targets"][0];
    assert_eq!(
        t["headers"],
        serde_json::json!({"x-tenant": "***", "x-token": "***"})
    );
    assert_eq!(t["entraToken"], "***");
    assert_eq!(t["apiVersion"], "2024-10-21");
    let text = v.to_string();
    for secret in ["acme-tenant", "team-a-secret", "sk-openai-secret"] {
        assert!(!text.contains(secret), "{secret} leaked");
    }
}
