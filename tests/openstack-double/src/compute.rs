//! Nova (compute API v2.1): servers, listed in detail with Nova's filters (`name`,
//! `status`, `changes-since`, which also lists the servers deleted since as `DELETED`)
//! and pagination, and read one by one. Microversions: `OpenStack-API-Version:
//! compute X` (or `X-OpenStack-Nova-API-Version`) up to 2.96 is answered with the
//! version in the response; from 2.47 a server's `flavor` is embedded
//! (`original_name`, ...), before it is `{"id": ...}`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Query, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::Shared;
use crate::state::{Server, State};

/// The highest microversion served.
pub const MAX_MICROVERSION: (u32, u32) = (2, 96);
/// Nova's `osapi_max_limit`: the most servers in one page.
pub const MAX_LIMIT: usize = 1000;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/servers/detail", get(list_detail))
        .route("/servers/{id}", get(show))
        .route("/flavors", get(flavors))
        .route("/flavors/{id}", get(show_flavor))
}

fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::NOT_FOUND => "itemNotFound",
        StatusCode::NOT_ACCEPTABLE => "notAcceptable",
        _ => "badRequest",
    };
    (
        status,
        axum::Json(json!({ kind: {"code": status.as_u16(), "message": message} })),
    )
        .into_response()
}

/// The request's microversion (2.1 when none is asked for), or a 406.
fn microversion(headers: &HeaderMap) -> Result<(u32, u32), Response> {
    let asked = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("compute "))
        .or_else(|| {
            headers
                .get("x-openstack-nova-api-version")
                .and_then(|v| v.to_str().ok())
        })
        .map(str::trim);
    let Some(asked) = asked else {
        return Ok((2, 1));
    };
    if asked == "latest" {
        return Ok(MAX_MICROVERSION);
    }
    let parsed = asked
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
    match parsed {
        Some(v) if v >= (2, 1) && v <= MAX_MICROVERSION => Ok(v),
        _ => Err(error(
            StatusCode::NOT_ACCEPTABLE,
            &format!(
                "Version {asked} is not supported by the API. Minimum is 2.1 and maximum is 2.96."
            ),
        )),
    }
}

fn versioned(version: (u32, u32), status: StatusCode, body: Value) -> Response {
    let text = format!("compute {}.{}", version.0, version.1);
    (
        status,
        [
            ("openstack-api-version", text.clone()),
            ("x-openstack-nova-api-version", text[8..].to_owned()),
            (
                "vary",
                "OpenStack-API-Version, X-OpenStack-Nova-API-Version".to_owned(),
            ),
        ],
        axum::Json(body),
    )
        .into_response()
}

fn server_json(state: &State, server: &Server, version: (u32, u32)) -> Value {
    let addresses: serde_json::Map<String, Value> = state
        .server_addresses(&server.id)
        .into_iter()
        .map(|(network, list)| {
            let list = list
                .into_iter()
                .map(|(addr, kind, mac)| {
                    json!({"addr": addr, "version": if addr.contains(':') { 6 } else { 4 },
                           "OS-EXT-IPS:type": kind, "OS-EXT-IPS-MAC:mac_addr": mac})
                })
                .collect();
            (network, Value::Array(list))
        })
        .collect();
    let flavor = if version >= (2, 47) {
        json!({"original_name": server.flavor, "vcpus": 2, "ram": 2048, "disk": 20,
               "ephemeral": 0, "swap": 0, "extra_specs": {}})
    } else {
        let id = state
            .flavors
            .iter()
            .find(|(_, name)| **name == server.flavor)
            .map(|(id, _)| id.clone())
            .unwrap_or_default();
        json!({"id": id, "links": []})
    };
    json!({
        "id": server.id,
        "name": server.name,
        "status": server.status,
        "addresses": addresses,
        "flavor": flavor,
        "OS-EXT-AZ:availability_zone": server.zone,
        "OS-EXT-STS:vm_state": match server.status.as_str() {
            "SHUTOFF" => "stopped", "ERROR" => "error", _ => "active" },
        "metadata": server.metadata,
        "created": iso8601(server.created),
        "updated": iso8601(server.updated),
        "tenant_id": "project",
        "links": [],
    })
}

/// `GET /servers/detail`: `name` is a regular expression searched in the name, as
/// Nova's; `status` filters; `changes-since` (ISO 8601) lists the servers updated at or
/// after it, the deleted ones among them (as `DELETED`), as Nova does for every user;
/// `limit` (at most [`MAX_LIMIT`]) and `marker` page, with a `servers_links` `next`
/// link (the same filters) while more remain.
async fn list_detail(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let name = match query.get("name").map(|n| regex::Regex::new(n)) {
        None => None,
        Some(Ok(re)) => Some(re),
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Invalid regular expression in name",
            );
        }
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => MAX_LIMIT,
        Some(Ok(l)) => l.min(MAX_LIMIT),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "limit must be an integer"),
    };
    let since = match query.get("changes-since").map(|t| parse_time(t)) {
        None => None,
        Some(Some(since)) => Some(since),
        Some(None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Invalid input for query parameters changes-since.",
            );
        }
    };
    shared.with(|state| {
        state.stamp_server_changes();
        let state: &State = state;
        let matching: Vec<&Server> = listed(state, since)
            .into_iter()
            .filter(|s| name.as_ref().is_none_or(|re| re.is_match(&s.name)))
            .filter(|s| {
                query
                    .get("status")
                    .is_none_or(|st| s.status.eq_ignore_ascii_case(st))
            })
            .collect();
        let start = match query.get("marker") {
            None => 0,
            Some(marker) => match matching.iter().position(|s| &s.id == marker) {
                Some(i) => i + 1,
                None => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("marker [{marker}] not found"),
                    );
                }
            },
        };
        let page: Vec<&Server> = matching.iter().skip(start).take(limit).copied().collect();
        let mut body = json!({
            "servers": page.iter().map(|s| server_json(state, s, version)).collect::<Vec<_>>(),
        });
        if start + page.len() < matching.len()
            && let Some(last) = page.last()
        {
            let next = next_link(&headers, &query, limit, &last.id);
            body["servers_links"] = json!([{"rel": "next", "href": next}]);
        }
        versioned(version, StatusCode::OK, body)
    })
}

/// The servers a listing filters: every server; with `changes-since`, those updated at
/// or after it (to the second, as Nova's database keeps times), deleted ones included.
fn listed(state: &State, since: Option<SystemTime>) -> Vec<&Server> {
    let Some(since) = since else {
        return state.servers.values().collect();
    };
    let mut changed: Vec<&Server> = state
        .servers
        .values()
        .chain(state.deleted_servers.values())
        .filter(|s| unix(s.updated) >= unix(since))
        .collect();
    changed.sort_by(|a, b| a.id.cmp(&b.id));
    changed
}

/// The `next` link of a page ending at `last`: the request's filters, from `last`.
fn next_link(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    limit: usize,
    last: &str,
) -> String {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let mut filters: Vec<(&String, &String)> = query
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "limit" | "marker"))
        .collect();
    filters.sort();
    let mut params = url::form_urlencoded::Serializer::new(String::new());
    params.append_pair("limit", &limit.to_string());
    params.append_pair("marker", last);
    for (k, v) in filters {
        params.append_pair(k, v);
    }
    format!(
        "http://{host}/compute/v2.1/servers/detail?{}",
        params.finish()
    )
}

/// `GET /flavors`: every flavor's `id` and `name` (one page: clouds have few).
async fn flavors(Extract(shared): Extract<Shared>, headers: HeaderMap) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| {
        let list: Vec<Value> = state
            .flavors
            .iter()
            .map(|(id, name)| json!({"id": id, "name": name, "links": []}))
            .collect();
        versioned(version, StatusCode::OK, json!({"flavors": list}))
    })
}

/// `GET /flavors/{id}`: the flavor's `id` and `name` (how a client before microversion
/// 2.47 names a server's flavor).
async fn show_flavor(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| match state.flavors.get(&id) {
        Some(name) => versioned(
            version,
            StatusCode::OK,
            json!({"flavor": {"id": id, "name": name, "vcpus": 2, "ram": 2048, "disk": 20,
                              "links": []}}),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            &format!("Flavor {id} could not be found."),
        ),
    })
}

/// `GET /servers/{id}`.
async fn show(
    Extract(shared): Extract<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let version = match microversion(&headers) {
        Ok(v) => v,
        Err(e) => return e,
    };
    shared.with(|state| {
        state.stamp_server_changes();
        match state.servers.get(&id) {
            Some(server) => versioned(
                version,
                StatusCode::OK,
                json!({"server": server_json(state, server, version)}),
            ),
            None => error(
                StatusCode::NOT_FOUND,
                &format!("Instance {id} could not be found."),
            ),
        }
    })
}

/// Seconds since the epoch (0 before it).
fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Days since 1970-01-01 of a date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * i64::from((month + 9) % 12) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// `time` as Nova writes `created` and `updated`: `2026-06-02T10:00:00Z`.
pub fn iso8601(time: SystemTime) -> String {
    let seconds = unix(time) as i64;
    let days = seconds.div_euclid(86_400) + 719_468;
    let (era, day_of_era) = (days.div_euclid(146_097), days.rem_euclid(146_097));
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let in_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

/// An ISO 8601 time as Nova takes `changes-since`: `2026-06-02T09:59:00Z`, with or
/// without fractional seconds (dropped), `Z`, an offset (`+02:00`) or none (UTC).
pub fn parse_time(text: &str) -> Option<SystemTime> {
    let (date, rest) = text.split_once(['T', 't', ' '])?;
    let fields: Vec<&str> = date.split('-').collect();
    let [year, month, day] = fields.as_slice() else {
        return None;
    };
    let (year, month, day): (i64, u32, u32) =
        (year.parse().ok()?, month.parse().ok()?, day.parse().ok()?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let clock = clock.split('.').next()?;
    let parts: Vec<i64> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [hours, minutes, seconds] = match parts.as_slice() {
        [h, m] => [*h, *m, 0],
        [h, m, s] => [*h, *m, *s],
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hours * 3600 + minutes * 60 + seconds
            - zone_offset(zone)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// The seconds east of UTC of an ISO 8601 zone: empty or `Z` is 0, else `±hh:mm` or
/// `±hhmm`.
fn zone_offset(zone: &str) -> Option<i64> {
    if zone.is_empty() || zone.eq_ignore_ascii_case("z") {
        return Some(0);
    }
    let sign = match zone.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = digits[2..].parse().ok()?;
    Some(sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_nova_writes_and_reads_them() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_208_000);
        assert_eq!(iso8601(at), "2024-02-29T12:00:00Z");
        for text in [
            "2024-02-29T12:00:00Z",
            "2024-02-29T12:00:00.123456Z",
            "2024-02-29T14:00:00+02:00",
            "2024-02-29T07:00:00-0500",
            "2024-02-29 12:00:00",
            "2024-02-29T12:00",
        ] {
            assert_eq!(parse_time(text), Some(at), "{text}");
        }
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:00:00+2",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
