//! The arguments of the notes tools (`set_memories`, `set_goals`, `set_plans`) as models write
//! them, read into what the store takes. Their schemas offer the flat form of one note (a
//! `key` and `fact`; one goal; one plan), the smallest a request carries (issue 44: each
//! schema is paid for on every first request); the list forms the tools took before are read
//! too. Models are poor at clock arithmetic and at naming rules: asked "in one minute, remind
//! me to drink water", Qwen2.5-Coder 1.5B wrote `{"name": "drink_water", "at": <the current
//! time>, "timeZone": "UTC"}`. So a plan may say `in` (a delay: `90s`, `10m`, `2h`, `1d`),
//! which becomes `at` from the time of the call; a name is read the way its rule says
//! (lowercase, `_` and spaces as dashes) rather than refused for its case; and a `timeZone`
//! beside a due time, which carries its own offset, is dropped. An empty fact forgets its key
//! (so `delete_memories` need not be offered). What still cannot be read is refused with the
//! error result saying how to write it.

use serde_json::{Map, Value};

use crate::plans;
use crate::store::{Goal, Memories};

/// The longest delay `in` takes: ten years (a plan further out is `at`'s to say).
const MAX_DELAY_MS: i64 = 10 * 366 * 24 * 3600 * 1000;

/// The facts of `set_memories` to keep, and the keys to forget (those given an empty fact).
pub fn memories(args: &Value) -> Result<(Memories, Vec<String>), String> {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut pairs: Vec<(String, String)> = Vec::new();
    match (args.get("memories"), args.get("key")) {
        (Some(Value::Object(map)), _) => {
            pairs.extend(map.iter().map(|(k, v)| (k.clone(), text(v))));
        }
        // The seed's `[{key, value}]` form.
        (Some(Value::Array(items)), _) => {
            for item in items {
                let (Some(k), Some(v)) = (item.get("key").and_then(Value::as_str), item.get("value"))
                else {
                    return Err("invalid arguments for set_memories: items need key and value".into());
                };
                pairs.push((k.into(), text(v)));
            }
        }
        (None, Some(Value::String(key))) => {
            let fact = args.get("fact").or_else(|| args.get("value"));
            pairs.push((key.clone(), fact.map(text).unwrap_or_default()));
        }
        _ => {
            return Err(
                "invalid arguments for set_memories: give a key and its fact (or memories: an object of key → fact)".into(),
            )
        }
    }
    let mut keep = Memories::new();
    let mut forget = Vec::new();
    for (k, v) in pairs {
        if v.trim().is_empty() {
            forget.push(k);
        } else {
            keep.insert(k, v);
        }
    }
    Ok((keep, forget))
}

/// The goals of `set_goals` (`active` when no status is said).
pub fn goals(args: &Value) -> Result<Vec<Goal>, String> {
    let list = match args.get("goals") {
        Some(goals) => goals.clone(),
        None if args.get("id").is_some() => Value::Array(vec![args.clone()]),
        None => Value::Null,
    };
    let goals: Vec<Goal> = serde_json::from_value(list).map_err(|e| {
        format!("invalid arguments for set_goals: give a goal's id, description and status ({e})")
    })?;
    Ok(goals
        .into_iter()
        .map(|g| Goal {
            status: if g.status.is_empty() {
                "active".into()
            } else {
                g.status
            },
            ..g
        })
        .collect())
}

/// `set_plans`' arguments as `{plans: [...], cancel: [...]}` (one plan written flat becomes a
/// list of one), with each plan's `in` made an `at` (from `now_ms`) and the names of plans and
/// cancellations read by the naming rule.
pub fn plans(args: Value, now_ms: i64) -> Result<Value, String> {
    let mut args = flat_plan(args);
    if let Some(plans) = args.get_mut("plans").and_then(Value::as_array_mut) {
        for plan in plans.iter_mut().filter_map(Value::as_object_mut) {
            read_plan(plan, now_ms)?;
        }
    }
    if let Some(cancel) = args.get_mut("cancel").and_then(Value::as_array_mut) {
        for name in cancel.iter_mut() {
            if let Some(n) = name.as_str() {
                *name = Value::String(plan_name(n));
            }
        }
    }
    Ok(args)
}

/// `{name, instruction, …, cancel}` as `{plans: [{name, instruction, …}], cancel}`.
fn flat_plan(args: Value) -> Value {
    let Value::Object(mut map) = args else {
        return args;
    };
    if map.contains_key("plans") || !map.contains_key("name") {
        return Value::Object(map);
    }
    let cancel = map.remove("cancel");
    let mut out = Map::new();
    out.insert("plans".into(), Value::Array(vec![Value::Object(map)]));
    if let Some(cancel) = cancel {
        out.insert("cancel".into(), cancel);
    }
    Value::Object(out)
}

fn read_plan(plan: &mut Map<String, Value>, now_ms: i64) -> Result<(), String> {
    if let Some(Value::String(name)) = plan.get("name") {
        let name = plan_name(name);
        plan.insert("name".into(), Value::String(name));
    }
    let Some(delay) = plan.remove("in") else {
        // A due time carries its own offset: a zone written beside it says nothing.
        if plan.contains_key("at") && !plan.contains_key("schedule") {
            plan.remove("timeZone");
        }
        return Ok(());
    };
    let name = plan.get("name").and_then(Value::as_str).unwrap_or_default();
    if plan.contains_key("at") || plan.contains_key("schedule") {
        return Err(format!("plan {name}: set one of in, at and schedule"));
    }
    let Some(ms) = delay.as_str().and_then(delay_ms) else {
        return Err(format!(
            "plan {name}: in {delay}: write a delay as a number and a unit, such as 90s, 10m, 2h or 1d"
        ));
    };
    // A delay has no time zone: one written beside it says nothing.
    plan.remove("timeZone");
    plan.insert("at".into(), Value::String(plans::rfc3339(now_ms + ms)));
    Ok(())
}

/// A plan name read by its rule: lowercase, with `_`, spaces and dots as dashes.
fn plan_name(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c {
            '_' | ' ' | '.' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// A delay such as `90s`, `10 m`, `2 hours` or `1d`, in milliseconds (at least one second, at
/// most [`MAX_DELAY_MS`]).
fn delay_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: i64 = number.parse().ok()?;
    let unit_ms: i64 = match unit.trim().to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    let ms = n.checked_mul(unit_ms)?;
    (1000..=MAX_DELAY_MS).contains(&ms).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delay_becomes_a_due_time_and_names_follow_their_rule() {
        let now = 1_800_000_000_000;
        let read = plans(
            json!({"plans": [{"name": "Drink_Water", "instruction": "Drink water", "in": "1m", "timeZone": "UTC"}],
                   "cancel": ["old_one"]}),
            now,
        )
        .unwrap();
        assert_eq!(
            read,
            json!({"plans": [{"name": "drink-water", "instruction": "Drink water", "at": plans::rfc3339(now + 60_000)}],
                   "cancel": ["old-one"]})
        );
        for (text, ms) in [
            ("90s", 90_000),
            ("10 m", 600_000),
            ("2 hours", 7_200_000),
            ("1d", 86_400_000),
        ] {
            assert_eq!(delay_ms(text), Some(ms), "{text}");
        }
        // Plans without `in` pass as they were, but for the name, and a zone beside a due
        // time (it has its own offset).
        let at = json!({"plans": [{"name": "x", "instruction": "y", "at": "2030-01-01T00:00:00Z", "timeZone": "UTC"}]});
        assert_eq!(
            super::plans(at, now).unwrap(),
            json!({"plans": [{"name": "x", "instruction": "y", "at": "2030-01-01T00:00:00Z"}]})
        );
        let cron = json!({"plans": [{"name": "x", "instruction": "y", "schedule": "@daily", "timeZone": "Europe/Oslo"}]});
        assert_eq!(super::plans(cron.clone(), now).unwrap(), cron);
    }

    #[test]
    fn one_note_written_flat_is_read_as_the_list_forms_are() {
        let (keep, forget) = memories(&json!({"key": "dinner", "fact": "at 8"})).unwrap();
        assert_eq!(keep, Memories::from([("dinner".into(), "at 8".into())]));
        assert!(forget.is_empty());
        let (keep, forget) =
            memories(&json!({"memories": {"dinner": "at 8", "lunch": "", "tea": " "}})).unwrap();
        assert_eq!(keep.len(), 1);
        assert_eq!(forget, ["lunch", "tea"], "an empty fact forgets its key");
        let (_, forget) = memories(&json!({"key": "dinner"})).unwrap();
        assert_eq!(forget, ["dinner"]);
        let (keep, _) = memories(&json!({"memories": [{"key": "a", "value": 1}]})).unwrap();
        assert_eq!(keep["a"], "1");
        for bad in [
            json!({}),
            json!({"memories": "x"}),
            json!({"memories": [{"key": "a"}]}),
        ] {
            assert!(memories(&bad)
                .unwrap_err()
                .starts_with("invalid arguments for set_memories"));
        }
        let one = goals(&json!({"id": "q4", "description": "Q4 report"})).unwrap();
        assert_eq!(
            (one[0].id.as_str(), one[0].status.as_str()),
            ("q4", "active")
        );
        let two =
            goals(&json!({"goals": [{"id": "a", "status": "blocked"}, {"id": "b"}]})).unwrap();
        assert_eq!(two.len(), 2);
        assert!(goals(&json!({"goals": "x"}))
            .unwrap_err()
            .contains("give a goal's id"));
        let flat = plans(
            json!({"name": "water", "instruction": "Drink", "in": "1m", "cancel": ["old"]}),
            0,
        )
        .unwrap();
        assert_eq!(
            flat,
            json!({"plans": [{"name": "water", "instruction": "Drink", "at": plans::rfc3339(60_000)}], "cancel": ["old"]})
        );
        let cancel_only = plans(json!({"cancel": ["Old_One"]}), 0).unwrap();
        assert_eq!(cancel_only, json!({"cancel": ["old-one"]}));
    }

    #[test]
    fn a_delay_that_cannot_be_read_is_refused_with_how_to_write_it() {
        for delay in [
            json!("soon"),
            json!("-5m"),
            json!("0s"),
            json!(60),
            json!("99999999999d"),
        ] {
            let err = plans(
                json!({"plans": [{"name": "x", "instruction": "y", "in": delay}]}),
                0,
            )
            .unwrap_err();
            assert!(err.contains("such as 90s, 10m, 2h or 1d"), "{err}");
        }
        let err = plans(
            json!({"plans": [{"name": "x", "instruction": "y", "in": "5m", "schedule": "@daily"}]}),
            0,
        )
        .unwrap_err();
        assert_eq!(err, "plan x: set one of in, at and schedule");
    }
}
