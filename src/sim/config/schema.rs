//! The JSON Schema of the configuration, generated from the serde structs.

use super::*;

/// The JSON Schema (draft 2020-12) of [`SimConfig`], generated from the serde
/// structs: field names, types, defaults, limits ([`limits`]) and the doc
/// comments as descriptions. Rules across fields (`warmup_ns < duration_ns`,
/// `n_pcpus` a multiple of sockets × threads, …) are in [`SimConfig::validate`]
/// and the descriptions only. Serde aliases of enum values (`"eevdf"`, the
/// old halt-poll policy names) are added as documented (deprecated) values,
/// and renamed fields as each definition's `x-renamed-fields`.
pub fn json_schema() -> serde_json::Value {
    let mut v = serde_json::to_value(schemars::schema_for!(SimConfig)).expect("schema serialises");
    type_ranges(&mut v);
    for (def, old, new, since, why) in FIELD_ALIASES {
        v["$defs"][*def]["x-renamed-fields"][*old] = serde_json::json!({"to": new, "since": since, "why": why});
    }
    v["x-cross-field-rules"] =
        CROSS_FIELD_RULES.iter().map(|(fields, rule)| serde_json::json!({"fields": fields, "rule": rule})).collect();
    // serde aliases are not seen by schemars: list them so that what the parser accepts validates
    for (def, alias, of, deprecated) in ENUM_ALIASES {
        let d = &mut v["$defs"][*def];
        if let Some(names) = d.get("enum").and_then(|e| e.as_array()).cloned() {
            // an enum without doc comments: the same as one of consts
            d["oneOf"] = names.iter().map(|n| serde_json::json!({"type": "string", "const": n})).collect();
            d.as_object_mut().expect("a definition").retain(|k, _| k != "enum" && k != "type");
        }
        if let Some(one_of) = d["oneOf"].as_array_mut() {
            one_of.push(serde_json::json!({
                "type": "string",
                "const": alias,
                "description": format!("alias of \"{of}\""),
                "deprecated": deprecated,
                "x-alias-of": of,
            }));
        }
    }
    v
}

/// The rules across fields that [`SimConfig::validate`] enforces and a JSON
/// Schema cannot state (each field's own range can): which fields, and the
/// rule. The schema lists them as `x-cross-field-rules`; a value inside every
/// stated range is refused only by one of these (tests/test_config_schema.py
/// probes every boundary).
pub const CROSS_FIELD_RULES: &[(&[&str], &str)] = &[
    (&["warmup_ns", "duration_ns"], "warmup_ns < duration_ns"),
    (&["trace_from_ns", "duration_ns"], "trace_from_ns < duration_ns"),
    (&["trace_until_ns", "trace_from_ns"], "trace_until_ns is 0 (the run's end) or > trace_from_ns"),
    (&["host.idle_states"], "each idle state at least as deep (exit and residency) as the one before"),
    (&["host.noise.kthread_hz", "host.noise.kthread_ns"], "kthread_hz * kthread_ns <= 0.5e9 (half a CPU)"),
    (&["host.noise.vmm_io_hz", "host.noise.vmm_io_ns"], "vmm_io_hz * vmm_io_ns <= 0.5e9 (half a CPU)"),
    (&["host.speed.fast_dwell_ns", "host.speed.slow_dwell_ns"], "both 0 (off) or both > 0"),
    (&["host.speed.slow_pct", "host.speed.fast_pct"], "slow_pct <= fast_pct"),
    (&["host.speed.fast_pct", "host.speed.slow_pct", "host.speed.fast_dwell_ns"], "100 while the dwells are 0"),
    (&["host.cfs.min_granularity_ns", "host.cfs.latency_ns"], "min_granularity_ns <= latency_ns"),
    (&["host.sockets", "host.n_pcpus"], "sockets <= n_pcpus"),
    (&["host.n_pcpus", "host.sockets", "host.threads_per_core"], "n_pcpus is a multiple of sockets * threads_per_core"),
    (&["vms.count", "vms.vcpus"], "the sum over VMs of count * vcpus <= 65536"),
    (&["host.vcpu_pcpus"], "at most 65536 entries, each a host CPU below n_pcpus"),
    (&["vms.threads", "vms.vcpus"], "threads <= 16 * vcpus"),
    (&["vms.vcpus", "host.n_pcpus", "host.scheduler"], "vcpus <= n_pcpus under scheduler = balance"),
    (&["host.scheduler", "host.affinity"], "affinity is not all under scheduler = pinned"),
    (&["vms.guest.threads_per_core", "vms.vcpus"], "vcpus is a multiple of guest.threads_per_core"),
    (
        &["vms.guest.llc_vcpus", "vms.guest.threads_per_core", "vms.vcpus"],
        "guest.llc_vcpus is 0 (the whole VM) or a multiple of guest.threads_per_core that divides vcpus",
    ),
    (&["vms.ple.max", "vms.ple.window"], "ple.max >= ple.window"),
    (&["vms.workload.phases.ns", "vms.workload.phases.dist"], "a periodic sleep has ns > 0 and a fixed length"),
    (&["vms.workload.phases.kind"], "every phase on one lock uses one kind (rwsem reads and writes mix)"),
    (&["vms.workload.phases.targets", "vms.vcpus"], "an IPI's targets < vcpus"),
    (&["vms.workload.phases.to", "vms.threads"], "a send's target thread < threads"),
];

/// Every integer's type range as `maximum` where no tighter one is stated:
/// schemars gives `"format": "uint32"` and a minimum of 0 but no maximum, so
/// the schema accepted 2^32 where the parser refuses it.
fn type_ranges(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            let max = match m.get("format").and_then(|f| f.as_str()) {
                Some("uint8") => Some(serde_json::json!(u8::MAX)),
                Some("uint16") => Some(serde_json::json!(u16::MAX)),
                Some("uint32") => Some(serde_json::json!(u32::MAX)),
                Some("uint64") | Some("uint") => Some(serde_json::json!(u64::MAX)),
                _ => None,
            };
            if let Some(max) = max {
                if !m.contains_key("maximum") && !m.contains_key("exclusiveMaximum") {
                    m.insert("maximum".into(), max);
                }
            }
            m.values_mut().for_each(type_ranges);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(type_ranges),
        _ => {}
    }
}

/// (schema definition, old key, new key, date of the rename, why): the fields read
/// under an old name too (a `#[serde(alias)]` on the field), listed in the
/// schema as `x-renamed-fields` so that Python accepts the same old names
/// with a dated deprecation.
pub const FIELD_ALIASES: &[(&str, &str, &str, &str, &str)] = &[(
    "HostConfig",
    "pcpus",
    "n_pcpus",
    "2026-12-05",
    "a count of simulated CPUs; pcpus is a list of host CPU ids everywhere else",
)];

/// (schema definition, alias, canonical name, deprecated): the serde aliases of enum values.
const ENUM_ALIASES: &[(&str, &str, &str, bool)] = &[
    ("Scheduler", "eevdf", "fair", false),
    ("HaltPollPolicy", "dynamic", "block-time", true),
    ("HaltPollPolicy", "dynamic_v4", "dynamic-v4", true),
    ("HaltPollPolicy", "v4", "dynamic-v4", true),
    ("PolicyKind", "none", "no_yield", true),
    ("PolicyKind", "baseline2011", "baseline_2011", true),
];

#[cfg(test)]
mod schema_tests {
    use super::*;

    fn get<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
        path.iter().fold(v, |v, k| &v[*k])
    }

    #[test]
    fn schema_states_the_validators_limits_and_every_field_has_a_description() {
        let s = json_schema();
        let pcpus = get(&s, &["$defs", "HostConfig", "properties", "n_pcpus"]);
        assert_eq!(pcpus["minimum"], 1);
        assert_eq!(pcpus["maximum"], MAX_PCPUS);
        assert_eq!(pcpus["default"], 4);
        let rq = get(&s, &["$defs", "HostConfig", "properties", "rq_lock_ns"]);
        assert_eq!(rq["maximum"], limits::MAX_COST_NS);
        let hp = get(&s, &["$defs", "HaltPollConfig", "properties"]);
        assert!(hp.get("max_ns").is_some() && hp.get("grow_start_ns").is_some(), "{hp}");
        // the validator refuses one above the schema's maximum and accepts the maximum
        let mut c = SimConfig::default();
        c.host.rq_lock_ns = limits::MAX_COST_NS;
        c.validate().unwrap();
        c.host.rq_lock_ns += 1;
        assert!(c.validate().unwrap_err().starts_with("host.rq_lock_ns"));
        let mut c = SimConfig::default();
        c.vms[0].workload.spin_iter_cycles = limits::MAX_SPIN_ITER_CYCLES + 1;
        assert!(c.validate().unwrap_err().starts_with("vms[0].workload.spin_iter_cycles"));
        // every property of every struct has a description (the doc comment)
        fn walk(v: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
            if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
                for (k, p) in props {
                    if k != "kind" && p.get("description").is_none() {
                        missing.push(format!("{path}.{k}"));
                    }
                }
            }
            if let Some(o) = v.as_object() {
                for (k, x) in o {
                    if k != "properties" {
                        walk(x, &format!("{path}/{k}"), missing);
                    }
                }
            } else if let Some(a) = v.as_array() {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{path}/{i}"), missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(&s, "", &mut missing);
        assert!(missing.is_empty(), "fields without a doc comment: {missing:?}");
        // serde's enum aliases are listed
        let sched = get(&s, &["$defs", "Scheduler", "oneOf"]).to_string();
        assert!(sched.contains("\"eevdf\""), "{sched}");
    }
}
