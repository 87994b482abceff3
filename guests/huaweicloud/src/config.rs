//! The cloud config: cloud-provider-huaweicloud's `cloud-config` (gcfg), without its
//! keys, and its `loadbalancer-config` ConfigMap's options as sections of the same file.
//!
//! ```ini
//! [Global]
//! cloud = myhuaweicloud.com          ; the default
//! region = ap-southeast-1            ; required
//! project-id = 0f5b3e2c8a4d4b7f9e1c2d3a4b5c6d7e   ; required
//!
//! [Vpc]
//! id = 1b2c...
//! subnet-id = 4d5e...
//! security-group-id = 7f80...
//!
//! [LoadBalancer]                     ; upstream's `loadBalancerOption`
//! lb-algorithm = ROUND_ROBIN
//! keep-eip = false
//! session-affinity-flag = on
//! session-affinity-option = {"type": "SOURCE_IP", "persistence_timeout": 15}
//! health-check-flag = on
//! health-check-option = {"delay": 5, "timeout": 15, "max_retries": 5}
//!
//! [Networking]                       ; upstream's `networkingOption`
//! public-network-name = 3a4b...      ; repeatable
//!
//! [Endpoints]                        ; this provider's extension (private clouds, tests)
//! ecs = https://ecs.example.internal
//! ```
//!
//! What upstream reads where (`pkg/config/config.go` `ReadConfig`, `CloudConfig`;
//! `pkg/config/loadbalancerconfig.go` `LoadELBConfig`, `LoadBalancerOptions`):
//! - `[Global]` and `[Vpc]` are upstream's `cloud-config` file. `access-key` and
//!   `secret-key` are **refused**: the host signs every request (AK/SK,
//!   `SDK-HMAC-SHA256`) with the keys of the credentials Secret its policy names
//!   (`huaweicloud.accessKeyIdFile`, `huaweicloud.secretAccessKeyFile`); the provider
//!   never holds a key. `project-id` is required here (upstream: optional), since the
//!   provider writes it in the API paths. `auth-url` is accepted and unused (the host
//!   signs; nothing asks IAM).
//! - `[LoadBalancer]`, `[Networking]` and `[Metadata]` are upstream's `loadbalancer-config`
//!   ConfigMap (`loadBalancerOption`, `networkingOption`, `metadataOption`, JSON there),
//!   with its keys and defaults ([`LoadBalancerOptions`]). A provider reads no
//!   ConfigMap, so they live in the cloud config. The JSON objects
//!   (`session-affinity-option`, `health-check-option`) are written as in upstream's
//!   ConfigMap: gcfg strips the double quotes of a pasted `{"type": "SOURCE_IP"}`, and the
//!   `{type: SOURCE_IP}` left is read too ([`parse_object`]); with gcfg's escapes
//!   (`"{\"type\": \"SOURCE_IP\"}"`) the value is plain JSON.
//! - `[Endpoints]` is **this provider's extension**: `ecs`, `elb`, `vpc` URLs replacing
//!   `https://<service>.<region>.<cloud>` (upstream's `GetHcClient`), for private clouds and
//!   tests ([`Config::endpoint`]).
//!
//! Unlike upstream's `gcfg.FatalOnly` read, a section, subsection or key this file
//! does not know is an error naming it (and its line): a typo never goes unnoticed.
//! Names match as gcfg matches them (any case, `-` and `_` ignored).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use wasm_ccm_guest::gcfg;
use wasm_ccm_guest::url::Url;

/// Upstream's default `[Global] cloud` (`setDefaultConfig`).
pub const DEFAULT_CLOUD: &str = "myhuaweicloud.com";

/// Upstream's `HealthCheckDelay`, `HealthCheckTimeout`, `HealthCheckMaxRetries`.
pub const HEALTH_CHECK_DELAY: i32 = 5;
pub const HEALTH_CHECK_TIMEOUT: i32 = 3;
pub const HEALTH_CHECK_MAX_RETRIES: i32 = 3;

/// The services the provider calls; each has an endpoint ([`Config::endpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    /// Elastic Cloud Server: instances.
    Ecs,
    /// Elastic Load Balance: shared (`/v2/...`) and dedicated (`/v3/...`) load balancers.
    Elb,
    /// Virtual Private Cloud: subnets, security groups, EIPs (`/v1/.../publicips`).
    Vpc,
}

impl Service {
    /// Every service the provider calls.
    pub const ALL: [Service; 3] = [Service::Ecs, Service::Elb, Service::Vpc];

    /// The service's name: the first label of its host name (`ecs.<region>.<cloud>`),
    /// its `[Endpoints]` key, the policy's `services` entry.
    pub fn name(self) -> &'static str {
        match self {
            Service::Ecs => "ecs",
            Service::Elb => "elb",
            Service::Vpc => "vpc",
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[Vpc]`: upstream's `VpcOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VpcOptions {
    /// `id`: the VPC of the cluster's ECSs.
    pub id: String,
    /// `subnet-id`: the IPv4 subnet of the cluster's ECSs (upstream's default for load
    /// balancers' VIPs when neither the Node nor the Service names one).
    pub subnet_id: String,
    /// `security-group-id`: the security group upstream associates with every Node's
    /// ECS (its `SecurityGroupListener`). Read, not used: no export associates Nodes.
    #[allow(dead_code)]
    pub security_group_id: String,
}

/// Upstream's `elbmodel.SessionPersistence` (`session-affinity-option`, and the
/// `kubernetes.io/elb.session-affinity-option` annotation): JSON keys `type`,
/// `cookie_name`, `persistence_timeout`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPersistence {
    /// `type`: `SOURCE_IP`, `HTTP_COOKIE` or `APP_COOKIE` (empty: unset).
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `cookie_name` (for `APP_COOKIE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_name: Option<String>,
    /// `persistence_timeout`, minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_timeout: Option<i32>,
}

impl SessionPersistence {
    const FIELDS: &'static [&'static str] = &["type", "cookie_name", "persistence_timeout"];

    /// This value with the keys of the JSON object `json` replacing its fields, as
    /// upstream's `json.Unmarshal` into a copy of the default does (`getSessionAffinity`
    /// with the `kubernetes.io/elb.session-affinity-option` annotation): keys match
    /// case-insensitively, unknown keys are ignored, fields not named are kept.
    pub fn merged(&self, json: &str) -> Result<Self, String> {
        merge(self, Self::FIELDS, json)
    }
}

/// Upstream's `config.HealthCheckOption` (`health-check-option`, and the
/// `kubernetes.io/elb.health-check-option` annotation): JSON keys `enable`, `delay`,
/// `timeout`, `max_retries`, `protocol`, `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheckOption {
    /// `enable`. Upstream sets it to true when the flag is empty or `on`
    /// (`getHealthCheckOptionFromAnnotation`); otherwise it is what the JSON said
    /// (default false).
    #[serde(default)]
    pub enable: bool,
    /// `delay`, seconds (default 5).
    #[serde(default)]
    pub delay: i32,
    /// `timeout`, seconds (default 3).
    #[serde(default)]
    pub timeout: i32,
    /// `max_retries` (default 3).
    #[serde(default)]
    pub max_retries: i32,
    /// `protocol` (empty: the listener's).
    #[serde(default)]
    pub protocol: String,
    /// `path` (HTTP checks).
    #[serde(default)]
    pub path: String,
}

impl Default for HealthCheckOption {
    /// Upstream's `initDefaultValue`: delay 5, timeout 3, max_retries 3.
    fn default() -> Self {
        Self {
            enable: false,
            delay: HEALTH_CHECK_DELAY,
            timeout: HEALTH_CHECK_TIMEOUT,
            max_retries: HEALTH_CHECK_MAX_RETRIES,
            protocol: String::new(),
            path: String::new(),
        }
    }
}

impl HealthCheckOption {
    const FIELDS: &'static [&'static str] = &[
        "enable",
        "delay",
        "timeout",
        "max_retries",
        "protocol",
        "path",
    ];

    /// This value with the keys of the JSON object `json` replacing its fields, as
    /// upstream's `json.Unmarshal` into a copy of the default does
    /// (`getHealthCheckOptionFromAnnotation` with `kubernetes.io/elb.health-check-option`).
    pub fn merged(&self, json: &str) -> Result<Self, String> {
        merge(self, Self::FIELDS, json)
    }
}

/// `[LoadBalancer]`: upstream's `LoadBalancerOptions` (the `loadBalancerOption` of its
/// `loadbalancer-config` ConfigMap), same keys, same defaults (`NewDefaultELBConfig`).
/// Each is the default of the Service annotation of the same name
/// (`kubernetes.io/elb.<key>`), as upstream's `getStringFromSvsAnnotation` & co. read them.
/// All are read; the load balancer code uses those of the ELB kinds it serves.
#[allow(dead_code)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerOptions {
    /// `lb-algorithm`: `ROUND_ROBIN`, `LEAST_CONNECTIONS` or `SOURCE_IP`. Upstream's default
    /// is empty (the annotation or this must name one for a pool).
    pub lb_algorithm: String,
    /// `lb-provider` (default `vlb`).
    pub lb_provider: String,
    /// `keep-eip` (default false): keep the EIP when the load balancer goes.
    pub keep_eip: bool,
    /// `enable-cross-vpc` (default false): dedicated load balancers only.
    pub enable_cross_vpc: bool,
    /// `l4-flavor-id`: dedicated load balancers only.
    pub l4_flavor_id: String,
    /// `l7-flavor-id`: dedicated load balancers only.
    pub l7_flavor_id: String,
    /// `session-affinity-option`.
    pub session_affinity_option: SessionPersistence,
    /// `session-affinity-flag`: `on` or `off` (default empty). Upstream's
    /// `getSessionAffinity`: on unless empty or `off`.
    pub session_affinity_flag: String,
    /// `enable-transparent-client-ip` (default false).
    pub enable_transparent_client_ip: bool,
    /// `idle-timeout`, seconds (0: unset).
    pub idle_timeout: i32,
    /// `request-timeout`, seconds (0: unset).
    pub request_timeout: i32,
    /// `response-timeout`, seconds (0: unset).
    pub response_timeout: i32,
    /// `health-check-flag`: `on` or `off` (default empty). Upstream's
    /// `getHealthCheckOptionFromAnnotation`: on when empty or `on`.
    pub health_check_flag: String,
    /// `health-check-option` (default delay 5, timeout 3, max_retries 3).
    pub health_check_option: HealthCheckOption,
    /// `disable-create-security-group` (default false).
    pub disable_create_security_group: bool,
    /// `loadbalancer-class`: when set, upstream serves only Services of class
    /// `huaweicloud.com/elb`.
    pub load_balancer_class: String,
    /// `business-name`: replaces the cluster name in load balancer names
    /// ([`LoadBalancerOptions::cluster_name`]).
    pub business_name: String,
    /// `primary-nic`: `force` to use the Node's primary NIC's IP as the member address
    /// (default empty: the Node's address).
    pub primary_nic: String,
}

impl Default for LoadBalancerOptions {
    fn default() -> Self {
        Self {
            lb_algorithm: String::new(),
            lb_provider: "vlb".into(),
            keep_eip: false,
            enable_cross_vpc: false,
            l4_flavor_id: String::new(),
            l7_flavor_id: String::new(),
            session_affinity_option: SessionPersistence::default(),
            session_affinity_flag: String::new(),
            enable_transparent_client_ip: false,
            idle_timeout: 0,
            request_timeout: 0,
            response_timeout: 0,
            health_check_flag: String::new(),
            health_check_option: HealthCheckOption::default(),
            disable_create_security_group: false,
            load_balancer_class: String::new(),
            business_name: String::new(),
            primary_nic: String::new(),
        }
    }
}

impl LoadBalancerOptions {
    /// The cluster name in load balancer names: `business-name` when set, else
    /// `cluster` (upstream's `GetLoadBalancerName`).
    pub fn cluster_name<'a>(&'a self, cluster: &'a str) -> &'a str {
        if self.business_name.is_empty() {
            cluster
        } else {
            &self.business_name
        }
    }
}

/// `[Networking]`: upstream's `NetworkingOptions` (`networkingOption`), read by its
/// `BuildAddresses`. The names are the keys of an ECS's `addresses` (its NICs' VPCs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkingOptions {
    /// `public-network-name` (repeatable, or comma-separated): addresses there are
    /// external.
    pub public_network_name: Vec<String>,
    /// `internal-network-name` (likewise): when set, only addresses there are internal.
    pub internal_network_name: Vec<String>,
}

/// `[Metadata]`: upstream's `MetadataOptions` (`metadataOption`). Read and checked, not
/// used: the provider asks the ECS API, never a metadata service or config drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataOptions {
    /// `search-order` (default `metadataService,configDrive`).
    #[allow(dead_code)]
    pub search_order: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            search_order: "metadataService,configDrive".into(),
        }
    }
}

/// `[Endpoints]` (this provider's extension): URLs replacing the default endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoints {
    overrides: BTreeMap<Service, String>,
}

impl Endpoints {
    /// The URL set for `service`, without a trailing `/`.
    pub fn get(&self, service: Service) -> Option<&str> {
        self.overrides.get(&service).map(String::as_str)
    }
}

/// The provider's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[Global] cloud`: the domain of the endpoints (default `myhuaweicloud.com`).
    pub cloud: String,
    /// `[Global] region` (required): the endpoints' region, and the Nodes'
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// `[Global] project-id` (required): `{project_id}` in API paths.
    pub project_id: String,
    /// `[Global] auth-url` (default `https://iam.<cloud>:443/v3/`): accepted, unused (the
    /// host signs the requests; nothing asks IAM).
    #[allow(dead_code)]
    pub auth_url: String,
    pub vpc: VpcOptions,
    pub load_balancer: LoadBalancerOptions,
    pub networking: NetworkingOptions,
    pub metadata: MetadataOptions,
    pub endpoints: Endpoints,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cloud: DEFAULT_CLOUD.into(),
            region: String::new(),
            project_id: String::new(),
            auth_url: String::new(),
            vpc: VpcOptions::default(),
            load_balancer: LoadBalancerOptions::default(),
            networking: NetworkingOptions::default(),
            metadata: MetadataOptions::default(),
            endpoints: Endpoints::default(),
        }
    }
}

/// The sections this file knows, as gcfg reads them (lowercase) and as written in
/// messages.
const SECTIONS: [(&str, &str); 6] = [
    ("global", "Global"),
    ("vpc", "Vpc"),
    ("loadbalancer", "LoadBalancer"),
    ("networking", "Networking"),
    ("metadata", "Metadata"),
    ("endpoints", "Endpoints"),
];

/// The section's name as messages write it.
fn section_title(section: &str) -> &str {
    SECTIONS
        .iter()
        .find(|(read, _)| *read == section)
        .map_or(section, |(_, title)| title)
}

/// The name of the variable on `line` as written (gcfg gives it lowercase, without `-`
/// and `_`).
fn written_name(text: &str, line: usize) -> String {
    let raw = text.lines().nth(line.saturating_sub(1)).unwrap_or_default();
    raw.trim()
        .split(['=', ';', '#'])
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Every `[section]` header: its line, its name as written, and whether it has a
/// subsection. (gcfg gives entries only: a section without variables says nothing.)
fn headers(text: &str) -> Vec<(usize, String, bool)> {
    text.lines()
        .enumerate()
        .filter_map(|(index, raw)| {
            let inner = raw.trim().strip_prefix('[')?;
            let inner = inner.split(']').next().unwrap_or_default().trim();
            let (name, sub) = match inner.split_once(char::is_whitespace) {
                Some((name, _)) => (name, true),
                None => (inner, false),
            };
            Some((index + 1, name.to_owned(), sub))
        })
        .collect()
}

fn boolean(value: &str, line: usize, section: &str, key: &str) -> Result<bool, String> {
    gcfg::boolean(value, line, &format!("[{section}] {key}"))
}

fn integer(value: &str, line: usize, section: &str, key: &str) -> Result<i32, String> {
    value.trim().parse().map_err(|_| {
        format!("cloud config line {line}: [{section}] {key} `{value}` is not a whole number")
    })
}

/// One of `allowed` (a flag's values); an error naming the key otherwise.
fn one_of(
    value: String,
    allowed: &[&str],
    line: usize,
    section: &str,
    key: &str,
) -> Result<String, String> {
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        let listed: Vec<String> = allowed
            .iter()
            .map(|a| {
                if a.is_empty() {
                    "empty".to_owned()
                } else {
                    format!("`{a}`")
                }
            })
            .collect();
        Err(format!(
            "cloud config line {line}: [{section}] {key} `{value}` is not one of {}",
            listed.join(", ")
        ))
    }
}

/// A comma-separated list, blanks dropped.
fn list(value: &str) -> impl Iterator<Item = String> + '_ {
    value
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// A JSON object as written in the cloud config: plain JSON (gcfg-quoted:
/// `"{\"type\": \"SOURCE_IP\"}"`), or what gcfg leaves of JSON pasted as is (it strips
/// double quotes): `{type: SOURCE_IP, persistence_timeout: 15}`, whose values are read
/// as numbers, `true`/`false`, or text.
pub fn parse_object(value: &str) -> Result<Map<String, Value>, String> {
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(value) {
        return Ok(object);
    }
    let inner = value
        .trim()
        .strip_prefix('{')
        .and_then(|v| v.strip_suffix('}'))
        .ok_or("not a JSON object ({...})")?;
    let mut object = Map::new();
    for pair in inner.split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair
            .split_once(':')
            .ok_or_else(|| format!("`{}` is not `key: value`", pair.trim()))?;
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            return Err(format!("`{}` has no key", pair.trim()));
        }
        let value = if let Ok(n) = value.parse::<i64>() {
            Value::from(n)
        } else if value == "true" || value == "false" {
            Value::Bool(value == "true")
        } else if value == "null" {
            Value::Null
        } else {
            Value::String(value.to_owned())
        };
        object.insert(key.to_owned(), value);
    }
    Ok(object)
}

/// `base` with the keys of the object `json` replacing its `fields` (matched
/// case-insensitively, as Go's `encoding/json` matches them); unknown keys and `null`s
/// leave `base` as it is, as `json.Unmarshal` into a filled struct does.
fn merge<T: Serialize + DeserializeOwned>(
    base: &T,
    fields: &[&str],
    json: &str,
) -> Result<T, String> {
    let overlay = parse_object(json)?;
    let mut merged = match serde_json::to_value(base) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for (key, value) in overlay {
        if value.is_null() {
            continue;
        }
        if let Some(field) = fields.iter().find(|f| f.eq_ignore_ascii_case(&key)) {
            merged.insert((*field).to_owned(), value);
        }
    }
    serde_json::from_value(Value::Object(merged)).map_err(|e| e.to_string())
}

/// A JSON-object option of `[LoadBalancer]`, merged onto its default.
fn object_option<T>(
    merged: Result<T, String>,
    line: usize,
    key: &str,
    example: &str,
) -> Result<T, String> {
    merged.map_err(|e| {
        format!(
            "cloud config line {line}: [LoadBalancer] {key} is not the JSON object upstream \
             takes ({e}); e.g. {key} = {example}"
        )
    })
}

impl Config {
    /// Parses and checks the file (see the module docs).
    pub fn parse(text: &str) -> Result<Self, String> {
        let entries = gcfg::parse(text)?;
        for (line, name, subsection) in headers(text) {
            let read = name.to_ascii_lowercase();
            if !SECTIONS.iter().any(|(known, _)| *known == read) {
                return Err(format!(
                    "cloud config line {line}: unknown section [{name}] (the sections are \
                     [Global], [Vpc], [LoadBalancer], [Networking], [Metadata], [Endpoints])"
                ));
            }
            if subsection {
                return Err(format!(
                    "cloud config line {line}: [{name}] takes no subsection (`[{name} \"...\"]`)"
                ));
            }
        }
        let mut config = Config::default();
        let mut auth_url = None;
        for entry in entries {
            let gcfg::Entry {
                line,
                section,
                name,
                value,
                ..
            } = entry;
            let title = section_title(&section).to_owned();
            let key = written_name(text, line);
            let unknown = |known: &str| {
                format!(
                    "cloud config line {line}: [{title}] has no key `{key}` (its keys: {known})"
                )
            };
            match section.as_str() {
                "global" => match name.as_str() {
                    "cloud" => config.cloud = value.trim().to_owned(),
                    "region" => config.region = value.trim().to_owned(),
                    "projectid" => config.project_id = value.trim().to_owned(),
                    "authurl" => auth_url = Some(value),
                    // Never quote the value: it is a key.
                    "accesskey" | "secretkey" => {
                        return Err(format!(
                            "cloud config line {line}: [Global] {key} is refused: the provider \
                             never holds Huawei Cloud keys. The host signs every request with the \
                             keys of the credentials Secret its policy reads (the `huaweicloud` \
                             rule's accessKeyIdFile and secretAccessKeyFile): put the keys \
                             there and remove {key} from the cloud config"
                        ));
                    }
                    _ => {
                        return Err(unknown(
                            "cloud, region, project-id, auth-url; access-key and secret-key \
                             belong in the credentials Secret",
                        ));
                    }
                },
                "vpc" => match name.as_str() {
                    "id" => config.vpc.id = value,
                    "subnetid" => config.vpc.subnet_id = value,
                    "securitygroupid" => config.vpc.security_group_id = value,
                    _ => return Err(unknown("id, subnet-id, security-group-id")),
                },
                "loadbalancer" => {
                    let lb = &mut config.load_balancer;
                    let s = "LoadBalancer";
                    match name.as_str() {
                        "lbalgorithm" => lb.lb_algorithm = value,
                        "lbprovider" => lb.lb_provider = value,
                        "keepeip" => lb.keep_eip = boolean(&value, line, s, &key)?,
                        "enablecrossvpc" => lb.enable_cross_vpc = boolean(&value, line, s, &key)?,
                        "l4flavorid" => lb.l4_flavor_id = value,
                        "l7flavorid" => lb.l7_flavor_id = value,
                        "sessionaffinityflag" => {
                            lb.session_affinity_flag =
                                one_of(value, &["", "on", "off"], line, s, &key)?
                        }
                        "sessionaffinityoption" => {
                            lb.session_affinity_option = object_option(
                                SessionPersistence::default().merged(&value),
                                line,
                                &key,
                                r#"{"type": "SOURCE_IP", "persistence_timeout": 15}"#,
                            )?
                        }
                        "enabletransparentclientip" => {
                            lb.enable_transparent_client_ip = boolean(&value, line, s, &key)?
                        }
                        "idletimeout" => lb.idle_timeout = integer(&value, line, s, &key)?,
                        "requesttimeout" => lb.request_timeout = integer(&value, line, s, &key)?,
                        "responsetimeout" => lb.response_timeout = integer(&value, line, s, &key)?,
                        "healthcheckflag" => {
                            lb.health_check_flag = one_of(value, &["", "on", "off"], line, s, &key)?
                        }
                        "healthcheckoption" => {
                            lb.health_check_option = object_option(
                                HealthCheckOption::default().merged(&value),
                                line,
                                &key,
                                r#"{"delay": 5, "timeout": 3, "max_retries": 3}"#,
                            )?
                        }
                        "disablecreatesecuritygroup" => {
                            lb.disable_create_security_group = boolean(&value, line, s, &key)?
                        }
                        "loadbalancerclass" => lb.load_balancer_class = value,
                        "businessname" => lb.business_name = value,
                        "primarynic" => {
                            lb.primary_nic = one_of(value, &["", "force"], line, s, &key)?
                        }
                        _ => {
                            return Err(unknown(
                                "lb-algorithm, lb-provider, keep-eip, enable-cross-vpc, \
                                 l4-flavor-id, l7-flavor-id, session-affinity-flag, \
                                 session-affinity-option, enable-transparent-client-ip, \
                                 idle-timeout, request-timeout, response-timeout, \
                                 health-check-flag, health-check-option, \
                                 disable-create-security-group, loadbalancer-class, \
                                 business-name, primary-nic",
                            ));
                        }
                    }
                }
                "networking" => match name.as_str() {
                    "publicnetworkname" => {
                        config.networking.public_network_name.extend(list(&value))
                    }
                    "internalnetworkname" => {
                        config.networking.internal_network_name.extend(list(&value))
                    }
                    _ => return Err(unknown("public-network-name, internal-network-name")),
                },
                "metadata" => match name.as_str() {
                    "searchorder" => {
                        for source in list(&value) {
                            if source != "metadataService" && source != "configDrive" {
                                return Err(format!(
                                    "cloud config line {line}: [Metadata] {key}: `{source}` is \
                                     not metadataService or configDrive"
                                ));
                            }
                        }
                        wasm_ccm_guest::log::info(
                            "cloud config: [Metadata] search-order is read and not used: the \
                             provider asks the ECS API, never a metadata service",
                            &[("line", &line.to_string())],
                        );
                        config.metadata.search_order = value;
                    }
                    _ => return Err(unknown("search-order")),
                },
                "endpoints" => {
                    let service = Service::ALL
                        .into_iter()
                        .find(|s| s.name() == name)
                        .ok_or_else(|| unknown("ecs, elb, vpc"))?;
                    let url = Url::parse(value.trim())
                        .map_err(|e| format!("cloud config line {line}: [Endpoints] {key}: {e}"))?;
                    if url.path_and_query.contains('?') {
                        return Err(format!(
                            "cloud config line {line}: [Endpoints] {key}: an endpoint has no \
                             query"
                        ));
                    }
                    config
                        .endpoints
                        .overrides
                        .insert(service, url.to_string().trim_end_matches('/').to_owned());
                }
                // Every section was checked above.
                other => {
                    return Err(format!(
                        "cloud config line {line}: unknown section [{other}]"
                    ));
                }
            }
        }
        config.check()?;
        config.auth_url =
            auth_url.unwrap_or_else(|| format!("https://iam.{}:443/v3/", config.cloud));
        Ok(config)
    }

    /// The checks after reading: the required keys, and names that go in host names.
    fn check(&mut self) -> Result<(), String> {
        if self.cloud.is_empty() {
            self.cloud = DEFAULT_CLOUD.into();
        }
        let host_label = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                && !s.starts_with(['-', '.'])
                && !s.ends_with(['-', '.'])
        };
        if !host_label(&self.cloud) {
            return Err(format!(
                "cloud config: [Global] cloud `{}` is not a domain name (e.g. {DEFAULT_CLOUD})",
                self.cloud
            ));
        }
        if self.region.is_empty() {
            return Err(
                "cloud config: [Global] region is required (the region of the cluster's ECSs, \
                 e.g. ap-southeast-1)"
                    .into(),
            );
        }
        if !host_label(&self.region) || self.region.contains('.') {
            return Err(format!(
                "cloud config: [Global] region `{}` is not a region name (letters, digits, -)",
                self.region
            ));
        }
        if self.project_id.is_empty() {
            return Err(
                "cloud config: [Global] project-id is required: the provider writes it in the \
                 API paths (/v1/<project-id>/cloudservers/...); it is the project of the region"
                    .into(),
            );
        }
        if !self.project_id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "cloud config: [Global] project-id `{}` is not a project ID (letters and digits)",
                self.project_id
            ));
        }
        Ok(())
    }

    /// The endpoint of `service`, without a trailing `/`: the `[Endpoints]` URL when
    /// set, else `https://<service>.<region>.<cloud>` (upstream's `GetHcClient`).
    pub fn endpoint(&self, service: Service) -> String {
        match self.endpoints.get(service) {
            Some(url) => url.to_owned(),
            None => format!("https://{}.{}.{}", service.name(), self.region, self.cloud),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[Global]\nregion = ap-southeast-1\nproject-id = p0123\n";

    #[test]
    fn upstreams_file_and_defaults() {
        let config = Config::parse(
            "[Global]\nregion = cn-north-4\nproject-id = abc123\nauth-url = https://iam.x/v3\n\
             [Vpc]\nid = vpc-1\nsubnet-id = sub-1\nsecurity-group-id = sg-1\n",
        )
        .unwrap();
        assert_eq!(config.cloud, "myhuaweicloud.com");
        assert_eq!(config.region, "cn-north-4");
        assert_eq!(config.project_id, "abc123");
        assert_eq!(config.auth_url, "https://iam.x/v3");
        assert_eq!(config.vpc.id, "vpc-1");
        assert_eq!(config.vpc.subnet_id, "sub-1");
        assert_eq!(config.vpc.security_group_id, "sg-1");
        assert_eq!(config.load_balancer, LoadBalancerOptions::default());
        assert_eq!(config.load_balancer.lb_provider, "vlb");
        assert_eq!(
            config.load_balancer.health_check_option,
            HealthCheckOption {
                enable: false,
                delay: 5,
                timeout: 3,
                max_retries: 3,
                protocol: String::new(),
                path: String::new(),
            }
        );
        assert_eq!(config.metadata.search_order, "metadataService,configDrive");
        assert_eq!(
            config.endpoint(Service::Ecs),
            "https://ecs.cn-north-4.myhuaweicloud.com"
        );
        let default_auth = Config::parse(MINIMAL).unwrap();
        assert_eq!(
            default_auth.auth_url,
            "https://iam.myhuaweicloud.com:443/v3/"
        );
    }

    #[test]
    fn endpoints_follow_cloud_and_region_unless_set() {
        let config = Config::parse(&format!(
            "{MINIMAL}cloud = example.com\n[Endpoints]\nelb = http://127.0.0.1:8080/\n\
             VPC = https://vpc.internal/base\n"
        ))
        .unwrap();
        assert_eq!(
            config.endpoint(Service::Ecs),
            "https://ecs.ap-southeast-1.example.com"
        );
        assert_eq!(config.endpoint(Service::Elb), "http://127.0.0.1:8080");
        assert_eq!(config.endpoint(Service::Vpc), "https://vpc.internal/base");
        let err =
            Config::parse(&format!("{MINIMAL}[Endpoints]\niam = https://iam.x\n")).unwrap_err();
        assert!(err.contains("[Endpoints] has no key `iam`"), "{err}");
        let err = Config::parse(&format!("{MINIMAL}[Endpoints]\necs = ftp://x\n")).unwrap_err();
        assert!(
            err.contains("line 5") && err.contains("[Endpoints] ecs"),
            "{err}"
        );
    }

    #[test]
    fn keys_are_refused_without_quoting_them() {
        for (line, secret) in [
            ("access-key = AKIDEXAMPLE1234", "AKIDEXAMPLE1234"),
            ("secret-key = \"s3cr3t;value\"", "s3cr3t"),
            ("Secret_Key = s3cr3t", "s3cr3t"),
        ] {
            let err = Config::parse(&format!("{MINIMAL}{line}\n")).unwrap_err();
            assert!(err.contains("line 4"), "{err}");
            assert!(err.contains("accessKeyIdFile"), "{err}");
            assert!(!err.contains(secret), "{err}");
        }
        let err = Config::parse(&format!("{MINIMAL}access-key = AK\n")).unwrap_err();
        assert!(err.contains("[Global] access-key is refused"), "{err}");
    }

    #[test]
    fn required_keys_and_names() {
        let err = Config::parse("[Global]\nproject-id = p1\n").unwrap_err();
        assert!(err.contains("[Global] region is required"), "{err}");
        let err = Config::parse("[Global]\nregion = r1\n").unwrap_err();
        assert!(err.contains("[Global] project-id is required"), "{err}");
        let err = Config::parse("[Global]\nregion = r1\nproject-id = p/1\n").unwrap_err();
        assert!(err.contains("project-id `p/1`"), "{err}");
        let err = Config::parse("[Global]\nregion = a.b\nproject-id = p1\n").unwrap_err();
        assert!(err.contains("region `a.b`"), "{err}");
        let err =
            Config::parse("[Global]\nregion = r\nproject-id = p1\ncloud = x/y\n").unwrap_err();
        assert!(err.contains("cloud `x/y`"), "{err}");
    }

    #[test]
    fn unknown_sections_subsections_and_keys_are_named() {
        let err =
            Config::parse(&format!("{MINIMAL}[LoadBalancer]\nlb-algorthm = X\n")).unwrap_err();
        assert!(
            err.contains("line 5") && err.contains("[LoadBalancer] has no key `lb-algorthm`"),
            "{err}"
        );
        // An empty unknown section too.
        let err = Config::parse(&format!("{MINIMAL}[Route]\n")).unwrap_err();
        assert!(err.contains("line 4") && err.contains("[Route]"), "{err}");
        let err = Config::parse(&format!("{MINIMAL}[Vpc \"a\"]\nid = x\n")).unwrap_err();
        assert!(err.contains("no subsection"), "{err}");
        let err = Config::parse(&format!("{MINIMAL}zone = a\n")).unwrap_err();
        assert!(err.contains("[Global] has no key `zone`"), "{err}");
    }

    #[test]
    fn load_balancer_options_as_upstreams_configmap() {
        // upstream's TestLoadELBConfigBasic, in gcfg: the JSON pasted as is (gcfg strips
        // its double quotes) and gcfg-quoted.
        let config = Config::parse(&format!(
            "{MINIMAL}[LoadBalancer]\nlb-algorithm = ROUND_ROBIN\nlb-provider = vlb\n\
             keep-eip = true\nsession-affinity-flag = on\n\
             session-affinity-option = {{\"type\": \"SOURCE_IP\", \"cookie_name\": \
             \"session_id\", \"persistence_timeout\": 15}}\n\
             health-check-flag = on\n\
             health-check-option = \"{{\\\"delay\\\": 5, \\\"timeout\\\": 15, \\\"max_retries\\\": 5}}\"\n\
             idle-timeout = 60\nenable-transparent-client-ip = true\nprimary-nic = force\n\
             business-name = order-pass\n\
             [Networking]\npublic-network-name = public-network-name\n\
             internal-network-name = a, b\ninternal-network-name = c\n\
             [Metadata]\nsearch-order = metadataService,configDrive\n"
        ))
        .unwrap();
        let lb = &config.load_balancer;
        assert_eq!(lb.lb_algorithm, "ROUND_ROBIN");
        assert!(lb.keep_eip);
        assert_eq!(lb.session_affinity_flag, "on");
        assert_eq!(
            lb.session_affinity_option,
            SessionPersistence {
                kind: "SOURCE_IP".into(),
                cookie_name: Some("session_id".into()),
                persistence_timeout: Some(15),
            }
        );
        assert_eq!(lb.health_check_option.delay, 5);
        assert_eq!(lb.health_check_option.timeout, 15);
        assert_eq!(lb.health_check_option.max_retries, 5);
        assert_eq!(lb.idle_timeout, 60);
        assert!(lb.enable_transparent_client_ip);
        assert_eq!(lb.primary_nic, "force");
        assert_eq!(lb.cluster_name("kubernetes"), "order-pass");
        assert_eq!(
            config.networking.public_network_name,
            ["public-network-name"]
        );
        assert_eq!(config.networking.internal_network_name, ["a", "b", "c"]);
    }

    #[test]
    fn object_options_merge_as_go_unmarshals() {
        let base = HealthCheckOption::default();
        let merged = base
            .merged(r#"{"Timeout": 10, "unknown": 1, "path": null}"#)
            .unwrap();
        assert_eq!(merged.timeout, 10);
        assert_eq!(merged.delay, 5);
        assert_eq!(merged.max_retries, 3);
        assert!(base.merged("[1]").is_err());
        assert!(base.merged(r#"{"delay": "soon"}"#).is_err());
        let session = SessionPersistence::default()
            .merged("{type: APP_COOKIE, cookie_name: JSESSIONID}")
            .unwrap();
        assert_eq!(session.kind, "APP_COOKIE");
        assert_eq!(session.cookie_name.as_deref(), Some("JSESSIONID"));
        assert_eq!(session.persistence_timeout, None);
        assert_eq!(
            serde_json::to_value(&session).unwrap(),
            serde_json::json!({"type": "APP_COOKIE", "cookie_name": "JSESSIONID"})
        );
        let err = Config::parse(&format!(
            "{MINIMAL}[LoadBalancer]\nhealth-check-option = delay 5\n"
        ))
        .unwrap_err();
        assert!(
            err.contains("line 5") && err.contains("health-check-option"),
            "{err}"
        );
    }

    #[test]
    fn flags_and_values_are_checked() {
        let parse = |extra: &str| Config::parse(&format!("{MINIMAL}[LoadBalancer]\n{extra}\n"));
        assert_eq!(parse("").unwrap().load_balancer.health_check_flag, "");
        assert_eq!(
            parse("health-check-flag = off")
                .unwrap()
                .load_balancer
                .health_check_flag,
            "off"
        );
        let err = parse("health-check-flag = yes").unwrap_err();
        assert!(
            err.contains("[LoadBalancer] health-check-flag `yes`"),
            "{err}"
        );
        let err = parse("keep-eip = maybe").unwrap_err();
        assert!(err.contains("line 5") && err.contains("keep-eip"), "{err}");
        let err = parse("idle-timeout = 1m").unwrap_err();
        assert!(err.contains("idle-timeout `1m`"), "{err}");
        let err = parse("primary-nic = Force").unwrap_err();
        assert!(err.contains("primary-nic"), "{err}");
        let err =
            Config::parse(&format!("{MINIMAL}[Metadata]\nsearch-order = cloudInit\n")).unwrap_err();
        assert!(err.contains("cloudInit"), "{err}");
    }
}
