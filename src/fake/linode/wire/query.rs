//! How list endpoints narrow and cut their items: `X-Filter` and pagination,
//! with the API's 400s for what it refuses. It must not know which endpoint
//! it serves; callers pass the items and the filterable keys.

use super::api_error::{ApiError, ApiResult};
use crate::fake::HttpRequest;
use serde_json::{json, Value};

const DEFAULT_PAGE_SIZE: usize = 100;

/// `{data, page, pages, results}` of `items` for the request's paging.
pub(in crate::fake::linode) fn paginate(
    items: Vec<Value>,
    req: &HttpRequest,
    forced: Option<usize>,
) -> ApiResult {
    let page_size = match req.query_param("page_size") {
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (25..=500).contains(&n) => n,
            _ => return Err(ApiError::bad("page_size", "Must be 25-500")),
        },
        None => DEFAULT_PAGE_SIZE,
    };
    let page_size = forced.unwrap_or(page_size).max(1);
    let page = match req.query_param("page") {
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(ApiError::bad("page", "Must be a positive integer")),
        },
        None => 1,
    };
    let results = items.len();
    let pages = results.div_ceil(page_size).max(1);
    let data: Vec<Value> = items
        .into_iter()
        .skip((page - 1).saturating_mul(page_size))
        .take(page_size)
        .collect();
    Ok(json!({"data": data, "page": page, "pages": pages, "results": results}))
}

/// Applies an `X-Filter` header: equality on `allowed` keys, `+and`/`+or`,
/// simple operators, `+order_by`/`+order`. Anything else is 400 like the API.
pub(in crate::fake::linode) fn apply_filter(
    items: Vec<Value>,
    header: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<Value>, ApiError> {
    let Some(raw) = header else {
        return Ok(items);
    };
    let bad = |reason: String| ApiError::new(400, Some("X-Filter"), &reason);
    let filter: Value =
        serde_json::from_str(raw).map_err(|_| bad("Invalid JSON in X-Filter".to_string()))?;
    let Value::Object(obj) = &filter else {
        return Err(bad("X-Filter must be an object".to_string()));
    };
    // Validate once (an unmatched item must not hide an invalid key).
    check_filter(obj, allowed).map_err(bad)?;
    let mut out: Vec<Value> = items
        .into_iter()
        .filter(|i| filter_matches(obj, i))
        .collect();
    if let Some(key) = obj.get("+order_by").and_then(Value::as_str) {
        let desc = obj.get("+order").and_then(Value::as_str) == Some("desc");
        out.sort_by(|a, b| {
            let ord = compare(&a[key], &b[key]).unwrap_or(std::cmp::Ordering::Equal);
            if desc {
                ord.reverse()
            } else {
                ord
            }
        });
    }
    Ok(out)
}

/// The `X-Filter` a backend that ignores `keys` acts on: those keys dropped
/// at the top level and inside `+and`/`+or`. A header that is not a JSON
/// object is passed on unchanged (and refused as before).
pub(in crate::fake::linode) fn drop_filter_keys(header: &str, keys: &[&str]) -> String {
    fn strip(value: &mut Value, keys: &[&str]) {
        let Value::Object(obj) = value else {
            return;
        };
        obj.retain(|k, _| !keys.contains(&k.as_str()));
        for combinator in ["+and", "+or"] {
            if let Some(Value::Array(list)) = obj.get_mut(combinator) {
                list.iter_mut().for_each(|sub| strip(sub, keys));
            }
        }
    }
    match serde_json::from_str::<Value>(header) {
        Ok(mut filter @ Value::Object(_)) => {
            strip(&mut filter, keys);
            filter.to_string()
        }
        _ => header.to_string(),
    }
}

const OPERATORS: [&str; 7] = ["+eq", "+neq", "+gt", "+gte", "+lt", "+lte", "+contains"];

fn check_filter(obj: &serde_json::Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    for (key, value) in obj {
        match key.as_str() {
            "+and" | "+or" => {
                let Some(list) = value.as_array() else {
                    return Err(format!("{key} must be an array"));
                };
                for sub in list {
                    let Value::Object(sub) = sub else {
                        return Err(format!("{key} items must be objects"));
                    };
                    check_filter(sub, allowed)?;
                }
            }
            "+order_by" => {
                if !value.as_str().is_some_and(|f| allowed.contains(&f)) {
                    return Err(format!("Cannot order by {value}"));
                }
            }
            "+order" => {
                if !matches!(value.as_str(), Some("asc") | Some("desc")) {
                    return Err("+order must be asc or desc".to_string());
                }
            }
            field if !allowed.contains(&field) => return Err(format!("Cannot filter on {field}")),
            field => {
                if let Value::Object(ops) = value {
                    if let Some(op) = ops.keys().find(|op| !OPERATORS.contains(&op.as_str())) {
                        return Err(format!("Cannot filter on {field} with {op}"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn filter_matches(obj: &serde_json::Map<String, Value>, item: &Value) -> bool {
    use std::cmp::Ordering::*;
    obj.iter().all(|(key, want)| match key.as_str() {
        "+and" => want.as_array().is_some_and(|l| {
            l.iter()
                .filter_map(Value::as_object)
                .all(|s| filter_matches(s, item))
        }),
        "+or" => want.as_array().is_some_and(|l| {
            l.iter()
                .filter_map(Value::as_object)
                .any(|s| filter_matches(s, item))
        }),
        "+order_by" | "+order" => true,
        field => {
            let got = &item[field];
            match want {
                Value::Object(ops) => ops.iter().all(|(op, v)| match op.as_str() {
                    "+eq" => got == v,
                    "+neq" => got != v,
                    "+gt" => compare(got, v) == Some(Greater),
                    "+gte" => matches!(compare(got, v), Some(Greater | Equal)),
                    "+lt" => compare(got, v) == Some(Less),
                    "+lte" => matches!(compare(got, v), Some(Less | Equal)),
                    "+contains" => match (got, v.as_str()) {
                        (Value::String(s), Some(n)) => s.contains(n),
                        (Value::Array(a), Some(n)) => a.iter().any(|x| x == n),
                        _ => false,
                    },
                    _ => false,
                }),
                // Tags and other lists match by membership, like the API.
                _ => match got {
                    Value::Array(a) => a.contains(want),
                    _ => got == want,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_semantics() {
        let items = vec![
            json!({"id": 1, "label": "a", "region": "us-ord", "tags": ["x"]}),
            json!({"id": 2, "label": "b", "region": "us-ord", "tags": []}),
            json!({"id": 3, "label": "a", "region": "us-sea", "tags": []}),
        ];
        let allowed = ["id", "label", "region", "tags"];
        let run = |f: &str| {
            apply_filter(items.clone(), Some(f), &allowed).map(|v| {
                v.iter()
                    .map(|i| i["id"].as_u64().unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(r#"{"label":"a"}"#).ok(), Some(vec![1, 3]));
        assert_eq!(
            run(r#"{"label":"a","region":"us-sea"}"#).ok(),
            Some(vec![3])
        );
        assert_eq!(
            run(r#"{"+or":[{"label":"b"},{"region":"us-sea"}]}"#).ok(),
            Some(vec![2, 3])
        );
        assert_eq!(run(r#"{"id":{"+gt":1}}"#).ok(), Some(vec![2, 3]));
        assert_eq!(run(r#"{"tags":"x"}"#).ok(), Some(vec![1]));
        assert_eq!(
            run(r#"{"+order_by":"id","+order":"desc"}"#).ok(),
            Some(vec![3, 2, 1])
        );
        // Unknown keys fail even when nothing would match.
        for bad in [r#"{"size":1}"#, "not json", "[1]", r#"{"id":{"+near":1}}"#] {
            let err = run(bad).unwrap_err();
            assert_eq!(err.status, 400, "{bad}");
            assert_eq!(err.errors[0].0.as_deref(), Some("X-Filter"));
        }
        assert_eq!(
            run(r#"{"size":1}"#).unwrap_err().errors[0].1,
            "Cannot filter on size"
        );
    }

    #[test]
    fn dropped_filter_keys_vanish_everywhere_else_stays() {
        let drop = |f: &str| {
            serde_json::from_str::<Value>(&drop_filter_keys(f, &["tags"])).unwrap_or(Value::Null)
        };
        assert_eq!(drop(r#"{"tags":"x","label":"a"}"#), json!({"label": "a"}));
        assert_eq!(
            drop(r#"{"+and":[{"tags":"x"},{"region":"r"}],"+or":[{"tags":"y"}]}"#),
            json!({"+and": [{}, {"region": "r"}], "+or": [{}]})
        );
        assert_eq!(drop_filter_keys("not json", &["tags"]), "not json");
    }
}
