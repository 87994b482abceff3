//! The annotations holding JSON (`session-affinity-option`, `health-check-option`,
//! `eip-auto-create-option`), overlaid on the cloud config's options as upstream's
//! `json.Unmarshal` into a copy of them does, then checked as upstream's usage guide
//! documents them.

use serde_json::{Map, Value, json};
use wasm_ccm_guest::types::{CloudError, Service};

use super::{
    Defaults, EIP_AUTO_CREATE, HEALTH_FLAG, HEALTH_OPTION, Origin, SESSION_FLAG, SESSION_OPTION,
    annotation, invalid, pick,
};

/// A pool's sticky sessions (the API's `session_persistence`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Persistence {
    /// `SOURCE_IP`, `HTTP_COOKIE` or `APP_COOKIE`.
    pub kind: String,
    pub cookie_name: Option<String>,
    /// Minutes.
    pub timeout: Option<i64>,
}

impl Persistence {
    pub(crate) fn to_json(&self) -> Value {
        let mut body = json!({ "type": self.kind });
        if let Some(name) = &self.cookie_name {
            body["cookie_name"] = json!(name);
        }
        if let Some(timeout) = self.timeout {
            body["persistence_timeout"] = json!(timeout);
        }
        body
    }
}

/// Upstream's `config.HealthCheckOption` as the shared ELB uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HealthCheck {
    pub enable: bool,
    pub delay: i64,
    pub timeout: i64,
    pub max_retries: i64,
}

/// Upstream's `CreateEIPOptions` (`kubernetes.io/elb.eip-auto-create-option`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EipOptions {
    pub bandwidth_size: i64,
    /// `PER` or `WHOLE`.
    pub share_type: String,
    /// The shared bandwidth (`WHOLE`).
    pub share_id: String,
    /// `traffic` (upstream's default) or `bandwidth`.
    pub charge_mode: String,
    /// The EIP type, e.g. `5_bgp` (required: the API has no default).
    pub ip_type: String,
}

/// A JSON object annotation with only `allowed` keys, matched regardless of case as
/// upstream's `json.Unmarshal` matches them (which ignores other keys; here they are a
/// typo to report).
fn object(
    service: &Service,
    key: &'static str,
    allowed: &[&str],
) -> Result<Option<Map<String, Value>>, CloudError> {
    let Some(text) = annotation(service, key) else {
        return Ok(None);
    };
    let origin = Origin::Annotation(key);
    let written = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(invalid(service, origin, "not a JSON object")),
        Err(e) => return Err(invalid(service, origin, format!("not valid JSON: {e}"))),
    };
    let mut map = Map::new();
    for (field, value) in written {
        let Some(known) = allowed.iter().find(|a| a.eq_ignore_ascii_case(&field)) else {
            return Err(invalid(
                service,
                origin,
                format!("unknown field `{field}` (known: {})", allowed.join(", ")),
            ));
        };
        // The exact spelling wins over another case, as in Go.
        if field == *known || !map.contains_key(*known) {
            map.insert((*known).to_owned(), value);
        }
    }
    Ok(Some(map))
}

fn int_field(
    service: &Service,
    key: &'static str,
    map: &Map<String, Value>,
    field: &str,
) -> Result<Option<i64>, CloudError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_i64().map(Some).ok_or_else(|| {
            invalid(
                service,
                Origin::Annotation(key),
                format!("`{field}` must be an integer"),
            )
        }),
    }
}

fn string_field(
    service: &Service,
    key: &'static str,
    map: &Map<String, Value>,
    field: &str,
) -> Result<Option<String>, CloudError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(
            service,
            Origin::Annotation(key),
            format!("`{field}` must be a string"),
        )),
    }
}

/// Upstream's `getSessionAffinity`: the flag (annotation, else option) `on` turns it on
/// with the option's persistence overlaid by the annotation's JSON; `off` or empty
/// leaves it off (upstream takes any other value as on; here it is an error).
pub(super) fn persistence(
    service: &Service,
    defaults: &Defaults,
) -> Result<Option<Persistence>, CloudError> {
    let (flag, origin) = pick(
        service,
        SESSION_FLAG,
        &defaults.session_flag,
        "session-affinity-flag",
    );
    match flag {
        "" | "off" => return Ok(None),
        "on" => {}
        other => {
            return Err(invalid(
                service,
                origin,
                format!("`{other}` is neither on nor off"),
            ));
        }
    }
    let mut persistence = defaults.session.clone();
    let mut origin = Origin::Config("session-affinity-option");
    let allowed = ["type", "cookie_name", "persistence_timeout"];
    if let Some(map) = object(service, SESSION_OPTION, &allowed)? {
        origin = Origin::Annotation(SESSION_OPTION);
        if let Some(kind) = string_field(service, SESSION_OPTION, &map, "type")? {
            persistence.kind = kind;
        }
        if let Some(name) = string_field(service, SESSION_OPTION, &map, "cookie_name")? {
            persistence.cookie_name = Some(name).filter(|n| !n.is_empty());
        }
        if let Some(timeout) = int_field(service, SESSION_OPTION, &map, "persistence_timeout")? {
            persistence.timeout = Some(timeout);
        }
    }
    match persistence.kind.as_str() {
        "SOURCE_IP" | "HTTP_COOKIE" => {}
        "APP_COOKIE" if persistence.cookie_name.is_some() => {}
        "APP_COOKIE" => {
            return Err(invalid(
                service,
                origin,
                "`cookie_name` is required with APP_COOKIE",
            ));
        }
        "" => {
            return Err(invalid(
                service,
                origin,
                "`type` is required when session affinity is on",
            ));
        }
        other => {
            return Err(invalid(
                service,
                origin,
                format!("`type` `{other}` is not SOURCE_IP, HTTP_COOKIE or APP_COOKIE"),
            ));
        }
    }
    if let Some(timeout) = persistence.timeout.filter(|t| !(1..=1440).contains(t)) {
        return Err(invalid(
            service,
            origin,
            format!("`persistence_timeout` {timeout} is out of range 1..=1440"),
        ));
    }
    Ok(Some(persistence))
}

/// Upstream's `getHealthCheckOptionFromAnnotation`: on when the flag (annotation, else
/// option) is `on` or empty, with the option's values overlaid by the annotation's JSON
/// (`enable` included). Upstream takes any flag but `on`/empty as off; here a value
/// other than `on`/`off` is an error.
pub(super) fn health_check(
    service: &Service,
    defaults: &Defaults,
) -> Result<HealthCheck, CloudError> {
    let mut check = defaults.health.clone();
    let (flag, origin) = pick(
        service,
        HEALTH_FLAG,
        &defaults.health_flag,
        "health-check-flag",
    );
    match flag {
        "" | "on" => check.enable = true,
        "off" => {}
        other => {
            return Err(invalid(
                service,
                origin,
                format!("`{other}` is neither on nor off"),
            ));
        }
    }
    let mut origin = Origin::Config("health-check-option");
    // `protocol` and `path` are upstream's fields too; its shared ELB ignores them.
    let allowed = [
        "enable",
        "delay",
        "timeout",
        "max_retries",
        "protocol",
        "path",
    ];
    if let Some(map) = object(service, HEALTH_OPTION, &allowed)? {
        origin = Origin::Annotation(HEALTH_OPTION);
        match map.get("enable") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(enable)) => check.enable = *enable,
            Some(_) => return Err(invalid(service, origin, "`enable` must be true or false")),
        }
        for (field, value) in [
            ("delay", &mut check.delay),
            ("timeout", &mut check.timeout),
            ("max_retries", &mut check.max_retries),
        ] {
            if let Some(v) = int_field(service, HEALTH_OPTION, &map, field)? {
                *value = v;
            }
        }
    }
    if check.enable {
        for (field, value, max) in [
            ("delay", check.delay, 50),
            ("timeout", check.timeout, 50),
            ("max_retries", check.max_retries, 10),
        ] {
            if !(1..=max).contains(&value) {
                return Err(invalid(
                    service,
                    origin,
                    format!("`{field}` {value} is out of range 1..={max}"),
                ));
            }
        }
    }
    Ok(check)
}

/// Upstream's `parseEIPAutoCreateOptions` (`charge_mode` defaults to `traffic`), checked
/// as upstream's usage guide documents the fields.
pub(super) fn eip_options(service: &Service) -> Result<Option<EipOptions>, CloudError> {
    let key = EIP_AUTO_CREATE;
    let allowed = [
        "bandwidth_size",
        "share_type",
        "share_id",
        "charge_mode",
        "ip_type",
    ];
    let Some(map) = object(service, key, &allowed)? else {
        return Ok(None);
    };
    let text = |field: &str| string_field(service, key, &map, field).map(Option::unwrap_or_default);
    let options = EipOptions {
        bandwidth_size: int_field(service, key, &map, "bandwidth_size")?.unwrap_or(0),
        share_type: text("share_type")?,
        share_id: text("share_id")?,
        charge_mode: Some(text("charge_mode")?)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "traffic".to_owned()),
        ip_type: text("ip_type")?,
    };
    let origin = Origin::Annotation(key);
    // The EIP API requires a type (`publicip.type`); upstream sends an empty one and
    // fails after making the ELB.
    if options.ip_type.is_empty() {
        return Err(invalid(
            service,
            origin,
            "`ip_type` is required (the EIP's type, e.g. 5_bgp or 5_sbgp: the region's)",
        ));
    }
    match options.share_type.as_str() {
        "PER" if options.bandwidth_size <= 0 => Err(invalid(
            service,
            origin,
            "`bandwidth_size` is required (above 0) with share_type PER",
        )),
        "WHOLE" if options.share_id.is_empty() => Err(invalid(
            service,
            origin,
            "`share_id` is required with share_type WHOLE",
        )),
        "PER" | "WHOLE" => match options.charge_mode.as_str() {
            "traffic" | "bandwidth" => Ok(Some(options)),
            other => Err(invalid(
                service,
                origin,
                format!("`charge_mode` `{other}` is neither traffic nor bandwidth"),
            )),
        },
        "" => Err(invalid(
            service,
            origin,
            "`share_type` (PER or WHOLE) is required",
        )),
        other => Err(invalid(
            service,
            origin,
            format!("`share_type` `{other}` is neither PER nor WHOLE"),
        )),
    }
}
