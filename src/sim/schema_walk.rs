//! The walk that checks a value against the JSON Schema its type's
//! attributes generate: each field's own limits, stated once, in the
//! field's `#[schemars(range(…))]` / `length(…)` attribute or its type, and
//! read back here. Used by the simulator's whole configuration
//! (`SimConfig::validate`) and by the halt-polling calibration model's
//! configuration alone (`HaltPollConfig::validate`); it depends on neither.

/// Every field's own limits, as the schema states them (`minimum`, `maximum`,
/// `exclusiveMaximum`, `minItems`, `maxItems`): one walk over the config's
/// JSON and the schema together, so a limit is written once, in the field's
/// `#[schemars(range(…))]` / `length(…)` attribute or its type. The error
/// names the field by its path (`host.n_pcpus must be >= 1, got 0`,
/// `vms[0].workload.phases[2].ns must be <= 1000000000000, got …`). A number
/// that is not finite (NaN and ±inf serialise to JSON null) is refused where
/// the schema wants a number.
pub(crate) fn check_ranges(
    root: &serde_json::Value,
    s: &serde_json::Value,
    v: &serde_json::Value,
    path: &str,
) -> Result<(), String> {
    use serde_json::Value;
    let at = |p: &str| if p.is_empty() { "the configuration".to_string() } else { p.to_string() };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or_default();
        return check_ranges(root, &root["$defs"][name], v, path);
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        // Option<T>: null, or the one branch that is not null
        if v.is_null() {
            return Ok(());
        }
        return match any.iter().find(|b| b.get("type").and_then(Value::as_str) != Some("null")) {
            Some(b) => check_ranges(root, b, v, path),
            None => Ok(()),
        };
    }
    if let Some(one) = s.get("oneOf").and_then(Value::as_array) {
        // a tagged enum (Phase): the variant named by the value's `kind`
        if let Some(kind) = v.get("kind") {
            if let Some(b) = one.iter().find(|b| b.pointer("/properties/kind/const") == Some(kind)) {
                return check_ranges(root, b, v, path);
            }
        }
        return Ok(()); // a string enum: serde already refused an unknown name
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            if let Some(x) = v.get(k) {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                check_ranges(root, sub, x, &p)?;
            }
        }
        return Ok(());
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if v.is_null() && types.contains(&"null") {
        return Ok(()); // Option<T>: not set
    }
    if let Some(items) = v.as_array() {
        let n = items.len() as u64;
        if let Some(most) = s.get("maxItems").and_then(Value::as_u64).filter(|&m| n > m) {
            return Err(format!("{} must hold at most {most} items, got {n}", at(path)));
        }
        if let Some(least) = s.get("minItems").and_then(Value::as_u64).filter(|&m| n < m) {
            return Err(format!("{} must hold at least {least} item(s), got {n}", at(path)));
        }
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        for (i, x) in items.iter().enumerate() {
            let sub = prefix.and_then(|p| p.get(i)).or_else(|| s.get("items").filter(|it| it.is_object()));
            if let Some(sub) = sub {
                check_ranges(root, sub, x, &format!("{path}[{i}]"))?;
            }
        }
        return Ok(());
    }
    if types.iter().any(|t| *t == "integer" || *t == "number") {
        let Some(x) = v.as_f64() else {
            return Err(format!("{} must be a finite number, got {v}", at(path)));
        };
        // integers compare exactly (u64 beyond 2^53 would round as f64)
        let below = |lim: &Value| match (v.as_u64(), lim.as_u64()) {
            (Some(a), Some(b)) => a < b,
            _ => {
                v.as_i64().zip(lim.as_i64()).map(|(a, b)| a < b).unwrap_or_else(|| x < lim.as_f64().unwrap_or(f64::NAN))
            }
        };
        let above = |lim: &Value| match (v.as_u64(), lim.as_u64()) {
            (Some(a), Some(b)) => a > b,
            _ => {
                v.as_i64().zip(lim.as_i64()).map(|(a, b)| a > b).unwrap_or_else(|| x > lim.as_f64().unwrap_or(f64::NAN))
            }
        };
        if let Some(lo) = s.get("minimum").filter(|lo| below(lo)) {
            return Err(format!("{} must be >= {lo}, got {v}", at(path)));
        }
        if let Some(hi) = s.get("maximum").filter(|hi| above(hi)) {
            return Err(format!("{} must be <= {hi}, got {v}", at(path)));
        }
        if let Some(hi) = s.get("exclusiveMaximum").filter(|hi| !below(hi)) {
            return Err(format!("{} must be < {hi}, got {v}", at(path)));
        }
    }
    Ok(())
}
